#pragma once
// FreeIndex: the free blocks of one owner (stream), binned TLSF-style.
//
// Bins: 64 first-level classes (floor(log2(size))) x 16 second-level subdivisions. Two bitmaps say
// which bins are non-empty, so find() is a few bit operations, never a scan: O(1) whatever the
// number of free blocks. Within a bin, blocks are LIFO (the most recently freed block is the warmest
// and, for determinism, the order depends only on the request sequence).
//
// find(size) first tries the head of the bin that holds `size` (an exact-class fit), then the first
// non-empty bin above it, where every block is large enough. The block chosen is therefore at most
// one bin (1/16 of its power of two) larger than the best fit: "good fit" in O(1).

#include "block.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace ncclpool::detail {

class FreeIndex {
 public:
  static constexpr unsigned kSubBits = 4;
  static constexpr unsigned kSubBins = 1u << kSubBits;
  static constexpr unsigned kClasses = 64;

  void insert(Block* block) noexcept {
    const auto [fl, sl] = bin_of(block->size);
    Block*& head = heads_[fl][sl];
    block->free_prev = nullptr;
    block->free_next = head;
    if (head != nullptr) head->free_prev = block;
    head = block;
    fl_bitmap_ |= 1ull << fl;
    sl_bitmap_[fl] |= static_cast<std::uint16_t>(1u << sl);
    ++count_;
  }

  void remove(Block* block) noexcept {
    const auto [fl, sl] = bin_of(block->size);
    if (block->free_prev != nullptr) {
      block->free_prev->free_next = block->free_next;
    } else {
      heads_[fl][sl] = block->free_next;
      if (block->free_next == nullptr) {
        sl_bitmap_[fl] = static_cast<std::uint16_t>(sl_bitmap_[fl] & ~(1u << sl));
        if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(1ull << fl);
      }
    }
    if (block->free_next != nullptr) block->free_next->free_prev = block->free_prev;
    block->free_prev = block->free_next = nullptr;
    --count_;
  }

  // A free block of at least `size` bytes, or nullptr. Does not remove it.
  [[nodiscard]] Block* find(std::size_t size) const noexcept {
    if (count_ == 0) return nullptr;
    auto [fl, sl] = bin_of(size);
    if (Block* head = heads_[fl][sl]; head != nullptr && head->size >= size) return head;
    // Every block in a higher bin is larger than `size`.
    if (++sl == kSubBins) {
      sl = 0;
      if (++fl == kClasses) return nullptr;
    }
    unsigned sl_map = sl_bitmap_[fl] & (~0u << sl);
    if (sl_map == 0) {
      if (fl + 1 >= kClasses) return nullptr;
      const std::uint64_t fl_map = fl_bitmap_ & (~0ull << (fl + 1));
      if (fl_map == 0) return nullptr;
      fl = static_cast<unsigned>(std::countr_zero(fl_map));
      sl_map = sl_bitmap_[fl];
    }
    sl = static_cast<unsigned>(std::countr_zero(sl_map));
    return heads_[fl][sl];
  }

  // Size of the largest free block (statistics only: walks one bin).
  [[nodiscard]] std::size_t largest() const noexcept {
    if (fl_bitmap_ == 0) return 0;
    const unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(fl_bitmap_));
    const unsigned sl = 31u - static_cast<unsigned>(std::countl_zero(static_cast<unsigned>(sl_bitmap_[fl])));
    std::size_t best = 0;
    for (const Block* b = heads_[fl][sl]; b != nullptr; b = b->free_next) best = b->size > best ? b->size : best;
    return best;
  }

  // Invariant checks only: is `block` linked in the bin its size maps to?
  [[nodiscard]] bool contains(const Block* block) const noexcept {
    const auto [fl, sl] = bin_of(block->size);
    for (const Block* b = heads_[fl][sl]; b != nullptr; b = b->free_next)
      if (b == block) return true;
    return false;
  }

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  struct Bin {
    unsigned fl;
    unsigned sl;
  };
  static Bin bin_of(std::size_t size) noexcept {
    const unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(static_cast<std::uint64_t>(size | 1u)));
    if (fl < kSubBits) return {0, static_cast<unsigned>(size)};
    return {fl, static_cast<unsigned>((size >> (fl - kSubBits)) & (kSubBins - 1))};
  }

 private:
  std::uint64_t fl_bitmap_ = 0;
  std::uint16_t sl_bitmap_[kClasses] = {};
  Block* heads_[kClasses][kSubBins] = {};
  std::size_t count_ = 0;
};

}  // namespace ncclpool::detail

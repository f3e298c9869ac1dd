#pragma once
// PointerMap: live block start address -> Block*, open addressing with linear probing and
// backward-shift deletion (no tombstones). Inserting and erasing never allocate except when the
// table doubles, which keeps deallocate() O(1) and malloc-free on the hot path.

#include "block.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ncclpool::detail {

class PointerMap {
 public:
  PointerMap() { rehash(64); }

  // Hot path (every allocation): kept inline in every file that calls it, whatever the inliner's
  // budget there (the pool's hot path lost ~15% at 1 MiB when it was not); the rare doubling is not.
  [[gnu::always_inline]] inline void insert(std::uintptr_t key, Block* value) {
    if ((size_ + 1) * 2 > slots_.size()) [[unlikely]] grow();
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }

  [[nodiscard]] Block* find(std::uintptr_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // Returns false if the key is absent.
  bool erase(std::uintptr_t key) noexcept {
    std::size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: pull later entries of the probe run into the hole.
    for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      const bool movable = (i <= j) ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return true;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    std::uintptr_t key = 0;
    Block* value = nullptr;
  };
  // Fibonacci hashing: block addresses are 256-aligned, the multiply spreads them into the top bits.
  [[nodiscard]] std::size_t home(std::uintptr_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  [[gnu::noinline]] void grow() { rehash(slots_.size() * 2); }
  void rehash(std::size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    mask_ = capacity - 1;
    shift_ = 64u - static_cast<unsigned>(std::countr_zero(capacity));
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != 0) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

}  // namespace ncclpool::detail

#pragma once
// Blocks and segments: the pool's bookkeeping objects. A segment is one allocation from the source;
// its bytes are covered, in address order, by a doubly linked list of blocks (free or live).

#include <ncclpool/segment_source.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ncclpool::detail {

struct Segment;
struct StreamState;

struct Block {
  Segment* segment = nullptr;
  std::size_t offset = 0;     // from segment->base
  std::size_t size = 0;       // multiple of the pool alignment
  std::size_t requested = 0;  // live blocks: what the caller asked for
  std::uint64_t allocation = 0;  // live blocks: the pool's allocation number (check mode compares places in this order)
  Block* phys_prev = nullptr; // neighbours in address order within the segment
  Block* phys_next = nullptr;
  Block* free_prev = nullptr; // links in the owner's free list (free blocks only)
  Block* free_next = nullptr;
  // Free block: the stream whose work must finish before reuse elsewhere (the "fresh" pseudo-stream
  // for memory never used). Live block: the stream it was allocated on.
  StreamState* owner = nullptr;
  bool is_free = true;
};

struct Segment {
  SegmentAllocation allocation;
  char* base = nullptr;
  std::size_t size = 0;
  std::uint64_t sequence = 0;
  Block* first = nullptr;
  std::size_t live_blocks = 0;
  std::size_t live_bytes = 0;  // sizes of its live blocks (growth skips segments with too little free)
  bool withheld = false;  // taken out of use for a collective release (Pool::withhold_empty_segments)
};

// Block objects come from here, never from malloc on the hot path.
class BlockArena {
 public:
  Block* make() {
    if (free_ == nullptr) grow();
    Block* block = free_;
    free_ = block->free_next;
    *block = Block{};
    return block;
  }
  void recycle(Block* block) noexcept {
    block->segment = nullptr;
    block->free_next = free_;
    free_ = block;
  }

 private:
  static constexpr std::size_t kChunk = 512;
  void grow() {
    chunks_.push_back(std::make_unique<Block[]>(kChunk));
    Block* chunk = chunks_.back().get();
    for (std::size_t i = 0; i < kChunk; ++i) {
      chunk[i].free_next = free_;
      free_ = &chunk[i];
    }
  }
  std::vector<std::unique_ptr<Block[]>> chunks_;
  Block* free_ = nullptr;
};

}  // namespace ncclpool::detail

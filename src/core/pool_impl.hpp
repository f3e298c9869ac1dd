#pragma once
// PoolImpl: the state behind ncclpool::Pool. Split by concern:
//   pool_alloc.cpp    allocate / deallocate, taking, splitting and coalescing blocks (the hot path)
//   pool_streams.cpp  stream publication, cross-stream reuse, merged runs, reclaiming unpublished blocks
//   pool_growth.cpp   segment sizes, new segments from the source, reserve()
//   pool_release.cpp  trim, releasing and withholding empty segments
//   pool_impl.cpp     construction, observers and queries
//   invariants.cpp  check_invariants()
//   diagnostics.cpp error messages for bad frees and OOM

#include "block.hpp"
#include "free_index.hpp"
#include "pointer_map.hpp"

#include <ncclpool/pool.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ncclpool::detail {

// The free blocks that one stream owns. The "fresh" pseudo-stream owns memory never handed out,
// which any stream may take without waiting.
//
// Deferred publication (docs/pool.md, "Streams"): a free does not record an event. The bytes a
// stream freed since its last publish form one `unpublished` free block: only this stream may take
// it, a free next to it joins it, nothing else coalesces with it. A free elsewhere publishes first.
// A stream whose unpublished block another stream wanted turns `eager` and publishes at every free,
// until kQuietFrees frees pass with no other stream taking its memory.
// One block, measured: the same-stream allocate/free loop keeps taking it back (no event), and the
// recorded training traces need no more memory than with an event at every free, and more blocks
// kept apart cost the FSDP traces memory (docs/benchmarks/memory.md).
struct StreamState {
  stream_t id = 0;
  bool fresh = false;
  FreeIndex index;
  Block* unpublished = nullptr;   // a free block of this stream, or none (always none for fresh)
  bool publish_refused = false;   // the last publish failed (graph capture): none of its blocks may cross
  bool eager = false;
  std::uint32_t quiet_frees = 0;  // eager frees since another stream last took this stream's memory

  // Another stream wants (or may soon want) this stream's memory: publish at every free from now on.
  void make_eager() {
    eager = true;
    quiet_frees = 0;
  }
};

// Whether `block` is the unpublished block of the stream that owns it.
inline bool unpublished(const Block* block) { return block->is_free && block->owner->unpublished == block; }

class PoolImpl {
 public:
  PoolImpl(std::shared_ptr<SegmentSource> source, PoolConfig config);
  ~PoolImpl();

  void* allocate(std::size_t bytes, stream_t stream);
  void deallocate(void* ptr, const stream_t* stream);
  void publish_frees(stream_t stream);
  void reserve(std::size_t bytes);
  std::size_t trim();
  PoolStats stats() const;
  MemoryBreakdown memory_breakdown() const;
  void add_observer(PoolObserver& observer, bool replay_existing);
  void remove_observer(PoolObserver& observer) noexcept;
  std::vector<SegmentInfo> segments() const;
  std::vector<SegmentInfo> empty_segments() const;
  std::vector<SegmentInfo> withhold_empty_segments();
  std::size_t release_withheld(bool release);
  std::vector<BlockLocation> live_blocks() const;
  std::uint64_t placement_recoveries() const;
  std::optional<SegmentInfo> segment_of(const void* ptr) const;
  std::optional<BlockLocation> locate(const void* ptr) const;
  void check_invariants() const;

  const PoolConfig& config() const noexcept { return config_; }
  const SourceProperties& source_properties() const noexcept { return source_->properties(); }
  SegmentSource& source() noexcept { return *source_; }

 private:
  // --- all below run with mutex_ held ---
  StreamState* stream_state(stream_t stream);
  Block* take_free_block(std::size_t size, StreamState* requester);
  Block* merge_free_run(std::size_t size, StreamState* requester);
  Block* foreign_block(StreamState* other, std::size_t size);
  void publish(StreamState* stream);
  void settle_published(StreamState* stream);
  bool reclaim_unpublished();
  [[noreturn]] void throw_deterministic_oom(const OutOfMemory& error) const;  // error, plus why nothing was reclaimed
  [[nodiscard]] bool order_after(StreamState* requester, StreamState* producer);
  void absorb_next(Block* block);
  Block* grow(std::size_t size);
  SegmentAllocation allocate_segment(std::size_t segment_size, std::size_t request);
  Segment* adopt_segment(const SegmentAllocation& allocation);
  Block* split(Block* block, std::size_t size);
  Block* coalesce(Block* block);
  std::size_t release_empty_segments();
  void release_segment(Segment* segment);
  [[nodiscard]] bool observers_allow_release(const Segment& segment);
  SegmentInfo info(const Segment& segment) const;
  const Segment* segment_containing(std::uintptr_t address) const;
  std::size_t segment_size_for(std::size_t size) const;
  std::size_t chunk_now() const;  // the chunk a segment past the budget is a multiple of (ramped up to growth_chunk)
  [[noreturn]] void throw_bad_free(void* ptr) const;
  std::string describe() const;  // "pool 'name' (device 0, sim)"

  std::shared_ptr<SegmentSource> source_;
  PoolConfig config_;
  std::size_t growth_chunk_ = 0;  // config_.growth_chunk rounded up to the source granularity
  std::size_t min_segment_ = 0;   // the smallest segment growth makes (a multiple of the granularity)
  std::size_t granularity_ = 0;   // the source's: every segment size is a multiple of it

  mutable std::mutex mutex_;
  BlockArena arena_;
  PointerMap live_;
  StreamState fresh_;
  std::vector<std::unique_ptr<StreamState>> streams_;     // first-use order (deterministic)
  std::unordered_map<stream_t, StreamState*> stream_by_id_;
  StreamState* last_stream_ = nullptr;                    // one-entry cache for the hot path
  std::vector<std::unique_ptr<Segment>> segments_;        // creation order
  std::map<std::uintptr_t, Segment*> segment_by_base_;    // address lookups, O(log n)
  std::vector<PoolObserver*> observers_;
  std::uint64_t next_sequence_ = 0;
  PoolStats stats_;

  static constexpr std::uint32_t kQuietFrees = 256;
};

// Rounds up to a multiple of `align` (a power of two); returns 0 on overflow.
inline std::size_t round_up(std::size_t value, std::size_t align) noexcept {
  if (value > SIZE_MAX - (align - 1)) return 0;
  return (value + align - 1) & ~(align - 1);
}
// Same for any multiple; 0 on overflow.
inline std::size_t round_up_multiple(std::size_t value, std::size_t multiple) noexcept {
  const std::size_t rem = value % multiple;
  if (rem == 0) return value;
  if (value > SIZE_MAX - (multiple - rem)) return 0;
  return value + (multiple - rem);
}

std::string format_bytes(std::size_t bytes);
std::string format_pointer(const void* ptr);

}  // namespace ncclpool::detail

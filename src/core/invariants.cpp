// check_invariants(): recounts everything from the block lists and compares with the indexes and
// counters. Used after every step of the randomized tests; cheap enough for debug builds.

#include "pool_impl.hpp"


namespace ncclpool::detail {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& pool) {
  throw InvariantViolation(pool + ": invariant broken: " + what);
}
}  // namespace

void PoolImpl::check_invariants() const {
  std::lock_guard lock(mutex_);
  const std::string pool = describe();
  std::size_t reserved = 0, allocated = 0, requested = 0, live = 0, free_blocks = 0;
  std::uint64_t last_sequence = 0;
  bool first_segment = true;

  if (segment_by_base_.size() != segments_.size()) fail("segment address map and segment list differ in size", pool);
  for (const auto& seg : segments_) {
    const std::string where = "segment " + std::to_string(seg->sequence);
    if (!first_segment && seg->sequence <= last_sequence) fail(where + ": segments not in creation order", pool);
    first_segment = false;
    last_sequence = seg->sequence;
    auto it = segment_by_base_.find(reinterpret_cast<std::uintptr_t>(seg->base));
    if (it == segment_by_base_.end() || it->second != seg.get()) fail(where + ": missing from the address map", pool);
    reserved += seg->size;

    std::size_t expected_offset = 0, live_in_segment = 0, live_bytes_in_segment = 0;
    const Block* prev = nullptr;
    for (const Block* b = seg->first; b != nullptr; prev = b, b = b->phys_next) {
      const std::string at = where + " offset " + std::to_string(b->offset);
      if (b->segment != seg.get()) fail(at + ": block points to another segment", pool);
      if (b->phys_prev != prev) fail(at + ": broken back link", pool);
      if (b->offset != expected_offset) fail(at + ": gap or overlap (expected offset " + std::to_string(expected_offset) + ")", pool);
      if (b->size == 0 || b->size % config_.alignment != 0) fail(at + ": size not a positive multiple of the alignment", pool);
      expected_offset += b->size;
      if (b->owner == nullptr) fail(at + ": block has no owner", pool);
      if (b->is_free) {
        if (seg->withheld) {
          if (b->owner->index.contains(b)) fail(at + ": block of a withheld segment is in a free index", pool);
        } else {
          ++free_blocks;
          if (!b->owner->index.contains(b)) fail(at + ": free block missing from its owner's free index", pool);
        }
        if (live_.find(reinterpret_cast<std::uintptr_t>(seg->base + b->offset)) == b) fail(at + ": free block in the live map", pool);
        // A stream's unpublished block does not coalesce until the stream publishes; a withheld
        // segment's blocks not until release_withheld puts them back (a publish meanwhile skips them).
        const bool waiting = seg->withheld || unpublished(b) || (prev != nullptr && unpublished(prev));
        if (prev != nullptr && prev->is_free && !waiting && (prev->owner == b->owner || prev->owner->fresh || b->owner->fresh))
          fail(at + ": adjacent free blocks that should have coalesced", pool);
      } else {
        ++live_in_segment;
        live_bytes_in_segment += b->size;
        allocated += b->size;
        requested += b->requested;
        if (b->requested == 0 || b->requested > b->size) fail(at + ": requested size out of range", pool);
        if (live_.find(reinterpret_cast<std::uintptr_t>(seg->base + b->offset)) != b) fail(at + ": live block missing from the live map", pool);
      }
    }
    if (expected_offset != seg->size) fail(where + ": blocks cover " + std::to_string(expected_offset) + " of " + std::to_string(seg->size) + " bytes", pool);
    if (live_in_segment != seg->live_blocks) fail(where + ": live block count is stale", pool);
    if (live_bytes_in_segment != seg->live_bytes) fail(where + ": live byte count is stale", pool);
    if (seg->withheld && live_in_segment != 0) fail(where + ": a withheld segment has live blocks", pool);
    live += live_in_segment;
  }

  if (fresh_.unpublished != nullptr || fresh_.publish_refused) fail("fresh memory has a stream obligation", pool);
  for (const auto& st : streams_) {
    const Block* u = st->unpublished;
    if (u == nullptr) continue;
    // A recycled block has no segment; a live or foreign one would be taken for this stream's.
    if (u->segment == nullptr || !u->is_free || u->owner != st.get())
      fail("a stream's unpublished block is not one of its free blocks", pool);
    if (!u->segment->withheld && !st->index.contains(u)) fail("a stream's unpublished block is missing from its free index", pool);
  }

  std::size_t indexed = fresh_.index.size();
  for (const auto& s : streams_) indexed += s->index.size();
  if (indexed != free_blocks) fail("free indexes hold " + std::to_string(indexed) + " blocks, segments " + std::to_string(free_blocks), pool);
  if (live_.size() != live) fail("live map holds " + std::to_string(live_.size()) + " blocks, segments " + std::to_string(live), pool);
  if (stats_.reserved_bytes != reserved) fail("reserved_bytes counter disagrees with a recount", pool);
  if (stats_.allocated_bytes != allocated) fail("allocated_bytes counter disagrees with a recount", pool);
  if (stats_.requested_bytes != requested) fail("requested_bytes counter disagrees with a recount", pool);
  if (stats_.active_allocations != live) fail("active_allocations counter disagrees with a recount", pool);
  if (stats_.segment_count != segments_.size()) fail("segment_count counter disagrees with a recount", pool);
  if (stats_.peak_allocated_bytes < allocated || stats_.peak_reserved_bytes < reserved) fail("a peak is below its current value", pool);
  if (config_.max_reserved != 0 && reserved > config_.max_reserved) fail("reserved bytes exceed max_reserved", pool);
}

}  // namespace ncclpool::detail

// Growth (a rare path): the segment size for a request (its own size within the segment budget,
// ramped chunks past it), getting memory from the source with one retry after releasing empty
// segments, adopting it as a segment the observers hear of, and reserve().

#include "pool_impl.hpp"

#include <algorithm>

namespace ncclpool::detail {

// Growth within a budget of segments: 64 plus one per chunk's worth of reserve (each segment of a
// symmetric pool costs a window per group: docs/benchmarks/scope.md, growth.md). Every input follows the
// request sequence only, so ranks of a deterministic pool fed the same requests grow the same
// segments.
//
// Within the budget every segment is its request's own size (at least growth_chunk / 128, rounded
// to the granularity; min_segment if set), as PyTorch gives large allocations segments of their own;
// past it, chunks.
// Rounding to chunks left most of the last chunk unused at the peak (the decode trace: a 1 GiB chunk
// for 352 MiB live; Megatron-FSDP's: a 32 MiB tensor opened a 1 GiB chunk at the peak), and how much
// depended on where the peak fell; own-size segments cut the worst peak reserved / live over the
// recorded traces (docs/benchmarks/memory.md). The floor keeps small requests from making a window
// each; a larger min_segment trades reserve for windows (docs/benchmarks/growth.md).
std::size_t PoolImpl::segment_size_for(std::size_t size) const {
  const std::size_t segment_budget = 64 + stats_.reserved_bytes / growth_chunk_;
  if (stats_.segment_count < segment_budget) return std::max(round_up_multiple(size, granularity_), min_segment_);
  return round_up_multiple(std::max(size, min_segment_), chunk_now());
}

// Past the budget: growth_chunk / 16, then reserved / kRampDivisor (the pool grows by 1/8), up to
// growth_chunk, so that a pool that spent its budget on small segments does not add a whole chunk
// to a few hundred MiB. Ramped chunks take a few more windows than whole ones (docs/benchmarks/memory.md
// has both figures).
std::size_t PoolImpl::chunk_now() const {
  constexpr std::size_t kRampDivisor = 8;
  const std::size_t first = std::min(growth_chunk_, round_up_multiple(growth_chunk_ / 16, granularity_));
  return std::clamp(round_up_multiple(stats_.reserved_bytes / kRampDivisor, granularity_), first, growth_chunk_);
}

Block* PoolImpl::grow(std::size_t size) {
  const std::size_t segment_size = segment_size_for(size);
  Segment* segment = adopt_segment(allocate_segment(segment_size, size));
  return segment->first;
}

// Gets memory from the source; on OOM (or past max_reserved) releases empty segments and retries once.
SegmentAllocation PoolImpl::allocate_segment(std::size_t segment_size, std::size_t request) {
  std::string reason;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      if (release_empty_segments() == 0) break;  // nothing to give back: retrying cannot help
    }
    if (config_.max_reserved != 0 && stats_.reserved_bytes + segment_size > config_.max_reserved) {
      reason = "the pool limit max_reserved=" + format_bytes(config_.max_reserved) + " would be exceeded";
      continue;
    }
    try {
      SegmentAllocation allocation = source_->allocate(segment_size);
      if (attempt == 1) ++stats_.oom_recoveries;
      return allocation;
    } catch (const OutOfMemory& e) {
      reason = e.what();
    }
  }
  ++stats_.oom_count;
  std::size_t kept_bytes = 0, kept = 0;
  for (const auto& s : segments_)
    if (s->live_blocks == 0) {
      kept_bytes += s->size;
      ++kept;
    }
  std::string hint;
  if (kept != 0)
    hint = "; " + std::to_string(kept) + " empty segment(s) of " + format_bytes(kept_bytes) +
           " are kept because they are registered as windows (or withheld for a release): a collective trim on every rank "
           "(Registry::trim, ncclpool_trim, Pool.trim) releases them";
  throw OutOfMemory(describe() + ": out of memory allocating " + format_bytes(request) + " (new segment of " +
                    format_bytes(segment_size) + "; reserved " + format_bytes(stats_.reserved_bytes) +
                    ", allocated " + format_bytes(stats_.allocated_bytes) + "): " + reason + hint);
}

// Turns a source allocation into a segment with one fresh block, and tells the observers. If an
// observer throws, those already told hear of the release and the memory goes back: no trace left.
Segment* PoolImpl::adopt_segment(const SegmentAllocation& allocation) {
  auto segment = std::make_unique<Segment>();
  segment->allocation = allocation;
  segment->base = static_cast<char*>(allocation.base);
  segment->size = allocation.size;
  segment->sequence = next_sequence_;
  const SegmentInfo seg_info = info(*segment);
  for (std::size_t i = 0; i < observers_.size(); ++i) {
    try {
      observers_[i]->on_segment_created(seg_info);
    } catch (...) {
      for (std::size_t j = i; j-- > 0;) observers_[j]->on_segment_releasing(seg_info);
      source_->deallocate(allocation);
      throw;
    }
  }
  ++next_sequence_;
  Block* block = arena_.make();
  block->segment = segment.get();
  block->size = segment->size;
  block->owner = &fresh_;
  block->is_free = true;
  segment->first = block;
  segment_by_base_.emplace(reinterpret_cast<std::uintptr_t>(segment->base), segment.get());
  segments_.push_back(std::move(segment));
  stats_.reserved_bytes += allocation.size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  ++stats_.segments_created;
  ++stats_.segment_count;
  return segments_.back().get();
}

// The total asked for is checked against the capacity before any rounding: rounding a size near
// SIZE_MAX up to the granularity wraps to a small one (reserve(SIZE_MAX) once reserved 2 MiB and said
// success), and checking only the rounded missing bytes let reserved + missing pass the capacity.
void PoolImpl::reserve(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const std::size_t capacity = source_->properties().capacity;
  const auto too_large = [&] {
    return SizeTooLarge(describe() + ": cannot reserve " + format_bytes(bytes) + ": exceeds the device capacity " + format_bytes(capacity));
  };
  if (bytes > capacity) throw too_large();
  if (bytes <= stats_.reserved_bytes) return;
  const std::size_t missing = bytes - stats_.reserved_bytes;
  const std::size_t segment_size = segment_size_for(missing);
  if (segment_size < missing || segment_size > capacity) throw too_large();
  fresh_.index.insert(grow(missing));
}

}  // namespace ncclpool::detail

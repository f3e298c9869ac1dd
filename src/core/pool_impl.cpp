// PoolImpl's construction and destruction, observers and read-only queries (stats, segments, live
// blocks, address lookups). The other concerns live beside it (pool_impl.hpp lists them).

#include "pool_impl.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace ncclpool::detail {

PoolImpl::PoolImpl(std::shared_ptr<SegmentSource> source, PoolConfig config)
    : source_(std::move(source)), config_(std::move(config)) {
  if (!source_) throw InvalidArgument("pool '" + config_.name + "': segment source is null");
  const SourceProperties& props = source_->properties();
  const std::size_t a = config_.alignment;
  if (a < 256 || !std::has_single_bit(a) || a > props.alignment) {
    throw InvalidArgument(describe() + ": alignment " + std::to_string(a) +
                          " must be a power of two from 256 to the source alignment (" +
                          std::to_string(props.alignment) + ")");
  }
  if (props.granularity == 0 || props.granularity % a != 0) {
    throw InvalidArgument(describe() + ": source granularity " + std::to_string(props.granularity) +
                          " is not a multiple of the alignment " + std::to_string(a));
  }
  if (config_.growth_chunk == 0) throw InvalidArgument(describe() + ": growth_chunk must be positive");
  granularity_ = props.granularity;
  growth_chunk_ = round_up_multiple(config_.growth_chunk, props.granularity);
  if (growth_chunk_ == 0 || growth_chunk_ > props.capacity) {
    throw InvalidArgument(describe() + ": growth_chunk " + format_bytes(config_.growth_chunk) +
                          " exceeds the device capacity " + format_bytes(props.capacity));
  }
  min_segment_ = round_up_multiple(std::max<std::size_t>(1, config_.min_segment != 0 ? config_.min_segment : growth_chunk_ / 128), granularity_);
  if (min_segment_ == 0 || min_segment_ > props.capacity)
    throw InvalidArgument(describe() + ": min_segment " + format_bytes(config_.min_segment) + " exceeds the device capacity " +
                          format_bytes(props.capacity));
  if (config_.min_segment != 0 && config_.max_reserved != 0 && min_segment_ > config_.max_reserved)
    throw InvalidArgument(describe() + ": min_segment " + format_bytes(min_segment_) + " exceeds max_reserved " +
                          format_bytes(config_.max_reserved) + ": the pool could never grow");
  fresh_.fresh = true;
}

PoolImpl::~PoolImpl() {
  std::lock_guard lock(mutex_);
  // Newest first, so that observers see releases in reverse creation order.
  while (!segments_.empty()) release_segment(segments_.back().get());
}

std::string PoolImpl::describe() const {
  const SourceProperties& props = source_->properties();
  return "pool '" + config_.name + "' (device " + std::to_string(props.device) + ", " + to_string(props.kind) + ")";
}

// ---------------------------------------------------------------------------------------------
// Queries and observers.
// ---------------------------------------------------------------------------------------------

SegmentInfo PoolImpl::info(const Segment& segment) const {
  const SourceProperties& props = source_->properties();
  return SegmentInfo{segment.sequence, segment.base, segment.size, props.device, props.kind, segment.allocation.handle};
}

PoolStats PoolImpl::stats() const {
  std::lock_guard lock(mutex_);
  PoolStats s = stats_;
  std::size_t largest = fresh_.index.largest();
  for (const auto& st : streams_) largest = std::max(largest, st->index.largest());
  s.largest_free_block = largest;
  s.largest_fresh_block = fresh_.index.largest();
  return s;
}

MemoryBreakdown PoolImpl::memory_breakdown() const {
  std::lock_guard lock(mutex_);
  MemoryBreakdown m;
  for (const auto& s : segments_) {
    m.reserved += s->size;
    if (s->live_blocks == 0) {
      m.empty_segments += s->size;
      continue;
    }
    for (const Block* b = s->first; b != nullptr; b = b->phys_next) {
      if (!b->is_free) {
        m.requested += b->requested;
        m.rounding += b->size - b->requested;
        continue;
      }
      m.free_in_used_segments += b->size;
      if (b->owner->fresh) m.never_used += b->size;
      if (unpublished(b) || b->owner->publish_refused) m.other_streams_only += b->size;
    }
  }
  return m;
}

void PoolImpl::add_observer(PoolObserver& observer, bool replay_existing) {
  std::lock_guard lock(mutex_);
  if (std::find(observers_.begin(), observers_.end(), &observer) != observers_.end())
    throw InvalidArgument(describe() + ": observer already added");
  if (replay_existing)
    for (const auto& s : segments_) observer.on_segment_created(info(*s));
  observers_.push_back(&observer);
}

void PoolImpl::remove_observer(PoolObserver& observer) noexcept {
  std::lock_guard lock(mutex_);
  observers_.erase(std::remove(observers_.begin(), observers_.end(), &observer), observers_.end());
}

std::vector<SegmentInfo> PoolImpl::segments() const {
  std::lock_guard lock(mutex_);
  std::vector<SegmentInfo> out;
  out.reserve(segments_.size());
  for (const auto& s : segments_) out.push_back(info(*s));
  return out;
}

std::vector<SegmentInfo> PoolImpl::empty_segments() const {
  std::lock_guard lock(mutex_);
  std::vector<SegmentInfo> out;
  for (const auto& s : segments_)
    if (s->live_blocks == 0) out.push_back(info(*s));
  return out;
}

// In allocation order: two ranks that hand out the same requests in the same order must put each at
// the same place. The set of places alone would pass two buffers that traded places (what an
// out-of-memory recovery on one rank can do).
std::vector<BlockLocation> PoolImpl::live_blocks() const {
  std::vector<std::pair<std::uint64_t, BlockLocation>> numbered;
  {
    std::lock_guard lock(mutex_);
    numbered.reserve(stats_.active_allocations);
    for (const auto& s : segments_)
      for (const Block* b = s->first; b != nullptr; b = b->phys_next)
        if (!b->is_free) numbered.emplace_back(b->allocation, BlockLocation{s->sequence, b->offset, b->size});
  }
  std::sort(numbered.begin(), numbered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<BlockLocation> out;
  out.reserve(numbered.size());
  for (const auto& [allocation, location] : numbered) out.push_back(location);
  return out;
}

std::uint64_t PoolImpl::placement_recoveries() const {
  std::lock_guard lock(mutex_);
  return stats_.oom_recoveries;
}

const Segment* PoolImpl::segment_containing(std::uintptr_t address) const {
  auto it = segment_by_base_.upper_bound(address);
  if (it == segment_by_base_.begin()) return nullptr;
  --it;
  const Segment* s = it->second;
  return address < it->first + s->size ? s : nullptr;
}

std::optional<SegmentInfo> PoolImpl::segment_of(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const Segment* s = segment_containing(reinterpret_cast<std::uintptr_t>(ptr));
  if (s == nullptr) return std::nullopt;
  return info(*s);
}

std::optional<BlockLocation> PoolImpl::locate(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const Block* b = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (b == nullptr) return std::nullopt;
  return BlockLocation{b->segment->sequence, b->offset, b->size};
}

}  // namespace ncclpool::detail

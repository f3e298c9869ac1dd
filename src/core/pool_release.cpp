// Release (a rare path): trim, releasing empty segments the observers allow, freeing one segment
// after the streams that freed its blocks, and withholding empty segments for a collective release.

#include "pool_impl.hpp"

#include <algorithm>
#include <set>

namespace ncclpool::detail {

std::size_t PoolImpl::trim() {
  std::lock_guard lock(mutex_);
  return release_empty_segments();
}

bool PoolImpl::observers_allow_release(const Segment& segment) {
  const SegmentInfo seg_info = info(segment);
  for (PoolObserver* o : observers_)
    if (!o->may_release(seg_info)) return false;
  return true;
}

std::size_t PoolImpl::release_empty_segments() {
  std::size_t released = 0;
  // Creation order; collect first, since release_segment edits segments_.
  std::vector<Segment*> empty;
  for (auto& s : segments_)
    if (s->live_blocks == 0 && !s->withheld && observers_allow_release(*s)) empty.push_back(s.get());
  for (Segment* s : empty) {
    released += s->size;
    release_segment(s);
  }
  return released;
}

// Frees a segment: waits for the streams that freed its blocks, tells observers, returns memory.
void PoolImpl::release_segment(Segment* segment) {
  std::set<stream_t> producers;
  bool unpublished = false;  // a block freed after its stream's last publish: only a device sync covers it
  for (Block* b = segment->first; b != nullptr;) {
    Block* next = b->phys_next;
    if (b->is_free) {
      if (!segment->withheld) b->owner->index.remove(b);
      if (b->owner->unpublished == b) {
        b->owner->unpublished = nullptr;
        unpublished = true;
      }
      if (b->owner->publish_refused) unpublished = true;
      if (!b->owner->fresh) producers.insert(b->owner->id);
    } else {
      // Only on destruction: a live block is dropped with its segment.
      live_.erase(reinterpret_cast<std::uintptr_t>(segment->base + b->offset));
      stats_.allocated_bytes -= b->size;
      stats_.requested_bytes -= b->requested;
      --stats_.active_allocations;
    }
    arena_.recycle(b);
    b = next;
  }
  if (unpublished) {
    source_->ordering().synchronize_device();
  } else {
    for (stream_t s : producers) source_->ordering().synchronize(s);
  }
  const SegmentInfo seg_info = info(*segment);
  for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) {
    try {
      (*it)->on_segment_releasing(seg_info);
    } catch (...) {
      ++stats_.hook_errors;
    }
  }
  source_->deallocate(segment->allocation);
  stats_.reserved_bytes -= segment->size;
  ++stats_.segments_released;
  --stats_.segment_count;
  segment_by_base_.erase(reinterpret_cast<std::uintptr_t>(segment->base));
  auto it = std::find_if(segments_.begin(), segments_.end(), [&](auto& s) { return s.get() == segment; });
  segments_.erase(it);
}

std::vector<SegmentInfo> PoolImpl::withhold_empty_segments() {
  std::lock_guard lock(mutex_);
  std::vector<SegmentInfo> out;
  for (const auto& s : segments_) {
    if (s->live_blocks != 0 || s->withheld) continue;
    for (Block* b = s->first; b != nullptr; b = b->phys_next) b->owner->index.remove(b);  // all free
    s->withheld = true;
    out.push_back(info(*s));
  }
  return out;
}

std::size_t PoolImpl::release_withheld(bool release) {
  std::lock_guard lock(mutex_);
  std::vector<Segment*> withheld;
  for (auto& s : segments_)
    if (s->withheld) withheld.push_back(s.get());
  std::size_t released = 0;
  for (Segment* s : withheld) {
    if (release) {
      released += s->size;
      release_segment(s);
    } else {
      s->withheld = false;
      for (Block* b = s->first; b != nullptr; b = b->phys_next) b->owner->index.insert(b);
      // A block that was its stream's unpublished one when withheld may have been published since:
      // it joins its neighbours now.
      for (Block* b = s->first; b != nullptr; b = b->phys_next) {
        if (unpublished(b)) continue;
        b->owner->index.remove(b);
        b = coalesce(b);
        b->owner->index.insert(b);
      }
    }
  }
  return released;
}

}  // namespace ncclpool::detail

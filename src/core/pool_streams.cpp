// Stream publication and cross-stream reuse: publishing a stream's frees, ordering one stream after
// another, merging free runs across streams before growing, and reclaiming unpublished blocks after a
// device synchronization (never in a deterministic pool). See docs/pool.md, "Streams".

#include "pool_impl.hpp"

#include <algorithm>
#include <utility>

namespace ncclpool::detail {

// On the free path only when the free must publish (see deallocate): one call into the stream
// ordering (CUDA: an event record).
// Records a point on `stream` past all its frees so far. When the stream is capturing a graph no
// such point can be made: every block of the stream stays off other streams until a later publish.
void PoolImpl::publish(StreamState* stream) {
  const bool ok = source_->ordering().publish(stream->id);
  stream->publish_refused = !ok;
  if (ok) ++stats_.stream_publishes;
}

// The stream's unpublished block is covered now: it joins its free neighbours.
void PoolImpl::settle_published(StreamState* stream) {
  Block* block = std::exchange(stream->unpublished, nullptr);
  // Withheld: in no index; release_withheld puts it back and coalesces it.
  if (block == nullptr || block->segment->withheld) return;
  stream->index.remove(block);
  stream->index.insert(coalesce(block));
}

[[noreturn]] void PoolImpl::throw_deterministic_oom(const OutOfMemory& error) const {
  const bool held = std::any_of(streams_.begin(), streams_.end(), [](const auto& st) { return st->unpublished != nullptr || st->publish_refused; });
  if (!held) throw error;
  throw OutOfMemory(std::string(error.what()) +
                    "; blocks freed on other streams and not yet published are not reclaimed after a device synchronization in a "
                    "deterministic pool (that would place this rank's requests elsewhere than the other ranks'): call "
                    "publish_frees(stream) after a stream's last free, or reserve() the working set up front");
}

// Out of memory with unpublished blocks (or refused publishes) about: waits for the whole device,
// after which no free block carries a stream obligation, and gives every free block to the fresh
// pseudo-stream, which any stream takes without a wait. Not while a graph is being captured (a
// device synchronization would break it).
bool PoolImpl::reclaim_unpublished() {
  bool any = false;
  for (const auto& st : streams_) any = any || st->unpublished != nullptr || st->publish_refused;
  StreamOrdering& ordering = source_->ordering();
  if (!any || ordering.device_capturing()) return false;
  ordering.synchronize_device();
  for (const auto& st : streams_) {
    st->unpublished = nullptr;
    st->publish_refused = false;
  }
  for (const auto& segment : segments_) {
    if (segment->withheld) continue;  // in no index; release_withheld puts them back
    for (Block* b = segment->first; b != nullptr; b = b->phys_next) {
      if (!b->is_free || b->owner->fresh) continue;
      b->owner->index.remove(b);
      b->owner = &fresh_;
      b = coalesce(b);
      fresh_.index.insert(b);
    }
  }
  return true;
}

// Makes `requester` safe to use memory `producer` freed: nothing to do for its own or fresh memory;
// else a completed event (non-deterministic pools only) or a stream wait. False when no wait can be
// made now (graph capture).
bool PoolImpl::order_after(StreamState* requester, StreamState* producer) {
  if (producer == requester || producer->fresh) return true;
  if (producer->publish_refused) return false;
  StreamOrdering& ordering = source_->ordering();
  const bool done = !config_.deterministic && ordering.is_complete(producer->id);
  return done || ordering.wait(requester->id, producer->id);
}

// No single free block fits, but adjacent free blocks of different streams (which coalesce() keeps
// apart) may: the first run of them, in segment creation order, that holds `size` is merged for the
// requester behind a wait on each other stream in it. Only the growth path pays for this walk over
// the blocks; without it, pools shared by several streams grow where the memory is already there.
// Decisions depend on the block layout, never on addresses, so deterministic pools stay in step.
Block* PoolImpl::merge_free_run(std::size_t size, StreamState* requester) {
  // No free block fits as it is, and the pool may have to grow: every other stream holding
  // unpublished memory publishes from its next free on, so that its memory can serve others later.
  for (const auto& other : streams_)
    if (other.get() != requester && other->unpublished != nullptr) other->make_eager();
  for (const auto& segment : segments_) {
    // A segment with fewer free bytes than the request holds no run: the walk skips full segments.
    if (segment->withheld || segment->size - segment->live_bytes < size) continue;
    Block* start = nullptr;
    std::size_t run = 0;
    for (Block* b = segment->first; b != nullptr; b = b->phys_next) {
      const bool foreign_unpublished = unpublished(b) && b->owner != requester;
      if (foreign_unpublished) ++stats_.unpublished_skips;
      if (!b->is_free || foreign_unpublished) {
        start = nullptr;
        run = 0;
        continue;
      }
      if (start == nullptr) start = b;
      run += b->size;
      if (run < size) continue;
      // Drop leading blocks the run does not need, then order the requester after every other
      // stream in it.
      while (run - start->size >= size) {
        run -= start->size;
        start = start->phys_next;
      }
      bool ordered = true;
      for (Block* m = start; m != b->phys_next && ordered; m = m->phys_next) ordered = order_after(requester, m->owner);
      if (!ordered) {  // rare (capture): give up on this run, look further on
        start = nullptr;
        run = 0;
        continue;
      }
      // What the last block holds beyond the request stays its stream's. Merged, it would become the
      // requester's, and another stream could take it behind the requester's event, which may
      // predate the wait just made on this block's stream.
      if (run > size && b->owner != requester && !b->owner->fresh) {
        b->owner->index.remove(b);
        (void)split(b, b->size - (run - size));  // the surplus goes back into its owner's index
        b->owner->index.insert(b);
      }
      for (Block* m = start; m != b->phys_next; m = m->phys_next) {
        m->owner->index.remove(m);
        if (m->owner != requester && !m->owner->fresh) {
          ++stats_.cross_stream_reuses;
          m->owner->quiet_frees = 0;
        }
      }
      // Free blocks right after the run that the requester's blocks absorb anyway (its own, fresh)
      // join too, or they would sit beside the merged block's tail uncoalesced.
      Block* end = b->phys_next;
      while (end != nullptr && end->is_free && (end->owner == requester || end->owner->fresh)) {
        end->owner->index.remove(end);
        end = end->phys_next;
      }
      start->owner = requester;
      while (start->phys_next != end) absorb_next(start);
      return start;
    }
  }
  return nullptr;
}

void PoolImpl::publish_frees(stream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = stream_by_id_.find(stream);
  if (it == stream_by_id_.end()) return;
  publish(it->second);
  settle_published(it->second);
}

}  // namespace ncclpool::detail

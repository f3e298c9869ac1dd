// The pool's hot path: allocate and deallocate, the stream lookup, taking a free block (own stream,
// then fresh memory, then other streams behind a wait), splitting and coalescing. Everything here runs
// on every request: keep it free of allocation, scans and driver calls on the same stream.

#include "pool_impl.hpp"

#include <algorithm>
#include <utility>

namespace ncclpool::detail {

// ---------------------------------------------------------------------------------------------
// Hot path. Cost with no growth: one lock, a stream lookup (one-entry cache), two bitmap searches
// and a pointer-map insert; no allocation, no scan, and on the same stream no driver call (a free
// publishes only when it would start a second unpublished block, or on an eager stream).
// ---------------------------------------------------------------------------------------------

void* PoolImpl::allocate(std::size_t bytes, stream_t stream) {
  if (bytes == 0) throw InvalidArgument(describe() + ": cannot allocate 0 bytes");
  const std::size_t size = round_up(bytes, config_.alignment);
  const std::size_t capacity = source_->properties().capacity;
  if (size == 0 || size > capacity || (config_.max_reserved != 0 && size > config_.max_reserved)) {
    std::lock_guard lock(mutex_);
    ++stats_.oom_count;
    throw SizeTooLarge(describe() + ": request of " + format_bytes(bytes) + " exceeds " +
                       (config_.max_reserved != 0 && size <= capacity
                            ? "the pool limit max_reserved=" + format_bytes(config_.max_reserved)
                            : "the device capacity " + format_bytes(capacity)));
  }

  std::lock_guard lock(mutex_);
  StreamState* requester = stream_state(stream);
  Block* block = take_free_block(size, requester);
  if (block == nullptr) block = merge_free_run(size, requester);  // rare: before growing
  if (block == nullptr) {
    try {
      block = grow(size);  // returns a fresh block, not in any index
    } catch (const OutOfMemory& e) {
      // Other streams' unpublished blocks may hold the memory: after a device synchronization they
      // are free for anyone. Only here, where the alternative is failing, and never in a
      // deterministic pool: an out-of-memory is one rank's state, and the blocks it would hand back
      // put this rank's requests where the same requests do not go on the other ranks (a symmetric
      // kernel would read their windows at the wrong offsets, silently). Failing keeps every rank's
      // placement the same.
      if (config_.deterministic) throw_deterministic_oom(e);
      if (!reclaim_unpublished()) throw;
      --stats_.oom_count;  // the failed growth counted it; a second failure below counts it again
      block = take_free_block(size, requester);
      if (block == nullptr) block = merge_free_run(size, requester);
      if (block == nullptr) block = grow(size);
      ++stats_.oom_recoveries;
    }
  }
  Block* tail = split(block, size);
  // An unpublished block keeps its obligation in what is left of it (none left: none to keep).
  if (block->owner->unpublished == block) block->owner->unpublished = tail;
  block->is_free = false;
  block->owner = requester;
  block->requested = bytes;
  block->allocation = stats_.allocation_count + 1;
  ++block->segment->live_blocks;
  block->segment->live_bytes += block->size;
  void* ptr = block->segment->base + block->offset;
  live_.insert(reinterpret_cast<std::uintptr_t>(ptr), block);

  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_allocations;
  ++stats_.allocation_count;
  return ptr;
}

void PoolImpl::deallocate(void* ptr, const stream_t* stream) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  Block* block = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (block == nullptr) throw_bad_free(ptr);  // nothing changed yet
  StreamState* owner = stream != nullptr ? stream_state(*stream) : block->owner;
  // Publish only when something needs it: the stream has an unpublished block elsewhere (a block
  // next to it joins it instead), a refused publish is to be retried, or other streams take memory
  // from this one. May throw (CUDA: a destroyed stream): before anything changes, so the block
  // stays live.
  auto joins = [&](const Block* n) { return n != nullptr && n == owner->unpublished; };
  const bool beside_unpublished = joins(block->phys_prev) || joins(block->phys_next);
  const bool publishing = owner->publish_refused || owner->eager || (!beside_unpublished && owner->unpublished != nullptr);
  if (publishing) publish(owner);
  live_.erase(reinterpret_cast<std::uintptr_t>(ptr));
  if (publishing) {
    settle_published(owner);
    if (owner->eager && ++owner->quiet_frees >= kQuietFrees) owner->eager = false;
  }

  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  --stats_.active_allocations;
  ++stats_.deallocation_count;
  --block->segment->live_blocks;
  block->segment->live_bytes -= block->size;

  block->is_free = true;
  block->owner = owner;
  block->requested = 0;
  if (publishing) {
    // Covered by the publish just made (or by publish_refused, which keeps all of it on this stream).
    owner->index.insert(coalesce(block));
    return;
  }
  // Unpublished: reusable here at once, elsewhere after this stream's next publish. It joins the
  // stream's unpublished neighbour (absorb_next moves the stream's pointer), so that a stream
  // allocating and freeing in one region keeps one unpublished block and never needs an event.
  if (joins(block->phys_next)) {
    owner->index.remove(block->phys_next);
    absorb_next(block);
  }
  if (joins(block->phys_prev)) {
    Block* prev = block->phys_prev;
    owner->index.remove(prev);
    absorb_next(prev);
    block = prev;
  }
  owner->unpublished = block;
  owner->index.insert(block);
}

StreamState* PoolImpl::stream_state(stream_t stream) {
  if (last_stream_ != nullptr && last_stream_->id == stream) return last_stream_;
  auto it = stream_by_id_.find(stream);
  if (it == stream_by_id_.end()) {
    streams_.push_back(std::make_unique<StreamState>());
    streams_.back()->id = stream;
    source_->ordering().on_new_stream(stream);
    it = stream_by_id_.emplace(stream, streams_.back().get()).first;
  }
  last_stream_ = it->second;
  return last_stream_;
}

// Merges block->phys_next (already out of its index) into `block`.
void PoolImpl::absorb_next(Block* block) {
  Block* next = block->phys_next;
  if (next->owner->unpublished == next) next->owner->unpublished = block;  // same owner: merge_free_run, or a free joining it
  block->size += next->size;
  block->phys_next = next->phys_next;
  if (next->phys_next != nullptr) next->phys_next->phys_prev = block;
  arena_.recycle(next);
}

// Own stream first (no wait), then memory never used (no wait), then other streams in first-use
// order behind a wait. Nothing here depends on addresses; with deterministic=false, a completed
// event lets a block cross streams without adding a dependency.
Block* PoolImpl::take_free_block(std::size_t size, StreamState* requester) {
  if (Block* b = requester->index.find(size)) {
    requester->index.remove(b);
    return b;
  }
  if (Block* b = fresh_.index.find(size)) {
    fresh_.index.remove(b);
    return b;
  }
  for (auto& other : streams_) {
    if (other.get() == requester) continue;
    Block* b = foreign_block(other.get(), size);
    if (b == nullptr || !order_after(requester, other.get())) continue;
    other->index.remove(b);
    other->quiet_frees = 0;
    ++stats_.cross_stream_reuses;
    return b;
  }
  return nullptr;
}

// A block of another stream that fits, passing over its unpublished block (only a publish on that
// stream, at one of its later frees, makes it safe here). Passing over it makes that stream eager.
Block* PoolImpl::foreign_block(StreamState* other, std::size_t size) {
  Block* b = other->index.find(size);
  if (b == nullptr || b != other->unpublished) return b;
  other->make_eager();
  ++stats_.unpublished_skips;
  // find() returns the head of a bin: taking it out and back in leaves the bin's order unchanged.
  other->index.remove(b);
  Block* alternative = other->index.find(size);
  other->index.insert(b);
  return alternative;
}

// Cuts `block` (taken out of its index) down to `size`; the tail stays free with the same owner and
// is returned (nullptr when nothing is left over). The tail cannot merge further: `block` was
// already coalesced with its free neighbours (or is unpublished, which waits).
Block* PoolImpl::split(Block* block, std::size_t size) {
  if (block->size - size < config_.alignment) return nullptr;
  Block* tail = arena_.make();
  tail->segment = block->segment;
  tail->offset = block->offset + size;
  tail->size = block->size - size;
  tail->owner = block->owner;
  tail->is_free = true;
  tail->phys_prev = block;
  tail->phys_next = block->phys_next;
  if (block->phys_next != nullptr) block->phys_next->phys_prev = tail;
  block->phys_next = tail;
  block->size = size;
  tail->owner->index.insert(tail);
  return tail;
}

// Merges a newly freed block with free neighbours it may absorb: those of the same owner, and fresh
// memory (never used, so it carries no stream obligation and may take on the freeing stream's).
// Blocks of two different streams stay apart: their stream-order obligations differ.
// Returns the merged block, not yet in any index.
Block* PoolImpl::coalesce(Block* block) {
  auto absorbable = [&](const Block* n) {
    return n != nullptr && n->is_free && !unpublished(n) && (n->owner == block->owner || n->owner->fresh);
  };
  // Loops: blocks that waited unpublished side by side join in one go once published.
  while (absorbable(block->phys_next)) {
    block->phys_next->owner->index.remove(block->phys_next);
    absorb_next(block);
  }
  while (absorbable(block->phys_prev)) {
    Block* prev = block->phys_prev;
    prev->owner->index.remove(prev);
    prev->owner = block->owner;
    absorb_next(prev);
    block = prev;
  }
  return block;
}

}  // namespace ncclpool::detail

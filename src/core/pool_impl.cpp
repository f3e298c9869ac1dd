// The pool's allocation, free, growth and release paths. See pool.hpp for the behaviour.

#include "pool_impl.hpp"

#include <algorithm>
#include <bit>
#include <set>
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

// ---------------------------------------------------------------------------------------------
// Growth and release (rare paths).
// ---------------------------------------------------------------------------------------------

// Growth within a budget of segments: 64 plus one per chunk's worth of reserve (a window costs
// ~15 ms per group; 64 GiB of 128 MiB tensors take ~128 segments, ~1.9 s). Every input follows the
// request sequence only, so ranks of a deterministic pool fed the same requests grow the same
// segments.
//
// Within the budget every segment is its request's own size (at least growth_chunk / 128, rounded
// to the granularity; min_segment if set), as PyTorch gives large allocations segments of their own;
// past it, chunks.
// Rounding to chunks left most of the last chunk unused at the peak (the decode trace: a 1 GiB chunk
// for 352 MiB live; Megatron-FSDP's: a 32 MiB tensor opened a 1 GiB chunk at the peak), and how much
// depended on where the peak fell: over the recorded traces at seven scales the worst peak reserved /
// live went from 5.81 to 1.23 for tensors, and from 1.60 to 1.08 for torch's segments (the torch
// layer's requests; docs/benchmarks/memory.md). The floor keeps small requests from making a window
// each; a larger min_segment trades reserve for windows (docs/benchmarks/growth.md: 1 GiB puts 64
// torch segments of 32 MiB in 2 windows per group instead of 64).
std::size_t PoolImpl::segment_size_for(std::size_t size) const {
  const std::size_t segment_budget = 64 + stats_.reserved_bytes / growth_chunk_;
  if (stats_.segment_count < segment_budget) return std::max(round_up_multiple(size, granularity_), min_segment_);
  return round_up_multiple(std::max(size, min_segment_), chunk_now());
}

// Past the budget: growth_chunk / 16, then reserved / kRampDivisor (the pool grows by 1/8), up to
// growth_chunk, so that a pool that spent its budget on small segments does not add a whole chunk
// to a few hundred MiB (3.0x reserved / live at 511 MiB of 1-4 MiB tensors with whole 1 GiB chunks,
// 1.13 at worst ramped). Ramped chunks take more windows than whole ones: up to ~144 segments at
// 64 GiB when every request is 8 MiB or less (whole chunks: 128).
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

void PoolImpl::reserve(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (bytes <= stats_.reserved_bytes) return;
  const std::size_t missing = bytes - stats_.reserved_bytes;
  const std::size_t segment_size = segment_size_for(missing);
  if (segment_size == 0 || segment_size > source_->properties().capacity) {
    throw SizeTooLarge(describe() + ": cannot reserve " + format_bytes(bytes) + ": exceeds the device capacity " +
                       format_bytes(source_->properties().capacity));
  }
  fresh_.index.insert(grow(missing));
}

void PoolImpl::publish_frees(stream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = stream_by_id_.find(stream);
  if (it == stream_by_id_.end()) return;
  publish(it->second);
  settle_published(it->second);
}

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

#pragma once
/// @file pool.hpp
/// @brief The caching pool: carves segments from a SegmentSource into stream-ordered blocks.
///
/// Behaviour in brief (docs/pool.md has the long form):
///  * Sizes are rounded up to `alignment` (>= 256 bytes). Free blocks sit in size-binned lists (TLSF
///    style: 16 bins per power of two, two bitmaps), so finding a block is O(1); blocks split on
///    allocation and coalesce with free neighbours on free. No free list is ever scanned.
///  * Stream-ordered reuse: a block freed on stream S is reusable at once by requests on S. A request
///    on another stream T takes it only after S published a point past the free (an event) and T
///    waits on it. S publishes at its next free elsewhere, at every free once another stream asked
///    for one of its blocks, or on publish_frees(): the same-stream cached path makes no driver call
///    (docs/pool.md, "Deferred publication").
///  * Decisions never depend on addresses (only on the request sequence), so pools on different ranks
///    fed the same requests place blocks at the same (segment sequence, offset). With
///    `deterministic = true` they never depend on timing either (no event polling).
///  * Before growing, a run of adjacent free blocks of different streams that holds the request is
///    merged behind waits on those streams (a walk over the blocks, on the growth path only).
///  * Growth takes a segment of the request's own size (at least min_segment, default growth_chunk /
///    128, rounded to the source granularity) within a budget of 64 segments plus one per growth_chunk of reserve, and
///    a chunk past it, which starts at growth_chunk / 16 and grows with the pool up to growth_chunk
///    (docs/pool.md, "Growth, reserve, trim, OOM"). On a source OOM the pool releases its empty
///    segments and retries once before throwing OutOfMemory.
///  * Observers hear of every segment created (with its creation sequence number) and of every
///    segment about to be released, before its memory goes back to the source.
///  * Thread safe: one lock per pool. Observer callbacks run under it and must not call the pool.

#include <ncclpool/errors.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/segment_source.hpp>
#include <ncclpool/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

/// Per-pool settings. Validated by the Pool constructor (InvalidArgument on a bad value).
struct PoolConfig {
  std::string name = "ncclpool";          ///< used in every message about this pool
  std::size_t alignment = 256;            ///< power of two, 256 .. source alignment (4096 for windows)
  std::size_t growth_chunk = 2ull << 20;  ///< past the segment budget, chunks ramp up to it
  /// The smallest segment growth makes (rounded up to the source granularity); 0: growth_chunk / 128.
  /// Larger: fewer segments, so fewer windows (later requests share the segment) for more reserve.
  std::size_t min_segment = 0;
  std::size_t max_reserved = 0;           ///< cap on reserved bytes (0 = none); past it = OOM
  bool deterministic = false;             ///< never let timing (event polls) steer a decision
};

/// A segment as observers and callers see it.
struct SegmentInfo {
  std::uint64_t sequence = 0;  ///< creation order within the pool, from 0; equal across ranks
  void* base = nullptr;
  std::size_t size = 0;
  int device = 0;
  SourceKind kind = SourceKind::sim;
  std::uintptr_t handle = 0;   ///< the source's handle of the segment
};

/// Where a live block sits: the same on every rank of a deterministic pool fed the same requests.
struct BlockLocation {
  std::uint64_t segment_sequence = 0;
  std::size_t offset = 0;  ///< from the segment base
  std::size_t size = 0;    ///< rounded size of the block
};

/// Where a pool's reserved bytes are, at one moment (Pool::memory_breakdown): why the pool is bigger
/// than what is live. reserved = requested + rounding + free_in_used_segments + empty_segments.
/// Its fields, X(name, doc), the one list: the members, the sum over an auto pool's parts and the JSON
/// (ncclpool_pool_stats_json's "breakdown", replay's "at_peak") are made from it.
#define NCCLPOOL_MEMORY_BREAKDOWN_FIELDS(X)                                                               \
  X(reserved, "bytes in segments")                                                                        \
  X(requested, "what the live allocations asked for")                                                     \
  X(rounding, "live blocks beyond their request (alignment, unsplit excess)")                             \
  X(free_in_used_segments, "free blocks in segments that hold a live block")                              \
  X(never_used, "of those: memory never handed out (the rest of a chunk)")                                \
  X(other_streams_only, "of those: blocks only their stream may take now (unpublished)")                  \
  X(empty_segments, "segments with no live block (trim releases them; windows need a collective trim)")
struct MemoryBreakdown {
#define NCCLPOOL_MEMORY_BREAKDOWN_MEMBER(name, doc) std::size_t name = 0;
  NCCLPOOL_MEMORY_BREAKDOWN_FIELDS(NCCLPOOL_MEMORY_BREAKDOWN_MEMBER)
#undef NCCLPOOL_MEMORY_BREAKDOWN_MEMBER
  /// Adds another part's breakdown (every field sums).
  NCCLPOOL_API MemoryBreakdown& operator+=(const MemoryBreakdown& other) noexcept;
};
/// @brief The breakdown as one JSON object (key names = the field names, in the list's order).
NCCLPOOL_API std::string to_json(const MemoryBreakdown& breakdown);

/// @brief Told of segment creation and release. Callbacks run under the pool lock.
class NCCLPOOL_API PoolObserver {
 public:
  virtual ~PoolObserver() = default;
  /// A segment was created. Throwing rolls the creation back: observers told before this one get
  /// on_segment_releasing, the memory returns to the source and the allocation fails with the error.
  virtual void on_segment_created(const SegmentInfo& segment) = 0;
  /// Asked before an empty segment is trimmed; false keeps it (e.g. a collective deregistration is
  /// needed first). Not asked on pool destruction.
  [[nodiscard]] virtual bool may_release(const SegmentInfo& /*segment*/) { return true; }
  /// The segment is about to go back to the source (its memory is still valid). Must not throw;
  /// anything thrown is counted in PoolStats::hook_errors and ignored.
  virtual void on_segment_releasing(const SegmentInfo& segment) noexcept = 0;
};

namespace detail {
class PoolImpl;
}

/// @brief A thread-safe caching pool over one SegmentSource (one device).
class NCCLPOOL_API Pool {
 public:
  /// @throws InvalidArgument if the config is invalid or source is null.
  explicit Pool(std::shared_ptr<SegmentSource> source, PoolConfig config = {});
  /// Releases every segment (observers are told first), live blocks included.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// @brief A block of at least `bytes`, aligned to config().alignment, ordered on `stream`.
  /// @throws InvalidArgument (zero size), SizeTooLarge, OutOfMemory, or an observer's error.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = 0);
  /// @brief Frees a block; it becomes reusable on the stream it was allocated on. Null is a no-op.
  /// @throws DoubleFree, ForeignPointer, InvalidPointer; the pool is unchanged when it throws.
  void deallocate(void* ptr);
  /// @brief Frees a block last used on `stream` (reusable at once there, elsewhere behind a wait).
  void deallocate(void* ptr, stream_t stream);
  /// @brief Makes every block freed on `stream` so far reusable by other streams (behind a wait), by
  /// recording an event on it now. The pool does this by itself at later frees; call it after a
  /// stream's last free before you destroy the stream, so that its blocks do not stay with it until
  /// an out-of-memory. No-op for a stream the pool never served. @throws BackendError (a destroyed
  /// stream); a capturing stream publishes nothing (its blocks stay with it until a later publish).
  void publish_frees(stream_t stream);

  /// @brief Grows the pool up front so that at least `bytes` are reserved (one new segment).
  void reserve(std::size_t bytes);
  /// @brief Releases every empty segment that all observers allow; returns the bytes released.
  std::size_t trim();

  [[nodiscard]] PoolStats stats() const;
  [[nodiscard]] std::string stats_json() const;
  /// @brief Where the reserved bytes are now. Walks the blocks (O(blocks), under the lock): for
  /// diagnostics and reports, not for the hot path.
  [[nodiscard]] MemoryBreakdown memory_breakdown() const;

  /// @brief Adds an observer. With replay_existing, it is first told of every existing segment in
  /// creation order, atomically with respect to growth. @throws InvalidArgument if already added.
  void add_observer(PoolObserver& observer, bool replay_existing = false);
  void remove_observer(PoolObserver& observer) noexcept;

  /// @brief Every segment, in creation order.
  [[nodiscard]] std::vector<SegmentInfo> segments() const;
  /// @brief Segments with no live block, in creation order (what trim() would release).
  [[nodiscard]] std::vector<SegmentInfo> empty_segments() const;
  /// @brief Takes every empty segment out of use (no allocation can land in it) and returns them in
  /// creation order: the first half of a release that ranks agree on before it happens.
  std::vector<SegmentInfo> withhold_empty_segments();
  /// @brief Ends a withholding: with `release`, frees every withheld segment (observers are told, not
  /// asked: the caller agreed with them) and returns the bytes; else puts them back into use.
  std::size_t release_withheld(bool release);
  /// @brief Every live block, in allocation order (the order of the allocate calls that handed them
  /// out): check mode compares these, place by place, across ranks.
  [[nodiscard]] std::vector<BlockLocation> live_blocks() const;
  /// @brief Out-of-memory recoveries so far (PoolStats::oom_recoveries). Each may have put later
  /// requests elsewhere than the same requests went on another rank (empty segments released and
  /// the growth retried; a non-deterministic pool also hands other streams' blocks back after a
  /// device synchronization, which a deterministic one refuses), so a registry's agreements carry
  /// it: ranks whose layouts may have parted fail together there.
  [[nodiscard]] std::uint64_t placement_recoveries() const;
  /// @brief The segment containing ptr, in O(log segments).
  [[nodiscard]] std::optional<SegmentInfo> segment_of(const void* ptr) const;
  /// @brief Segment sequence and offset of the live block that starts at ptr.
  [[nodiscard]] std::optional<BlockLocation> locate(const void* ptr) const;

  /// @brief Checks every internal invariant (each byte of each segment in exactly one block, free
  /// index and pointer map agree with the blocks, counters match a recount).
  /// @throws InvariantViolation naming the first broken invariant.
  void check_invariants() const;

  [[nodiscard]] const PoolConfig& config() const noexcept;
  [[nodiscard]] const SourceProperties& source_properties() const noexcept;
  [[nodiscard]] SegmentSource& source() noexcept;

 private:
  std::unique_ptr<detail::PoolImpl> impl_;
};

}  // namespace ncclpool

#pragma once
/// @file segment_source.hpp
/// @brief The platform contract under the pool: where segments come from and how streams are ordered.
///
/// A SegmentSource hands out large, aligned segments of device (or host) memory; the pool carves them
/// into blocks. Implementations: `sim` (host memory), `cuda` (cuMemAlloc), `vmm` (cuMem virtual memory,
/// device or host-NUMA), and `nccl` (ncclMemAlloc, in the NCCL backend).
///
/// Contract for implementers:
///  * allocate(size) is called with size a positive multiple of granularity(); it returns a segment of
///    exactly that size whose base is aligned to at least `alignment`, or throws OutOfMemory when the
///    memory is not there (the pool then releases cached segments and retries once), or another
///    ncclpool::Error for any other failure. A throwing allocate leaves nothing allocated.
///  * deallocate() never throws; it is called exactly once per successful allocate.
///  * All calls come with the owning pool's lock held: a source need not be thread safe by itself.

#include <ncclpool/export.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclpool {

/// Opaque stream handle. On CUDA sources it is a CUstream (0 = the legacy default stream); the
/// simulator treats it as an id.
using stream_t = std::uintptr_t;

/// What backs a segment.
enum class SourceKind : int { sim = 0, cuda = 1, vmm = 2, nccl = 3 };

/// @brief Short name of a source kind ("sim", "cuda", "vmm", "nccl").
NCCLPOOL_API const char* to_string(SourceKind kind) noexcept;

/// Static facts about a source, fixed at creation.
struct SourceProperties {
  SourceKind kind = SourceKind::sim;
  std::string description;        ///< e.g. "vmm device 0 (posix-fd)"; used in messages
  int device = 0;                 ///< CUDA device ordinal the memory belongs to
  std::size_t granularity = 0;    ///< every segment size is a multiple of this
  std::size_t alignment = 0;      ///< every segment base is aligned to this
  std::size_t capacity = 0;       ///< the most memory the device could ever give (total memory)
  bool device_accessible = false; ///< kernels on `device` can read and write it
  bool window_capable = false;    ///< can back an NCCL symmetric window (ncclMemAlloc or cuMem memory)
};

/// One segment handed out by a source.
struct SegmentAllocation {
  void* base = nullptr;
  std::size_t size = 0;
  std::uintptr_t handle = 0;  ///< source-private (e.g. a CUmemGenericAllocationHandle)
};

/// @brief How a free block moves safely from the stream that freed it to another stream.
///
/// A block freed on stream S is reused on S at once (stream order covers it). Before another stream
/// may take it, S must be *published* after the free: the pool calls publish(S), which marks a point
/// in S's work that covers everything enqueued on S so far (CUDA: cuEventRecord), and later
/// wait(consumer, S), which makes later work on `consumer` start only after S's latest published
/// point (CUDA: cuStreamWaitEvent). The pool does not publish at every free: recording an event costs
/// more than the rest of the cached path, so it publishes at a stream's free that is not next to the
/// bytes that stream freed since its last publish, at every free of a stream that other streams take
/// memory from, and never on a path where the stream might already be destroyed (see docs/pool.md).
///
///  * publish(s) returns false when no such point can be made now (s is capturing a CUDA graph); it
///    throws (e.g. a destroyed stream) without side effects.
///  * wait(consumer, producer) returns false when the dependency cannot be made now (either stream is
///    capturing, or `producer` never published); the pool then looks elsewhere.
///  * is_complete(producer): whether `producer`'s latest published point has completed (CUDA:
///    cuEventQuery); deterministic pools never call it.
///  * synchronize(producer) blocks the host until `producer`'s latest published point completed;
///    synchronize_device() until all work on the device completed (cuCtxSynchronize). The pool calls
///    them before it returns a segment to the source, or hands unpublished blocks to other streams
///    after an out-of-memory; synchronize_device() only when a block of the segment is unpublished.
class NCCLPOOL_API StreamOrdering {
 public:
  virtual ~StreamOrdering() = default;
  [[nodiscard]] virtual bool publish(stream_t stream) = 0;
  [[nodiscard]] virtual bool wait(stream_t consumer, stream_t producer) = 0;
  [[nodiscard]] virtual bool is_complete(stream_t producer) = 0;
  virtual void synchronize(stream_t producer) = 0;
  virtual void synchronize_device() = 0;
  /// The pool announces every stream the first time it serves it (with its lock held).
  virtual void on_new_stream(stream_t /*stream*/) {}
  /// Whether a stream of this device that the pool has served (or the default stream) is capturing
  /// a CUDA graph now. Thread safe: the registry asks without the pool lock.
  [[nodiscard]] virtual bool device_capturing() { return false; }
  /// Whether the calling thread captures a CUDA graph on this device: a capture the program makes,
  /// at the same places in the same threads on every rank. The registry decides on it whether an
  /// agreement point is skipped (never on device_capturing(): another thread's capture on one rank
  /// would make that rank alone skip). Thread safe. Default: device_capturing().
  [[nodiscard]] virtual bool thread_capturing() { return device_capturing(); }
};

/// @brief Where a pool's segments come from. See the contract at the top of this file.
class NCCLPOOL_API SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  [[nodiscard]] virtual const SourceProperties& properties() const noexcept = 0;
  [[nodiscard]] virtual SegmentAllocation allocate(std::size_t size) = 0;
  virtual void deallocate(const SegmentAllocation& segment) noexcept = 0;
  [[nodiscard]] virtual StreamOrdering& ordering() noexcept = 0;
};

}  // namespace ncclpool

#pragma once
/// @file communicator.hpp
/// @brief What the registry needs from a communicator: identity, local registration, collective
/// window registration and a small all-gather for agreement. Implemented by NcclCommunicator
/// (a caller-owned ncclComm_t) and LoopbackCommunicator (threads as ranks, for the simulator).
///
/// Contract: register_window, deregister_window and start_all_gather are collective: every rank of
/// the communicator makes the same calls in the same order. Implementations report failures as
/// RegistrationError (registration refused) or AgreementError (a collective that did not complete
/// or did not match), naming the communicator; they never hang without bound. A collective that
/// timed out leaves the communicator broken: every later collective call throws AgreementError at
/// once (its owner must abort it; the registry then forgets it).

#include <ncclpool/export.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ncclpool {

/// A fixed-size record exchanged at agreement points (144 bytes, so one all-gather suffices).
struct AgreementRecord {
  static constexpr std::size_t kWords = 18;
  std::array<std::uint64_t, kWords> words{};
  friend bool operator==(const AgreementRecord&, const AgreementRecord&) = default;
};

/// Added to Communicator::prepare_symmetric_kernels()' value when this process registers windows
/// without NCCL_WIN_COLL_SYMMETRIC, so that NCCL's symmetric kernels never run on them
/// (SymmetricKernels in nccl.hpp: the NCCL versions whose symmetric kernels can read their input
/// early). Ranks must agree on it like on the CTA count.
inline constexpr int kSymmetricKernelsOff = 1 << 16;
/// Added to Communicator::prepare_symmetric_kernels()' value when this process registers windows with
/// NCCL_WIN_COLL_SYMMETRIC and fences every collective it launches or wraps on them (SymmetricKernels'
/// decision `fence`: NCCLPOOL_SYMMETRIC_KERNELS=fence, or auto in a process that called
/// prefer_symmetric_fence, on the NCCL versions with the hazard). Compared across ranks like the rest.
inline constexpr int kSymmetricKernelsFenced = 1 << 17;

/// What a measured profile (profile.hpp) must match for a communicator, and what routes default to.
struct MachineKey {
  std::string gpu;       ///< device name, e.g. "NVIDIA H200"; the simulator's is "ncclpool simulator"
  int nccl_version = 0;  ///< ncclGetVersion; 0 for the simulator
  int ranks = 0;         ///< the communicator's size
  int compute_capability = 0;  ///< major * 10 + minor (90: H100, H200); 0 unknown (the simulator's unless set)
};

/// An all-gather that was started and whose result has not been read yet. Destroying it without
/// wait() abandons the result (the collective still completes on the device).
class NCCLPOOL_API PendingGather {
 public:
  virtual ~PendingGather() = default;
  /// True once wait() would return without waiting. Never blocks, never throws.
  [[nodiscard]] virtual bool ready() = 0;
  /// Every rank's record, indexed by rank. Waits until the deadline (the communicator's timeout,
  /// counted from the start of the all-gather). @throws AgreementError (timeout, asynchronous NCCL
  /// error: the communicator is broken from then on), BackendError.
  [[nodiscard]] virtual std::vector<AgreementRecord> wait() = 0;
};

class NCCLPOOL_API Communicator {
 public:
  virtual ~Communicator() = default;
  [[nodiscard]] virtual int device() const = 0;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  /// Identity of the underlying communicator (the ncclComm_t); two wrappers of one comm compare equal.
  [[nodiscard]] virtual std::uintptr_t native_handle() const = 0;
  /// "nccl comm 0x55d0 (rank 1 of 4, device 1)"; used in every message about it.
  [[nodiscard]] virtual std::string describe() const = 0;
  /// Whether window (symmetric) registration is available; if not, `why` says why.
  [[nodiscard]] virtual bool supports_windows(std::string* why) const = 0;

  /// Local (non-collective) registration: ncclCommRegister. Returns the handle.
  [[nodiscard]] virtual void* register_local(void* base, std::size_t size) = 0;
  virtual void deregister_local(void* handle) = 0;
  /// Collective window registration: ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC).
  [[nodiscard]] virtual void* register_window(void* base, std::size_t size) = 0;
  /// Collective window deregistration.
  virtual void deregister_window(void* window) = 0;
  /// Collective, asynchronous: enqueues an all-gather of `mine` and returns at once (no host wait),
  /// so a rank with nothing to register still joins every agreement for a few microseconds.
  [[nodiscard]] virtual std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) = 0;
  /// Collective, blocking: every rank's record, indexed by rank.
  [[nodiscard]] std::vector<AgreementRecord> all_gather(const AgreementRecord& mine) { return start_all_gather(mine)->wait(); }
  /// True after a collective of this communicator timed out or failed asynchronously: it must be
  /// aborted by its owner, and no collective is started on it any more.
  [[nodiscard]] virtual bool broken() const { return false; }
  /// Called before the communicator's first symmetric agreement (and by auto pools choosing routes):
  /// fixes how this process launches symmetric kernels and returns it: the CTA count (SymmetricCtas
  /// in nccl.hpp; 0 = NCCL's own choice), plus kSymmetricKernelsOff when windows are registered
  /// without the symmetric flag or kSymmetricKernelsFenced when collectives on them are fenced
  /// (SymmetricKernels); -1 = nothing to say. Ranks must return the same:
  /// a symmetric kernel whose ranks launch different block counts (or that runs on some ranks only)
  /// waits for blocks that never come, so the registry's attach agreement compares the values and
  /// fails on every rank when they differ.
  [[nodiscard]] virtual int prepare_symmetric_kernels() { return -1; }
  /// The GPU model, NCCL version and size a profile of this communicator's machine was measured with.
  [[nodiscard]] virtual MachineKey machine() const { return MachineKey{"", 0, size()}; }
  /// Which node this rank runs on, as NCCL tells nodes apart: a hash of NCCL_HOSTID when set, else of
  /// the host name and boot id (NCCL's getHostHash). Ranks with different values are different nodes
  /// to NCCL: no symmetric kernels or copy engines between them, so auto pools route no size to
  /// windows then (the routes agreement compares it). Default: this process's host.
  [[nodiscard]] virtual std::uint64_t node() const;
};

}  // namespace ncclpool

#pragma once
/// @file communicator.hpp
/// @brief What the registry needs from a communicator: identity, local registration, collective
/// window registration and a small all-gather for agreement. Implemented by NcclCommunicator
/// (a caller-owned ncclComm_t) and LoopbackCommunicator (threads as ranks, for the simulator).
///
/// Contract: register_window, deregister_window and all_gather are collective: every rank of the
/// communicator makes the same calls in the same order. Implementations report failures as
/// RegistrationError (registration refused) or AgreementError (a collective that did not complete
/// or did not match), naming the communicator; they never hang without bound.

#include <ncclpool/export.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ncclpool {

/// A fixed-size record exchanged at agreement points (64 bytes, so one all-gather suffices).
struct AgreementRecord {
  std::array<std::uint64_t, 8> words{};
  friend bool operator==(const AgreementRecord&, const AgreementRecord&) = default;
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
  /// Collective: every rank's record, indexed by rank.
  [[nodiscard]] virtual std::vector<AgreementRecord> all_gather(const AgreementRecord& mine) = 0;
};

}  // namespace ncclpool

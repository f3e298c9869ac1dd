#pragma once
/// @file registry.hpp
/// @brief Keeps every segment of a pool registered exactly once with every attached communicator.
///
/// * attach(comm, local): registers every existing segment (creation order) with ncclCommRegister;
///   later segments are registered as the pool creates them (inside the allocation that grew the pool).
/// * attach(comm, symmetric): collective. Agrees with the other ranks, then registers every existing
///   segment as a window (creation order). Later segments are *pending* until commit().
/// * commit(): collective over each symmetric communicator with pending segments: all-gathers (count,
///   bytes, digest of the creation sequence) and registers pending windows in creation order, or
///   throws AgreementError naming the ranks that differ and registers nothing. Refused (InvalidState)
///   while a stream of the pool's device captures a CUDA graph; local registrations that fell into a
///   capture are pending too and are made by the next commit().
/// * Segments with windows (or pending windows) are kept by trim and OOM release; Registry::trim()
///   releases them collectively. Local registrations are removed before a segment is freed.
/// * detach(comm): removes all of comm's registrations (collectively for windows, after agreement).
///   forget(comm): drops comm's handles without calling it (aborted or destroyed communicator).
/// * Steady state costs nothing: allocation with no growth never enters the registry; commit() with
///   nothing pending is O(1).

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/pool.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

enum class RegistrationKind : int {
  local = 0,      ///< ncclCommRegister: zero-copy for ordinary collectives
  symmetric = 1,  ///< ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC): symmetric kernels; collective
};
NCCLPOOL_API const char* to_string(RegistrationKind kind) noexcept;

/// Per-communicator counters.
struct CommunicatorStats {
  RegistrationKind kind = RegistrationKind::local;
  std::uint64_t registrations = 0;      ///< successful register calls, ever
  std::uint64_t deregistrations = 0;
  std::size_t registered_segments = 0;  ///< now
  std::size_t bytes_registered = 0;     ///< now
  double registration_seconds = 0;      ///< time spent in register/deregister calls and agreements
  std::size_t pending = 0;              ///< segments waiting for commit()
  std::uint64_t agreements = 0;         ///< all-gathers made for this communicator
  std::uint64_t errors = 0;             ///< failed register/deregister calls
};

/// One communicator's registration of one segment.
struct SegmentRegistration {
  const Communicator* comm = nullptr;
  RegistrationKind kind = RegistrationKind::local;
  void* handle = nullptr;  ///< ncclCommRegister handle or ncclWindow_t
};

/// A segment and everything registered on it.
struct SegmentRegistrations {
  SegmentInfo segment;
  std::vector<SegmentRegistration> registrations;
};

namespace detail {
class RegistryImpl;
}

class NCCLPOOL_API Registry {
 public:
  /// Observes `pool` from now on (existing segments included). The registry keeps the pool alive.
  explicit Registry(std::shared_ptr<Pool> pool);
  /// Deregisters local registrations. Never collective: symmetric communicators still attached are
  /// forgotten (reported on stderr); detach them first.
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// @throws InvalidArgument (attached twice, other device, symmetric over a pool that is not
  /// deterministic or a source that cannot back windows), Unsupported (no window support),
  /// RegistrationError / AgreementError (nothing stays registered with comm when it throws).
  void attach(std::shared_ptr<Communicator> comm, RegistrationKind kind);
  /// @throws InvalidArgument if comm is not attached; RegistrationError / AgreementError.
  void detach(const Communicator& comm);
  /// Drops comm's handles without calling it. @throws InvalidArgument if comm is not attached.
  void forget(const Communicator& comm);
  /// Registers everything pending. @throws InvalidState (graph capture), AgreementError, RegistrationError.
  void commit();
  /// Collectively (over the symmetric communicators) releases the empty segments every rank agrees
  /// on, then trims the pool. Returns the bytes released on this rank.
  std::size_t trim();

  [[nodiscard]] std::optional<SegmentRegistrations> lookup(const void* ptr) const;
  /// The window (or local handle) of the segment holding ptr for comm; nullptr if none.
  [[nodiscard]] void* handle_of(const void* ptr, const Communicator& comm) const;
  [[nodiscard]] CommunicatorStats stats(const Communicator& comm) const;
  [[nodiscard]] std::size_t pending() const;
  [[nodiscard]] std::size_t attached() const;
  /// Each live segment registered exactly once with each attached communicator (or pending), no
  /// handle without a segment, counters match. @throws InvariantViolation.
  void check_invariants() const;

  [[nodiscard]] Pool& pool() noexcept;
  [[nodiscard]] const std::shared_ptr<Pool>& shared_pool() const noexcept;

 private:
  std::unique_ptr<detail::RegistryImpl> impl_;
};

/// @brief Routes this thread's allocations to a registry's pool (see current_scope()) and commits on
/// close(). Nothing collective runs in the destructor: a scope destroyed without close() only pops.
class NCCLPOOL_API Scope {
 public:
  explicit Scope(Registry& registry);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  /// Commits the registry (collective when something is pending) and leaves the scope.
  void close();
  [[nodiscard]] Registry& registry() noexcept { return *registry_; }

 private:
  Registry* registry_;
  Scope* previous_;
  bool open_ = true;
};

/// The innermost open scope of the calling thread, or nullptr.
NCCLPOOL_API Scope* current_scope() noexcept;

}  // namespace ncclpool

#pragma once
/// @file registry.hpp
/// @brief Keeps every segment of a pool registered exactly once with every attached communicator.
///
/// * attach(comm, local): registers every existing segment (creation order) with ncclCommRegister;
///   later segments are registered as the pool creates them (inside the allocation that grew the pool).
/// * attach(comm, symmetric): collective. Agrees with the other ranks, then registers every existing
///   segment as a window (creation order). Later segments are *pending* until commit().
/// * commit(): an agreement point. Collective over every attached symmetric communicator, whether or
///   not this rank has anything pending: each rank all-gathers a record (pool, agreement number,
///   count, bytes, digest of the pending segments). A rank with pending windows waits for the
///   records, registers when every rank brought the same, else throws AgreementError naming the
///   ranks that differ. A rank with nothing pending only enqueues its part (a few microseconds, no
///   host wait) and checks the outcome later: at its next agreement point, poll() or scope begin, at
///   the latest once the agreement timeout passed. So every mismatch ends in an error on every rank.
///   Skipped (nothing collective) while a stream of the pool's device captures a CUDA graph; with
///   something pending it is refused then (InvalidState). Local registrations that fell into a
///   capture are pending too and are made by the next commit().
/// * Segments with windows (or pending windows) are kept by trim and OOM release; Registry::trim()
///   releases them collectively. Local registrations are removed before a segment is freed.
/// * detach(comm): removes all of comm's registrations (collectively for windows, after agreement).
///   forget(comm): drops comm's handles without calling it (aborted or destroyed communicator).
/// * Scope ends (Scope::close) commit on a schedule the same on every rank: the first
///   RegistryOptions::scope_period of them, then every scope_period-th.
/// * Steady state costs little: allocation with no growth never enters the registry; commit() with
///   nothing pending is O(1) without symmetric communicators, and one enqueued all-gather per
///   symmetric communicator with them (so a steady scope end costs that once per scope_period).
/// * Check mode (RegistryOptions::check, NCCLPOOL_CHECK) proves more at each agreement point, at the
///   price of a host wait there: see CheckLevel.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registration.hpp>
#include <ncclpool/stats_fields.h>

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

/// How much ranks prove to each other (docs/registry.md, "Check mode").
enum class CheckLevel : int {
  off = 0,          ///< agreements compare what is about to be registered (always on)
  layout = 1,       ///< also, at every agreement point every rank waits for the records and the live
                    ///< blocks of the pool must sit at the same (segment, offset, size) on every rank
  collectives = 2,  ///< also, ncclpool.torch checks the buffers of every collective on a group with
                    ///< windows (verify_symmetric_buffers); C++ callers call that function themselves
};
NCCLPOOL_API const char* to_string(CheckLevel level) noexcept;
/// NCCLPOOL_CHECK: off|layout|collectives or 0|1|2; unset or empty = off.
/// @throws InvalidArgument naming the variable on any other value.
NCCLPOOL_API CheckLevel check_level_from_env();

struct RegistryOptions {
  /// Check level; std::nullopt = check_level_from_env().
  std::optional<CheckLevel> check;
  /// Which scope ends are agreement points (see Scope::close): each of the first `scope_period`
  /// scope ends of the registry, then every `scope_period`-th. Counted per registry, the same on
  /// every rank. 1 = every scope end (what check mode uses). Must be >= 1.
  unsigned scope_period = kDefaultScopePeriod;
  static constexpr unsigned kDefaultScopePeriod = 16;
  /// Settings that change how ranks use the pool collectively (the caller's text: a kind, buffer
  /// checks, debug modes, a kernel policy...), which every rank must have alike. Non-empty: every
  /// attach is collective, a local one included (an attach agreement comparing the kind and a
  /// digest of this text), so ranks whose kind or settings differ all fail there together. Every
  /// symmetric attach compares the digest too. Empty: a local attach is not collective.
  std::string agreed_settings{};
};

/// Per-communicator counters. The fields and what each says: NCCLPOOL_COMM_STATS_FIELDS in
/// stats_fields.h (those of scope `both`).
struct CommunicatorStats {
  NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_STATS_CXX_MEMBER)

  /// Adds the counters of the same communicator in another part of an auto pool: sums, and
  /// symmetric where either is (each field's `merge` in stats_fields.h).
  NCCLPOOL_API CommunicatorStats& operator+=(const CommunicatorStats& other) noexcept;
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
  /// @throws InvalidArgument (null pool, bad NCCLPOOL_CHECK).
  explicit Registry(std::shared_ptr<Pool> pool, RegistryOptions options = {});
  /// Deregisters local registrations. Never collective: symmetric communicators still attached are
  /// forgotten (reported on stderr); detach them first.
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Collective when `kind` is symmetric or the registry has agreed settings (RegistryOptions): then
  /// every check that fails on this rank alone (other device, attached twice, a pending vote_no, ...)
  /// is this rank's "no" in the attach agreement, and every rank fails there together.
  /// @throws InvalidArgument (a kind other than local or symmetric, attached twice, other device,
  /// symmetric over a pool that is not deterministic or a source that cannot back windows),
  /// Unsupported (no window support), InvalidState (a collective attach during graph capture),
  /// RegistrationError / AgreementError (nothing stays registered with comm when it throws).
  void attach(std::shared_ptr<Communicator> comm, RegistrationKind kind);
  /// @throws InvalidArgument if comm is not attached; RegistrationError / AgreementError.
  void detach(const Communicator& comm);
  /// Drops comm's handles without calling it. @throws InvalidArgument if comm is not attached.
  void forget(const Communicator& comm);
  /// An agreement point (see the file comment): registers everything pending.
  /// @throws InvalidState (graph capture with something pending), AgreementError (now, or for an
  /// earlier agreement point of this rank found to have differed), RegistrationError.
  void commit();
  /// The agreement point of commit(), reached on an error path of this rank (an exception on its
  /// way out of code that commits on every rank): joins the agreement voting no, so that every rank
  /// fails there and nothing is registered, instead of leaving the other ranks' agreement to pair
  /// with this rank's next collective. Never throws (the caller's own error is the one to raise).
  void commit_after_error() noexcept;
  /// Records a failure found on this rank alone as this rank's "no" at the pool's next collective
  /// step (a collective attach, a commit or scheduled scope end with a symmetric communicator, a
  /// symmetric detach, a trim with one). That step takes it: this rank still joins, votes no, nothing
  /// is registered or released anywhere, every other rank raises the agreement's AgreementError
  /// ("voted no"), and this rank raises InvalidState naming `why`. The first failure is kept until a
  /// step takes it. Never collective, never waits, never throws.
  void vote_no(const std::string& why) noexcept;
  /// The same with the error itself: the step raises `error` on this rank.
  void vote_no(std::exception_ptr error) noexcept;
  /// Whether a vote_no (or a scope's failure) waits for the next collective step.
  [[nodiscard]] bool voting_no() const noexcept;
  /// Checks agreements of earlier agreement points whose results arrived (never waits, nothing
  /// collective). @throws AgreementError for the oldest one that differed (reported once: not again
  /// at the next agreement point).
  void poll();
  /// Collectively (over the symmetric communicators) releases the empty segments. The empty segments
  /// are withheld from allocation first, so no thread can reuse one between the agreement and the
  /// release; if ranks differ, nothing is released anywhere and they return to use. Returns the
  /// bytes released on this rank. @throws AgreementError, InvalidState (graph capture).
  std::size_t trim();

  [[nodiscard]] std::optional<SegmentRegistrations> lookup(const void* ptr) const;
  /// The window (or local handle) of the segment holding ptr for comm; nullptr if none.
  [[nodiscard]] void* handle_of(const void* ptr, const Communicator& comm) const;
  [[nodiscard]] CommunicatorStats stats(const Communicator& comm) const;
  [[nodiscard]] std::size_t pending() const;
  [[nodiscard]] std::size_t attached() const;
  [[nodiscard]] CheckLevel check_level() const noexcept;
  /// Scope ends so far (Scope::close calls), and the number of the next scope end that commits (a
  /// scope end numbered n commits when n < scope_period or n is a multiple of it).
  [[nodiscard]] std::uint64_t scope_ends() const noexcept;
  [[nodiscard]] std::uint64_t next_committing_scope_end() const noexcept;
  [[nodiscard]] unsigned scope_period() const noexcept;
  /// Open Scopes on this registry (all threads). Destroying a registry with open scopes is a bug.
  [[nodiscard]] int open_scopes() const noexcept;
  /// Each live segment registered exactly once with each attached communicator (or pending), no
  /// handle without a segment, counters match. @throws InvariantViolation.
  void check_invariants() const;

  [[nodiscard]] Pool& pool() noexcept;
  [[nodiscard]] const std::shared_ptr<Pool>& shared_pool() const noexcept;

 private:
  friend class Scope;
  friend class RegisteredPool;  // its parts' registries share one pending "no" (vote_no)
  std::atomic<int>& impl_open_scopes() noexcept;
  void end_scope(bool failed);  // Scope::close: commit at the scheduled scope ends, else local pending only
  void poll_quietly() noexcept;  // Scope's opening: a mismatch found is kept for the next agreement point
  std::unique_ptr<detail::RegistryImpl> impl_;
};

/// @brief Routes this thread's allocations to a registry's pool (see current_scope()); its end is a
/// scope end, which commits on a schedule the same on every rank. Every scope end counts, on every
/// path: a scope destroyed without close() (an exception on its way through) ends as
/// close_after_error(). The registry must outlive its open scopes (destroying it first aborts the
/// process with a message).
class NCCLPOOL_API Scope {
 public:
  /// Checks earlier agreements whose results arrived (no wait, never throws: a mismatch found here is
  /// this rank's "no" at its next agreement point, where every rank fails together).
  explicit Scope(Registry& registry);
  /// close_after_error() if the scope is still open.
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  /// Leaves the scope; at the registry's scheduled scope ends (RegistryOptions::scope_period: the
  /// first few, then every so many, counted per registry so that every rank has the same schedule)
  /// also commits it (collective over the symmetric communicators). Windows for segments made
  /// between two scheduled scope ends wait for the next one (their memory works meanwhile, through
  /// NCCL's non-symmetric path); call Registry::commit() on every rank to register them now.
  /// Local registrations that fell into a graph capture are made at every scope end.
  void close();
  /// The scope end of a scope left with an error on this rank: counted like close() (the schedule
  /// must stay the same on every rank), and at a scheduled scope end this rank joins the agreement
  /// voting no (enqueued, no wait), so every rank fails there together. At a scope end that is not an
  /// agreement point (or under graph capture) the failure is kept as Registry::vote_no for the next
  /// collective step: one rank's error in a scope always ends in an error on every rank at the pool's
  /// next agreement point. Never throws.
  void close_after_error() noexcept;
  /// Leaves without a scope end: nothing counted, nothing collective. Only for scopes that every
  /// rank leaves this way (C ABI ncclpool_scope_leave, Python scope(commit=False)).
  void abandon() noexcept;
  [[nodiscard]] Registry& registry() noexcept { return *registry_; }

 private:
  void leave() noexcept;
  Registry* registry_;
  Scope* previous_;
  bool open_ = true;
};

/// The innermost open scope of the calling thread, or nullptr.
NCCLPOOL_API Scope* current_scope() noexcept;

/// @brief Proves that the buffers of one collective sit at the same place in the same symmetric
/// windows of `comm` on every rank (or in none), as a symmetric kernel needs: else it reads a peer's
/// memory at the wrong offset and the result is wrong without any error. Collective over comm: call it
/// on every rank right before the collective, with its buffers in the same order (send, receive).
/// Windows of every registry in the process count. A host wait; for check mode and tests.
/// @throws AgreementError naming the ranks, windows and offsets that differ.
NCCLPOOL_API void verify_symmetric_buffers(Communicator& comm, const std::vector<const void*>& buffers);

}  // namespace ncclpool

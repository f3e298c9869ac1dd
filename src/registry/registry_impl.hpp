#pragma once
// RegistryImpl: the segment x communicator table behind ncclpool::Registry.
//   registry.cpp   attach / detach / forget / commit / trim and the pool hooks
//   agreement.cpp  the agreement record (count, bytes, digest) and its mismatch report
//   queries.cpp    lookups, statistics, invariant checks, Scope
//
// Locking: the pool calls the hooks with its lock held and they take mutex_ (pool -> registry).
// Registry calls that need the pool ask it *before* taking mutex_, never while holding it.

#include <ncclpool/registry.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace ncclpool::detail {

struct CommState {
  std::shared_ptr<Communicator> comm;
  RegistrationKind kind = RegistrationKind::local;
  CommunicatorStats stats;
  std::vector<std::uint64_t> pending;  // segment sequences, creation order
};

struct SegmentEntry {
  SegmentInfo info;
  std::vector<std::pair<CommState*, void*>> handles;  // what is registered now

  [[nodiscard]] auto handle_of(const CommState* cs) {
    return std::find_if(handles.begin(), handles.end(), [&](auto& h) { return h.first == cs; });
  }
  [[nodiscard]] bool registered_with(const CommState* cs) { return handle_of(cs) != handles.end(); }
};

// What agreement compares: how many segments, their bytes, and a digest of (sequence, size) in order.
enum class AgreementPhase : std::uint64_t { attach = 1, commit = 2, detach = 3, trim = 4 };
AgreementRecord make_agreement(AgreementPhase phase, const std::vector<std::pair<std::uint64_t, std::size_t>>& segments);
// Throws AgreementError naming the ranks whose records differ (grouped), or returns.
void check_agreement(const std::vector<AgreementRecord>& records, const Communicator& comm, AgreementPhase phase);

class RegistryImpl final : public PoolObserver {
 public:
  explicit RegistryImpl(std::shared_ptr<Pool> pool);
  ~RegistryImpl() override;

  void attach(std::shared_ptr<Communicator> comm, RegistrationKind kind);
  void detach(const Communicator& comm);
  void forget(const Communicator& comm);
  void commit();
  std::size_t trim();
  std::optional<SegmentRegistrations> lookup(const void* ptr) const;
  void* handle_of(const void* ptr, const Communicator& comm) const;
  CommunicatorStats stats(const Communicator& comm) const;
  std::size_t pending() const { return pending_total_.load(); }
  std::size_t attached() const;
  void check_invariants() const;

  // PoolObserver (called with the pool lock held)
  void on_segment_created(const SegmentInfo& segment) override;
  bool may_release(const SegmentInfo& segment) override;
  void on_segment_releasing(const SegmentInfo& segment) noexcept override;

  std::shared_ptr<Pool> pool_;

 private:
  CommState* find(const Communicator& comm) const;  // nullptr if not attached
  CommState& require(const Communicator& comm, const char* operation) const;
  bool capturing() const;
  void register_one(CommState& cs, SegmentEntry& entry);      // throws; records handle + stats
  void deregister_one(CommState& cs, SegmentEntry& entry);  // throws; no-op if not registered
  void deregister_or_report(CommState& cs, SegmentEntry& entry, const char* context) noexcept;  // stderr
  void drop_pending(std::uint64_t sequence);
  std::vector<std::pair<std::uint64_t, std::size_t>> describe_segments(const std::vector<std::uint64_t>& sequences) const;
  SegmentEntry& entry_of(std::uint64_t sequence);
  void agree(CommState& cs, AgreementPhase phase, const std::vector<std::uint64_t>& sequences);
  void remove_comm(CommState* cs);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<CommState>> comms_;     // attach order
  std::map<std::uintptr_t, SegmentEntry> segments_;   // by base address (lookups)
  std::map<std::uint64_t, std::uintptr_t> by_sequence_;  // creation order
  std::set<std::uint64_t> approved_release_;          // agreed by a collective trim
  std::atomic<std::size_t> pending_total_{0};
};

// Adds the wall time of a registration call to a communicator's statistics.
class RegistrationTimer {
 public:
  explicit RegistrationTimer(CommunicatorStats& stats) : stats_(stats), start_(std::chrono::steady_clock::now()) {}
  ~RegistrationTimer() { stats_.registration_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  RegistrationTimer(const RegistrationTimer&) = delete;
  RegistrationTimer& operator=(const RegistrationTimer&) = delete;

 private:
  CommunicatorStats& stats_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ncclpool::detail

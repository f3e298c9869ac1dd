#pragma once
// RegistryImpl: the segment x communicator table behind ncclpool::Registry.
//   registry.cpp   attach / detach / forget / commit / trim and the pool hooks; every collective
//                  step goes through step(), which carries this rank's Vote (vote.hpp)
//   agreement.cpp  the agreement record and its mismatch report; layout proof (check mode)
//   queries.cpp    lookups, statistics, invariant checks, Scope
//   verify.cpp     verify_symmetric_buffers (a collective's buffers, same window and offset)
//   window_directory.*  process-wide window ordinals per communicator
//
// Locking: the pool calls the hooks with its lock held and they take mutex_ (pool -> registry).
// Registry calls that need the pool ask it *before* taking mutex_, never while holding it.

#include <ncclpool/registry.hpp>

#include "vote.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool::detail {

// What an agreement compares. Phases: the registry's agreement points, plus the steps of a layout
// proof and of verify_symmetric_buffers, which use the same record.
enum class AgreementPhase : std::uint64_t { attach = 1, commit = 2, detach = 3, trim = 4, trim_verdict = 5, layout_detail = 6, buffers = 7 };
const char* phase_name(AgreementPhase phase);

// Word layout of an AgreementRecord (18 words):
namespace word {
enum : std::size_t {
  magic = 0, phase = 1, epoch = 2, ordinal = 3, name_digest = 4, name_prefix = 5 /* and 6 */, count = 7, bytes = 8,
  digest = 9, first = 10, last = 11, check = 12, layout_digest = 13, live_blocks = 14, vote = 15,
  settings = 16,  // digest of RegistryOptions::agreed_settings (0: none)
  kind = 17,      // 1 + the RegistrationKind of the attachment (local ones agree only with agreed settings)
};
}
static_assert(word::kind < AgreementRecord::kWords);
inline constexpr std::uint64_t kAgreementMagic = 0x6e63636c706f6f6cull;  // "ncclpool"

// An agreement this rank started and has not checked yet.
struct Outstanding {
  std::unique_ptr<PendingGather> gather;
  AgreementRecord mine;
};

struct CommState {
  std::shared_ptr<Communicator> comm;
  // An earlier agreement of this rank (one it did not wait for) found to have differed and not yet
  // reported: this rank's "no" at its next agreement point on comm, where every rank then fails.
  std::exception_ptr found_late;
  RegistrationKind kind = RegistrationKind::local;
  CommunicatorStats stats;
  // What the attachment's kind does (registration.hpp): every kind-dependent step asks this.
  [[nodiscard]] const RegistrationKindOps& ops() const noexcept { return registration_ops(kind); }
  std::vector<std::uint64_t> pending;  // segment sequences, creation order
  std::uint64_t epoch = 0;             // agreements started on this attachment (collective kinds)
  std::uint64_t ordinal = 0;           // which window attachment of this communicator in the process
  int symmetric_kernels = -1;          // Communicator::prepare_symmetric_kernels, compared across ranks
  std::deque<Outstanding> outstanding; // started, oldest first
};

struct SegmentEntry {
  SegmentInfo info;
  std::vector<std::pair<CommState*, void*>> handles;  // what is registered now

  [[nodiscard]] auto handle_of(const CommState* cs) {
    return std::find_if(handles.begin(), handles.end(), [&](auto& h) { return h.first == cs; });
  }
  [[nodiscard]] bool registered_with(const CommState* cs) { return handle_of(cs) != handles.end(); }
};

// This rank's part of an agreement: who (pool name, attachment ordinal, agreement number), what
// (pending segments as (sequence, size)), and in check mode the layout of the live blocks.
struct AgreementInput {
  AgreementPhase phase = AgreementPhase::commit;
  std::uint64_t epoch = 0;
  std::uint64_t ordinal = 0;
  const std::string* pool_name = nullptr;
  std::vector<std::pair<std::uint64_t, std::size_t>> segments;
  CheckLevel check = CheckLevel::off;
  std::uint64_t layout_digest = 0;
  std::uint64_t live_blocks = 0;
  bool voted_no = false;       // this rank failed (Vote): nobody may register or release here
  int symmetric_kernels = -1;  // how the process launches symmetric kernels (-1: nothing to say)
  unsigned scope_period = 0;   // RegistryOptions::scope_period: ranks must have the same schedule
  std::uint64_t placement_recoveries = 0;  // Pool::placement_recoveries: placements this rank moved
  std::uint64_t settings_digest = 0;       // settings_digest(RegistryOptions::agreed_settings)
  RegistrationKind kind = RegistrationKind::symmetric;  // the attachment's kind
};
// FNV-1a of the agreed settings; 0 for none, so that pools without them compare as before.
std::uint64_t settings_digest(const std::string& settings);
// The check word holds the check level (bits 0-7), the symmetric kernel setting + 1 (bits 8-31) and
// the scope period (bits 32-63).
inline CheckLevel check_level_of(std::uint64_t check_word) { return static_cast<CheckLevel>(check_word & 0xff); }
inline int symmetric_kernels_of(std::uint64_t check_word) { return static_cast<int>((check_word >> 8) & 0xffffff) - 1; }
inline unsigned scope_period_of(std::uint64_t check_word) { return static_cast<unsigned>(check_word >> 32); }
// The vote word holds "no" (bit 0) and the pool's placement recoveries (bits 32-63).
inline bool voted_no_of(std::uint64_t vote_word) { return (vote_word & 1) != 0; }
inline std::uint64_t placement_recoveries_of(std::uint64_t vote_word) { return vote_word >> 32; }
AgreementRecord make_agreement(const AgreementInput& in);
std::uint64_t layout_digest(const std::vector<BlockLocation>& blocks);
// Throws AgreementError naming the ranks whose records differ (grouped), or returns. `late` says the
// mismatch is found after this rank went on (it had nothing to register and did not wait).
// `settings`: this rank's agreed settings, named in the message when the ranks' digests differ.
void check_agreement(const std::vector<AgreementRecord>& records, const AgreementRecord& mine, const Communicator& comm, bool late,
                     const std::string& settings = {});
// True when every rank ran a layout check and only the layouts differ: then every rank (all of them
// wait in check mode) takes part in explain_layout_difference.
bool only_layouts_differ(const std::vector<AgreementRecord>& records);
// Collective: every rank sends its items (three words each; all zeros means "no item") a few per
// record, round after round, until an item differs across ranks in its first `compared_words`
// words. Every rank sees every record, so every rank makes the same rounds: as many as the longest
// list needs, at most `max_rounds`. Used by the layout proof and by verify_symmetric_buffers.
using Triple = std::array<std::uint64_t, 3>;
struct TripleExchange {
  std::vector<std::uint64_t> counts;            // each rank's number of items
  std::optional<std::size_t> first_difference;  // index of the first item that differs, if any
  std::vector<Triple> at_difference;            // each rank's item there
};
TripleExchange exchange_until_different(Communicator& comm, AgreementPhase phase, const std::vector<Triple>& mine,
                                        std::size_t compared_words, std::size_t max_rounds);
// Collective: exchanges the live blocks a few at a time until the first difference, and throws an
// AgreementError naming it (ranks, segment, offset, size).
[[noreturn]] void explain_layout_difference(Communicator& comm, const std::vector<AgreementRecord>& records,
                                            const std::vector<BlockLocation>& mine, const std::string& pool_name);

class RegistryImpl final : public PoolObserver {
 public:
  RegistryImpl(std::shared_ptr<Pool> pool, RegistryOptions options);
  ~RegistryImpl() override;

  void attach(std::shared_ptr<Communicator> comm, RegistrationKind kind);
  void detach(const Communicator& comm);
  void forget(const Communicator& comm);
  void commit() { commit(/*agree=*/true, Vote{}); }
  // An agreement point reached on an error path: joins the commit voting no (never throws).
  void commit_after_error() noexcept;
  // A scope end; `failed`: the scope ends with an error on this rank (voting no if it is scheduled).
  void end_scope(bool failed);
  // Checks earlier agreements whose results arrived (never waits, nothing collective). report: throws
  // the first mismatch found; else keeps it for this rank's next agreement point (a scope opening:
  // whether a result has arrived is timing, so it must not decide whether a scope opens).
  void poll(bool report);
  // Registry::vote_no: kept in pending_no_ for the next collective step (which takes it into its vote).
  void vote_no(std::exception_ptr error) noexcept { pending_no_->record(std::move(error)); }
  bool voting_no() const noexcept { return pending_no_->holds(); }
  // The parts of one pool share one pending "no" (RegisteredPool): the first part to agree takes it.
  void share_pending_no(std::shared_ptr<PendingNo> shared) noexcept { pending_no_ = std::move(shared); }
  const std::shared_ptr<PendingNo>& pending_no() const noexcept { return pending_no_; }
  std::size_t trim();
  std::optional<SegmentRegistrations> lookup(const void* ptr) const;
  void* handle_of(const void* ptr, const Communicator& comm) const;
  CommunicatorStats stats(const Communicator& comm) const;
  std::size_t pending() const { return pending_total_.load(); }
  std::size_t attached() const;
  void check_invariants() const;
  CheckLevel check_level() const noexcept { return check_; }
  std::uint64_t scope_ends() const noexcept { return scope_ends_.load(std::memory_order_relaxed); }
  unsigned scope_period() const noexcept { return scope_period_; }
  static bool scope_end_commits(std::uint64_t n, unsigned period) noexcept { return n < period || n % period == 0; }

  // PoolObserver (called with the pool lock held)
  void on_segment_created(const SegmentInfo& segment) override;
  bool may_release(const SegmentInfo& segment) override;
  void on_segment_releasing(const SegmentInfo& segment) noexcept override;

  std::shared_ptr<Pool> pool_;
  std::atomic<int> open_scopes_{0};

 private:
  CommState* find(const Communicator& comm) const;  // nullptr if not attached
  CommState& require(const Communicator& comm, const char* operation) const;
  bool capturing() const;
  void register_one(CommState& cs, SegmentEntry& entry);      // throws; records handle + stats
  void register_existing(CommState& cs, const std::vector<std::uint64_t>& sequences);  // all or none; throws
  void deregister_one(CommState& cs, SegmentEntry& entry);  // throws; no-op if not registered
  void deregister_or_report(CommState& cs, SegmentEntry& entry, const char* context) noexcept;  // stderr
  void drop_pending(std::uint64_t sequence);
  std::vector<std::pair<std::uint64_t, std::size_t>> describe_segments(const std::vector<std::uint64_t>& sequences) const;
  SegmentEntry& entry_of(std::uint64_t sequence);
  // Agreement points. Every collective step of the registry is one call of step(): it first checks
  // the agreements cs started earlier (a mismatch found there becomes this rank's "no"), then starts
  // this step's agreement carrying the vote, and with `wait` checks it. True when every rank said
  // yes to the same thing: only then may the caller register or release. Never throws: what fails
  // is in `vote`.
  bool step(CommState& cs, AgreementPhase phase, const std::vector<std::uint64_t>& sequences, Vote& vote, bool wait);
  void start_agreement(CommState& cs, AgreementPhase phase, const std::vector<std::uint64_t>& sequences, bool voted_no);
  // Checks cs's started agreements oldest first: all of them (waiting), or those already complete.
  // The first mismatch is kept in cs.found_late; never throws.
  void check_outstanding(CommState& cs, bool wait_all) noexcept;
  [[nodiscard]] std::vector<CommState*> collective_comms() const;  // attachments of a collective kind
  // Takes mutex_ for an operation that starts agreements. In check mode it first asks the pool for
  // its live blocks (before mutex_: pool -> registry lock order) and keeps them in last_layout_.
  [[nodiscard]] std::unique_lock<std::mutex> lock_for_agreement();
  void remove_comm(CommState* cs);
  // agree: the symmetric communicators' agreement too (every explicit commit, scheduled scope ends);
  // else only local registrations left pending by a capture. vote: what this rank brings (no after
  // an error on its way).
  void commit(bool agree, Vote vote);
  bool local_pending() const;  // takes mutex_: a local communicator has registrations left by a capture

  // Takes a pending "no" (vote_no) into this step's vote.
  void take_pending_no(Vote& vote) noexcept {
    if (std::exception_ptr no = pending_no_->take()) vote.fail(std::move(no));
  }

  mutable std::mutex mutex_;
  std::shared_ptr<PendingNo> pending_no_ = std::make_shared<PendingNo>();
  std::string agreed_settings_;                       // RegistryOptions::agreed_settings
  std::uint64_t settings_digest_ = 0;                 // settings_digest(agreed_settings_)
  std::vector<std::unique_ptr<CommState>> comms_;     // attach order
  std::map<std::uintptr_t, SegmentEntry> segments_;   // by base address (lookups)
  std::map<std::uint64_t, std::uintptr_t> by_sequence_;  // creation order
  std::atomic<std::size_t> pending_total_{0};
  std::atomic<std::size_t> collective_count_{0};      // attachments of a collective kind (symmetric)
  CheckLevel check_ = CheckLevel::off;
  unsigned scope_period_ = RegistryOptions::kDefaultScopePeriod;  // 1 in check mode
  std::atomic<std::uint64_t> scope_ends_{0};          // Scope::close calls, ever (the schedule's clock)
  std::vector<BlockLocation> last_layout_;            // check mode: this rank's blocks at the last agreement
  std::uint64_t last_placement_recoveries_ = 0;       // Pool::placement_recoveries at the last agreement
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

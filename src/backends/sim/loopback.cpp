// LoopbackGroup / LoopbackCommunicator: collective semantics for threads-as-ranks.
//
// Each rank numbers its collective calls 0, 1, 2, ...; call k of every rank meets in slot k. The last
// rank to arrive lets everyone compare: all ranks must make the same operation with the same
// argument (segment size for a window, window id for a deregistration). A mismatch, or an injected
// fault, fails the call on every rank. A rank missing past the timeout breaks the group.

#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>

#include "core/node.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

namespace ncclpool {

namespace detail {

namespace {
const char* op_name(int op) {
  switch (op) {
    case 0: return "register_local";
    case 1: return "deregister_local";
    case 2: return "register_window";
    case 3: return "deregister_window";
    case 4: return "all_gather";
    case 5: return "user_collective";
  }
  return "?";
}
constexpr int kAllGather = 4;
constexpr int kUserCollective = 5;
}  // namespace

class LoopbackState {
 public:
  LoopbackState(std::string name, int size, std::chrono::milliseconds timeout, LoopbackMatching matching)
      : name_(std::move(name)), size_(size), timeout_(timeout), matching_(matching), calls_(static_cast<std::size_t>(size), 0),
        injected_(static_cast<std::size_t>(size)), counters_(static_cast<std::size_t>(size)), symmetric_kernels_(static_cast<std::size_t>(size), -1),
        call_logs_(static_cast<std::size_t>(size)), machine_gpus_(static_cast<std::size_t>(size), "ncclpool simulator"), machine_ccs_(static_cast<std::size_t>(size), 0),
        windows_supported_(static_cast<std::size_t>(size), true), nodes_(static_cast<std::size_t>(size)) {}

  struct Result {
    std::vector<AgreementRecord> records;
    std::uint64_t window_id = 0;
  };

  // Posts `rank`'s next collective call and returns its slot without waiting (an all-gather on a
  // GPU is only enqueued). Call k of every rank meets in slot k.
  std::uint64_t post(int rank, int op, std::uint64_t argument, const AgreementRecord& record, const std::string& who) {
    std::lock_guard lock(mutex_);
    if (broken_) throw AgreementError(who + ": " + broken_reason_);
    const bool fail_here = count_and_check(rank, op);
    const std::uint64_t k = calls_[static_cast<std::size_t>(rank)]++;
    Slot& slot = slots_[k];
    if (slot.posts.empty()) {
      slot.posts.resize(static_cast<std::size_t>(size_));
      slot.deadline = std::chrono::steady_clock::now() + timeout_;
    }
    slot.posts[static_cast<std::size_t>(rank)] = Post{op, argument, record, fail_here};
    // Kept as (op, argument), no string: this runs inside the timed window of `bench scope --sim`,
    // where a string per call (a heap allocation, and the log's reallocations) doubled one row.
    call_logs_[static_cast<std::size_t>(rank)].push_back(LoggedCall{op, argument});
    ++slot.arrived;
    ++collective_calls_;
    cv_.notify_all();
    return k;
  }

  bool ready(std::uint64_t k) {
    std::lock_guard lock(mutex_);
    auto it = slots_.find(k);
    return broken_ || (it != slots_.end() && it->second.arrived == size_ && (!hold_completions_ || k < released_slots_));
  }

  void hold_completions(bool hold) {
    std::lock_guard lock(mutex_);
    hold_completions_ = hold;
  }
  // Every slot that every rank has posted becomes visible to ready().
  void release_completions() {
    std::lock_guard lock(mutex_);
    released_slots_ = *std::min_element(calls_.begin(), calls_.end());
  }

  // Waits for every rank to post slot k (until the slot's deadline), then returns its outcome.
  Result complete(std::uint64_t k, int op, const std::string& who) {
    std::unique_lock lock(mutex_);
    Slot& slot = slots_.at(k);
    if (!cv_.wait_until(lock, slot.deadline, [&] { return slot.arrived == size_ || broken_; })) {
      std::ostringstream msg;
      msg << "collective call #" << k << " (" << op_name(op) << ") timed out after " << timeout_.count() << " ms: ranks";
      for (int r = 0; r < size_; ++r)
        if (!slot.posts[static_cast<std::size_t>(r)]) msg << ' ' << r;
      msg << " never made it (did they skip a commit or register in another order?); the group is broken";
      broken_ = true;
      broken_reason_ = msg.str();
      cv_.notify_all();
      throw AgreementError(who + ": " + broken_reason_);
    }
    if (slot.arrived != size_) throw AgreementError(who + ": " + broken_reason_);
    if (!slot.evaluated) evaluate(slot, k);
    Result result{slot.records, slot.window_id};
    const std::string error = slot.error;
    const bool agreement = slot.agreement_error;
    read(k);
    if (!error.empty()) {
      if (agreement) throw AgreementError(who + ": " + error);
      throw RegistrationError(who + ": " + error);
    }
    return result;
  }

  // A rank that will never read slot k (an abandoned all-gather).
  void abandon(std::uint64_t k) {
    std::lock_guard lock(mutex_);
    if (slots_.count(k)) read(k);
  }

  Result collective(int rank, int op, std::uint64_t argument, const AgreementRecord& record, const std::string& who) {
    return complete(post(rank, op, argument, record, who), op, who);
  }

  // Counts a non-collective call; true if it must fail.
  bool local_call(int rank, int op) {
    std::lock_guard lock(mutex_);
    return count_and_check(rank, op);
  }

  void inject(int op, int rank, int nth) {
    std::lock_guard lock(mutex_);
    for (int r = 0; r < size_; ++r)
      if (rank < 0 || rank == r) injected_[static_cast<std::size_t>(r)][op] = counters_[static_cast<std::size_t>(r)][op] + static_cast<std::uint64_t>(nth);
  }

  void set_symmetric_kernels(int rank, int setting) {
    std::lock_guard lock(mutex_);
    for (int r = 0; r < size_; ++r)
      if (rank < 0 || rank == r) symmetric_kernels_[static_cast<std::size_t>(r)] = setting;
  }
  int symmetric_kernels(int rank) {
    std::lock_guard lock(mutex_);
    return symmetric_kernels_[static_cast<std::size_t>(rank)];
  }
  std::vector<std::string> call_log(int rank) {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    out.reserve(call_logs_[static_cast<std::size_t>(rank)].size());
    // The all-gather's argument is always the record size: left out, so logs read as NCCL calls.
    for (const LoggedCall& c : call_logs_[static_cast<std::size_t>(rank)])
      out.push_back(c.op == kAllGather ? std::string(op_name(c.op)) : std::string(op_name(c.op)) + "(" + std::to_string(c.argument) + ")");
    return out;
  }
  void set_machine_gpu(int rank, const std::string& gpu, int compute_capability) {
    std::lock_guard lock(mutex_);
    for (int r = 0; r < size_; ++r)
      if (rank < 0 || rank == r) {
        machine_gpus_[static_cast<std::size_t>(r)] = gpu;
        machine_ccs_[static_cast<std::size_t>(r)] = compute_capability;
      }
  }
  int machine_compute_capability(int rank) {
    std::lock_guard lock(mutex_);
    return machine_ccs_[static_cast<std::size_t>(rank)];
  }
  std::string machine_gpu(int rank) {
    std::lock_guard lock(mutex_);
    return machine_gpus_[static_cast<std::size_t>(rank)];
  }
  void set_windows_supported(int rank, bool supported) {
    std::lock_guard lock(mutex_);
    for (int r = 0; r < size_; ++r)
      if (rank < 0 || rank == r) windows_supported_[static_cast<std::size_t>(r)] = supported;
  }
  bool windows_supported(int rank) {
    std::lock_guard lock(mutex_);
    return windows_supported_[static_cast<std::size_t>(rank)];
  }
  void set_node(int rank, std::uint64_t node) {
    std::lock_guard lock(mutex_);
    for (int r = 0; r < size_; ++r)
      if (rank < 0 || rank == r) nodes_[static_cast<std::size_t>(r)] = node;
  }
  std::optional<std::uint64_t> node(int rank) {
    std::lock_guard lock(mutex_);
    return nodes_[static_cast<std::size_t>(rank)];
  }

  std::uint64_t next_local_handle() { return ++local_handles_; }  // ranks register locally in parallel
  std::atomic<std::int64_t> live{0};
  std::uint64_t collective_calls() {
    std::lock_guard lock(mutex_);
    return collective_calls_;
  }
  bool broken() {
    std::lock_guard lock(mutex_);
    return broken_;
  }
  const std::string& name() const { return name_; }
  int size() const { return size_; }

 private:
  struct Post {
    int op;
    std::uint64_t argument;
    AgreementRecord record;
    bool inject_failure;
  };
  struct Slot {
    std::vector<std::optional<Post>> posts;
    std::chrono::steady_clock::time_point deadline;
    int arrived = 0;
    int readers = 0;
    bool evaluated = false;
    bool agreement_error = false;
    std::string error;
    std::vector<AgreementRecord> records;
    std::uint64_t window_id = 0;
  };

  void read(std::uint64_t k) {
    if (++slots_.at(k).readers == size_) slots_.erase(k);
  }

  bool count_and_check(int rank, int op) {
    auto& counter = counters_[static_cast<std::size_t>(rank)][op];
    ++counter;
    auto& inj = injected_[static_cast<std::size_t>(rank)];
    auto it = inj.find(op);
    if (it != inj.end() && it->second == counter) {
      inj.erase(it);
      return true;
    }
    return false;
  }

  // strict: every rank must make the same call. nccl: calls pair by position whatever they are, as
  // on a GPU; an all-gather that met another operation returns that rank's argument as its record
  // (garbage to the reader), and a window registration succeeds whatever the sizes.
  void evaluate(Slot& slot, std::uint64_t k) {
    slot.evaluated = true;
    const Post& first = *slot.posts[0];
    if (matching_ == LoopbackMatching::strict) {
      std::ostringstream diff;
      for (int r = 1; r < size_; ++r) {
        const Post& p = *slot.posts[static_cast<std::size_t>(r)];
        if (p.op != first.op || p.argument != first.argument)
          diff << " rank " << r << " called " << op_name(p.op) << '(' << p.argument << ");";
      }
      if (!diff.str().empty()) {
        slot.agreement_error = true;
        slot.error = "collective call #" + std::to_string(k) + " does not match across ranks: rank 0 called " +
                     op_name(first.op) + "(" + std::to_string(first.argument) + ");" + diff.str();
        return;
      }
    }
    for (int r = 0; r < size_; ++r) {
      if (slot.posts[static_cast<std::size_t>(r)]->inject_failure) {
        slot.error = std::string("injected failure of ") + op_name(slot.posts[static_cast<std::size_t>(r)]->op) + " on rank " +
                     std::to_string(r) + " (the collective fails on every rank)";
        return;
      }
    }
    for (auto& p : slot.posts) {
      AgreementRecord r = p->record;
      if (p->op != kAllGather) {
        r = AgreementRecord{};
        r.words[0] = p->argument;
      }
      slot.records.push_back(r);
    }
    slot.window_id = ++windows_;
  }

  std::string name_;
  int size_;
  std::chrono::milliseconds timeout_;
  LoopbackMatching matching_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> calls_;
  std::map<std::uint64_t, Slot> slots_;
  std::vector<std::map<int, std::uint64_t>> injected_;
  std::vector<std::map<int, std::uint64_t>> counters_;
  std::vector<int> symmetric_kernels_;  // per rank: what prepare_symmetric_kernels reports
  struct LoggedCall {
    int op;
    std::uint64_t argument;
  };
  std::vector<std::deque<LoggedCall>> call_logs_;  // per rank: its collective calls, in order (a deque: growing it moves nothing)
  std::vector<std::string> machine_gpus_;             // per rank: the GPU name machine() reports
  std::vector<int> machine_ccs_;                      // per rank: its compute capability (0: unknown)
  std::vector<bool> windows_supported_;               // per rank: what supports_windows() answers
  std::vector<std::optional<std::uint64_t>> nodes_;   // per rank: what node() answers (unset: this process's host)
  bool hold_completions_ = false;                      // ready() sees only slots below released_slots_
  std::uint64_t released_slots_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
  std::uint64_t windows_ = 0;
  std::atomic<std::uint64_t> local_handles_{0};
  std::uint64_t collective_calls_ = 0;
};

namespace {
class LoopbackPendingGather final : public PendingGather {
 public:
  LoopbackPendingGather(std::shared_ptr<LoopbackGroup> group, std::uint64_t slot, std::string who)
      : group_(std::move(group)), slot_(slot), who_(std::move(who)) {}
  ~LoopbackPendingGather() override {
    if (!read_) group_->state().abandon(slot_);
  }
  bool ready() override { return group_->state().ready(slot_); }
  std::vector<AgreementRecord> wait() override {
    if (read_) throw InvalidState(who_ + ": all-gather result already read");
    read_ = true;
    return group_->state().complete(slot_, kAllGather, who_).records;
  }

 private:
  std::shared_ptr<LoopbackGroup> group_;
  std::uint64_t slot_;
  std::string who_;
  bool read_ = false;
};
}  // namespace

}  // namespace detail

LoopbackGroup::LoopbackGroup(std::string name, int size, std::chrono::milliseconds timeout, LoopbackMatching matching) {
  if (size < 1) throw InvalidArgument("loopback group '" + name + "': size must be >= 1");
  state_ = std::make_unique<detail::LoopbackState>(std::move(name), size, timeout, matching);
}
LoopbackGroup::~LoopbackGroup() = default;
const std::string& LoopbackGroup::name() const noexcept { return state_->name(); }
int LoopbackGroup::size() const noexcept { return state_->size(); }
void LoopbackGroup::inject_failure(LoopbackOp op, int rank, int nth) { state_->inject(static_cast<int>(op), rank, nth); }
std::int64_t LoopbackGroup::live_registrations() const { return state_->live.load(); }
std::uint64_t LoopbackGroup::collective_calls() const { return state_->collective_calls(); }
bool LoopbackGroup::broken() const { return state_->broken(); }
void LoopbackGroup::set_symmetric_kernels(int rank, int setting) {
  if (rank >= size()) throw InvalidArgument("loopback group '" + name() + "': rank " + std::to_string(rank) + " outside a group of " + std::to_string(size()));
  state_->set_symmetric_kernels(rank, setting);
}
int LoopbackGroup::symmetric_kernels(int rank) const { return state_->symmetric_kernels(rank); }
std::vector<std::string> LoopbackGroup::call_log(int rank) const {
  if (rank < 0 || rank >= size()) throw InvalidArgument("loopback group '" + name() + "': no rank " + std::to_string(rank));
  return state_->call_log(rank);
}
void LoopbackGroup::set_machine_gpu(int rank, const std::string& gpu, int compute_capability) {
  if (rank >= size()) throw InvalidArgument("loopback group '" + name() + "': rank " + std::to_string(rank) + " outside a group of " + std::to_string(size()));
  state_->set_machine_gpu(rank, gpu, compute_capability);
}
std::string LoopbackGroup::machine_gpu(int rank) const { return state_->machine_gpu(rank); }
int LoopbackGroup::machine_compute_capability(int rank) const { return state_->machine_compute_capability(rank); }
void LoopbackGroup::set_windows_supported(int rank, bool supported) {
  if (rank >= size()) throw InvalidArgument("loopback group '" + name() + "': rank " + std::to_string(rank) + " outside a group of " + std::to_string(size()));
  state_->set_windows_supported(rank, supported);
}
void LoopbackGroup::set_node(int rank, std::uint64_t node) {
  if (rank >= size()) throw InvalidArgument("loopback group '" + name() + "': rank " + std::to_string(rank) + " outside a group of " + std::to_string(size()));
  state_->set_node(rank, node);
}
std::uint64_t LoopbackGroup::node(int rank) const {
  if (rank < 0 || rank >= size()) throw InvalidArgument("loopback group '" + name() + "': no rank " + std::to_string(rank));
  return state_->node(rank).value_or(detail::process_node());
}
void LoopbackGroup::hold_completions(bool hold) { state_->hold_completions(hold); }
void LoopbackGroup::release_completions() { state_->release_completions(); }

LoopbackCommunicator::LoopbackCommunicator(std::shared_ptr<LoopbackGroup> group, int rank, int device)
    : group_(std::move(group)), rank_(rank), device_(device) {
  if (!group_) throw InvalidArgument("loopback communicator: group is null");
  if (rank < 0 || rank >= group_->size())
    throw InvalidArgument("loopback communicator: rank " + std::to_string(rank) + " outside group '" + group_->name() + "' of " + std::to_string(group_->size()));
}

int LoopbackCommunicator::size() const { return group_->size(); }
std::uintptr_t LoopbackCommunicator::native_handle() const {
  // One identity per (group, rank): wrappers of the same rank compare equal.
  return reinterpret_cast<std::uintptr_t>(group_.get()) + static_cast<std::uintptr_t>(rank_);
}
std::string LoopbackCommunicator::describe() const {
  return "loopback comm '" + group_->name() + "' (rank " + std::to_string(rank_) + " of " + std::to_string(group_->size()) +
         ", device " + std::to_string(device_) + ")";
}
std::uint64_t LoopbackCommunicator::node() const { return group_->node(rank_); }
bool LoopbackCommunicator::supports_windows(std::string* why) const {
  if (group_->state().windows_supported(rank_)) return true;
  if (why) *why = "loopback group '" + group_->name() + "' has no symmetric memory on rank " + std::to_string(rank_) + " (set_windows_supported)";
  return false;
}

void* LoopbackCommunicator::register_local(void* base, std::size_t size) {
  if (group_->state().local_call(rank_, static_cast<int>(LoopbackOp::register_local)))
    throw RegistrationError(describe() + ": injected failure of register_local(" + std::to_string(reinterpret_cast<std::uintptr_t>(base)) + ", " + std::to_string(size) + ")");
  ++group_->state().live;
  return reinterpret_cast<void*>(group_->state().next_local_handle());
}

void LoopbackCommunicator::deregister_local(void* /*handle*/) {
  if (group_->state().local_call(rank_, static_cast<int>(LoopbackOp::deregister_local)))
    throw RegistrationError(describe() + ": injected failure of deregister_local");
  --group_->state().live;
}

void* LoopbackCommunicator::register_window(void* /*base*/, std::size_t size) {
  auto r = group_->state().collective(rank_, static_cast<int>(LoopbackOp::register_window), size, {}, describe());
  ++group_->state().live;
  return reinterpret_cast<void*>(r.window_id);
}

void LoopbackCommunicator::deregister_window(void* window) {
  (void)group_->state().collective(rank_, static_cast<int>(LoopbackOp::deregister_window), reinterpret_cast<std::uintptr_t>(window), {}, describe());
  --group_->state().live;
}

std::unique_ptr<PendingGather> LoopbackCommunicator::start_all_gather(const AgreementRecord& mine) {
  const std::uint64_t slot = group_->state().post(rank_, detail::kAllGather, sizeof(AgreementRecord), mine, describe());
  return std::make_unique<detail::LoopbackPendingGather>(group_, slot, describe());
}

bool LoopbackCommunicator::broken() const { return group_->broken(); }

void LoopbackCommunicator::user_collective(std::uint64_t argument) {
  (void)group_->state().collective(rank_, detail::kUserCollective, argument, {}, describe());
}

}  // namespace ncclpool

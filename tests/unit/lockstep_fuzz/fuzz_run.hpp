#pragma once
// One run of a lockstep fuzz program: its ranks as threads, step by step behind a barrier, on one
// loopback group per communicator of the layout (NCCL pairing mode), and the checks after every step
// and at the end (the oracle). See test_lockstep_fuzz.cpp's header for what is checked.

#include "unit/lockstep_fuzz/program.hpp"

#include <array>
#include <atomic>
#include <barrier>
#include <map>
#include <thread>

namespace ncclpool {
namespace {

// One rank's view of a loopback group, counting this rank's registration calls, so that the fuzzer
// knows whether a failure it injected in the loopback (which fails this rank's next call of a kind)
// fired: a fault whose call never came tested nothing. Everything else is the loopback's.
class CountingComm final : public Communicator {
 public:
  CountingComm(std::shared_ptr<LoopbackGroup> group, int rank) : inner_(std::make_shared<LoopbackCommunicator>(std::move(group), rank)) {}
  [[nodiscard]] int device() const override { return inner_->device(); }
  [[nodiscard]] int rank() const override { return inner_->rank(); }
  [[nodiscard]] int size() const override { return inner_->size(); }
  [[nodiscard]] std::uintptr_t native_handle() const override { return inner_->native_handle(); }
  [[nodiscard]] std::string describe() const override { return inner_->describe(); }
  [[nodiscard]] bool supports_windows(std::string* why) const override { return inner_->supports_windows(why); }
  [[nodiscard]] void* register_local(void* base, std::size_t size) override {
    ++calls_[static_cast<std::size_t>(LoopbackOp::register_local)];
    return inner_->register_local(base, size);
  }
  void deregister_local(void* handle) override { inner_->deregister_local(handle); }
  [[nodiscard]] void* register_window(void* base, std::size_t size) override {
    ++calls_[static_cast<std::size_t>(LoopbackOp::register_window)];
    return inner_->register_window(base, size);
  }
  void deregister_window(void* window) override { inner_->deregister_window(window); }
  [[nodiscard]] std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) override { return inner_->start_all_gather(mine); }
  [[nodiscard]] bool broken() const override { return inner_->broken(); }
  [[nodiscard]] int prepare_symmetric_kernels() override { return inner_->prepare_symmetric_kernels(); }
  [[nodiscard]] MachineKey machine() const override { return inner_->machine(); }
  [[nodiscard]] std::uint64_t node() const override { return inner_->node(); }
  void user_collective(std::uint64_t argument) { inner_->user_collective(argument); }

  // The loopback was told to fail this rank's next call of op: note where that call is.
  void expect_failure(LoopbackOp op) { armed_at_[static_cast<std::size_t>(op)] = calls_[static_cast<std::size_t>(op)] + 1; }
  // Whether that call came (and so failed).
  [[nodiscard]] bool failure_fired(LoopbackOp op) const {
    const std::uint64_t at = armed_at_[static_cast<std::size_t>(op)];
    return at != 0 && calls_[static_cast<std::size_t>(op)] >= at;
  }

 private:
  std::shared_ptr<LoopbackCommunicator> inner_;
  std::array<std::atomic<std::uint64_t>, 4> calls_{};  // by LoopbackOp
  std::array<std::uint64_t, 4> armed_at_{};
};

// One rank's state: its communicators, its pools (each with its parts' sources) and its live blocks.
struct FuzzRank {
  std::vector<std::shared_ptr<CountingComm>> comms;  // by group; null where this rank is no member
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  std::vector<std::vector<std::shared_ptr<FaultSource>>> sources;  // per pool: by RegistrationKind (auto) or the one source
  std::map<int, std::pair<int, void*>> live;                       // id -> (pool, block)
  bool stopped = false;                                             // the "stop" fault: this rank calls nothing more
  std::size_t forgotten_registrations = 0;                         // dropped by forget (an abort would release them)
  bool racer_ran = false;                                           // the trim_race fault's thread ran
  int racer_requests = 0;                                           // ... and made that many requests during the trim
  bool threw_in_scope = false;                                      // the scope_throw fault's exception was thrown
};

std::unique_ptr<RegisteredPool> make_fuzz_pool(const Program& p, int index, std::vector<std::shared_ptr<FaultSource>>& sources) {
  RegistryOptions options;
  options.check = p.check;
  options.scope_period = 3;  // scheduled and unscheduled scope ends both occur
  const std::string name = "fuzz" + std::to_string(index);
  if (is_auto(p.pools[static_cast<std::size_t>(index)])) return make_auto_pool(name, builtin_routes(true), options, &sources);
  auto source = std::make_shared<FaultSource>();
  sources.push_back(source);
  PoolConfig config;
  config.name = name;
  config.growth_chunk = 2 * MiB;
  config.deterministic = true;
  return std::make_unique<SinglePool>(std::make_shared<Pool>(source, config), options);
}

// Where block `ptr` of pool `rp` sits as a symmetric kernel sees it: its window (the loopback's window
// id is the same on every rank for the same collective registration) and offset; nullopt when its
// part has no window for comm.
std::optional<std::string> window_place(const RegisteredPool& rp, const void* ptr, const Communicator& comm) {
  const PoolPart* part = rp.part_of(ptr);
  if (part == nullptr) return std::nullopt;
  try {
    if (part->registry->stats(comm).kind != RegistrationKind::symmetric) return std::nullopt;
  } catch (const InvalidArgument&) {
    return std::nullopt;  // that part is not attached to comm
  }
  void* window = part->registry->handle_of(ptr, comm);
  const auto loc = part->pool->locate(ptr);
  if (window == nullptr || !loc) return std::nullopt;
  return std::string(to_string(part->kind)) + " part, window " + std::to_string(reinterpret_cast<std::uintptr_t>(window)) + " (segment " +
         std::to_string(loc->segment_sequence) + ") offset " + std::to_string(loc->offset);
}

struct FuzzResult {
  std::vector<std::string> violations;
  std::string program;
  bool fired = false;      // the fault was injected and took effect (its call came); false for none
  bool any_error = false;  // some rank got an error in some step
};

class FuzzRun {
 public:
  explicit FuzzRun(const Program& p) : p_(p), n_(p.ranks), g_(static_cast<int>(p.groups.size())) {}

  FuzzResult run();

 private:
  FuzzRank& rank(int r) { return ranks_[static_cast<std::size_t>(r)]; }
  LoopbackGroup& group(int g) { return *groups_[static_cast<std::size_t>(g)]; }
  const std::vector<int>& members(int g) const { return p_.groups[static_cast<std::size_t>(g)]; }
  std::string rank_in(int r, int g) const {
    return p_.layout == Layout::world ? "rank " + std::to_string(r) : "rank " + std::to_string(r) + " (" + p_.group_name(g) + " rank " + std::to_string(p_.group_rank(r, g)) + ")";
  }

  void execute(int r, std::size_t k);
  void trim_with_racer(FuzzRank& fr, RegisteredPool& rp);
  void teardown(FuzzRank& fr);
  static void forget_every_part(FuzzRank& fr, RegisteredPool& pool, const Communicator& comm);
  void inject(std::size_t k);
  void violation(std::size_t k, const std::string& what) { violations_.push_back("step " + std::to_string(k) + " (" + p_.describe_op(p_.ops[k]) + "): " + what); }
  void after_step() noexcept;
  std::string errors_after(std::size_t k) const;
  bool concerns(const std::string& error, int g) const;
  void note_divergence(std::size_t k);
  void note_profile_fired();
  void check_places(std::size_t k);
  void check_invariants(std::size_t k);
  void final_checks();
  bool fault_fired();

  const Program& p_;
  const int n_;
  const int g_;  // groups
  std::vector<std::shared_ptr<LoopbackGroup>> groups_;
  std::vector<FuzzRank> ranks_;
  std::vector<std::vector<std::string>> errors_;  // [step][rank]
  std::vector<std::vector<bool>> collective_;     // [step][group]: some member made a collective call
  std::vector<std::vector<std::size_t>> log_sizes_;  // [group][group rank]
  std::vector<bool> reported_broken_;             // [group]
  std::size_t current_ = 0;
  bool program_over_ = false;  // written between steps only
  bool logs_differed_ = false;
  bool diverged_ = false;
  bool profile_fired_ = false;
  std::vector<std::string> violations_;
};

}  // namespace
}  // namespace ncclpool

#include "unit/lockstep_fuzz/fuzz_run_impl.hpp"

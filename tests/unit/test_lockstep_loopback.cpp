// The lockstep suite (tests/common/lockstep_cases.hpp) on the loopback simulator, so that every case
// is known to hold before GPU time is spent on it (tests/gpu/test_nccl_lockstep.cpp runs the same
// cases on NCCL). Then the one case only the simulator can stage (a graph captured on another thread).
//
// The loopback stands in for NCCL, case by case with NCCL's sizes (the simulator's host memory is
// mmap'd lazily, so 32 and 48 MiB segments cost nothing; its granularity is ncclMemAlloc's 2 MiB, so
// every allocation grows or reuses the same segments as on the GPU):
//  * ranks are free-running threads (no step barrier), one LoopbackCommunicator each on a group in
//    NCCL pairing mode (LoopbackMatching::nccl: calls pair by position, unchecked, as on NCCL);
//  * make_nccl_source(rank) -> a window-capable SimSource on "device" rank; streams are numbers;
//  * another GPU model on one rank -> LoopbackGroup::set_machine_gpu; a refused local registration ->
//    inject_failure(LoopbackOp::register_local, rank, 1);
//  * the application's collective after each failure -> LoopbackCommunicator::user_collective on
//    every rank. An application collective that met a stray all-gather returns no error in NCCL mode,
//    so the check that it paired is the end of every case: every rank made the same collective calls
//    in the same order (LoopbackGroup::call_log), no call waited for a partner in vain (broken()
//    false: a rank that skipped or added a step would leave a call alone until the timeout), and once
//    the pools are gone no registration is left (live_registrations() 0).
//
// Every case runs on 2, 3 and 4 ranks, and each twice: once with completions visible as soon as every
// rank posted (a rank that did not wait may hear of a mismatch at any later point), once with the
// group holding completions (LoopbackGroup::hold_completions, never released: a rank that did not wait
// hears of it only where it waits), so that an expectation that depends on thread timing fails in one
// of them. Run with --gtest_repeat to shake the free-running interleavings further.

#include <gtest/gtest.h>

#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/lockstep_cases.hpp"
#include "common/registry_ranks.hpp"

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool {
namespace {

// Long enough that a rank waiting for a slow peer on a loaded 2-core machine is not taken for a rank
// that never comes; a rank that really never comes (a skipped step) breaks the group after it.
constexpr auto kTimeout = std::chrono::seconds(5);

// The suite's ranks on the loopback: a group of N ranks in NCCL pairing mode, completions held or not.
template <int N, bool Held>
class LoopbackRanks : public ::testing::Test {
 public:
  static std::string name() { return std::to_string(N) + "ranks" + (Held ? "_held" : "_free"); }

 protected:
  void SetUp() override {
    group_ = std::make_shared<LoopbackGroup>("world", N, kTimeout, LoopbackMatching::nccl);
    group_->hold_completions(Held);  // never released: polls never see a completion
    for (int r = 0; r < N; ++r) comms_.push_back(std::make_shared<LoopbackCommunicator>(group_, r, /*device=*/r));
  }

  int ranks() const { return N; }
  std::vector<std::string> on_ranks(const std::function<void(int)>& body) { return ncclpool::on_ranks(N, body); }
  std::shared_ptr<LoopbackCommunicator> world(int rank) const { return comms_[static_cast<std::size_t>(rank)]; }
  std::shared_ptr<Communicator> world_on_device(int rank, int device) const {
    return std::make_shared<LoopbackCommunicator>(group_, rank, device);
  }
  // make_nccl_source(device) on the simulator: window-capable host memory, ncclMemAlloc's granularity.
  std::shared_ptr<SimSource> window_source(int rank) const { return std::make_shared<SimSource>(SimSourceConfig{rank}); }
  static stream_t stream(int /*rank*/, int i) { return static_cast<stream_t>(i); }
  static void sync_streams(int /*rank*/) {}
  void next_collective(int rank, std::uint64_t tag) const { world(rank)->user_collective(tag); }
  MachineKey machine_key() const { return world(0)->machine(); }
  void report_another_gpu(int rank) { group_->set_machine_gpu(rank, "another GPU model"); }
  void refuse_next_local_registration(int rank) { group_->inject_failure(LoopbackOp::register_local, rank, 1); }

  // After every rank's body returned and its pools and registries are gone: the same collective
  // calls on every rank, none left waiting, nothing left registered.
  void expect_in_step() const {
    const std::vector<std::string> reference = group_->call_log(0);
    for (int r = 1; r < N; ++r)
      EXPECT_EQ(group_->call_log(r), reference) << "rank " << r << "'s collective calls differ from rank 0's:" << log_text(r) << "\n  rank 0:" << log_text(0);
    EXPECT_FALSE(group_->broken()) << "a collective call waited for a partner that never came";
    EXPECT_EQ(group_->live_registrations(), 0) << "a registration outlived its pool";
  }
  void expect_no_collective_calls() const {
    for (int r = 0; r < N; ++r) EXPECT_TRUE(group_->call_log(r).empty()) << "rank " << r << ":" << log_text(r);
  }

  std::string log_text(int rank) const {
    std::string out;
    for (const std::string& call : group_->call_log(rank)) out += " " + call;
    return out;
  }

  std::shared_ptr<LoopbackGroup> group_;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms_;
};

using Settings = ::testing::Types<LoopbackRanks<2, false>, LoopbackRanks<2, true>, LoopbackRanks<3, false>, LoopbackRanks<3, true>,
                                  LoopbackRanks<4, false>, LoopbackRanks<4, true>>;
struct SettingName {
  template <class Ranks>
  static std::string GetName(int) {
    return Ranks::name();
  }
};

}  // namespace

namespace lockstep {
INSTANTIATE_TYPED_TEST_SUITE_P(Loopback, Lockstep, Settings, SettingName);
}  // namespace lockstep

namespace {

// ------------------------------------------------------------------------------------------------
// What only the simulator can stage, beside the suite.
// ------------------------------------------------------------------------------------------------

template <class Ranks>
class LockstepLoopback : public lockstep::Lockstep<Ranks> {};
TYPED_TEST_SUITE(LockstepLoopback, Settings, SettingName);

// Issue 44 item 9: "capturing" was asked of the device, so another thread of rank 0 capturing a graph
// while rank 0's main thread committed made rank 0 alone skip the commit the others joined (their
// all-gather then paired with rank 0's next collective). Capture is now the calling thread's, as the
// program makes it: rank 0 joins like every rank. A capture on the committing thread itself still
// skips (every rank captures at the same places): the commit after it agrees. (On NCCL the agreement
// runs in relaxed capture mode; the simulator's ordering marks the capturing thread.)
TYPED_TEST(LockstepLoopback, AnotherThreadsCaptureOnOneRankDoesNotMakeItSkipAnAgreement) {
  const auto errors = this->on_ranks([&](int rank) {
    auto source = this->window_source(rank);
    auto pool = deterministic_pool(source, "capture", 32 * lockstep::MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = pool->allocate(lockstep::MiB);  // a window pending on every rank
    std::promise<void> capturing, done;
    std::thread side;
    if (rank == 0) {
      side = std::thread([&] {
        source->sim_ordering().set_capturing(true);  // a graph captured on a side thread of rank 0 only
        capturing.set_value();
        done.get_future().wait();
        source->sim_ordering().set_capturing(false);
      });
      capturing.get_future().wait();
    }
    std::string error = caught([&] { registry.commit(); });
    if (rank == 0) {
      done.set_value();
      side.join();
    }
    if (!error.empty()) throw std::runtime_error(error);
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the commit registered nothing on this rank");
    this->next_collective(rank, 7);
    // The committing thread's own capture (the program's, on every rank): skipped everywhere alike.
    source->sim_ordering().set_capturing(true);
    registry.commit();
    source->sim_ordering().set_capturing(false);
    this->next_collective(rank, 8);
    pool->deallocate(p);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_in_step();
}

}  // namespace
}  // namespace ncclpool

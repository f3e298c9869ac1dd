// Mirrors tests/gpu/test_nccl_lockstep.cpp on the simulator: the lockstep failure table
// (docs/registry.md, "Failures, rank by rank"), each case followed by the recovery steps the GPU test
// makes (a later commit, attach or detach that must succeed on every rank), with the GPU test's
// expectations, so that they are known to hold before GPU time is spent on them.
//
// The port, case by case as in the GPU file and with its sizes (the simulator's host memory is
// mmap'd lazily, so 32 and 48 MiB segments cost nothing; its granularity is ncclMemAlloc's 2 MiB, so
// every allocation grows or reuses the same segments as on the GPU):
//  * ranks are free-running threads (no step barrier), one LoopbackCommunicator each on a group in
//    NCCL pairing mode (LoopbackMatching::nccl: calls pair by position, unchecked, as on NCCL);
//  * make_nccl_source(rank) -> a window-capable SimSource on "device" rank;
//  * RankFaults' other GPU model -> LoopbackGroup::set_machine_gpu; its refused local registration ->
//    inject_failure(LoopbackOp::register_local, rank, 1); LimitSource stays as it is;
//  * the all-reduce after each failure -> LoopbackCommunicator::user_collective(7) on every rank. An
//    application collective that met a stray all-gather returns no error in NCCL mode, so the check
//    that it paired is the end of every case: every rank made the same collective calls in the same
//    order (LoopbackGroup::call_log), no call waited for a partner in vain (broken() false: a rank that
//    skipped or added a step would leave a call alone until the timeout), and once the pools are gone
//    no registration is left (live_registrations() 0: a failed step that left a window behind, or a
//    registry destroyed with a window attached, would keep it).
//
// Every case runs on 2, 3 and 4 ranks, and each twice: once with completions visible as soon as every
// rank posted (a rank that did not wait may hear of a mismatch at any later point), once with the
// group holding completions (LoopbackGroup::hold_completions, never released: a rank that did not wait
// hears of it only where it waits), so that an expectation that depends on thread timing fails in one
// of them. Run with --gtest_repeat to shake the free-running interleavings further.

#include <gtest/gtest.h>

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/limit_source.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/lockstep_support.hpp"
#include "common/registry_ranks.hpp"
#include "common/scoped_profile.hpp"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;
// Long enough that a rank waiting for a slow peer on a loaded 2-core machine is not taken for a rank
// that never comes; a rank that really never comes (a skipped step) breaks the group after it.
constexpr auto kTimeout = std::chrono::seconds(5);

// (ranks, hold completions)
using Setting = std::tuple<int, bool>;

// The GPU fixture (NcclRanks + NcclLockstep) on the loopback: a group of n ranks in NCCL pairing mode,
// one communicator per rank on "device" rank, body(rank) on one thread per rank, and the end-of-case
// checks of the collective calls and registrations.
class LockstepRecovery : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    n_ = std::get<0>(GetParam());
    group_ = std::make_shared<LoopbackGroup>("world", n_, kTimeout, LoopbackMatching::nccl);
    group_->hold_completions(std::get<1>(GetParam()));  // never released: polls never see a completion
    for (int r = 0; r < n_; ++r) comms_.push_back(std::make_shared<LoopbackCommunicator>(group_, r, /*device=*/r));
  }

  std::vector<std::string> on_ranks(const std::function<void(int)>& body) { return ncclpool::on_ranks(n_, body); }
  std::shared_ptr<LoopbackCommunicator> world(int rank) const { return comms_[static_cast<std::size_t>(rank)]; }
  std::vector<std::string> slots() const { return std::vector<std::string>(static_cast<std::size_t>(n_)); }

  // The group's next application collective after the failure (the GPU test's all-reduce). Whether
  // it paired with the other ranks' is checked at the end, from the call logs.
  void expect_next_all_reduce_right(int rank) { world(rank)->user_collective(7); }

  // After every rank's body returned and its pools and registries are gone: the same collective
  // calls on every rank, none left waiting, nothing left registered.
  void expect_ranks_in_step() const {
    const std::vector<std::string> reference = group_->call_log(0);
    for (int r = 1; r < n_; ++r) {
      const std::vector<std::string> mine = group_->call_log(r);
      EXPECT_EQ(mine, reference) << "rank " << r << "'s collective calls differ from rank 0's:" << log_text(r) << "\n  rank 0:" << log_text(0);
    }
    EXPECT_FALSE(group_->broken()) << "a collective call waited for a partner that never came";
    EXPECT_EQ(group_->live_registrations(), 0) << "a registration outlived its pool";
  }

  std::string log_text(int rank) const {
    std::string out;
    for (const std::string& call : group_->call_log(rank)) out += " " + call;
    return out;
  }

  int n_ = 0;
  std::shared_ptr<LoopbackGroup> group_;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms_;
};

// make_nccl_source(device) on the simulator: window-capable host memory, ncclMemAlloc's granularity.
std::shared_ptr<SimSource> sim_source(int device) {
  SimSourceConfig config;
  config.device = device;
  return std::make_shared<SimSource>(config);
}

// The routes-over-two-parts pool of the cases (as the GPU test's), every part over sim sources.
std::unique_ptr<AutoPool> local_then_symmetric_pool(int device) {
  return ncclpool::local_then_symmetric_pool([device] { return sim_source(device); });
}

// ------------------------------------------------------------------------------------------------
// Item 1 (issue 27), then a commit.
// ------------------------------------------------------------------------------------------------

// Commit #1 has a window pending on rank 0 only, so rank 0 fails at once and the others (nothing
// pending) only enqueue and hear of it later. Then every rank has the same segment pending: commit
// #2's records are equal, but the late-found mismatch is those ranks' "no" (they wait at #2, and a
// rank that waits first waits for every earlier agreement), so every rank fails #2 and no window
// exists anywhere. Commit #3 agrees and registers everywhere; the detach after it agrees.
TEST_P(LockstepRecovery, ALateFoundErrorIsEveryRanksErrorAtTheNextCommit) {
  auto first = slots(), second = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(sim_source(rank), "late-commit", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = rank == 0 ? pool->allocate(MiB) : nullptr;  // rank 0 grows (a 2 MiB segment 0), the others not yet
    first[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (rank != 0) p = pool->allocate(MiB);  // now every rank has segment 0 pending
    second[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (registry.stats(*world).registered_segments != 0) throw std::runtime_error("a window was registered at a commit that failed");
    expect_next_all_reduce_right(rank);
    registry.commit();  // nothing late any more, equal records: registers segment 0 everywhere
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("commit #3 registered no window");
    pool->deallocate(p);
    registry.detach(*world);
    registry.check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 1; r < n_; ++r) EXPECT_EQ(first[static_cast<std::size_t>(r)], "") << "a rank with nothing pending must not wait" << listing(first);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(second[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail commit #2" << listing(second);
  // Which error each rank raises at #2: rank 0 the agreement's mismatch naming the ranks that voted
  // no; the others the mismatch of #1 they found there (kept as their vote, raised once #2 is over).
  EXPECT_TRUE(has(second[0], "voted no")) << listing(second);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(second[static_cast<std::size_t>(r)], "found after the fact")) << listing(second);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------------------------
// Item 1, then a detach.
// ------------------------------------------------------------------------------------------------

// The late-found mismatch is the "no" vote in the detach agreement. Every rank fails the detach and
// keeps the communicator and its windows; the next detach succeeds everywhere (rank 0's segment 1,
// never registered, is only dropped from its pending list there).
TEST_P(LockstepRecovery, ALateFoundErrorIsEveryRanksErrorAtDetachAndTheCommunicatorStays) {
  auto late = slots(), detach = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(sim_source(rank), "late-detach", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* shared = pool->allocate(MiB);
    registry.commit();  // segment 0: a window on every rank
    void* extra = rank == 0 ? pool->allocate(48 * MiB) : nullptr;  // rank 0 grows segment 1 alone
    late[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (extra) pool->deallocate(extra);
    detach[static_cast<std::size_t>(rank)] = caught([&] { registry.detach(*world); });
    if (registry.attached() != 1) throw std::runtime_error("a failed detach dropped the communicator on this rank");
    if (registry.handle_of(shared, *world) == nullptr) throw std::runtime_error("a failed detach released the window on this rank");
    expect_next_all_reduce_right(rank);
    pool->deallocate(shared);
    registry.detach(*world);  // the late error was reported: every rank votes yes now
    if (registry.attached() != 0) throw std::runtime_error("the second detach left the communicator attached");
    registry.check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(late[0], "AgreementError")) << listing(late);
  for (int r = 1; r < n_; ++r) EXPECT_EQ(late[static_cast<std::size_t>(r)], "") << "a rank with nothing pending only enqueues" << listing(late);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(detach[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail the detach" << listing(detach);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(detach[static_cast<std::size_t>(r)], "found after the fact")) << listing(detach);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------------------------
// Item 2: a profile that applies on one rank only.
// ------------------------------------------------------------------------------------------------

// A profile for the simulator's machine key ("ncclpool simulator", NCCL 0, `ranks` ranks): every
// collective none below 64 KiB, local from 64 KiB (no windows), as the GPU test writes for its GPU.
Profile none_then_local_profile(int ranks) {
  return testing_support::profile_for("ncclpool simulator", 0, ranks, {{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}},
                                      "sim lockstep recovery test");
}

// The profile routes every size to none/local; on the last rank it does not apply (its communicator
// reports another GPU model, as a node with other GPUs would), so that rank takes the built-in routes
// (windows from 1 MiB). The routes agreement runs at the attach on every rank and fails on every
// rank; nothing is attached anywhere, and the all-reduce after it pairs.
TEST_P(LockstepRecovery, AnAutoPoolWhoseProfileAppliesOnOneRankOnlyFailsTheAttachEverywhere) {
  const testing_support::ScopedProfile file(none_then_local_profile(n_), "lockstep-recovery");
  group_->set_machine_gpu(n_ - 1, "another GPU model");
  auto attach = slots(), sources = slots();
  const auto errors = on_ranks([&](int rank) {
    AutoPoolConfig config;
    config.make_source = [rank](RegistrationKind) { return sim_source(rank); };
    auto pool = make_auto_pool(config);
    auto world = this->world(rank);
    attach[static_cast<std::size_t>(rank)] = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("attached although the ranks route differently");
    expect_next_all_reduce_right(rank);
    sources[static_cast<std::size_t>(rank)] = pool->routes().describe() + " (" + pool->routes_source() + ")";
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(attach[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail the attach" << listing(attach);
  // The setting took: the profile on every rank but the last, the built-in routes there.
  for (int r = 0; r + 1 < n_; ++r) EXPECT_TRUE(has(sources[static_cast<std::size_t>(r)], "the profile")) << listing(sources);
  EXPECT_TRUE(has(sources[static_cast<std::size_t>(n_ - 1)], "built-in routes")) << listing(sources);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------------------------
// Item 4: one part of an auto pool fails its commit on one rank.
// ------------------------------------------------------------------------------------------------

// An auto pool attached as symmetric over two parts (both make windows). Rank 0 grows the local part
// alone: that part's agreement fails on rank 0 at once, and rank 0 still joins the symmetric part's
// agreement, so the next all-reduce pairs. The other ranks hear of it at their next commit (their "no"
// there, though every rank then has the same segment pending). The commit after that agrees and
// registers on every rank; the detach (symmetric part, then local part) agrees.
TEST_P(LockstepRecovery, AnAutoPoolsPartFailingItsCommitOnOneRankKeepsEveryRankInStep) {
  auto first = slots(), second = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = local_then_symmetric_pool(rank);
    void* fixed = pool->allocate(2 * MiB);  // the symmetric part's segment, before the attach
    auto world = this->world(rank);
    pool->attach(world, RegistrationKind::symmetric);
    void* small = rank == 0 ? pool->allocate(64 * KiB) : nullptr;  // the local part grows on rank 0 only
    first[static_cast<std::size_t>(rank)] = caught([&] { pool->commit(); });
    expect_next_all_reduce_right(rank);
    if (rank != 0) small = pool->allocate(64 * KiB);
    second[static_cast<std::size_t>(rank)] = caught([&] { pool->commit(); });
    pool->commit();  // equal records, nothing late: the local part's window everywhere
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(fixed, *world) == nullptr)
      throw std::runtime_error("after the agreeing commit a buffer is in no window");
    pool->deallocate(small);
    pool->deallocate(fixed);
    pool->detach(*world);
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 0; r < n_; ++r)
    EXPECT_TRUE(has(first[static_cast<std::size_t>(r)] + second[static_cast<std::size_t>(r)], "AgreementError"))
        << "every rank must end in an error" << listing(first) << listing(second);
  // More precisely (no timing in it): the others only enqueue at the first commit (nothing pending in
  // either part) and wait at the second (the local part's segment), where every rank fails.
  for (int r = 1; r < n_; ++r) EXPECT_EQ(first[static_cast<std::size_t>(r)], "") << listing(first);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(second[static_cast<std::size_t>(r)], "AgreementError")) << listing(second);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------------------------
// Item 5: a local registration refused on one rank during an auto attach.
// ------------------------------------------------------------------------------------------------

// An auto pool with a segment in its local and in its symmetric part before the attach; rank 0's
// local registration is refused (its first register_local call: the attach's). That refusal is rank
// 0's "no" at the routes agreement: every rank fails the attach, the local parts are undone, nothing
// is attached or registered anywhere. The next attach (nothing refused) succeeds everywhere.
TEST_P(LockstepRecovery, ALocalRegistrationRefusedOnOneRankFailsTheAutoAttachEverywhere) {
  group_->inject_failure(LoopbackOp::register_local, 0, 1);
  auto attach = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = local_then_symmetric_pool(rank);
    void* small = pool->allocate(64 * KiB);
    void* large = pool->allocate(2 * MiB);
    auto world = this->world(rank);
    attach[static_cast<std::size_t>(rank)] = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("a failed attach left the communicator attached");
    if (pool->handle_of(small, *world) != nullptr || pool->handle_of(large, *world) != nullptr)
      throw std::runtime_error("a failed attach left a registration behind");
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
    pool->attach(world, std::nullopt);  // nothing refused now
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(large, *world) == nullptr)
      throw std::runtime_error("the second attach registered nothing");
    pool->deallocate(small);
    pool->deallocate(large);
    pool->detach(*world);
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(attach[0], "RegistrationError")) << listing(attach);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(attach[static_cast<std::size_t>(r)], "AgreementError")) << listing(attach);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(attach[static_cast<std::size_t>(r)], "could not attach")) << listing(attach);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------------------------
// Item 3, check mode `layout`: an out-of-memory on one rank.
// ------------------------------------------------------------------------------------------------

// A deterministic pool whose growth is refused on rank 0 (a LimitSource of one 32 MiB chunk there)
// must not reclaim stream 1's unpublished block to place e (stream 2), since that would move it on
// rank 0 only: the allocation fails with OutOfMemory. The others grow segment 1 for e, so the next
// commit's pending segments differ: every rank ends in an AgreementError (layout mode: every rank
// waits), and f (stream 1) sits in a's block, segment 0 offset 0, on every rank. The detach after
// it agrees (segment 0's window everywhere, no live block, no out-of-memory recovery counted:
// nothing could be released).
TEST_P(LockstepRecovery, AnOutOfMemoryOnOneRankIsEveryRanksErrorInLayoutCheckMode) {
  constexpr stream_t s1 = 1, s2 = 2;
  auto oom = slots(), agreement = slots(), places = slots();
  const auto errors = on_ranks([&](int rank) {
    std::shared_ptr<SegmentSource> source = sim_source(rank);
    if (rank == 0) source = std::make_shared<LimitSource>(source, std::make_shared<SharedLimit>(32 * MiB, "rank 0's pool"));
    auto pool = deterministic_pool(source, "oom-layout", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::layout});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* a = pool->allocate(32 * MiB, s1);  // fills segment 0
    registry.commit();
    pool->deallocate(a, s1);  // a's block stays with stream one
    void* e = nullptr;
    oom[static_cast<std::size_t>(rank)] = caught([&] { e = pool->allocate(32 * MiB, s2); });
    void* f = pool->allocate(32 * MiB, s1);  // a's block on every rank
    std::string error = caught([&] { registry.commit(); });
    // A rank that did not wait hears of the mismatch when it polls after the agreement completed.
    for (int tries = 0; error.empty() && tries < 100; ++tries) {
      error = caught([&] { registry.poll(); });
      if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    agreement[static_cast<std::size_t>(rank)] = error;
    const auto where = pool->locate(f);
    places[static_cast<std::size_t>(rank)] = where ? "segment " + std::to_string(where->segment_sequence) + " offset " + std::to_string(where->offset) : "nowhere";
    expect_next_all_reduce_right(rank);
    if (e) pool->deallocate(e, s2);
    pool->deallocate(f, s1);
    registry.detach(*world);  // segment 0's window on every rank: the detach agrees
    registry.check_invariants();
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(oom[0], "OutOfMemory")) << listing(oom);
  for (int r = 1; r < n_; ++r) EXPECT_EQ(oom[static_cast<std::size_t>(r)], "") << listing(oom);
  for (int r = 0; r < n_; ++r) {
    EXPECT_TRUE(has(agreement[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must end in an error" << listing(agreement);
    EXPECT_EQ(places[static_cast<std::size_t>(r)], places[0]) << "the buffer after the failure moved on one rank" << listing(places);
  }
  EXPECT_EQ(places[0], "segment 0 offset 0") << listing(places);
  expect_ranks_in_step();
}

INSTANTIATE_TEST_SUITE_P(Ranks, LockstepRecovery, ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Setting>& setting) {
                           return std::to_string(std::get<0>(setting.param)) + "ranks" + (std::get<1>(setting.param) ? "_held" : "_free");
                         });

}  // namespace
}  // namespace ncclpool

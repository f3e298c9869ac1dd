// Lockstep (docs/registry.md, "Lockstep"): a failure found on one rank alone is that rank's "no" at
// the pool's next collective step, never a reason to skip it (issue 44). Ranks are free-running
// threads on the loopback in NCCL pairing mode, as in test_lockstep_recovery.cpp: each case ends with
// an application collective on every rank, and the end-of-case checks prove that every rank made the
// same collective calls in the same order, none waited in vain, and nothing stayed registered.
//  * Registry::vote_no before a commit, a scheduled scope end, an attach, a detach and a trim;
//  * a scope left with an error at a scope end that is not an agreement point (its "no" is kept);
//  * agreed settings: a local attach is collective, the kind and the settings are compared, and
//    another device on one rank is that rank's "no" there;
//  * an auto pool: vote_no at its routes agreement, and agreed settings that differ.
// Every case then shows that the next agreement agrees again.

#include <gtest/gtest.h>

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/lockstep_support.hpp"
#include "common/registry_ranks.hpp"

#include <functional>
#include <future>
#include <thread>
#include <string>
#include <tuple>
#include <vector>

namespace ncclpool {
namespace {

using Setting = std::tuple<int, bool>;  // (ranks, hold completions)

class LockstepVotes : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    n_ = std::get<0>(GetParam());
    group_ = std::make_shared<LoopbackGroup>("world", n_, std::chrono::seconds(5), LoopbackMatching::nccl);
    group_->hold_completions(std::get<1>(GetParam()));
    for (int r = 0; r < n_; ++r) comms_.push_back(std::make_shared<LoopbackCommunicator>(group_, r, /*device=*/r));
  }

  std::vector<std::string> run(const std::function<void(int)>& body) { return ncclpool::on_ranks(n_, body); }
  std::shared_ptr<LoopbackCommunicator> world(int rank) const { return comms_[static_cast<std::size_t>(rank)]; }
  std::vector<std::string> slots() const { return std::vector<std::string>(static_cast<std::size_t>(n_)); }
  static std::string& at(std::vector<std::string>& v, int rank) { return v[static_cast<std::size_t>(rank)]; }

  // A rank's pool and registry on "device" rank.
  static std::shared_ptr<Pool> pool_on(int rank, const std::string& name = "votes") {
    SimSourceConfig config;
    config.device = rank;
    return deterministic_pool(std::make_shared<SimSource>(config), name, 32 * MiB);
  }

  void expect_all_ok(const std::vector<std::string>& errors) const {
    for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r << listing(errors);
  }
  // Rank 0 raised its own error (naming `why`), every other rank the agreement's "voted no".
  void expect_rank0_voted_no(const std::vector<std::string>& step, const std::string& why) const {
    EXPECT_TRUE(has(step[0], why)) << listing(step);
    EXPECT_FALSE(has(step[0], "AgreementError")) << "rank 0 raises its own error" << listing(step);
    for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(step[static_cast<std::size_t>(r)], "AgreementError")) << listing(step);
    for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(step[static_cast<std::size_t>(r)], "voted no")) << listing(step);
  }
  void expect_ranks_in_step() const {
    for (int r = 1; r < n_; ++r) EXPECT_EQ(group_->call_log(r), group_->call_log(0)) << "rank " << r << "'s collective calls differ from rank 0's";
    EXPECT_FALSE(group_->broken()) << "a collective call waited for a partner that never came";
    EXPECT_EQ(group_->live_registrations(), 0) << "a registration outlived its pool";
  }

  int n_ = 0;
  std::shared_ptr<LoopbackGroup> group_;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms_;
};

TEST_P(LockstepVotes, VoteNoBeforeACommitFailsItOnEveryRankAndTheNextAgrees) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    registry.attach(world(rank), RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);  // a window pending on every rank: every rank waits at the commit
    if (rank == 0) registry.vote_no("out of memory in the Python layer");
    if (rank == 0 && !registry.voting_no()) throw std::runtime_error("vote_no kept nothing");
    at(step, rank) = caught([&] { registry.commit(); });
    if (registry.handle_of(p, *world(rank)) != nullptr) throw std::runtime_error("a window was registered where a rank said no");
    if (registry.voting_no()) throw std::runtime_error("the commit did not take the vote");
    world(rank)->user_collective(7);
    registry.commit();  // agrees: registers everywhere
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "out of memory in the Python layer");
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, VoteNoBeforeAScheduledScopeEndFailsItOnEveryRank) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    registry.attach(world(rank), RegistrationKind::symmetric);
    Scope scope(registry);
    void* p = pool->allocate(MiB);
    if (rank == 0) registry.vote_no("a check failed on this rank");
    at(step, rank) = caught([&] { scope.close(); });  // scope end 0: scheduled
    world(rank)->user_collective(7);
    registry.commit();
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "a check failed on this rank");
  expect_ranks_in_step();
}

// Item 2 of issue 44: a scope left with an error at a scope end that is not an agreement point kept
// no "no" before: the next commit agreed on every rank, as if nothing had failed on rank 0.
TEST_P(LockstepVotes, AScopeFailedAtAnUnscheduledScopeEndVotesNoAtTheNextAgreementPoint) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off, /*scope_period=*/2});
    registry.attach(world(rank), RegistrationKind::symmetric);
    for (int i = 0; i < 3; ++i) Scope(registry).close();  // scope ends 0, 1, 2: scheduled
    if (registry.next_committing_scope_end() == registry.scope_ends()) throw std::runtime_error("the test needs an unscheduled scope end next");
    void* p = nullptr;
    try {
      Scope scope(registry);
      p = pool->allocate(MiB);
      if (rank == 0) throw std::runtime_error("the application failed inside the scope");
      scope.close();  // scope end 3: not scheduled, nothing collective
    } catch (const std::runtime_error&) {
    }
    at(step, rank) = caught([&] { registry.commit(); });
    if (registry.handle_of(p, *world(rank)) != nullptr) throw std::runtime_error("a window was registered where a rank said no");
    world(rank)->user_collective(7);
    registry.commit();
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "ended with an error on this rank");
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, VoteNoBeforeASymmetricAttachFailsItOnEveryRank) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    void* p = pool->allocate(MiB);
    if (rank == 0) registry.vote_no("another device on this rank");
    at(step, rank) = caught([&] { registry.attach(world(rank), RegistrationKind::symmetric); });
    if (registry.attached() != 0) throw std::runtime_error("attached although a rank said no");
    world(rank)->user_collective(7);
    registry.attach(world(rank), RegistrationKind::symmetric);
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the next attach registered nothing");
    pool->deallocate(p);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "another device on this rank");
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, VoteNoBeforeADetachKeepsTheCommunicatorOnEveryRank) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    registry.attach(world(rank), RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);
    registry.commit();
    pool->deallocate(p);
    if (rank == 0) registry.vote_no("a teardown error on this rank");
    at(step, rank) = caught([&] { registry.detach(*world(rank)); });
    if (registry.attached() != 1) throw std::runtime_error("a failed detach dropped the communicator");
    world(rank)->user_collective(7);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "a teardown error on this rank");
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, VoteNoBeforeATrimReleasesNothingAnywhere) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    registry.attach(world(rank), RegistrationKind::symmetric);
    pool->deallocate(pool->allocate(MiB));
    registry.commit();
    const std::size_t reserved = pool->stats().reserved_bytes;
    if (rank == 0) registry.vote_no("trim refused on this rank");
    at(step, rank) = caught([&] { (void)registry.trim(); });
    if (pool->stats().reserved_bytes != reserved) throw std::runtime_error("a trim released memory where a rank said no");
    world(rank)->user_collective(7);
    if (registry.trim() == 0) throw std::runtime_error("the next trim released nothing");
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "trim refused on this rank");
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------- agreed settings

// With agreed settings a local attach is collective: one rank attaching as symmetric while the others
// attach locally (NCCLPOOL_SGLANG_KIND on one rank only) fails on every rank, naming the kinds.
TEST_P(LockstepVotes, AgreedSettingsMakeALocalAttachCollectiveAndCompareTheKind) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    void* p = pool->allocate(MiB);
    const RegistrationKind kind = rank == 0 ? RegistrationKind::symmetric : RegistrationKind::local;
    at(step, rank) = caught([&] { registry.attach(world(rank), kind); });
    if (registry.attached() != 0) throw std::runtime_error("attached although the kinds differ");
    world(rank)->user_collective(7);
    registry.attach(world(rank), RegistrationKind::local);  // every rank alike: agrees, registers
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the agreed local attach registered nothing");
    pool->deallocate(p);
    registry.detach(*world(rank));  // local: nothing collective
  });
  expect_all_ok(errors);
  for (int r = 0; r < n_; ++r) {
    EXPECT_TRUE(has(at(step, r), "AgreementError")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "attached as local")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "attached as symmetric")) << listing(step);
  }
  EXPECT_TRUE(has(step[0], "this rank as symmetric with agreed settings 'kind=local'")) << listing(step);
  EXPECT_TRUE(has(step[1], "this rank as local")) << listing(step);
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, AgreedSettingsThatDifferFailTheAttachOnEveryRankNamingThisRanksText) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    const std::string settings = rank == n_ - 1 ? "debug=on" : "debug=off";
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, settings});
    at(step, rank) = caught([&] { registry.attach(world(rank), RegistrationKind::local); });
    if (registry.attached() != 0) throw std::runtime_error("attached although the settings differ");
    world(rank)->user_collective(7);
  });
  expect_all_ok(errors);
  for (int r = 0; r < n_; ++r) {
    EXPECT_TRUE(has(at(step, r), "AgreementError")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "agreed settings differ")) << listing(step);
    EXPECT_TRUE(has(at(step, r), r == n_ - 1 ? "'debug=on'" : "'debug=off'")) << listing(step);
  }
  expect_ranks_in_step();
}

// Another current device on one rank at a group's first use: that rank's "no" in the attach agreement.
TEST_P(LockstepVotes, AnotherDeviceOnOneRankIsItsNoAtAnAgreedLocalAttach) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    auto other_device = std::make_shared<LoopbackCommunicator>(group_, rank, /*device=*/rank == 0 ? 99 : rank);
    at(step, rank) = caught([&] { registry.attach(rank == 0 ? other_device : world(rank), RegistrationKind::local); });
    if (registry.attached() != 0) throw std::runtime_error("attached although a rank could not");
    world(rank)->user_collective(7);
    registry.attach(world(rank), RegistrationKind::local);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  EXPECT_TRUE(has(step[0], "is on device 99")) << listing(step);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(at(step, r), "voted no")) << listing(step);
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, VoteNoBeforeAnAgreedLocalAttachFailsItOnEveryRank) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    if (rank == 0) registry.vote_no("out of memory before the first use");
    at(step, rank) = caught([&] { registry.attach(world(rank), RegistrationKind::local); });
    world(rank)->user_collective(7);
    registry.attach(world(rank), RegistrationKind::local);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_rank0_voted_no(step, "out of memory before the first use");
  expect_ranks_in_step();
}

// Without agreed settings a local attach stays what it was: nothing collective.
TEST_P(LockstepVotes, ALocalAttachWithoutAgreedSettingsIsNotCollective) {
  const auto errors = run([&](int rank) {
    auto pool = pool_on(rank);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    if (rank == 0) registry.vote_no("kept for a collective step");
    registry.attach(world(rank), RegistrationKind::local);
    if (rank == 0 && !registry.voting_no()) throw std::runtime_error("a local attach took the vote");
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(group_->call_log(r).empty()) << "rank " << r;
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------- auto pools

TEST_P(LockstepVotes, VoteNoOnAnAutoPoolFailsItsRoutesAgreementOnEveryRank) {
  auto step = slots(), commit = slots();
  const auto errors = run([&](int rank) {
    auto pool = local_then_symmetric_pool([rank] { return std::make_shared<SimSource>(SimSourceConfig{rank}); });
    void* large = pool->allocate(2 * MiB);
    if (rank == 0) pool->vote_no("a setting could not be read");
    at(step, rank) = caught([&] { pool->attach(world(rank), std::nullopt); });
    if (pool->attached(*world(rank))) throw std::runtime_error("attached although a rank said no");
    world(rank)->user_collective(7);
    pool->attach(world(rank), std::nullopt);
    void* more = pool->allocate(4 * MiB);  // the symmetric part's next window, pending
    if (rank == 0) pool->vote_no("a second failure");
    at(commit, rank) = caught([&] { pool->commit(); });  // the symmetric part's agreement takes it
    world(rank)->user_collective(8);
    pool->commit();
    if (pool->handle_of(more, *world(rank)) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(more);
    pool->deallocate(large);
    pool->detach(*world(rank));
  });
  expect_all_ok(errors);
  EXPECT_TRUE(has(step[0], "a setting could not be read")) << listing(step);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(at(step, r), "could not attach")) << listing(step);
  expect_rank0_voted_no(commit, "a second failure");
  expect_ranks_in_step();
}

TEST_P(LockstepVotes, AutoPoolsWhoseAgreedSettingsDifferFailTheRoutesAgreement) {
  auto step = slots();
  const auto errors = run([&](int rank) {
    auto make_part = [rank](RegistrationKind part) {
      return deterministic_pool(std::make_shared<SimSource>(SimSourceConfig{rank}), "auto/" + std::string(to_string(part)), 32 * MiB);
    };
    RegistryOptions options{CheckLevel::off};
    options.agreed_settings = rank == 0 ? "checks=collectives" : "checks=off";
    AutoPool pool("auto", make_part, builtin_routes(true), "set by the test", options);
    at(step, rank) = caught([&] { pool.attach(world(rank), std::nullopt); });
    world(rank)->user_collective(7);
  });
  expect_all_ok(errors);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(at(step, r), "agreed settings differ")) << listing(step);
  EXPECT_TRUE(has(step[0], "'checks=collectives'")) << listing(step);
  expect_ranks_in_step();
}

// ------------------------------------------------------------------------------- graph capture

// Issue 44 item 9: "capturing" was asked of the device, so another thread of rank 0 capturing a graph
// while rank 0's main thread committed made rank 0 alone skip the commit the others joined (their
// all-gather then paired with rank 0's next collective). Capture is now the calling thread's, as the
// program makes it: rank 0 joins like every rank. A capture on the committing thread itself still
// skips (every rank captures at the same places): the commit after it agrees.
TEST_P(LockstepVotes, AnotherThreadsCaptureOnOneRankDoesNotMakeItSkipAnAgreement) {
  const auto errors = run([&](int rank) {
    SimSourceConfig config;
    config.device = rank;
    auto source = std::make_shared<SimSource>(config);
    auto pool = deterministic_pool(source, "capture", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    registry.attach(world(rank), RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);  // a window pending on every rank
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
    if (registry.handle_of(p, *world(rank)) == nullptr) throw std::runtime_error("the commit registered nothing on this rank");
    world(rank)->user_collective(7);
    // The committing thread's own capture (the program's, on every rank): skipped everywhere alike.
    source->sim_ordering().set_capturing(true);
    registry.commit();
    source->sim_ordering().set_capturing(false);
    world(rank)->user_collective(8);
    pool->deallocate(p);
    registry.detach(*world(rank));
  });
  expect_all_ok(errors);
  expect_ranks_in_step();
}

INSTANTIATE_TEST_SUITE_P(Ranks, LockstepVotes, ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Setting>& setting) {
                           return std::to_string(std::get<0>(setting.param)) + "ranks" + (std::get<1>(setting.param) ? "_held" : "_free");
                         });

}  // namespace
}  // namespace ncclpool

#pragma once
// The lockstep cases (docs/registry.md, "Lockstep" and "Failures, rank by rank"), written once and typed
// over the communicator, as RMM runs one suite over every memory resource: the loopback simulator in
// NCCL pairing mode (tests/unit/test_lockstep_loopback.cpp, in CI) and real NCCL, one GPU per rank
// (tests/gpu/test_nccl_lockstep.cpp). In each case one rank alone fails (a late-found mismatch, a
// profile that applies on one rank only, one part's commit, a local registration, an out-of-memory, a
// `vote_no`, a scope left with an error, agreed settings or a device that differ), every rank must end
// in an error at the same collective step, the application's next collective must pair, and the next
// step must agree again.
//
// Instantiate with INSTANTIATE_TYPED_TEST_SUITE_P(Backend, Lockstep, ::testing::Types<Ranks...>).
// A Ranks type is a ::testing::Test (skipping in SetUp where it cannot run) that provides:
//   int ranks() const                          how many ranks (2+)
//   on_ranks(body)                             body(rank) on every rank at once (threads on the
//                                              loopback, one thread per GPU with its context on NCCL);
//                                              each rank's exception text, "" where it returned
//   world(rank)                                this rank's communicator on the group, the same object
//                                              for the whole body (call it inside the body)
//   world_on_device(rank, device)              a communicator of the group that says it is on `device`
//   window_source(rank)                        a segment source that can back windows, on rank's device
//   stream(rank, i), sync_streams(rank)        stream i (1, 2) of that rank; wait for its work
//   next_collective(rank, tag)                 the application's next collective after a failure
//                                              (NCCL: an all-reduce whose sum is checked)
//   machine_key()                              what the communicators report in machine()
//   report_another_gpu(rank)                   before on_ranks: rank's communicator reports another GPU
//   refuse_next_local_registration(rank)       before on_ranks: rank's next local registration refused
//   expect_in_step()                           after on_ranks: every rank made the same collective calls,
//                                              none waited in vain, nothing is left registered (where the
//                                              backend can tell: the loopback's call logs)
//   expect_no_collective_calls()               after on_ranks: no rank made a collective call (ditto)

#include "common/lockstep_support.hpp"
#include "common/scoped_profile.hpp"

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/limit_source.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/routes.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool::lockstep {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

inline std::string& at(std::vector<std::string>& per_rank, int rank) { return per_rank[static_cast<std::size_t>(rank)]; }
inline const std::string& at(const std::vector<std::string>& per_rank, int rank) { return per_rank[static_cast<std::size_t>(rank)]; }

template <class Ranks>
class Lockstep : public Ranks {
 protected:
  std::vector<std::string> slots() const { return std::vector<std::string>(static_cast<std::size_t>(this->ranks())); }

  // A rank's deterministic pool of 32 MiB chunks over its window-capable source.
  std::shared_ptr<Pool> pool_on(int rank, const std::string& name) { return deterministic_pool(this->window_source(rank), name, 32 * MiB); }
  // The routes-over-two-parts pool of the cases (lockstep_support.hpp), every part over rank's source.
  std::unique_ptr<AutoPool> auto_pool_on(int rank) {
    return local_then_symmetric_pool([this, rank] { return this->window_source(rank); });
  }

  void expect_all_ok(const std::vector<std::string>& errors) const {
    for (int r = 0; r < this->ranks(); ++r) EXPECT_EQ(at(errors, r), "") << "rank " << r << listing(errors);
  }
  // Rank 0 raised its own error (naming `why`), every other rank the agreement's "voted no".
  void expect_rank0_voted_no(const std::vector<std::string>& step, const std::string& why) const {
    EXPECT_TRUE(has(step[0], why)) << listing(step);
    EXPECT_FALSE(has(step[0], "AgreementError")) << "rank 0 raises its own error" << listing(step);
    for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(step, r), "AgreementError")) << listing(step);
    for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(step, r), "voted no")) << listing(step);
  }
};

TYPED_TEST_SUITE_P(Lockstep);

// ================================================================================================
// The failure table's rows with their recovery (issue 27 items 1-5): a case, then the later commit,
// attach or detach that must succeed on every rank.
// ================================================================================================

// Item 1 (issue 27), then a commit. Commit #1 has a window pending on rank 0 only, so rank 0 fails at
// once and the others (nothing pending) only enqueue and hear of it later. Then every rank has the
// same segment pending: commit #2's records are equal, but the late-found mismatch is those ranks'
// "no" (they wait at #2, and a rank that waits first waits for every earlier agreement), so every rank
// fails #2 and no window exists anywhere. Commit #3 agrees and registers everywhere; the detach after
// it agrees.
TYPED_TEST_P(Lockstep, ALateFoundErrorIsEveryRanksErrorAtTheNextCommit) {
  auto first = this->slots(), second = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "late-commit");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = rank == 0 ? pool->allocate(MiB) : nullptr;  // rank 0 grows (a 2 MiB segment 0), the others not yet
    at(first, rank) = caught([&] { registry.commit(); });
    if (rank != 0) p = pool->allocate(MiB);  // now every rank has segment 0 pending
    at(second, rank) = caught([&] { registry.commit(); });
    if (registry.stats(*world).registered_segments != 0) throw std::runtime_error("a window was registered at a commit that failed");
    this->next_collective(rank, 7);
    registry.commit();  // nothing late any more, equal records: registers segment 0 everywhere
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("commit #3 registered no window");
    pool->deallocate(p);
    registry.detach(*world);
    registry.check_invariants();
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_EQ(at(first, r), "") << "a rank with nothing pending must not wait" << listing(first);
  for (int r = 0; r < this->ranks(); ++r) EXPECT_TRUE(has(at(second, r), "AgreementError")) << "every rank must fail commit #2" << listing(second);
  // Which error each rank raises at #2: rank 0 the agreement's mismatch naming the ranks that voted
  // no; the others the mismatch of #1 they found there (kept as their vote, raised once #2 is over).
  EXPECT_TRUE(has(second[0], "voted no")) << listing(second);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(second, r), "found after the fact")) << listing(second);
  this->expect_in_step();
}

// Item 1, then a detach. The late-found mismatch is the "no" vote in the detach agreement. Every rank
// fails the detach and keeps the communicator and its windows; the next detach succeeds everywhere
// (rank 0's segment 1, never registered, is only dropped from its pending list there).
TYPED_TEST_P(Lockstep, ALateFoundErrorIsEveryRanksErrorAtDetachAndTheCommunicatorStays) {
  auto late = this->slots(), detach = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "late-detach");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* shared = pool->allocate(MiB);
    registry.commit();  // segment 0: a window on every rank
    void* extra = rank == 0 ? pool->allocate(48 * MiB) : nullptr;  // rank 0 grows segment 1 alone
    at(late, rank) = caught([&] { registry.commit(); });
    if (extra) pool->deallocate(extra);
    at(detach, rank) = caught([&] { registry.detach(*world); });
    if (registry.attached() != 1) throw std::runtime_error("a failed detach dropped the communicator on this rank");
    if (registry.handle_of(shared, *world) == nullptr) throw std::runtime_error("a failed detach released the window on this rank");
    this->next_collective(rank, 7);
    pool->deallocate(shared);
    registry.detach(*world);  // the late error was reported: every rank votes yes now
    if (registry.attached() != 0) throw std::runtime_error("the second detach left the communicator attached");
    registry.check_invariants();
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(late[0], "AgreementError")) << listing(late);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_EQ(at(late, r), "") << "a rank with nothing pending only enqueues" << listing(late);
  for (int r = 0; r < this->ranks(); ++r) EXPECT_TRUE(has(at(detach, r), "AgreementError")) << "every rank must fail the detach" << listing(detach);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(detach, r), "found after the fact")) << listing(detach);
  this->expect_in_step();
}

// Item 2: a profile for this machine routes every collective to none below 64 KiB and local from
// 64 KiB (no windows); on the last rank it does not apply (its communicator reports another GPU model,
// as a node with other GPUs would), so that rank takes the built-in routes (windows from 1 MiB). The
// routes agreement runs at the attach on every rank and fails on every rank; nothing is attached
// anywhere, and the collective after it pairs.
TYPED_TEST_P(Lockstep, AnAutoPoolWhoseProfileAppliesOnOneRankOnlyFailsTheAttachEverywhere) {
  const int n = this->ranks();
  const MachineKey key = this->machine_key();
  const testing_support::ScopedProfile file(
      testing_support::profile_for(key.gpu, key.nccl_version, n, {{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}}, "lockstep test"),
      "lockstep-cases");
  this->report_another_gpu(n - 1);
  auto attach = this->slots(), sources = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    AutoPoolConfig config;
    config.make_source = [this, rank](RegistrationKind) { return this->window_source(rank); };
    auto pool = make_auto_pool(config);
    auto world = this->world(rank);
    at(attach, rank) = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("attached although the ranks route differently");
    this->next_collective(rank, 7);
    at(sources, rank) = pool->routes().describe() + " (" + pool->routes_source() + ")";
  });
  this->expect_all_ok(errors);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(has(at(attach, r), "AgreementError")) << "every rank must fail the attach" << listing(attach);
  // The setting took: the profile on every rank but the last, the built-in routes there.
  for (int r = 0; r + 1 < n; ++r) EXPECT_TRUE(has(at(sources, r), "the profile")) << listing(sources);
  EXPECT_TRUE(has(at(sources, n - 1), "built-in routes")) << listing(sources);
  this->expect_in_step();
}

// Item 4: an auto pool attached as symmetric over two parts (both make windows). Rank 0 grows the
// local part alone: that part's agreement fails on rank 0 at once, and rank 0 still joins the
// symmetric part's agreement, so the next collective pairs. The other ranks hear of it at their next
// commit (their "no" there, though every rank then has the same segment pending). The commit after
// that agrees and registers on every rank; the detach (symmetric part, then local part) agrees.
TYPED_TEST_P(Lockstep, AnAutoPoolsPartFailingItsCommitOnOneRankKeepsEveryRankInStep) {
  auto first = this->slots(), second = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->auto_pool_on(rank);
    void* fixed = pool->allocate(2 * MiB);  // the symmetric part's segment, before the attach
    auto world = this->world(rank);
    pool->attach(world, RegistrationKind::symmetric);
    void* small = rank == 0 ? pool->allocate(64 * KiB) : nullptr;  // the local part grows on rank 0 only
    at(first, rank) = caught([&] { pool->commit(); });
    this->next_collective(rank, 7);
    if (rank != 0) small = pool->allocate(64 * KiB);
    at(second, rank) = caught([&] { pool->commit(); });
    pool->commit();  // equal records, nothing late: the local part's window everywhere
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(fixed, *world) == nullptr)
      throw std::runtime_error("after the agreeing commit a buffer is in no window");
    pool->deallocate(small);
    pool->deallocate(fixed);
    pool->detach(*world);
    pool->check_invariants();
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 0; r < this->ranks(); ++r)
    EXPECT_TRUE(has(at(first, r) + at(second, r), "AgreementError")) << "every rank must end in an error" << listing(first) << listing(second);
  // More precisely (no timing in it): the others only enqueue at the first commit (nothing pending in
  // either part) and wait at the second (the local part's segment), where every rank fails.
  for (int r = 1; r < this->ranks(); ++r) EXPECT_EQ(at(first, r), "") << listing(first);
  for (int r = 0; r < this->ranks(); ++r) EXPECT_TRUE(has(at(second, r), "AgreementError")) << listing(second);
  this->expect_in_step();
}

// Item 5: an auto pool with a segment in its local and in its symmetric part before the attach; rank
// 0's local registration is refused (its first one: the attach's). That refusal is rank 0's "no" at
// the routes agreement: every rank fails the attach, the local parts are undone, nothing is attached
// or registered anywhere. The next attach (nothing refused) succeeds everywhere.
TYPED_TEST_P(Lockstep, ALocalRegistrationRefusedOnOneRankFailsTheAutoAttachEverywhere) {
  this->refuse_next_local_registration(0);
  auto attach = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->auto_pool_on(rank);
    void* small = pool->allocate(64 * KiB);
    void* large = pool->allocate(2 * MiB);
    auto world = this->world(rank);
    at(attach, rank) = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("a failed attach left the communicator attached");
    if (pool->handle_of(small, *world) != nullptr || pool->handle_of(large, *world) != nullptr)
      throw std::runtime_error("a failed attach left a registration behind");
    pool->check_invariants();
    this->next_collective(rank, 7);
    pool->attach(world, std::nullopt);  // nothing refused now
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(large, *world) == nullptr)
      throw std::runtime_error("the second attach registered nothing");
    pool->deallocate(small);
    pool->deallocate(large);
    pool->detach(*world);
    pool->check_invariants();
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(attach[0], "RegistrationError")) << listing(attach);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(attach, r), "AgreementError")) << listing(attach);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(attach, r), "could not attach")) << listing(attach);
  this->expect_in_step();
}

// Item 3, check mode `layout`: a deterministic pool whose growth is refused on rank 0 (a LimitSource of
// one 32 MiB chunk there: the device is full, as far as the pool can tell) must not reclaim stream 1's
// unpublished block to place e (stream 2), since that would move it on rank 0 only: the allocation
// fails with OutOfMemory. The others grow segment 1 for e, so the next commit's pending segments
// differ: every rank ends in an AgreementError (layout mode: every rank waits; a rank that did not
// hears of it when it polls), and f (stream 1) sits in a's block, segment 0 offset 0, on every rank.
// The detach after it agrees (segment 0's window everywhere, no live block).
TYPED_TEST_P(Lockstep, AnOutOfMemoryOnOneRankIsEveryRanksErrorInLayoutCheckMode) {
  auto oom = this->slots(), agreement = this->slots(), places = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    std::shared_ptr<SegmentSource> source = this->window_source(rank);
    if (rank == 0) source = std::make_shared<LimitSource>(source, std::make_shared<SharedLimit>(32 * MiB, "rank 0's pool"));
    auto pool = deterministic_pool(source, "oom-layout", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::layout});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    const stream_t s1 = this->stream(rank, 1), s2 = this->stream(rank, 2);
    void* a = pool->allocate(32 * MiB, s1);  // fills segment 0
    registry.commit();
    pool->deallocate(a, s1);  // a's block stays with stream one
    void* e = nullptr;
    at(oom, rank) = caught([&] { e = pool->allocate(32 * MiB, s2); });
    void* f = pool->allocate(32 * MiB, s1);  // a's block on every rank
    std::string error = caught([&] { registry.commit(); });
    // A rank that did not wait hears of the mismatch when it polls after the agreement completed.
    for (int tries = 0; error.empty() && tries < 100; ++tries) {
      error = caught([&] { registry.poll(); });
      if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    at(agreement, rank) = error;
    const auto where = pool->locate(f);
    at(places, rank) = where ? "segment " + std::to_string(where->segment_sequence) + " offset " + std::to_string(where->offset) : "nowhere";
    this->next_collective(rank, 7);
    if (e) pool->deallocate(e, s2);
    pool->deallocate(f, s1);
    this->sync_streams(rank);
    registry.detach(*world);  // segment 0's window on every rank: the detach agrees
    registry.check_invariants();
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(oom[0], "OutOfMemory")) << listing(oom);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_EQ(at(oom, r), "") << listing(oom);
  for (int r = 0; r < this->ranks(); ++r) {
    EXPECT_TRUE(has(at(agreement, r), "AgreementError")) << "every rank must end in an error" << listing(agreement);
    EXPECT_EQ(at(places, r), places[0]) << "the buffer after the failure moved on one rank" << listing(places);
  }
  EXPECT_EQ(places[0], "segment 0 offset 0") << listing(places);
  this->expect_in_step();
}

// ================================================================================================
// Issue 44: a failure found on one rank alone is that rank's "no" at the pool's next collective step,
// never a reason to skip it. Each case then shows that the next agreement agrees again.
// ================================================================================================

TYPED_TEST_P(Lockstep, VoteNoBeforeACommitFailsItOnEveryRankAndTheNextAgrees) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);  // a window pending on every rank: every rank waits at the commit
    if (rank == 0) registry.vote_no("out of memory in the Python layer");
    if (rank == 0 && !registry.voting_no()) throw std::runtime_error("vote_no kept nothing");
    at(step, rank) = caught([&] { registry.commit(); });
    if (registry.handle_of(p, *world) != nullptr) throw std::runtime_error("a window was registered where a rank said no");
    if (registry.voting_no()) throw std::runtime_error("the commit did not take the vote");
    this->next_collective(rank, 7);
    registry.commit();  // agrees: registers everywhere
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
    this->next_collective(rank, 8);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "out of memory in the Python layer");
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, VoteNoBeforeAScheduledScopeEndFailsItOnEveryRank) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    Scope scope(registry);
    void* p = pool->allocate(MiB);
    if (rank == 0) registry.vote_no("a check failed on this rank");
    at(step, rank) = caught([&] { scope.close(); });  // scope end 0: scheduled
    this->next_collective(rank, 7);
    registry.commit();
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "a check failed on this rank");
  this->expect_in_step();
}

// Item 2 of issue 44: a scope left with an error at a scope end that is not an agreement point kept
// no "no" before: the next commit agreed on every rank, as if nothing had failed on rank 0.
TYPED_TEST_P(Lockstep, AScopeFailedAtAnUnscheduledScopeEndVotesNoAtTheNextAgreementPoint) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off, /*scope_period=*/2});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
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
    if (registry.handle_of(p, *world) != nullptr) throw std::runtime_error("a window was registered where a rank said no");
    this->next_collective(rank, 7);
    registry.commit();
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "ended with an error on this rank");
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, VoteNoBeforeASymmetricAttachFailsItOnEveryRank) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    void* p = pool->allocate(MiB);
    if (rank == 0) registry.vote_no("another device on this rank");
    at(step, rank) = caught([&] { registry.attach(world, RegistrationKind::symmetric); });
    if (registry.attached() != 0) throw std::runtime_error("attached although a rank said no");
    this->next_collective(rank, 7);
    registry.attach(world, RegistrationKind::symmetric);
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the next attach registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "another device on this rank");
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, VoteNoBeforeADetachKeepsTheCommunicatorOnEveryRank) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);
    registry.commit();
    pool->deallocate(p);
    if (rank == 0) registry.vote_no("a teardown error on this rank");
    at(step, rank) = caught([&] { registry.detach(*world); });
    if (registry.attached() != 1) throw std::runtime_error("a failed detach dropped the communicator");
    this->next_collective(rank, 7);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "a teardown error on this rank");
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, VoteNoBeforeATrimReleasesNothingAnywhere) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    registry.attach(world, RegistrationKind::symmetric);
    pool->deallocate(pool->allocate(MiB));
    registry.commit();
    const std::size_t reserved = pool->stats().reserved_bytes;
    if (rank == 0) registry.vote_no("trim refused on this rank");
    at(step, rank) = caught([&] { (void)registry.trim(); });
    if (pool->stats().reserved_bytes != reserved) throw std::runtime_error("a trim released memory where a rank said no");
    this->next_collective(rank, 7);
    if (registry.trim() == 0) throw std::runtime_error("the next trim released nothing");
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "trim refused on this rank");
  this->expect_in_step();
}

// ------------------------------------------------------------------------------- agreed settings

// With agreed settings a local attach is collective: one rank attaching as symmetric while the others
// attach locally (NCCLPOOL_SGLANG_KIND on one rank only) fails on every rank, naming the kinds.
TYPED_TEST_P(Lockstep, AgreedSettingsMakeALocalAttachCollectiveAndCompareTheKind) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "settings");
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    auto world = this->world(rank);
    void* p = pool->allocate(MiB);
    const RegistrationKind kind = rank == 0 ? RegistrationKind::symmetric : RegistrationKind::local;
    at(step, rank) = caught([&] { registry.attach(world, kind); });
    if (registry.attached() != 0) throw std::runtime_error("attached although the kinds differ");
    this->next_collective(rank, 7);
    registry.attach(world, RegistrationKind::local);  // every rank alike: agrees, registers
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the agreed local attach registered nothing");
    pool->deallocate(p);
    registry.detach(*world);  // local: nothing collective
    this->next_collective(rank, 8);
  });
  this->expect_all_ok(errors);
  for (int r = 0; r < this->ranks(); ++r) {
    EXPECT_TRUE(has(at(step, r), "AgreementError")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "attach with different kinds")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "attached as local")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "attached as symmetric")) << listing(step);
  }
  EXPECT_TRUE(has(step[0], "this rank as symmetric with agreed settings 'kind=local'")) << listing(step);
  EXPECT_TRUE(has(step[1], "this rank as local")) << listing(step);
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, AgreedSettingsThatDifferFailTheAttachOnEveryRankNamingThisRanksText) {
  const int n = this->ranks();
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    const std::string settings = rank == n - 1 ? "debug=on" : "debug=off";
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, settings});
    at(step, rank) = caught([&] { registry.attach(this->world(rank), RegistrationKind::local); });
    if (registry.attached() != 0) throw std::runtime_error("attached although the settings differ");
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(has(at(step, r), "AgreementError")) << listing(step);
    EXPECT_TRUE(has(at(step, r), "agreed settings differ")) << listing(step);
    EXPECT_TRUE(has(at(step, r), r == n - 1 ? "'debug=on'" : "'debug=off'")) << listing(step);
  }
  this->expect_in_step();
}

// Another current device on one rank at a group's first use: that rank's "no" in the attach agreement.
TYPED_TEST_P(Lockstep, AnotherDeviceOnOneRankIsItsNoAtAnAgreedLocalAttach) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    auto world = this->world(rank);
    std::shared_ptr<Communicator> first = rank == 0 ? this->world_on_device(rank, 99) : world;
    at(step, rank) = caught([&] { registry.attach(first, RegistrationKind::local); });
    if (registry.attached() != 0) throw std::runtime_error("attached although a rank could not");
    this->next_collective(rank, 7);
    registry.attach(world, RegistrationKind::local);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(step[0], "is on device 99")) << listing(step);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(step, r), "voted no")) << listing(step);
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, VoteNoBeforeAnAgreedLocalAttachFailsItOnEveryRank) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    auto world = this->world(rank);
    if (rank == 0) registry.vote_no("out of memory before the first use");
    at(step, rank) = caught([&] { registry.attach(world, RegistrationKind::local); });
    this->next_collective(rank, 7);
    registry.attach(world, RegistrationKind::local);
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_rank0_voted_no(step, "out of memory before the first use");
  this->expect_in_step();
}

// Without agreed settings a local attach stays what it was: nothing collective, and the vote stays
// kept for the next collective step.
TYPED_TEST_P(Lockstep, ALocalAttachWithoutAgreedSettingsIsNotCollective) {
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->pool_on(rank, "votes");
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = this->world(rank);
    if (rank == 0) registry.vote_no("kept for a collective step");
    registry.attach(world, RegistrationKind::local);
    if (rank == 0 && !registry.voting_no()) throw std::runtime_error("a local attach took the vote");
    registry.detach(*world);
  });
  this->expect_all_ok(errors);
  this->expect_no_collective_calls();
  this->expect_in_step();
}

// ------------------------------------------------------------------------------- auto pools

TYPED_TEST_P(Lockstep, VoteNoOnAnAutoPoolFailsItsRoutesAgreementOnEveryRank) {
  auto step = this->slots(), commit = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto pool = this->auto_pool_on(rank);
    auto world = this->world(rank);
    void* large = pool->allocate(2 * MiB);
    if (rank == 0) pool->vote_no("a setting could not be read");
    at(step, rank) = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("attached although a rank said no");
    this->next_collective(rank, 7);
    pool->attach(world, std::nullopt);
    void* more = pool->allocate(4 * MiB);  // the symmetric part's next window, pending
    if (rank == 0) pool->vote_no("a second failure");
    at(commit, rank) = caught([&] { pool->commit(); });  // the symmetric part's agreement takes it
    this->next_collective(rank, 8);
    pool->commit();
    if (pool->handle_of(more, *world) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(more);
    pool->deallocate(large);
    pool->detach(*world);
  });
  this->expect_all_ok(errors);
  EXPECT_TRUE(has(step[0], "a setting could not be read")) << listing(step);
  for (int r = 1; r < this->ranks(); ++r) EXPECT_TRUE(has(at(step, r), "could not attach")) << listing(step);
  this->expect_rank0_voted_no(commit, "a second failure");
  this->expect_in_step();
}

TYPED_TEST_P(Lockstep, AutoPoolsWhoseAgreedSettingsDifferFailTheRoutesAgreement) {
  auto step = this->slots();
  const auto errors = this->on_ranks([&](int rank) {
    auto make_part = [this, rank](RegistrationKind part) {
      return deterministic_pool(this->window_source(rank), "auto/" + std::string(to_string(part)), 32 * MiB);
    };
    RegistryOptions options{CheckLevel::off};
    options.agreed_settings = rank == 0 ? "checks=collectives" : "checks=off";
    AutoPool pool("auto", make_part, builtin_routes(true), "set by the test", options);
    at(step, rank) = caught([&] { pool.attach(this->world(rank), std::nullopt); });
    this->next_collective(rank, 7);
  });
  this->expect_all_ok(errors);
  for (int r = 0; r < this->ranks(); ++r) EXPECT_TRUE(has(at(step, r), "agreed settings differ")) << listing(step);
  EXPECT_TRUE(has(step[0], "'checks=collectives'")) << listing(step);
  this->expect_in_step();
}

REGISTER_TYPED_TEST_SUITE_P(Lockstep, ALateFoundErrorIsEveryRanksErrorAtTheNextCommit, ALateFoundErrorIsEveryRanksErrorAtDetachAndTheCommunicatorStays,
                            AnAutoPoolWhoseProfileAppliesOnOneRankOnlyFailsTheAttachEverywhere,
                            AnAutoPoolsPartFailingItsCommitOnOneRankKeepsEveryRankInStep,
                            ALocalRegistrationRefusedOnOneRankFailsTheAutoAttachEverywhere,
                            AnOutOfMemoryOnOneRankIsEveryRanksErrorInLayoutCheckMode, VoteNoBeforeACommitFailsItOnEveryRankAndTheNextAgrees,
                            VoteNoBeforeAScheduledScopeEndFailsItOnEveryRank, AScopeFailedAtAnUnscheduledScopeEndVotesNoAtTheNextAgreementPoint,
                            VoteNoBeforeASymmetricAttachFailsItOnEveryRank, VoteNoBeforeADetachKeepsTheCommunicatorOnEveryRank,
                            VoteNoBeforeATrimReleasesNothingAnywhere, AgreedSettingsMakeALocalAttachCollectiveAndCompareTheKind,
                            AgreedSettingsThatDifferFailTheAttachOnEveryRankNamingThisRanksText,
                            AnotherDeviceOnOneRankIsItsNoAtAnAgreedLocalAttach, VoteNoBeforeAnAgreedLocalAttachFailsItOnEveryRank,
                            ALocalAttachWithoutAgreedSettingsIsNotCollective, VoteNoOnAnAutoPoolFailsItsRoutesAgreementOnEveryRank,
                            AutoPoolsWhoseAgreedSettingsDifferFailTheRoutesAgreement);

}  // namespace ncclpool::lockstep

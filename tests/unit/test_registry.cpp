// Registry rules on the simulator: ranks are threads, communicators are loopback groups.

#include <gtest/gtest.h>

#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"

#include <array>
#include <functional>
#include <random>
#include <thread>

namespace ncclpool {
namespace {

// ---------------------------------------------------------------- local registration

TEST(Registry, LocalAttachRegistersExistingThenNewSegments) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank(false);
  void* a = r.pool->allocate(3 * MiB);
  void* b = r.pool->allocate(3 * MiB);
  r.registry->attach(comm, RegistrationKind::local);
  EXPECT_EQ(group->live_registrations(), 2);
  void* c = r.pool->allocate(3 * MiB);  // growth registers at once
  EXPECT_EQ(group->live_registrations(), 3);
  EXPECT_NE(r.registry->handle_of(c, *comm), nullptr);
  EXPECT_NE(r.registry->handle_of(static_cast<char*>(b) + 100, *comm), nullptr);
  const auto found = r.registry->lookup(a);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->segment.sequence, 0u);
  ASSERT_EQ(found->registrations.size(), 1u);
  EXPECT_EQ(found->registrations[0].kind, RegistrationKind::local);
  const auto s = r.registry->stats(*comm);
  EXPECT_EQ(s.registrations, 3u);
  EXPECT_EQ(s.bytes_registered, 12 * MiB);
  EXPECT_EQ(s.pending, 0u);
  r.registry->check_invariants();
  for (void* p : {a, b, c}) r.pool->deallocate(p);
  EXPECT_EQ(r.pool->trim(), 12 * MiB);  // local registrations go first, then the memory
  EXPECT_EQ(group->live_registrations(), 0);
  r.registry->check_invariants();
}

TEST(Registry, SteadyStateRegistersNothingAndOnlyJoinsTheAgreement) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank();
  r.registry->attach(comm, RegistrationKind::symmetric);
  void* a = r.pool->allocate(MiB);
  r.registry->commit();
  const auto calls = group->collective_calls();
  for (int i = 0; i < 100; ++i) {
    Scope scope(*r.registry);
    r.pool->deallocate(a);
    a = r.pool->allocate(MiB);
    scope.close();
  }
  // Scheduled scope ends (the first 16, then every 16th: 0..15, 16, 32, 48, 64, 80, 96) are
  // agreement points: one all-gather each, enqueued without waiting, and no registration.
  EXPECT_EQ(group->collective_calls(), calls + 22) << "a scheduled use with nothing new joins exactly one agreement";
  const CommunicatorStats s = r.registry->stats(*comm);
  EXPECT_EQ(s.registrations, 1u);
  EXPECT_EQ(s.agreements_waited, 2u) << "only attach and the first commit waited";
  EXPECT_LE(s.agreements_in_flight, 16u);
  r.pool->deallocate(a);
  r.registry->detach(*comm);
}

// A window for a segment made after the first scope_period scope ends waits for the next scheduled
// one, on every rank; meanwhile unscheduled scope ends start nothing collective.
TEST(Registry, ScopeEndsAgreeOnASchedule) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank(true, 2 * MiB, 0, "ncclpool", RegistryOptions{.check = CheckLevel::off, .scope_period = 4});
  r.registry->attach(comm, RegistrationKind::symmetric);
  auto use = [&](std::size_t bytes) {
    Scope scope(*r.registry);
    void* p = bytes ? r.pool->allocate(bytes) : nullptr;
    scope.close();
    return p;
  };
  const auto calls = group->collective_calls();
  for (int i = 0; i < 4; ++i) use(0);  // scope ends 0..3: each agrees
  EXPECT_EQ(group->collective_calls(), calls + 4);
  void* grown = use(8 * MiB);  // scope end 4: scheduled (4 % 4 == 0), the window comes at once
  EXPECT_EQ(r.registry->pending(), 0u);
  void* later = use(64 * MiB);  // scope end 5: not scheduled, the segment waits
  EXPECT_EQ(r.registry->pending(), 1u);
  EXPECT_EQ(group->collective_calls(), calls + 4 + 2) << "scope end 4: agreement + window; scope end 5: nothing collective";
  use(0);
  use(0);  // scope ends 6, 7
  EXPECT_EQ(r.registry->pending(), 1u);
  EXPECT_EQ(r.registry->scope_ends(), 8u);
  EXPECT_EQ(r.registry->next_committing_scope_end(), 8u);
  use(0);  // scope end 8: scheduled
  EXPECT_EQ(r.registry->pending(), 0u);
  EXPECT_EQ(r.registry->next_committing_scope_end(), 12u);
  EXPECT_EQ(r.registry->scope_period(), 4u);
  EXPECT_EQ(group->collective_calls(), calls + 6 + 2) << "scope end 8: agreement + window";
  r.registry->check_invariants();
  r.pool->deallocate(grown);
  r.pool->deallocate(later);
  r.registry->detach(*comm);
}

// Local registrations need no agreement: one that a capture left pending is made at the next scope
// end, scheduled or not, while windows made beside it wait for a scheduled one.
TEST(Registry, UnscheduledScopeEndsRegisterWhatACaptureLeftLocal) {
  auto world = std::make_shared<LoopbackGroup>("world", 1);
  auto dp = std::make_shared<LoopbackGroup>("dp", 1);
  auto symmetric = std::make_shared<LoopbackCommunicator>(world, 0);
  auto local = std::make_shared<LoopbackCommunicator>(dp, 0);
  Rank r = make_rank(true, 2 * MiB, 0, "ncclpool", RegistryOptions{.check = CheckLevel::off, .scope_period = 4});
  r.registry->attach(symmetric, RegistrationKind::symmetric);
  r.registry->attach(local, RegistrationKind::local);
  for (int i = 0; i < 5; ++i) Scope(*r.registry).close();  // scope ends 0..4; the next (5) is not scheduled
  r.source->sim_ordering().set_capturing(true);
  void* p = nullptr;
  {
    Scope scope(*r.registry);
    p = r.pool->allocate(MiB);
    scope.close();  // scope end 5, under capture: nothing
  }
  EXPECT_EQ(r.registry->stats(*local).pending, 1u);
  EXPECT_EQ(r.registry->stats(*symmetric).pending, 1u);
  r.source->sim_ordering().set_capturing(false);
  Scope(*r.registry).close();  // scope end 6: not scheduled
  EXPECT_EQ(r.registry->stats(*local).pending, 0u) << "a local registration needs no agreement";
  EXPECT_EQ(dp->live_registrations(), 1);
  EXPECT_EQ(r.registry->stats(*symmetric).pending, 1u) << "the window waits for scope end 8";
  Scope(*r.registry).close();  // 7
  Scope(*r.registry).close();  // 8: scheduled
  EXPECT_EQ(r.registry->pending(), 0u);
  r.registry->check_invariants();
  r.pool->deallocate(p);
  r.registry->detach(*local);
  r.registry->detach(*symmetric);
}

TEST(Registry, ScopePeriodOneAndCheckModeAgreeAtEveryScopeEnd) {
  for (const RegistryOptions& options : {RegistryOptions{.check = CheckLevel::off, .scope_period = 1}, RegistryOptions{.check = CheckLevel::layout}}) {
    auto group = std::make_shared<LoopbackGroup>("world", 1);
    auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
    Rank r = make_rank(true, 2 * MiB, 0, "ncclpool", options);
    r.registry->attach(comm, RegistrationKind::symmetric);
    const auto calls = group->collective_calls();
    for (int i = 0; i < 40; ++i) Scope(*r.registry).close();
    EXPECT_EQ(group->collective_calls(), calls + 40);
    r.registry->detach(*comm);
  }
  EXPECT_THROW(Registry(make_rank().pool, RegistryOptions{.check = CheckLevel::off, .scope_period = 0}), InvalidArgument);
}

TEST(Registry, BadAttachesAreClearErrors) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank plain = make_rank(/*deterministic=*/false);
  try {
    plain.registry->attach(comm, RegistrationKind::symmetric);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("deterministic"), std::string::npos) << e.what();
  }
  plain.registry->attach(comm, RegistrationKind::local);
  auto same = std::make_shared<LoopbackCommunicator>(group, 0);  // another wrapper of the same comm
  EXPECT_THROW(plain.registry->attach(same, RegistrationKind::local), InvalidArgument);
  auto other_device = std::make_shared<LoopbackCommunicator>(std::make_shared<LoopbackGroup>("x", 1), 0, /*device=*/1);
  try {
    plain.registry->attach(other_device, RegistrationKind::local);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plain.registry->attach(nullptr, RegistrationKind::local), InvalidArgument);
  EXPECT_THROW(plain.registry->detach(*other_device), InvalidArgument);
  EXPECT_THROW(plain.registry->forget(*other_device), InvalidArgument);

  // A source that cannot back windows is a configuration error naming the sources to use.
  SimSourceConfig sc;
  sc.window_capable = false;
  PoolConfig pc;
  pc.deterministic = true;
  Registry cudamalloc_like(std::make_shared<Pool>(std::make_shared<SimSource>(sc), pc));
  try {
    cudamalloc_like.attach(std::make_shared<LoopbackCommunicator>(std::make_shared<LoopbackGroup>("y", 1), 0), RegistrationKind::symmetric);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("`nccl` source"), std::string::npos) << e.what();
  }
  plain.registry->detach(*comm);
}

TEST(Registry, FailedLocalRegistrationRollsTheSegmentBack) {
  auto g1 = std::make_shared<LoopbackGroup>("a", 1);
  auto g2 = std::make_shared<LoopbackGroup>("b", 1);
  auto c1 = std::make_shared<LoopbackCommunicator>(g1, 0);
  auto c2 = std::make_shared<LoopbackCommunicator>(g2, 0);
  Rank r = make_rank(false);
  r.registry->attach(c1, RegistrationKind::local);
  r.registry->attach(c2, RegistrationKind::local);
  g2->inject_failure(LoopbackOp::register_local, 0, 1);
  try {
    (void)r.pool->allocate(MiB);
    FAIL();
  } catch (const RegistrationError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("loopback comm 'b'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("segment 0"), std::string::npos) << msg;
  }
  EXPECT_EQ(g1->live_registrations(), 0) << "the registration with 'a' was undone";
  EXPECT_EQ(r.pool->stats().segment_count, 0u);
  EXPECT_EQ(r.source->live_segments(), 0u);
  r.registry->check_invariants();
  void* p = r.pool->allocate(MiB);  // works again
  EXPECT_EQ(g1->live_registrations(), 1);
  EXPECT_EQ(g2->live_registrations(), 1);
  r.pool->deallocate(p);
  r.registry->detach(*c1);
  r.registry->detach(*c2);
  EXPECT_EQ(g1->live_registrations() + g2->live_registrations(), 0);
}

TEST(Registry, CaptureDefersLocalRegistrationAndRefusesCommit) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank(false);
  r.registry->attach(comm, RegistrationKind::local);
  r.source->sim_ordering().set_capturing(true);
  void* p = r.pool->allocate(MiB);
  EXPECT_EQ(group->live_registrations(), 0) << "nothing is registered during capture";
  EXPECT_EQ(r.registry->pending(), 1u);
  EXPECT_THROW(r.registry->commit(), InvalidState);
  r.registry->check_invariants();
  r.source->sim_ordering().set_capturing(false);
  r.registry->commit();
  EXPECT_EQ(group->live_registrations(), 1);
  r.pool->deallocate(p);
  r.registry->detach(*comm);
}

TEST(Registry, SegmentsCreatedDuringCaptureAreCountedForEveryCommunicator) {
  // What a captured collective on such a segment misses (its window) must be visible in the stats.
  auto world = std::make_shared<LoopbackGroup>("world", 1);
  auto dp = std::make_shared<LoopbackGroup>("dp", 1);
  auto sym = std::make_shared<LoopbackCommunicator>(world, 0);
  auto local = std::make_shared<LoopbackCommunicator>(dp, 0);
  Rank r = make_rank(true, 64 * MiB);
  r.registry->attach(sym, RegistrationKind::symmetric);
  r.registry->attach(local, RegistrationKind::local);
  void* before = r.pool->allocate(MiB);  // a chunk with room, created outside capture
  r.registry->commit();
  r.source->sim_ordering().set_capturing(true);
  void* carved = r.pool->allocate(MiB);        // from the committed chunk: has its window
  void* grown = r.pool->allocate(128 * MiB);   // a new segment: no window until after the capture
  EXPECT_EQ(r.registry->stats(*sym).segments_created_in_capture, 1u);
  EXPECT_EQ(r.registry->stats(*local).segments_created_in_capture, 1u);
  EXPECT_NE(r.registry->handle_of(carved, *sym), nullptr);
  EXPECT_EQ(r.registry->handle_of(grown, *sym), nullptr);
  r.source->sim_ordering().set_capturing(false);
  r.registry->commit();
  EXPECT_NE(r.registry->handle_of(grown, *sym), nullptr);
  EXPECT_EQ(r.registry->stats(*sym).segments_created_in_capture, 1u) << "a count of what happened, not a state";
  for (void* p : {before, carved, grown}) r.pool->deallocate(p);
  r.registry->detach(*sym);
  r.registry->detach(*local);
}

TEST(Registry, ForgetDropsHandlesWithoutCallingTheCommunicator) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank(false);
  void* p = r.pool->allocate(MiB);
  r.registry->attach(comm, RegistrationKind::local);
  r.registry->forget(*comm);
  EXPECT_EQ(group->live_registrations(), 1) << "no deregistration call was made";
  EXPECT_EQ(r.registry->attached(), 0u);
  r.registry->check_invariants();
  r.pool->deallocate(p);
  r.pool->trim();
  EXPECT_EQ(group->live_registrations(), 1);
}

TEST(Registry, ScopeCommitsOnCloseOnlyAndNests) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank();
  r.registry->attach(comm, RegistrationKind::symmetric);
  EXPECT_EQ(current_scope(), nullptr);
  void* p = nullptr;
  {
    Scope outer(*r.registry);
    EXPECT_EQ(current_scope(), &outer);
    {
      Scope inner(*r.registry);
      EXPECT_EQ(current_scope(), &inner);
      p = r.pool->allocate(MiB);
    }  // destroyed without close(): no commit
    EXPECT_EQ(current_scope(), &outer);
    EXPECT_EQ(r.registry->pending(), 1u);
    outer.close();
    EXPECT_EQ(r.registry->pending(), 0u);
    EXPECT_THROW(outer.close(), InvalidState);
  }
  EXPECT_EQ(current_scope(), nullptr);
  r.pool->deallocate(p);
  r.registry->detach(*comm);
}

// ---------------------------------------------------------------- symmetric, multi-rank

TEST(Symmetric, CommitRegistersWindowsInCreationOrderOnEveryRank) {
  constexpr int kRanks = 4;
  auto group = std::make_shared<LoopbackGroup>("world", kRanks);
  std::vector<Rank> ranks;
  for (int i = 0; i < kRanks; ++i) ranks.push_back(make_rank());
  const auto errors = on_ranks(kRanks, [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    void* early = r.pool->allocate(3 * MiB);  // exists before attach
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    EXPECT_NE(r.registry->handle_of(early, *comm), nullptr);
    void* a = r.pool->allocate(5 * MiB);
    EXPECT_EQ(r.registry->handle_of(a, *comm), nullptr) << "pending until commit";
    EXPECT_FALSE(r.pool->trim()) << "pending windows are not trimmed";
    r.registry->commit();
    EXPECT_NE(r.registry->handle_of(a, *comm), nullptr);
    r.registry->check_invariants();
    r.pool->deallocate(a);
    r.pool->deallocate(early);
    EXPECT_EQ(r.pool->trim(), 0u) << "windowed segments are released only collectively";
    EXPECT_EQ(r.registry->trim(), 10 * MiB);
    r.registry->check_invariants();
    r.registry->detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(Symmetric, ExtraSegmentOnOneRankFailsOnEveryRankNamingIt) {
  constexpr int kRanks = 4;
  auto group = std::make_shared<LoopbackGroup>("world", kRanks, 3s);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>&, int rank) {
    (void)r.pool->allocate(3 * MiB);
    if (rank == 3) (void)r.pool->allocate(3 * MiB);  // diverges
    r.registry->commit();
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::string& e = errors[static_cast<std::size_t>(rank)];
    EXPECT_NE(e.find("ranks disagree at commit"), std::string::npos) << rank << ": " << e;
    EXPECT_NE(e.find("ranks 0,1,2: pool 'ncclpool' (attachment #0), commit #1: 1 segment(s)"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 3: pool 'ncclpool' (attachment #0), commit #1: 2 segment(s)"), std::string::npos) << e;
  }
  EXPECT_EQ(group->live_registrations(), 0) << "nothing was registered";
}

TEST(Symmetric, MissingRankEndsInAnErrorNotAHang) {
  constexpr int kRanks = 3;
  auto group = std::make_shared<LoopbackGroup>("world", kRanks, 300ms);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    (void)r.pool->allocate(MiB);
    if (rank != 2) r.registry->commit();  // rank 2 never gets there (it died, or its program differs)
    r.registry->forget(*comm);
  });
  EXPECT_EQ(errors[2], "");
  for (int rank : {0, 1}) {
    EXPECT_NE(errors[static_cast<std::size_t>(rank)].find("timed out"), std::string::npos) << errors[static_cast<std::size_t>(rank)];
    EXPECT_NE(errors[static_cast<std::size_t>(rank)].find("ranks 2 never made it"), std::string::npos) << errors[static_cast<std::size_t>(rank)];
  }
}

TEST(Symmetric, FailedWindowRegistrationLeavesTheSegmentPending) {
  constexpr int kRanks = 2;
  auto group = std::make_shared<LoopbackGroup>("world", kRanks);
  std::vector<Rank> ranks;
  for (int i = 0; i < kRanks; ++i) ranks.push_back(make_rank());
  group->inject_failure(LoopbackOp::register_window, 1, 2);  // the second window registration
  const auto errors = on_ranks(kRanks, [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    void* a = r.pool->allocate(3 * MiB);
    void* b = r.pool->allocate(3 * MiB);
    try {
      r.registry->commit();
      ADD_FAILURE() << "expected RegistrationError";
    } catch (const RegistrationError& e) {
      EXPECT_NE(std::string(e.what()).find("segment 1"), std::string::npos) << e.what();
    }
    EXPECT_NE(r.registry->handle_of(a, *comm), nullptr);
    EXPECT_EQ(r.registry->handle_of(b, *comm), nullptr);
    EXPECT_EQ(r.registry->pending(), 1u);
    r.registry->check_invariants();
    r.registry->commit();  // retried: registers the rest
    EXPECT_NE(r.registry->handle_of(b, *comm), nullptr);
    r.pool->deallocate(a);
    r.pool->deallocate(b);
    r.registry->detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

// ---------------------------------------------------------------- randomized, FSDP+EP shaped

// 4 ranks, 3 groups: world (symmetric), dp = {0,1},{2,3} (local), ep = {0,2},{1,3} (symmetric).
// Every rank runs the same random sequence (same seed), as SPMD programs do; faults are injected on
// every rank alike. The invariant checker runs after every step. Each seed runs with strict matching
// and with NCCL-like matching (calls pair by position unchecked), where a collective made by some
// ranks only would surface as garbage instead of a clean mismatch.
class RandomRegistry : public ::testing::TestWithParam<std::tuple<unsigned, LoopbackMatching>> {};

TEST_P(RandomRegistry, InvariantsHoldAndRegistrationsCountBackToZero) {
  constexpr int kRanks = 4;
  constexpr int kGenerations = 8;  // a forgotten (aborted) group is replaced by a new one
  auto make_groups = [](const std::string& name, int count, int size) {
    std::vector<std::vector<std::shared_ptr<LoopbackGroup>>> out(static_cast<std::size_t>(count));
    for (auto& gens : out)
      for (int g = 0; g < kGenerations; ++g)
        gens.push_back(std::make_shared<LoopbackGroup>(name + std::to_string(g), size, 10s, std::get<1>(GetParam())));
    return out;
  };
  auto world = make_groups("world", 1, 4);
  auto dp = make_groups("dp", 2, 2);
  auto ep = make_groups("ep", 2, 2);
  std::vector<Rank> ranks;
  // A short scope period, so that the sequence passes scheduled and unscheduled scope ends alike.
  for (int i = 0; i < kRanks; ++i)
    ranks.push_back(make_rank(true, (std::get<0>(GetParam()) % 2) ? 2 * MiB : 8 * MiB, 0, "ncclpool",
                              RegistryOptions{.check = CheckLevel::off, .scope_period = 3}));

  std::array<int, 2> final_dp_generation{};
  const auto errors = on_ranks(kRanks, [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    struct Slot {
      std::vector<std::shared_ptr<LoopbackGroup>>* gens;
      int member;
      RegistrationKind kind;
      int generation = 0;
      std::shared_ptr<LoopbackCommunicator> comm;
    };
    std::vector<Slot> slots = {{&world[0], rank, RegistrationKind::symmetric, 0, nullptr},
                               {&dp[static_cast<std::size_t>(rank / 2)], rank % 2, RegistrationKind::local, 0, nullptr},
                               {&ep[static_cast<std::size_t>(rank % 2)], rank / 2, RegistrationKind::symmetric, 0, nullptr}};
    auto comm_of = [](Slot& s) {
      return std::make_shared<LoopbackCommunicator>((*s.gens)[static_cast<std::size_t>(s.generation)], s.member);
    };
    std::mt19937_64 rng(std::get<0>(GetParam()));  // the same on every rank
    std::vector<void*> live;
    for (int step = 0; step < 250; ++step) {
      const auto op = rng() % 100;
      const std::size_t pick = rng();
      if (op < 40) {
        const bool fault = rng() % 15 == 0;
        if (fault) (*slots[1].gens)[static_cast<std::size_t>(slots[1].generation)]->inject_failure(LoopbackOp::register_local, slots[1].member, 1);
        try {
          live.push_back(r.pool->allocate(1 + pick % (5 * MiB), pick % 3));
        } catch (const RegistrationError&) {
          // every rank fails alike (the dp comm refused); the pool rolled back
        }
        if (fault) (*slots[1].gens)[static_cast<std::size_t>(slots[1].generation)]->inject_failure(LoopbackOp::register_local, slots[1].member, 1000000);
      } else if (op < 65 && !live.empty()) {
        const std::size_t k = pick % live.size();
        r.pool->deallocate(live[k]);
        live.erase(live.begin() + static_cast<long>(k));
      } else if (op < 70) {
        r.registry->commit();
      } else if (op < 78) {
        Scope scope(*r.registry);  // a use: allocate inside, then a scope end (commits on the schedule)
        if (pick % 2) live.push_back(r.pool->allocate(1 + pick % (3 * MiB), pick % 3));
        scope.close();
      } else if (op < 84) {
        r.registry->trim();
      } else if (op < 87) {
        r.pool->trim();  // non-collective: may only release segments without windows
      } else {
        Slot& s = slots[pick % slots.size()];
        if (!s.comm) {
          s.comm = comm_of(s);
          r.registry->attach(s.comm, s.kind);
        } else if (op < 96 || s.kind == RegistrationKind::symmetric) {
          r.registry->detach(*s.comm);
          s.comm.reset();
        } else {
          r.registry->forget(*s.comm);  // as after an abort: that group is gone, use a new one
          s.comm.reset();
          ++s.generation;
        }
      }
      r.registry->check_invariants();
      r.pool->check_invariants();
    }
    for (void* p : live) r.pool->deallocate(p);
    for (Slot& s : slots)
      if (s.comm) r.registry->detach(*s.comm);
    EXPECT_EQ(r.registry->attached(), 0u);
    r.registry->check_invariants();
    if (rank % 2 == 0) final_dp_generation[static_cast<std::size_t>(rank / 2)] = slots[1].generation;
  });
  for (int i = 0; i < kRanks; ++i) EXPECT_EQ(errors[static_cast<std::size_t>(i)], "") << "rank " << i;
  // Every group that was not forgotten counts back to zero (forgotten ones keep what they had,
  // as an aborted NCCL communicator would).
  EXPECT_GT(world[0][0]->collective_calls(), 20u) << "the sequence exercised windows and agreements";
  EXPECT_EQ(world[0][0]->live_registrations(), 0);
  EXPECT_EQ(ep[0][0]->live_registrations(), 0);
  EXPECT_EQ(ep[1][0]->live_registrations(), 0);
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_EQ(dp[i][static_cast<std::size_t>(final_dp_generation[i])]->live_registrations(), 0) << "dp group " << i;
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomRegistry,
                         ::testing::Combine(::testing::Values(11u, 12u, 13u, 14u),
                                            ::testing::Values(LoopbackMatching::strict, LoopbackMatching::nccl)));

}  // namespace
}  // namespace ncclpool

// "No silent corruption" on the simulator: every mismatch between ranks ends in an error on every
// rank, never a hang, never wrong data. Most groups use LoopbackMatching::nccl, which pairs calls by
// position unchecked as NCCL does, so what a GPU would hide is visible here too.

#include <gtest/gtest.h>

#include <ncclpool/loopback.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/ncclpool.h>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace ncclpool {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs body; if it throws, forgets comm before passing the error on (the registry must not outlive a
// failed rank with a communicator still attached: its destructor would report it).
template <class Body>
void forget_if_it_throws(Rank& r, const Communicator& comm, Body&& body) {
  try {
    body();
  } catch (...) {
    r.registry->forget(comm);
    throw;
  }
}

std::shared_ptr<LoopbackGroup> nccl_like(const std::string& name, int size, std::chrono::milliseconds timeout = 2s) {
  return std::make_shared<LoopbackGroup>(name, size, timeout, LoopbackMatching::nccl);
}

// ---------------------------------------------------------------- the simulator itself

TEST(LoopbackNcclMatching, ASkippedCollectivePairsWithTheNextOneSilently) {
  auto group = nccl_like("world", 2);
  std::vector<AgreementRecord> seen;
  const auto errors = on_ranks(2, [&](int rank) {
    LoopbackCommunicator comm(group, rank);
    if (rank == 0) {
      AgreementRecord mine;
      mine.words[0] = 42;
      seen = comm.all_gather(mine);  // pairs with rank 1's application collective
    } else {
      comm.user_collective(7);  // no error here: NCCL would not say anything either
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].words[0], 7u) << "rank 0 read rank 1's unrelated data as its record";
}

TEST(LoopbackNcclMatching, StrictMatchingFailsBothRanksInstead) {
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2s);
  const auto errors = on_ranks(2, [&](int rank) {
    LoopbackCommunicator comm(group, rank);
    if (rank == 0) (void)comm.all_gather(AgreementRecord{});
    else comm.user_collective(7);
  });
  EXPECT_TRUE(contains(errors[0], "does not match")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "does not match")) << errors[1];
}

TEST(LoopbackNcclMatching, AnAllGatherStartsWithoutWaiting) {
  auto group = nccl_like("world", 2);
  LoopbackCommunicator rank0(group, 0), rank1(group, 1);
  auto pending = rank0.start_all_gather(AgreementRecord{});
  EXPECT_FALSE(pending->ready());
  auto other = rank1.start_all_gather(AgreementRecord{});
  EXPECT_TRUE(pending->ready());
  EXPECT_EQ(pending->wait().size(), 2u);
  EXPECT_EQ(other->wait().size(), 2u);
}

// ---------------------------------------------------------------- item 2: a rank with nothing pending

TEST(Agreement, ARankWithNothingPendingJoinsWithoutWaitingAndLearnsOfTheMismatchLater) {
  auto group = nccl_like("world", 2);
  std::atomic<int> stage{0};
  std::string later_error;
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    if (rank == 0) (void)r.pool->allocate(MiB);  // rank 0 grows, rank 1 reuses what it has
    if (rank == 0) std::this_thread::sleep_for(50ms);  // rank 1's commit returns before rank 0's record exists
    std::string commit_error;
    try {
      r.registry->commit();
    } catch (const AgreementError& e) {
      commit_error = e.what();
    }
    if (rank == 0 && !contains(commit_error, "ranks disagree at commit #1")) throw std::runtime_error("rank 0: " + commit_error);
    if (rank == 1 && !commit_error.empty()) throw std::runtime_error("rank 1 should not have waited: " + commit_error);
    // Both go on to an application collective: it must pair with the other's, not with a stray
    // agreement all-gather (which would silently corrupt it on a GPU).
    comm->user_collective(1234);
    if (rank == 1) {
      try {
        r.registry->commit();  // the next agreement point reports the earlier mismatch
      } catch (const AgreementError& e) {
        later_error = e.what();
      }
    } else {
      try {
        r.registry->commit();  // rank 0 still has its segment pending: fails again, consistently
      } catch (const AgreementError&) {
      }
    }
    r.registry->check_invariants();
    r.registry->forget(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(later_error, "ranks disagree at commit #1")) << later_error;
  EXPECT_TRUE(contains(later_error, "found after the fact")) << later_error;
  EXPECT_TRUE(contains(later_error, "rank 0: pool 'ncclpool' (attachment #0), commit #1: 1 segment(s)")) << later_error;
  EXPECT_TRUE(contains(later_error, "rank 1: pool 'ncclpool' (attachment #0), commit #1: 0 segment(s)")) << later_error;
  EXPECT_FALSE(group->broken());
}

// A scope opening never throws (whether the earlier result has arrived is timing, and a rank whose
// scope did not open would count one scope end fewer from then on): the mismatch it finds is that
// rank's "no" at the next agreement point, where every rank fails together.
TEST(Agreement, AMismatchFoundAtAScopeOpeningIsThatRanksNoAtItsNextAgreementPoint) {
  auto group = nccl_like("world", 2);
  std::array<std::string, 2> scope_errors;
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    if (rank == 0) (void)r.pool->allocate(MiB);
    if (rank == 0) std::this_thread::sleep_for(50ms);  // rank 1's commit returns before rank 0's record exists
    try {
      r.registry->commit();
    } catch (const AgreementError&) {
    }
    comm->user_collective();  // by now rank 0 has sent its record
    Scope scope(*r.registry);  // rank 1 finds the mismatch here: no throw
    EXPECT_EQ(current_scope(), &scope);
    try {
      scope.close();  // a scheduled scope end: rank 1 votes no, rank 0 (still pending) waits and sees it
    } catch (const AgreementError& e) {
      scope_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->open_scopes(), 0);
    comm->user_collective(77);  // pairs with the other rank's: no stray agreement
    r.registry->forget(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(scope_errors[1], "ranks disagree at commit #1")) << scope_errors[1];
  EXPECT_TRUE(contains(scope_errors[1], "found after the fact")) << scope_errors[1];
  EXPECT_TRUE(contains(scope_errors[0], "ranks disagree at commit #2")) << scope_errors[0];
  EXPECT_TRUE(contains(scope_errors[0], "rank 1: pool 'ncclpool' (attachment #0), commit #2: voted no")) << scope_errors[0];
  EXPECT_FALSE(group->broken());
}

// ---------------------------------------------------------------- lockstep: local failures are votes

// An exception inside a scope on one rank: the scope end still counts there (a scope destroyed without
// close() ends as close_after_error), and at a scheduled one that rank votes no, so the other rank's
// agreement is answered and fails, and both keep one schedule.
TEST(Lockstep, AScopeLeftByAnExceptionStillCountsAndVotesNo) {
  auto group = nccl_like("world", 2);
  std::array<std::string, 2> close_errors;
  std::array<std::uint64_t, 2> ends{};
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    try {
      Scope scope(*r.registry);
      (void)r.pool->allocate(MiB);  // both grow: a window pending on both ranks
      if (rank == 1) throw std::runtime_error("the application failed inside the scope");
      scope.close();
    } catch (const AgreementError& e) {
      close_errors[static_cast<std::size_t>(rank)] = e.what();
    } catch (const std::runtime_error&) {
    }
    ends[static_cast<std::size_t>(rank)] = r.registry->scope_ends();
    EXPECT_EQ(r.registry->stats(*comm).registered_segments, 0u) << "nobody registers where a rank said no";
    comm->user_collective(5);  // pairs with the other rank's
    // The next scope end agrees again, on both ranks, and registers the window.
    Scope again(*r.registry);
    again.close();
    EXPECT_EQ(r.registry->stats(*comm).registered_segments, 1u);
    r.registry->check_invariants();
    r.registry->detach(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(ends[0], 1u);
  EXPECT_EQ(ends[1], 1u);
  EXPECT_TRUE(contains(close_errors[0], "voted no")) << close_errors[0];
  EXPECT_EQ(group->live_registrations(), 0);
}

// commit_after_error: the commit a rank would have made, made voting no on its error path.
TEST(Lockstep, ACommitOnAnErrorPathVotesNoInsteadOfSkipping) {
  auto group = nccl_like("world", 2);
  std::string commit_error;
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    (void)r.pool->allocate(MiB);
    if (rank == 1) {
      r.registry->commit_after_error();  // never throws
    } else {
      try {
        r.registry->commit();
      } catch (const AgreementError& e) {
        commit_error = e.what();
      }
    }
    EXPECT_EQ(r.registry->pending(), 1u);
    comm->user_collective(9);
    r.registry->commit();  // both again: now it registers
    EXPECT_EQ(r.registry->pending(), 0u);
    r.registry->detach(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(commit_error, "rank 1: pool 'ncclpool' (attachment #0), commit #1: voted no")) << commit_error;
  EXPECT_EQ(group->live_registrations(), 0);
}

// A check that fails on one rank only (here: its pool cannot back windows) is that rank's no in the
// attach agreement: both ranks fail at attach, neither is left waiting or attached.
TEST(Lockstep, ASymmetricAttachRefusedOnOneRankFailsOnEveryRank) {
  auto group = nccl_like("world", 2);
  std::array<std::string, 2> attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    Rank r = make_rank(/*deterministic=*/rank == 0);
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      r.registry->attach(comm, RegistrationKind::symmetric);
    } catch (const Error& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->attached(), 0u);
    comm->user_collective(3);  // pairs with the other rank's
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(attach_errors[1], "needs a deterministic pool")) << attach_errors[1];
  EXPECT_TRUE(contains(attach_errors[0], "ranks disagree at attach #0")) << attach_errors[0];
  EXPECT_TRUE(contains(attach_errors[0], "voted no")) << attach_errors[0];
}

// NCCL >= 2.29 gives a communicator without symmetric support no window (NULL); 2.28 its local
// registration. "No window" must be agreed: a rank without windows says no at the attach, and every
// rank fails there, instead of one rank registering windows that another does not.
TEST(Lockstep, ARankWithoutSymmetricMemoryFailsTheAttachOnEveryRank) {
  auto group = nccl_like("world", 2);
  group->set_windows_supported(1, false);
  std::array<std::string, 2> attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    Rank r = make_rank();
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    (void)r.pool->allocate(MiB);  // a segment to register
    try {
      r.registry->attach(comm, RegistrationKind::symmetric);
    } catch (const Error& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->attached(), 0u);
    comm->user_collective(4);  // pairs with the other rank's
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(attach_errors[1], "cannot register windows")) << attach_errors[1];
  EXPECT_TRUE(contains(attach_errors[0], "rank 1: pool 'ncclpool' (attachment #0), attach #0: voted no")) << attach_errors[0];
  EXPECT_EQ(group->live_registrations(), 0);
}

// Ranks whose scope periods differ would agree at different scope ends: the attach says so.
TEST(Lockstep, RanksWithOtherScopePeriodsFailAtAttach) {
  auto group = nccl_like("world", 2);
  std::array<std::string, 2> attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    Rank r = make_rank(true, 2 * MiB, 0, "ncclpool", RegistryOptions{CheckLevel::off, rank == 0 ? 16u : 8u});
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      r.registry->attach(comm, RegistrationKind::symmetric);
    } catch (const AgreementError& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (const auto& e : attach_errors) {
    EXPECT_TRUE(contains(e, "scope period 16")) << e;
    EXPECT_TRUE(contains(e, "scope period 8")) << e;
    EXPECT_TRUE(contains(e, "scope periods differ")) << e;
  }
}

// A mismatch found late at detach: the late rank votes no there, so every rank keeps the
// communicator and its windows (nobody deregisters alone), and a second detach succeeds on both.
TEST(Lockstep, AMismatchFoundLateAtDetachKeepsTheCommunicatorOnEveryRank) {
  auto group = nccl_like("world", 2);
  std::array<std::string, 2> detach_errors;
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    if (rank == 0) (void)r.pool->allocate(MiB);
    if (rank == 0) std::this_thread::sleep_for(50ms);
    try {
      r.registry->commit();  // rank 0 fails now; rank 1 enqueues and hears of it at detach
    } catch (const AgreementError&) {
    }
    try {
      r.registry->detach(*comm);
    } catch (const AgreementError& e) {
      detach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->attached(), 1u);
    r.registry->detach(*comm);  // the mismatch was reported once: now both agree
    EXPECT_EQ(r.registry->attached(), 0u);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(contains(detach_errors[1], "found after the fact")) << detach_errors[1];
  EXPECT_TRUE(contains(detach_errors[0], "detach #2")) << detach_errors[0];
  EXPECT_TRUE(contains(detach_errors[0], "voted no")) << detach_errors[0];
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(Agreement, ARankThatSkipsAnAgreementPointAltogetherIsNamedByTheOthers) {
  // Not ncclpool's doing (the program differs across ranks), but on NCCL the agreement all-gather of
  // rank 0 pairs with rank 1's application collective: rank 0 must say so rather than go on.
  auto group = nccl_like("world", 2);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    (void)r.pool->allocate(MiB);
    if (rank == 0) r.registry->commit();
    else comm->user_collective(5);
  });
  EXPECT_TRUE(contains(errors[0], "not an ncclpool agreement")) << errors[0];
}

TEST(Agreement, AMissingRankIsATimeoutOnTheWaitingRanksAndTheGroupIsBroken) {
  auto group = nccl_like("world", 2, 300ms);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    (void)r.pool->allocate(MiB);
    if (rank == 0) {
      try {
        r.registry->commit();
      } catch (const AgreementError& e) {
        if (!contains(e.what(), "timed out")) throw;
      }
      // Later calls fail at once instead of queueing behind the stuck collective.
      try {
        r.registry->commit();
        throw std::runtime_error("commit on a broken group succeeded");
      } catch (const AgreementError& e) {
        if (!contains(e.what(), "broken")) throw;
      }
    }
    r.registry->forget(*comm);  // what a program does after aborting the communicator
    r.registry->check_invariants();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// ---------------------------------------------------------------- item 1: pools told apart

void two_pools_committed_in_opposite_orders(const std::string& name_a, const std::string& name_b) {
  auto group = nccl_like("world", 2);
  std::vector<Rank> a, b;
  for (int i = 0; i < 2; ++i) {
    a.push_back(make_rank(true, 2 * MiB, 0, name_a));
    b.push_back(make_rank(true, 2 * MiB, 0, name_b));
  }
  const auto errors = on_ranks(2, [&](int rank) {
    Rank& pa = a[static_cast<std::size_t>(rank)];
    Rank& pb = b[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pa.registry->attach(comm, RegistrationKind::symmetric);
    pb.registry->attach(comm, RegistrationKind::symmetric);
    (void)pa.pool->allocate(MiB);
    (void)pb.pool->allocate(MiB);  // the same shape in both pools
    std::vector<Registry*> order{pa.registry.get(), pb.registry.get()};
    if (rank == 1) std::swap(order[0], order[1]);
    std::string first;
    for (Registry* r : order) {
      try {
        r->commit();
      } catch (const AgreementError& e) {
        if (first.empty()) first = e.what();
      }
    }
    if (pa.registry->stats(*comm).registered_segments != 0 || pb.registry->stats(*comm).registered_segments != 0)
      throw std::runtime_error("a window was registered although the pools were crossed");
    pa.registry->forget(*comm);
    pb.registry->forget(*comm);
    if (!first.empty()) throw std::runtime_error(first);
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& e = errors[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(contains(e, "ranks disagree at commit")) << rank << ": " << e;
    EXPECT_TRUE(contains(e, "(attachment #0)") && contains(e, "(attachment #1)")) << e;
  }
}

TEST(Agreement, TwoPoolsOfTheSameShapeCommittedInOppositeOrdersAreAnError) {
  two_pools_committed_in_opposite_orders("activations", "gradients");
  two_pools_committed_in_opposite_orders("ncclpool", "ncclpool");  // same names: the attachment number tells them apart
}

TEST(Agreement, PoolsWithOtherNamesOnOtherRanksAreNamed) {
  auto group = nccl_like("world", 2);
  std::vector<Rank> ranks;
  ranks.push_back(make_rank(true, 2 * MiB, 0, "rank0-pool"));
  ranks.push_back(make_rank(true, 2 * MiB, 0, "rank1-pool"));
  const auto errors = on_ranks(2, [&](int rank) {
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    ranks[static_cast<std::size_t>(rank)].registry->attach(comm, RegistrationKind::symmetric);
  });
  EXPECT_TRUE(contains(errors[0], "pool 'rank0-pool'") && contains(errors[0], "pool 'rank1-pool'")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "ranks disagree at attach #0")) << errors[1];
}

// After a refused attach: the same symmetric-kernel setting on every rank (a fresh group) attaches
// and detaches cleanly, with nothing left registered.
void expect_the_same_setting_attaches(std::vector<Rank>& ranks, int setting) {
  auto again = nccl_like("again", 2);
  again->set_symmetric_kernels(-1, setting);
  const auto fine = on_ranks(2, [&](int rank) {
    auto comm = std::make_shared<LoopbackCommunicator>(again, rank);
    ranks[static_cast<std::size_t>(rank)].registry->attach(comm, RegistrationKind::symmetric);
    ranks[static_cast<std::size_t>(rank)].registry->detach(*comm);
  });
  EXPECT_EQ(fine[0], "");
  EXPECT_EQ(fine[1], "");
  EXPECT_EQ(again->live_registrations(), 0);
}

// Ranks that would launch NCCL's symmetric kernels with different CTA counts (a profile on one host
// only, NCCL_SYM_CTAS on some ranks, prefer_nccl_symmetric_ctas declared on some ranks only) would
// hang in the first symmetric collective: the attach agreement fails on every rank instead, and
// registers nothing. Ranks here are threads of one process, which has one decision: each rank's word is
// the one a process that declared (rank 1) or not (rank 0) decides on Hopper, given to the simulated
// communicator.
TEST(Agreement, RanksWithDifferentSymmetricKernelSettingsFailAtAttach) {
  const int undeclared = choose_symmetric_ctas(nullptr, nullptr, 9, 0, nullptr, false).ctas;
  const int declared = choose_symmetric_ctas(nullptr, nullptr, 9, 0, nullptr, true).ctas;
  ASSERT_EQ(undeclared, 32);
  ASSERT_EQ(declared, 0);
  auto group = nccl_like("world", 2);
  std::vector<Rank> ranks;
  ranks.push_back(make_rank(true, 2 * MiB, 0, "p"));
  ranks.push_back(make_rank(true, 2 * MiB, 0, "p"));
  std::vector<void*> blocks;
  for (auto& r : ranks) blocks.push_back(r.pool->allocate(MiB));  // a segment that attach would register
  group->set_symmetric_kernels(0, undeclared);
  group->set_symmetric_kernels(1, declared);
  const auto errors = on_ranks(2, [&](int rank) {
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    ranks[static_cast<std::size_t>(rank)].registry->attach(comm, RegistrationKind::symmetric);
  });
  for (const std::string& e : errors) {
    EXPECT_TRUE(contains(e, "ranks disagree at attach #0")) << e;
    EXPECT_TRUE(contains(e, "symmetric kernels' CTAs 32") && contains(e, "symmetric kernels' CTAs NCCL's choice")) << e;
    EXPECT_TRUE(contains(e, "different CTA counts")) << e;
    EXPECT_TRUE(contains(e, "CTA preference (ncclpool_prefer_nccl_symmetric_ctas")) << e;
  }
  EXPECT_EQ(group->live_registrations(), 0);
  expect_the_same_setting_attaches(ranks, 32);  // the same setting on every rank attaches
  for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i].pool->deallocate(blocks[i]);
}

// ---------------------------------------------------------------- item 5: trim against allocation

TEST(Agreement, TrimReleasesWhatRanksAgreedOnWhileAnotherThreadAllocates) {
  auto group = nccl_like("world", 2);
  std::vector<std::size_t> released(2);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    void* a = r.pool->allocate(MiB);
    r.registry->commit();
    r.pool->deallocate(a);  // segment 0 is empty on both ranks
    std::thread allocator;
    std::atomic<bool> stop{false};
    if (rank == 1) {
      // Allocates and frees as fast as it can while the ranks agree: it must not land in segment 0.
      allocator = std::thread([&] {
        std::this_thread::sleep_for(10ms);  // trim has withheld segment 0 by then and waits for rank 0
        while (!stop.load()) {
          try {
            r.pool->deallocate(r.pool->allocate(MiB));
          } catch (const Error&) {
          }
        }
      });
    } else {
      std::this_thread::sleep_for(50ms);  // rank 1 sits in the agreement meanwhile
    }
    std::string trim_error;
    try {
      released[static_cast<std::size_t>(rank)] = r.registry->trim();
    } catch (const Error& e) {
      trim_error = e.what();
    }
    stop = true;
    if (allocator.joinable()) allocator.join();
    if (!trim_error.empty()) throw std::runtime_error(trim_error);
    r.pool->check_invariants();
    r.registry->check_invariants();
    r.registry->forget(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(released[0], 2 * MiB);
  EXPECT_EQ(released[1], 2 * MiB) << "rank 1 released what rank 0 released";
  EXPECT_FALSE(group->broken()) << "no window was deregistered on one rank only";
}

TEST(Agreement, TrimWithDifferentEmptySegmentsReleasesNothingAnywhere) {
  auto group = nccl_like("world", 2);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    void* a = r.pool->allocate(MiB);
    r.registry->commit();
    if (rank == 0) r.pool->deallocate(a);  // empty on rank 0 only
    try {
      (void)r.registry->trim();
      throw std::runtime_error("trim agreed");
    } catch (const AgreementError&) {
    }
    if (r.pool->stats().segment_count != 1) throw std::runtime_error("a segment was released");
    void* b = r.pool->allocate(MiB);  // withheld segments are back in use
    if (rank == 0 && b != a) throw std::runtime_error("segment 0 did not come back into use");
    r.pool->check_invariants();
    r.registry->check_invariants();
    r.registry->forget(*comm);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// ---------------------------------------------------------------- item 4: scopes outlive nothing

TEST(AgreementDeathTest, DestroyingARegistryWithAnOpenScopeAbortsLoudly) {
  EXPECT_DEATH(
      {
        Rank r = make_rank();
        auto* scope = new Scope(*r.registry);  // never closed
        (void)scope;
        r.registry.reset();
      },
      "scope\\(s\\) still open");
}

// ---------------------------------------------------------------- item 7: check mode

TEST(CheckMode, LayoutCheckNamesTheFirstBlockThatDiffers) {
  auto group = nccl_like("world", 2);
  std::vector<Rank> ranks;
  for (int i = 0; i < 2; ++i) ranks.push_back(make_rank(true, 256 * MiB, 0, "ncclpool", {CheckLevel::layout}));
  const auto errors = on_ranks(2, [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    r.pool->reserve(256 * MiB);  // one segment that every request below fits in
    (void)r.pool->allocate(MiB);
    r.registry->commit();  // same layout: fine
    // The same requests in another order: same segments, other offsets.
    if (rank == 0) {
      (void)r.pool->allocate(4 * MiB);
      (void)r.pool->allocate(8 * MiB);
    } else {
      (void)r.pool->allocate(8 * MiB);
      (void)r.pool->allocate(4 * MiB);
    }
    forget_if_it_throws(r, *comm, [&] { r.registry->commit(); });
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& e = errors[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(contains(e, "symmetric layouts of pool 'ncclpool' differ")) << e;
    EXPECT_TRUE(contains(e, "first difference at live block #1")) << e;
    EXPECT_TRUE(contains(e, "rank 0: segment 0 offset 1048576 size 4194304;")) << e;
    EXPECT_TRUE(contains(e, "rank 1: segment 0 offset 1048576 size 8388608;")) << e;
  }
}

TEST(CheckMode, BufferCheckCatchesSameSizedBuffersAllocatedInOppositeOrders) {
  // The case that corrupts silently on GPUs: two 4 MiB buffers in opposite orders. Layouts match;
  // only the buffers of the collective tell.
  auto group = nccl_like("world", 2);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    void* first = r.pool->allocate(4 * MiB);
    void* second = r.pool->allocate(4 * MiB);
    r.registry->commit();
    void* x = rank == 0 ? first : second;  // "buffer x" of the program
    void* same = first;
    verify_symmetric_buffers(*comm, {same, same});  // fine
    forget_if_it_throws(r, *comm, [&] { verify_symmetric_buffers(*comm, {x, x}); });
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& e = errors[static_cast<std::size_t>(rank)];
    EXPECT_TRUE(contains(e, "buffer #0 of this collective is not at the same place")) << e;
    EXPECT_TRUE(contains(e, "rank 0: window #0 offset 0;")) << e;
    EXPECT_TRUE(contains(e, "rank 1: window #1 offset 0;")) << e;  // 2 MiB chunks: one segment (window) each
  }
}

TEST(CheckMode, BufferCheckSeesAPlainBufferAgainstAWindow) {
  auto group = nccl_like("world", 2);
  std::vector<char> plain(64);
  const auto errors = on_symmetric_ranks(group, [&](Rank& r, const std::shared_ptr<LoopbackCommunicator>& comm, int rank) {
    void* in_window = r.pool->allocate(MiB);
    r.registry->commit();
    const void* buffer = rank == 0 ? in_window : static_cast<const void*>(plain.data());
    forget_if_it_throws(r, *comm, [&] { verify_symmetric_buffers(*comm, {buffer}); });
  });
  EXPECT_TRUE(contains(errors[1], "rank 1: not in a window of this communicator")) << errors[1];
}

TEST(CheckMode, EnvironmentVariableIsParsedStrictly) {
  ::setenv("NCCLPOOL_CHECK", "layout", 1);
  EXPECT_EQ(check_level_from_env(), CheckLevel::layout);
  ::setenv("NCCLPOOL_CHECK", "2", 1);
  EXPECT_EQ(check_level_from_env(), CheckLevel::collectives);
  ::setenv("NCCLPOOL_CHECK", "yes", 1);
  EXPECT_THROW((void)check_level_from_env(), InvalidArgument);
  ::unsetenv("NCCLPOOL_CHECK");
  EXPECT_EQ(check_level_from_env(), CheckLevel::off);
}

TEST(Agreement, TimeoutVariableIsParsedStrictly) {
  using std::chrono::milliseconds;
  ::unsetenv("NCCLPOOL_AGREEMENT_TIMEOUT_S");
  EXPECT_EQ(agreement_timeout_from_env(milliseconds(60000)), milliseconds(60000));
  ::setenv("NCCLPOOL_AGREEMENT_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(agreement_timeout_from_env(milliseconds(60000)), milliseconds(2500));
  for (const char* bad : {"abc", "0", "-1", "5s", "nan", "inf"}) {
    ::setenv("NCCLPOOL_AGREEMENT_TIMEOUT_S", bad, 1);
    EXPECT_THROW((void)agreement_timeout_from_env(milliseconds(60000)), InvalidArgument) << bad;
  }
  ::unsetenv("NCCLPOOL_AGREEMENT_TIMEOUT_S");
}

TEST(Environment, EveryBadVariableIsNamedWithWhatIsAccepted) {
  const char* const names[] = {"NCCLPOOL_AGREEMENT_TIMEOUT_S", "NCCLPOOL_AGREEMENT_BUFFERS", "NCCLPOOL_SYM_CTAS", "NCCLPOOL_SYMMETRIC_KERNELS",
                               "NCCLPOOL_SYMMETRIC_FENCE", "NCCLPOOL_GROWTH_CHUNK", "NCCLPOOL_MIN_SEGMENT"};
  for (const char* n : names) ::unsetenv(n);
  EXPECT_TRUE(environment_problems().empty());
  EXPECT_FALSE(agreement_buffers_on_device_from_env());
  // Accepted values: no problem.
  for (auto [n, v] : {std::pair{"NCCLPOOL_AGREEMENT_TIMEOUT_S", "2.5"}, {"NCCLPOOL_AGREEMENT_BUFFERS", "device"}, {"NCCLPOOL_SYM_CTAS", "nccl"},
                      {"NCCLPOOL_SYMMETRIC_KERNELS", "fence"}, {"NCCLPOOL_SYMMETRIC_FENCE", "memset"}, {"NCCLPOOL_GROWTH_CHUNK", "67108864"},
                      {"NCCLPOOL_MIN_SEGMENT", "1073741824"}})
    ::setenv(n, v, 1);
  EXPECT_TRUE(environment_problems().empty());
  EXPECT_TRUE(agreement_buffers_on_device_from_env());
  // Bad ones: each named, with its value and what is accepted, in the order above.
  for (auto [n, v] : {std::pair{"NCCLPOOL_AGREEMENT_TIMEOUT_S", "soon"}, {"NCCLPOOL_AGREEMENT_BUFFERS", "gpu"}, {"NCCLPOOL_SYM_CTAS", "99"},
                      {"NCCLPOOL_SYMMETRIC_KERNELS", "maybe"}, {"NCCLPOOL_SYMMETRIC_FENCE", "event"}, {"NCCLPOOL_GROWTH_CHUNK", "abc"},
                      {"NCCLPOOL_MIN_SEGMENT", "1GiB"}})
    ::setenv(n, v, 1);
  EXPECT_THROW((void)agreement_buffers_on_device_from_env(), InvalidArgument);
  const std::vector<EnvironmentProblem> problems = environment_problems();
  ASSERT_EQ(problems.size(), 7u);
  const char* const accepted[] = {"is not a positive number of seconds", "is not 'host' or 'device'", "is neither 'nccl' nor a count from 1 to 64",
                                  "is not auto, on, off or fence", "is not kernel, memset or node", "is not a number of bytes", "is not a number of bytes"};
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(problems[i].variable, names[i]);
    EXPECT_TRUE(contains(problems[i].message, std::string(names[i]) + "='" + problems[i].value + "'")) << problems[i].message;
    EXPECT_TRUE(contains(problems[i].message, accepted[i])) << problems[i].message;
  }
  ::unsetenv("NCCLPOOL_MIN_SEGMENT");
  for (const char* bad : {"-1", "1e6", "4M", "18446744073709551616"}) {
    ::setenv("NCCLPOOL_GROWTH_CHUNK", bad, 1);
    EXPECT_TRUE(contains(environment_problems().back().message, "NCCLPOOL_GROWTH_CHUNK")) << bad;
  }
  for (const char* n : names) ::unsetenv(n);
}

TEST(SymmetricCtas, UserSettingWinsThenNcclpoolsThenTheMeasuredDefault) {
  // NCCL_SYM_CTAS set by the user: left alone, whatever NCCLPOOL_SYM_CTAS says.
  SymmetricCtas c = choose_symmetric_ctas("24", "nccl", 9, 0);
  EXPECT_TRUE(c.decided);
  EXPECT_EQ(c.ctas, 24);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "NCCL_SYM_CTAS=24")) << c.source;
  EXPECT_EQ(choose_symmetric_ctas("999", nullptr, 9, 0).ctas, 64);  // NCCL caps it at 64
  EXPECT_EQ(choose_symmetric_ctas("abc", nullptr, 9, 0).ctas, 0);   // NCCL ignores it
  // NCCLPOOL_SYM_CTAS: "nccl" keeps NCCL's choice; a count is put into NCCL_SYM_CTAS.
  c = choose_symmetric_ctas(nullptr, "nccl", 9, 0);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "NCCLPOOL_SYM_CTAS=nccl")) << c.source;
  c = choose_symmetric_ctas("", "16", 9, 0);  // an empty NCCL_SYM_CTAS is unset, as NCCL reads it
  EXPECT_EQ(c.ctas, 16);
  EXPECT_TRUE(c.set_by_ncclpool);
  for (const char* bad : {"0", "65", "-4", "32x", "many", " 8"}) {
    c = choose_symmetric_ctas(nullptr, bad, 9, 0);
    EXPECT_EQ(c.ctas, 0) << bad;
    EXPECT_FALSE(c.set_by_ncclpool) << bad;
    EXPECT_TRUE(c.ignored_setting) << bad;
    EXPECT_TRUE(contains(c.source, "ignored")) << c.source;
  }
  // Nothing set: the measured default where there is one (Hopper), NCCL's choice elsewhere.
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0);
  EXPECT_EQ(c.ctas, 32);
  EXPECT_TRUE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "compute capability 9.0")) << c.source;
  c = choose_symmetric_ctas(nullptr, nullptr, 8, 0);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "no measured count for compute capability 8.0")) << c.source;
}

TEST(SymmetricCtas, DecidedOnceForTheProcessAndPutIntoTheEnvironment) {
  // The first decision of the process holds: NCCL reads NCCL_SYM_CTAS once.
  ::unsetenv("NCCL_SYM_CTAS");
  ::unsetenv("NCCLPOOL_SYM_CTAS");
  EXPECT_FALSE(symmetric_ctas().decided);
  // The caller's lookup is what counts (the backend reads no profile itself): here another
  // machine's, named in the source.
  ProfileLookup foreign;
  foreign.path = "/somewhere/profile.json";
  foreign.why_not = "the profile /somewhere/profile.json is not used: measured for 8 ranks";
  const SymmetricCtas first = apply_symmetric_ctas(9, 0, &foreign);
  EXPECT_TRUE(first.decided);
  EXPECT_EQ(first.ctas, 32);
  EXPECT_TRUE(contains(first.source, foreign.why_not)) << first.source;
  ASSERT_NE(std::getenv("NCCL_SYM_CTAS"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_SYM_CTAS"), "32");
  ::setenv("NCCLPOOL_SYM_CTAS", "nccl", 1);
  const SymmetricCtas again = apply_symmetric_ctas(8, 0);
  EXPECT_EQ(again.ctas, 32);
  EXPECT_EQ(again.source, first.source);
  EXPECT_EQ(symmetric_ctas().ctas, 32);
  ::unsetenv("NCCLPOOL_SYM_CTAS");
  ::unsetenv("NCCL_SYM_CTAS");
}

// A process whose symmetric collectives overlap compute (training: the FSDP2 helper, Megatron's
// install()) declares it, and ncclpool's measured default yields to NCCL's own count there; every
// setting that names a count (NCCL_SYM_CTAS, NCCLPOOL_SYM_CTAS, a profile's) still wins over it.
TEST(SymmetricCtas, TheDeclarationOfOverlapYieldsOnlyTheMeasuredDefault) {
  SymmetricCtas c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, nullptr, true);
  EXPECT_TRUE(c.decided);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_FALSE(c.ignored_setting);
  for (const char* part : {"NCCL's own choice", "overlap declared", "ncclpool_prefer_nccl_symmetric_ctas", "else 32 for compute capability 9.0"})
    EXPECT_TRUE(contains(c.source, part)) << part << ": " << c.source;
  // Without the declaration (the default argument: existing callers), the measured default as before.
  EXPECT_EQ(choose_symmetric_ctas(nullptr, nullptr, 9, 0).ctas, 32);
  EXPECT_EQ(choose_symmetric_ctas(nullptr, nullptr, 9, 0, nullptr, false).ctas, 32);
  // The user's variables win over it.
  c = choose_symmetric_ctas("24", nullptr, 9, 0, nullptr, true);
  EXPECT_EQ(c.ctas, 24);
  EXPECT_TRUE(contains(c.source, "NCCL_SYM_CTAS=24")) << c.source;
  c = choose_symmetric_ctas(nullptr, "16", 9, 0, nullptr, true);
  EXPECT_EQ(c.ctas, 16);
  EXPECT_TRUE(c.set_by_ncclpool);
  EXPECT_EQ(c.source, "NCCLPOOL_SYM_CTAS=16");
  c = choose_symmetric_ctas(nullptr, "nccl", 9, 0, nullptr, true);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_TRUE(contains(c.source, "NCCLPOOL_SYM_CTAS=nccl")) << c.source;
  c = choose_symmetric_ctas(nullptr, "many", 9, 0, nullptr, true);  // an ignored value is still said
  EXPECT_EQ(c.ctas, 0);
  EXPECT_TRUE(c.ignored_setting);
  // A GPU without a measured default: NCCL's choice either way, for that reason.
  c = choose_symmetric_ctas(nullptr, nullptr, 8, 0, nullptr, true);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_TRUE(contains(c.source, "no measured count for compute capability 8.0")) << c.source;
  // A profile that exists but does not apply is still named, and with a usual path the whole source
  // fits ncclpool_features_t.symmetric_ctas_source (255 bytes).
  ProfileLookup foreign;
  foreign.path = "/home/alice/.cache/ncclpool/profile.json";
  foreign.why_not = "the profile " + foreign.path + " is not used: measured for 8 ranks";
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &foreign, true);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_TRUE(contains(c.source, "ncclpool_prefer_nccl_symmetric_ctas") && contains(c.source, "measured for 8 ranks")) << c.source;
  EXPECT_LT(c.source.size(), 256u) << c.source;
}

// The process-wide decision, in a child process of its own (gtest's death-test machinery, re-run from
// main: "threadsafe"), so that it starts undecided whatever this process decided before. `body`
// returns "" or what went wrong; the child prints it (EXPECT inside the child would not reach here).
template <class Body>
void in_a_fresh_process(const char* what, Body body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::unsetenv("NCCL_SYM_CTAS");
        ::unsetenv("NCCLPOOL_SYM_CTAS");
        std::string wrong;
        try {
          wrong = body();
        } catch (const std::exception& e) {
          wrong = std::string("unexpected exception: ") + e.what();
        }
        std::fprintf(stderr, "%s\n", wrong.empty() ? "in-a-fresh-process: fine" : ("in-a-fresh-process: " + wrong).c_str());
        std::fflush(stderr);
        std::_Exit(wrong.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "in-a-fresh-process: fine")
      << what;
}

std::string expect(bool ok, const std::string& what) { return ok ? "" : what + "; "; }

TEST(SymmetricCtasDeathTest, TheDeclarationBeforeTheFirstAttachKeepsNcclsCount) {
  in_a_fresh_process("declared, then decided", [] {
    std::string wrong = expect(!nccl_symmetric_ctas_preferred(), "preferred before any declaration");
    prefer_nccl_symmetric_ctas();
    prefer_nccl_symmetric_ctas();  // idempotent
    wrong += expect(nccl_symmetric_ctas_preferred(), "not preferred after the declaration");
    wrong += expect(!symmetric_ctas().decided, "decided by the declaration");
    const SymmetricCtas d = apply_symmetric_ctas(9, 0);
    wrong += expect(d.decided && d.ctas == 0 && !d.set_by_ncclpool, "decided " + std::to_string(d.ctas) + " (" + d.source + ")");
    wrong += expect(contains(d.source, "ncclpool_prefer_nccl_symmetric_ctas"), "source: " + d.source);
    wrong += expect(std::getenv("NCCL_SYM_CTAS") == nullptr, "NCCL_SYM_CTAS was set");
    prefer_nccl_symmetric_ctas();  // after NCCL's choice was decided: nothing to change, accepted
    wrong += expect(symmetric_ctas().ctas == 0 && symmetric_ctas().source == d.source, "the decision changed");
    return wrong;
  });
}

TEST(SymmetricCtasDeathTest, TheDeclarationAfterTheMeasuredDefaultIsInvalidState) {
  in_a_fresh_process("decided the default, then declared", [] {
    const SymmetricCtas d = apply_symmetric_ctas(9, 0);
    std::string wrong = expect(d.ctas == 32 && d.set_by_ncclpool, "decided " + std::to_string(d.ctas));
    try {
      prefer_nccl_symmetric_ctas();
      wrong += "no InvalidState; ";
    } catch (const InvalidState& e) {
      const std::string m = e.what();
      for (const char* part : {"ncclpool_prefer_nccl_symmetric_ctas", "after this process decided", "first symmetric attach", "32 CTAs",
                               "ncclpool's default for compute capability 9.0", "before the first attach", "ncclpool.torch.fsdp.enable",
                               "ncclpool.torch.megatron.install()", "NCCLPOOL_SYM_CTAS=nccl on every rank"})
        wrong += expect(contains(m, part), std::string("the message lacks '") + part + "': " + m);
    }
    wrong += expect(!nccl_symmetric_ctas_preferred(), "recorded although refused");
    wrong += expect(symmetric_ctas().ctas == 32, "the decision changed");
    const char* env = std::getenv("NCCL_SYM_CTAS");
    wrong += expect(env != nullptr && std::string(env) == "32", "NCCL_SYM_CTAS is not 32");
    return wrong;
  });
}

// After a decision the declaration would not have changed (a count the user or a profile named,
// NCCL's choice on a GPU without a default), it is only recorded.
TEST(SymmetricCtasDeathTest, TheDeclarationAfterAnExplicitCountIsOnlyRecorded) {
  struct Case {
    const char* what;
    const char* variable;
    const char* value;
    int cc_major;
    int profile_ctas;  // < 0: no profile
    int expected;
  };
  for (const Case& c : {Case{"NCCLPOOL_SYM_CTAS=16", "NCCLPOOL_SYM_CTAS", "16", 9, -1, 16}, Case{"NCCL_SYM_CTAS=24", "NCCL_SYM_CTAS", "24", 9, -1, 24},
                        Case{"NCCLPOOL_SYM_CTAS=nccl", "NCCLPOOL_SYM_CTAS", "nccl", 9, -1, 0},
                        Case{"a profile's 32", nullptr, nullptr, 9, 32, 32}, Case{"a profile's 16", nullptr, nullptr, 9, 16, 16},
                        Case{"no default on 8.0", nullptr, nullptr, 8, -1, 0}}) {
    in_a_fresh_process(c.what, [&c] {
      if (c.variable != nullptr) ::setenv(c.variable, c.value, 1);
      ProfileLookup lookup;
      if (c.profile_ctas >= 0) {
        Profile p;
        p.gpu = "NVIDIA H200";
        p.nccl_version = 22809;
        p.ranks = 4;
        p.symmetric_ctas = c.profile_ctas;
        p.measured = "2026-11-28T00:00:00Z";
        lookup.profile = p;
        lookup.path = "/somewhere/profile.json";
      }
      const SymmetricCtas d = apply_symmetric_ctas(c.cc_major, 0, c.profile_ctas >= 0 ? &lookup : nullptr);
      std::string wrong = expect(d.ctas == c.expected, std::string(c.what) + ": decided " + std::to_string(d.ctas));
      prefer_nccl_symmetric_ctas();
      wrong += expect(nccl_symmetric_ctas_preferred(), std::string(c.what) + ": not recorded");
      wrong += expect(symmetric_ctas().ctas == c.expected, std::string(c.what) + ": the decision changed");
      return wrong;
    });
  }
}

// The C ABI keeps 255 bytes of the source: a longer one (a profile's path in its note) is cut before
// a whole UTF-8 character, never inside one.
TEST(SymmetricCtasDeathTest, TheSourceInTheFeaturesIsCutBetweenUtf8Characters) {
  for (const char* pad : {"", "x"}) {  // both parities of the cut against the two-byte characters
    in_a_fresh_process(*pad ? "a long non-ASCII source, shifted by a byte" : "a long non-ASCII source", [pad] {
      prefer_nccl_symmetric_ctas();
      ProfileLookup lookup;
      lookup.path = std::string("/data/") + pad;
      for (int i = 0; i < 120; ++i) lookup.path += "\xC3\xA9";  // é: two bytes each
      lookup.path += "/profile.json";
      lookup.why_not = "profile " + lookup.path + " not used: measured for 8 ranks";
      const SymmetricCtas d = apply_symmetric_ctas(9, 0, &lookup);
      ncclpool_features_t f{};
      f.struct_size = sizeof f;
      if (ncclpool_get_features(&f) != NCCLPOOL_SUCCESS) return std::string("ncclpool_get_features failed");
      const std::string got = f.symmetric_ctas_source;
      std::string wrong = expect(d.source.size() > 255 && got.size() < 256 && d.source.compare(0, got.size(), got) == 0,
                                 "not a cut prefix of the " + std::to_string(d.source.size()) + "-byte source: " + got);
      for (std::size_t i = 0; i < got.size();) {  // whole UTF-8 characters only
        const auto lead = static_cast<unsigned char>(got[i]);
        const std::size_t len = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
        if (i + len > got.size()) return wrong + "cut inside a UTF-8 character at byte " + std::to_string(i);
        i += len;
      }
      return wrong;
    });
  }
}

// Issue 28: NCCL 2.28.0-2.30.6 launch their symmetric kernels with PDL but without the grid-dependency
// sync. By default windows then go without the symmetric flag; `on` and `off` decide otherwise.
TEST(SymmetricKernels, OffByDefaultWhereTheKernelsCanReadTheirInputEarly) {
  struct Case {
    int nccl, cc, driver;
    bool hazard;
  };
  for (const Case& c : {Case{22709, 9, 13000, false}, Case{22800, 9, 12030, true}, Case{22809, 9, 13000, true}, Case{22907, 10, 13000, true},
                        Case{23006, 9, 12040, true}, Case{23007, 9, 13000, false}, Case{23203, 9, 13000, false}, Case{22809, 8, 13000, false},
                        Case{22809, 9, 12020, false}}) {
    EXPECT_EQ(symmetric_kernels_hazard(c.nccl, c.cc, c.driver), c.hazard) << c.nccl << " cc " << c.cc << " driver " << c.driver;
    const SymmetricKernels k = choose_symmetric_kernels(nullptr, c.nccl, c.cc, c.driver);
    EXPECT_TRUE(k.decided);
    EXPECT_EQ(k.hazard, c.hazard);
    EXPECT_EQ(k.enabled, !c.hazard) << k.why;
    EXPECT_EQ(choose_symmetric_kernels("auto", c.nccl, c.cc, c.driver).enabled, !c.hazard);
    EXPECT_TRUE(choose_symmetric_kernels("on", c.nccl, c.cc, c.driver).enabled);
    EXPECT_FALSE(choose_symmetric_kernels("off", c.nccl, c.cc, c.driver).enabled);
  }
  const SymmetricKernels guarded = choose_symmetric_kernels(nullptr, 22809, 9, 13000);
  EXPECT_EQ(guarded.decision, "guard");
  EXPECT_FALSE(guarded.fence);
  EXPECT_TRUE(contains(guarded.why, "NCCL 2.28.9")) << guarded.why;
  EXPECT_TRUE(contains(guarded.why, "cudaGridDependencySynchronize")) << guarded.why;
  EXPECT_TRUE(contains(guarded.why, "NCCLPOOL_SYMMETRIC_KERNELS=fence")) << guarded.why;
  EXPECT_TRUE(contains(guarded.why, "ncclpool_prefer_symmetric_fence")) << guarded.why;
  const SymmetricKernels forced = choose_symmetric_kernels("on", 22809, 9, 13000);
  EXPECT_TRUE(contains(forced.why, "although")) << forced.why;
  EXPECT_EQ(forced.decision, "on");
  EXPECT_EQ(choose_symmetric_kernels("off", 22809, 9, 13000).decision, "off");
  for (const char* bad : {"yes", "1", "ON", " on"}) {
    const SymmetricKernels k = choose_symmetric_kernels(bad, 22809, 9, 13000);
    EXPECT_TRUE(k.ignored_setting) << bad;
    EXPECT_FALSE(k.enabled) << bad;  // auto: the hazard keeps them off
    EXPECT_TRUE(contains(k.why, "ignored")) << k.why;
  }
}

// Issue 46: the third choice. Where the hazard exists, `auto` in a process that declared the fence
// (prefer_symmetric_fence) and `fence` keep the kernels on and fence every collective; without the
// hazard nothing needs a fence; `on` and `off` are what they say, declared or not.
TEST(SymmetricKernels, FencedWhereTheHazardIsAndTheFenceDeclaredOrAsked) {
  for (const bool declared : {false, true}) {
    const SymmetricKernels a = choose_symmetric_kernels(nullptr, 22809, 9, 13000, declared);
    EXPECT_EQ(a.decision, declared ? "fence" : "guard") << a.why;
    EXPECT_EQ(a.enabled, declared);
    EXPECT_EQ(a.fence, declared);
    EXPECT_EQ(a.fence_declared, declared);
    EXPECT_EQ(a.nccl_version, 22809);
    const SymmetricKernels f = choose_symmetric_kernels("fence", 22907, 9, 13000, declared);
    EXPECT_EQ(f.decision, "fence") << f.why;
    EXPECT_TRUE(f.enabled && f.fence && f.hazard);
    EXPECT_TRUE(contains(f.why, "NCCLPOOL_SYMMETRIC_KERNELS=fence")) << f.why;
    const SymmetricKernels on = choose_symmetric_kernels("on", 22809, 9, 13000, declared);
    EXPECT_EQ(on.decision, "on");
    EXPECT_TRUE(on.enabled && !on.fence);
    const SymmetricKernels off = choose_symmetric_kernels("off", 22809, 9, 13000, declared);
    EXPECT_EQ(off.decision, "off");
    EXPECT_TRUE(!off.enabled && !off.fence);
    for (const char* setting : {static_cast<const char*>(nullptr), "auto", "fence"}) {  // no hazard: no fence needed
      const SymmetricKernels safe = choose_symmetric_kernels(setting, 23007, 9, 13000, declared);
      EXPECT_EQ(safe.decision, "on") << safe.why;
      EXPECT_TRUE(safe.enabled && !safe.fence);
    }
  }
  const SymmetricKernels declared = choose_symmetric_kernels("auto", 22809, 9, 13000, true);
  EXPECT_TRUE(contains(declared.why, "the fence declared")) << declared.why;
  const SymmetricKernels odd = choose_symmetric_kernels("fenced", 22809, 9, 13000, true);
  EXPECT_TRUE(odd.ignored_setting);
  EXPECT_EQ(odd.decision, "fence");  // auto, declared
  EXPECT_TRUE(contains(odd.why, "not auto, on, off or fence: ignored")) << odd.why;
  // Every text fits ncclpool_features_t's 512 bytes for it.
  for (const char* setting : {static_cast<const char*>(nullptr), "on", "off", "fence", "maybe"})
    for (const bool d : {false, true}) EXPECT_LT(choose_symmetric_kernels(setting, 22809, 9, 13000, d).why.size(), 512u) << (setting ? setting : "unset");
}

// The fence's policy: nothing unless the decision is `fence`; eagerly always; in a capture not where
// NCCL < 2.29 adds its event-wait node itself (graph mixing on: unset, or a value NCCL reads as non-zero),
// always from 2.29 (a communicator's graphUsageMode can turn mixing off unseen).
TEST(SymmetricFence, LaunchedWhereNcclDoesNotOrderTheCollective) {
  const SymmetricKernels fence_2_28 = choose_symmetric_kernels(nullptr, 22809, 9, 13000, true);
  const SymmetricKernels fence_2_29 = choose_symmetric_kernels(nullptr, 22907, 9, 13000, true);
  for (const SymmetricKernels& k : {choose_symmetric_kernels(nullptr, 22809, 9, 13000), choose_symmetric_kernels("on", 22809, 9, 13000),
                                    choose_symmetric_kernels(nullptr, 23007, 9, 13000, true), SymmetricKernels{}})
    for (const bool capturing : {false, true}) EXPECT_FALSE(choose_symmetric_fence(k, capturing, "0").launch) << k.why;
  EXPECT_TRUE(choose_symmetric_fence(fence_2_28, false, nullptr).launch);
  EXPECT_TRUE(choose_symmetric_fence(fence_2_29, false, nullptr).launch);
  struct Case {
    const char* mixing;
    bool launch_2_28;
  };
  for (const Case& c : {Case{nullptr, false}, Case{"", false}, Case{"1", false}, Case{"2", false}, Case{"0", true}, Case{"00", true}, Case{"0x0", true},
                        Case{"off", true}, Case{"99999999999999999999", false}}) {
    EXPECT_EQ(choose_symmetric_fence(fence_2_28, true, c.mixing).launch, c.launch_2_28) << (c.mixing ? c.mixing : "unset");
    EXPECT_TRUE(choose_symmetric_fence(fence_2_29, true, c.mixing).launch) << (c.mixing ? c.mixing : "unset");
  }
  EXPECT_TRUE(contains(choose_symmetric_fence(fence_2_28, true, nullptr).why, "event-wait node"));
  bool ignored = true;
  EXPECT_EQ(choose_symmetric_fence_kind(nullptr, &ignored), SymmetricFenceKind::node);  // the default
  EXPECT_FALSE(ignored);
  EXPECT_EQ(choose_symmetric_fence_kind("memset", &ignored), SymmetricFenceKind::memset);
  EXPECT_FALSE(ignored);
  EXPECT_EQ(choose_symmetric_fence_kind("kernel", &ignored), SymmetricFenceKind::kernel);
  EXPECT_FALSE(ignored);
  EXPECT_EQ(choose_symmetric_fence_kind("event", &ignored), SymmetricFenceKind::node);
  EXPECT_TRUE(ignored);
  EXPECT_STREQ(to_string(SymmetricFenceKind::memset), "memset");
  EXPECT_EQ(choose_symmetric_fence_kind("node", &ignored), SymmetricFenceKind::node);
  EXPECT_FALSE(ignored);
  EXPECT_STREQ(to_string(SymmetricFenceKind::node), "node");
}

// Before any decision (no NCCL attach in this test program), the fence launches nothing, touches no
// driver, and counts the call: the simulator's and any process's state without windows.
TEST(SymmetricFence, NothingBeforeTheDecision) {
  ASSERT_FALSE(symmetric_kernels().decided);
  const SymmetricFenceStats before = symmetric_fence_stats();
  EXPECT_FALSE(symmetric_fence(nullptr));
  const SymmetricFenceStats after = symmetric_fence_stats();
  EXPECT_EQ(after.calls, before.calls + 1);
  EXPECT_EQ(after.launched, before.launched);
}

// Ranks that would run NCCL's symmetric kernels on some ranks only (another NCCL, or another
// NCCLPOOL_SYMMETRIC_KERNELS) fail at attach on every rank, naming both.
TEST(SymmetricKernels, RanksThatDecideDifferentlyFailAtAttach) {
  auto group = nccl_like("world", 2);
  group->set_symmetric_kernels(0, 32);
  group->set_symmetric_kernels(1, 32 + kSymmetricKernelsOff);
  std::array<std::string, 2> attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    Rank r = make_rank();
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      r.registry->attach(comm, RegistrationKind::symmetric);
    } catch (const AgreementError& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->attached(), 0u);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (const auto& e : attach_errors) {
    EXPECT_TRUE(contains(e, "symmetric kernels off (windows without the symmetric flag)")) << e;
    EXPECT_TRUE(contains(e, "on some ranks only")) << e;
  }
}

// Issue 46: one rank alone decided otherwise (fence against the guard, against unfenced `on`, guard
// against fence, with the same CTA count): every rank's attach fails naming NCCLPOOL_SYMMETRIC_KERNELS
// and the fence declaration, nothing is registered, and the ranks stay in lockstep: the application
// collective each makes next pairs (the same call logs, the group not broken).
TEST(SymmetricKernels, OneRankFencedAloneFailsEveryRankAtAttach) {
  struct Case {
    int others, alone;
    const char* named;
  };
  for (const Case& c : {Case{32 + kSymmetricKernelsOff, 32 + kSymmetricKernelsFenced, "symmetric kernels fenced"},
                        Case{32, 32 + kSymmetricKernelsFenced, "symmetric kernels fenced"},
                        Case{32 + kSymmetricKernelsFenced, 32 + kSymmetricKernelsOff, "symmetric kernels off"}}) {
    auto group = nccl_like("world", 3);
    group->set_symmetric_kernels(-1, c.others);
    group->set_symmetric_kernels(1, c.alone);
    std::array<std::string, 3> attach_errors;
    std::array<std::size_t, 3> attached{};
    const auto errors = on_ranks(3, [&](int rank) {
      Rank r = make_rank();
      void* block = r.pool->allocate(MiB);  // a segment the attach would register
      auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
      try {
        r.registry->attach(comm, RegistrationKind::symmetric);
      } catch (const AgreementError& e) {
        attach_errors[static_cast<std::size_t>(rank)] = e.what();
      }
      attached[static_cast<std::size_t>(rank)] = r.registry->attached();
      comm->user_collective(7);  // the application's next collective: pairs only if every rank made the same calls
      r.pool->deallocate(block);
    });
    for (int rank = 0; rank < 3; ++rank) {
      const auto i = static_cast<std::size_t>(rank);
      EXPECT_EQ(errors[i], "") << "rank " << rank;
      EXPECT_EQ(attached[i], 0u) << "rank " << rank;
      const std::string& e = attach_errors[i];
      EXPECT_TRUE(contains(e, "ranks disagree at attach #0")) << e;
      EXPECT_TRUE(contains(e, c.named)) << e;
      EXPECT_TRUE(contains(e, "NCCLPOOL_SYMMETRIC_KERNELS") && contains(e, "fence declaration")) << e;
      EXPECT_TRUE(contains(e, "symmetric kernels' CTAs 32")) << e;
      EXPECT_EQ(group->call_log(rank), group->call_log(0)) << "rank " << rank << "'s collective calls differ from rank 0's";
    }
    EXPECT_FALSE(group->broken());
    EXPECT_EQ(group->live_registrations(), 0);
  }
  // The same decision on every rank, fenced: attaches, registers, detaches.
  auto same = nccl_like("same", 2);
  same->set_symmetric_kernels(-1, 32 + kSymmetricKernelsFenced);
  const auto fine = on_ranks(2, [&](int rank) {
    Rank r = make_rank();
    void* block = r.pool->allocate(MiB);
    auto comm = std::make_shared<LoopbackCommunicator>(same, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    EXPECT_EQ(r.registry->attached(), 1u);
    r.pool->deallocate(block);
    r.registry->detach(*comm);
  });
  EXPECT_EQ(fine[0], "");
  EXPECT_EQ(fine[1], "");
  EXPECT_EQ(same->live_registrations(), 0);
}

// Issue 46 (attack): the decision word at a later attach. Every rank attached one communicator
// alike; at a second communicator's attach one rank alone reports `fence` (a process that declared
// the fence between two attaches, modelled per rank). Every rank's second attach fails; the first
// communicator stays attached on every rank and its next agreement (a commit registering a new
// segment) works; the calls pair and everything counts back to zero.
TEST(SymmetricKernels, OneRankFencedAloneAtALaterAttachKeepsTheFirstAttachOnEveryRank) {
  auto first = nccl_like("first", 3);
  auto second = nccl_like("second", 3);
  first->set_symmetric_kernels(-1, 32);
  second->set_symmetric_kernels(-1, 32);
  second->set_symmetric_kernels(0, 32 + kSymmetricKernelsFenced);
  std::array<std::string, 3> attach_errors;
  const auto errors = on_ranks(3, [&](int rank) {
    Rank r = make_rank();
    void* a = r.pool->allocate(MiB);
    auto one = std::make_shared<LoopbackCommunicator>(first, rank);
    auto two = std::make_shared<LoopbackCommunicator>(second, rank);
    r.registry->attach(one, RegistrationKind::symmetric);
    try {
      r.registry->attach(two, RegistrationKind::symmetric);
    } catch (const AgreementError& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(r.registry->attached(), 1u);
    void* b = r.pool->allocate(3 * MiB);  // a new segment: its window at the next agreement of `first`
    r.registry->commit();
    EXPECT_EQ(r.registry->pending(), 0u);
    EXPECT_NE(r.registry->handle_of(b, *one), nullptr);
    two->user_collective(4);
    r.pool->deallocate(a);
    r.pool->deallocate(b);
    r.registry->detach(*one);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  for (const auto& e : attach_errors) {
    EXPECT_TRUE(contains(e, "symmetric kernels fenced")) << e;
  }
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_EQ(first->call_log(rank), first->call_log(0)) << "rank " << rank;
    EXPECT_EQ(second->call_log(rank), second->call_log(0)) << "rank " << rank;
  }
  EXPECT_FALSE(first->broken());
  EXPECT_FALSE(second->broken());
  EXPECT_EQ(first->live_registrations(), 0);
  EXPECT_EQ(second->live_registrations(), 0);
}

TEST(Agreement, OutOfMemorySaysThatACollectiveTrimWouldHelp) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  SimSourceConfig sc;
  sc.capacity = 8 * MiB;
  auto pool = std::make_shared<Pool>(std::make_shared<SimSource>(sc), PoolConfig{.name = "p", .growth_chunk = 4 * MiB, .deterministic = true});
  Registry registry(pool, {CheckLevel::off});
  registry.attach(comm, RegistrationKind::symmetric);
  void* a = pool->allocate(4 * MiB);
  registry.commit();
  pool->deallocate(a);  // an empty segment with a window: OOM release must keep it
  try {
    (void)pool->allocate(8 * MiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_TRUE(contains(e.what(), "a collective trim on every rank")) << e.what();
  }
  EXPECT_EQ(registry.trim(), 4 * MiB);
  registry.detach(*comm);
}

}  // namespace
}  // namespace ncclpool

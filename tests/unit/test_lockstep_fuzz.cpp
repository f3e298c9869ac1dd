// Lockstep (DESIGN.md, "Semantics that must hold"): whether a rank takes part in a collective step
// depends only on what every rank already agreed, never on its own state. A local failure must become
// this rank's vote in the current agreement, so that every rank fails together and no collective call
// is ever left unmatched (on NCCL an unmatched call hangs, or pairs with the application's next
// collective and corrupts it silently).
//
// Two parts:
//  * Lockstep.*: one focused test per hole of issue 27 (items 1-5), each stating what every rank must
//    see. They fail on c7ebd93, by design.
//  * LockstepFuzz.*: a cross-rank fault-injection fuzzer (tests/unit/lockstep_fuzz/). 2-4 loopback
//    ranks (threads) in NCCL pairing mode run the same random program, step by step behind a barrier;
//    one rank gets one local fault. Layouts: one world communicator (also with the last rank on
//    another node), or two partly overlapping groups A = {0,1}, B = {1,2} with every pool attached to
//    both. After every step the harness compares each group's collective call logs, the places of
//    live blocks in windows, pool/registry invariants, and that no group timed out (a broken group:
//    a call left unmatched, a hang on NCCL); at the end, that every member of a group ended in an
//    error where one got an error about that group in a collective step, and that registrations count
//    back to zero. Each seed says whether its fault fired (its call came); in CI's seed set every
//    fault kind must fire.
//  * LockstepFuzzHarness.*: the fuzzer's own checks can fail.
//  * LockstepAttack.*: holes found by attacking the lockstep change, kept as regressions.
//
// Environment: NCCLPOOL_FUZZ_SEEDS=N runs seeds 1..N (default: CI's set), NCCLPOOL_FUZZ_SEED=s replays
// one seed, NCCLPOOL_FUZZ_FAULT=<name> forces one fault kind (each in every LockstepFuzz test, so a
// replay hint names its test), NCCLPOOL_FUZZ_VERBOSE=1 prints every seed's program.
// scripts/fuzz-lockstep.sh runs a longer campaign; scripts/fuzz-rule-breaks.sh shows that the fuzzer
// catches rule breaks put in on purpose (tests/unit/rule_breaks/).

#include <gtest/gtest.h>

#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/auto_pool.hpp>
#include <ncclpool/sim.hpp>

#include "common/lockstep_support.hpp"
#include "common/registry_ranks.hpp"
#include "common/scoped_env.hpp"
#include "common/scoped_profile.hpp"
#include "unit/lockstep_fuzz/campaign.hpp"

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ncclpool {
namespace {



// ------------------------------------------------------------------------------------------------
// Item 1: a late-found error must not make a rank skip the next agreement's outcome.
// ------------------------------------------------------------------------------------------------

// Commit #1: rank 0 has a window pending, rank 1 nothing (so rank 1 only enqueues and learns of the
// mismatch later). Commit #2: both have the same segment pending, so the new records are equal. Rank 1
// learns of #1 there: once fixed, that is its "no" vote in #2, so every rank fails #2 and no window is
// registered anywhere. On c7ebd93 rank 1 throws before acting on #2 while rank 0 registers the window
// alone (a collective NCCL call with no partner: a hang on a GPU, a timeout here).
TEST(Lockstep, LateErrorJoinsNextCommit) {
  auto group = nccl_group(2);
  std::vector<Rank> ranks;
  for (int i = 0; i < 2; ++i) ranks.push_back(make_rank());
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  for (int i = 0; i < 2; ++i) comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
  auto rank_of = [&](int r) -> Rank& { return ranks[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { rank_of(r).registry->attach(comms[static_cast<std::size_t>(r)], RegistrationKind::symmetric); },
      [&](int r) {
        if (r == 0) (void)rank_of(r).pool->allocate(MiB);  // rank 0 grows, rank 1 does not (yet)
      },
      [&](int r) { rank_of(r).registry->commit(); },  // commit #1: rank 0 fails now, rank 1 later
      [&](int r) {
        if (r == 1) (void)rank_of(r).pool->allocate(MiB);  // now both have segment 0 pending
      },
      [&](int r) { rank_of(r).registry->commit(); },  // commit #2: equal records, rank 1 knows of #1
  });
  EXPECT_TRUE(has(steps[2].errors[0], "AgreementError")) << steps[2].errors[0];
  EXPECT_EQ(steps[2].errors[1], "") << "rank 1 had nothing pending: it only enqueues at commit #1";
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(steps[4].errors[static_cast<std::size_t>(r)], "") << "rank " << r << " must fail commit #2 (rank 1 votes no there)";
  for (std::size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(steps[k].log_difference, "") << "after step " << k;
  EXPECT_FALSE(group->broken()) << "no collective call was left without its partners";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(rank_of(r).registry->stats(*comms[static_cast<std::size_t>(r)]).registered_segments, 0u)
        << "rank " << r << " registered a window at a commit another rank failed";
    rank_of(r).registry->forget(*comms[static_cast<std::size_t>(r)]);
  }
}

// ------------------------------------------------------------------------------------------------
// Item 2: the routes agreement must run at every attach of an auto pool, on every rank.
// ------------------------------------------------------------------------------------------------

// The profile routes everything to none/local; rank 1's node has another GPU, so the profile does not
// apply there and rank 1 takes the built-in routes (symmetric everywhere). Once fixed every rank runs
// the routes agreement and fails the attach; nothing is attached anywhere; the application's next
// collective pairs with its partners. On c7ebd93 rank 0 attaches without any collective and returns,
// and rank 1's routes all-gather pairs with rank 0's application collective.
TEST(Lockstep, RoutesAgreementEveryAttach) {
  const ScopedProfile profile(sim_profile(2, {{0, "none"}, {64 * KiB, "local"}}));
  auto group = nccl_group(2);
  group->set_machine_gpu(1, "another GPU");
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto_pool("auto", builtin_routes(true), {CheckLevel::off}));
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  for (int i = 0; i < 2; ++i) comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
  const auto steps = run_in_steps(*group, {
      [&](int r) { pools[static_cast<std::size_t>(r)]->attach(comms[static_cast<std::size_t>(r)], std::nullopt); },
      [&](int r) { comms[static_cast<std::size_t>(r)]->user_collective(7); },
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(has(steps[0].errors[static_cast<std::size_t>(r)], "AgreementError"))
        << "rank " << r << " must fail the attach (ranks route differently): " << steps[0].errors[static_cast<std::size_t>(r)];
    EXPECT_FALSE(pools[static_cast<std::size_t>(r)]->attached(*comms[static_cast<std::size_t>(r)])) << "rank " << r << ": all or nothing";
  }
  EXPECT_EQ(steps[0].log_difference, "") << "after the attach";
  EXPECT_EQ(steps[1].log_difference, "") << "after the application collective";
  EXPECT_EQ(steps[1].errors[0], "");
  EXPECT_EQ(steps[1].errors[1], "");
  EXPECT_FALSE(group->broken());
  for (int r = 0; r < 2; ++r)
    if (pools[static_cast<std::size_t>(r)]->attached(*comms[static_cast<std::size_t>(r)])) pools[static_cast<std::size_t>(r)]->forget(*comms[static_cast<std::size_t>(r)]);
}

// ------------------------------------------------------------------------------------------------
// Item 3: out-of-memory recovery must not move a buffer on one rank only.
// ------------------------------------------------------------------------------------------------

struct OomSwap {
  std::vector<std::string> alloc_errors;
  std::vector<std::string> commit_errors;
  std::vector<std::string> poll_errors;
  std::vector<std::string> places;  // per rank: "e: window W offset O, f: window W offset O"
  std::string log_difference;
};

// The same program on both ranks: a (2 MiB, stream 1) fills segment 0, commit, free a on stream 1 (its
// block stays with stream 1: unpublished), e (2 MiB, stream 2), f (2 MiB, stream 1), commit. Rank 1: e
// cannot take stream 1's block and grows segment 1; f takes a's block in segment 0. Rank 0 gets one
// injected OOM at e's growth. At c7ebd93 the pool synchronized, handed stream 1's block to everyone and
// e landed in segment 0, then f grew segment 1: both ranks had segments {0, 1}, the commit agreed, and
// e and f sat in swapped windows. Now a deterministic pool does not reclaim: e fails on rank 0 (which
// goes on, as a program catching the error would), and the commit's pending segments differ.
OomSwap run_oom_swap(CheckLevel check) {
  auto group = nccl_group(2);
  std::vector<Rank> ranks;
  for (int i = 0; i < 2; ++i) ranks.push_back(make_rank(true, 2 * MiB, 0, "ncclpool", {check}));
  OomSwap out;
  out.alloc_errors.resize(2);
  out.commit_errors.resize(2);
  out.poll_errors.resize(2);
  out.places.resize(2);
  (void)on_ranks(2, [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    void* a = r.pool->allocate(2 * MiB, 1);
    r.registry->commit();
    r.pool->deallocate(a, 1);
    if (rank == 0) r.source->inject_oom(1);  // a transient OOM on rank 0 only
    void* e = nullptr;
    try {
      e = r.pool->allocate(2 * MiB, 2);
    } catch (const OutOfMemory& err) {  // the program goes on, as one that catches it would
      out.alloc_errors[static_cast<std::size_t>(rank)] = describe_error(err);
    }
    void* f = r.pool->allocate(2 * MiB, 1);
    try {
      r.registry->commit();
    } catch (const std::exception& err) {
      out.commit_errors[static_cast<std::size_t>(rank)] = describe_error(err);
    }
    try {
      r.registry->poll();  // a rank that did not wait hears of a mismatch here
    } catch (const std::exception& err) {
      out.poll_errors[static_cast<std::size_t>(rank)] = describe_error(err);
    }
    auto place = [&](void* p) {
      if (p == nullptr) return std::string("none (its allocation failed)");
      const auto loc = r.pool->locate(p);
      return "window " + std::to_string(reinterpret_cast<std::uintptr_t>(r.registry->handle_of(p, *comm))) + " (segment " +
             std::to_string(loc ? loc->segment_sequence : 999) + ") offset " + std::to_string(loc ? loc->offset : 0);
    };
    out.places[static_cast<std::size_t>(rank)] = "e: " + place(e) + ", f: " + place(f);
    r.registry->forget(*comm);
  });
  out.log_difference = call_log_difference(*group);
  return out;
}

// Once fixed: either e and f sit at the same place on both ranks, or every rank ends in an error (the
// failed allocation, the commit, or the mismatch found after it).
TEST(Lockstep, OomRecoveryPlacementAgreed) {
  const OomSwap run = run_oom_swap(CheckLevel::off);
  const auto failed = [&](std::size_t r) { return !run.alloc_errors[r].empty() || !run.commit_errors[r].empty() || !run.poll_errors[r].empty(); };
  const bool both_failed = failed(0) && failed(1);
  EXPECT_TRUE(run.places[0] == run.places[1] || both_failed)
      << "the commit after rank 0's OOM recovery agreed, but the buffers sit at other places: rank 0: " << run.places[0]
      << "; rank 1: " << run.places[1] << " (commit errors: rank 0: '" << run.commit_errors[0] << "', rank 1: '" << run.commit_errors[1] << "')";
  EXPECT_EQ(run.log_difference, "");
}

// In check mode `layout` the swapped buffers (each rank's blocks at the same set of places, but e and
// f exchanged) must be an AgreementError at the next commit on every rank.
TEST(Lockstep, OomRecoveryLayoutCheckSeesSwappedBuffers) {
  const OomSwap run = run_oom_swap(CheckLevel::layout);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(has(run.commit_errors[static_cast<std::size_t>(r)], "AgreementError"))
        << "rank " << r << ": the layout check passed with e and f swapped: rank 0: " << run.places[0] << "; rank 1: " << run.places[1];
  EXPECT_EQ(run.log_difference, "");
}

// ------------------------------------------------------------------------------------------------
// Item 4: RegisteredPool::commit must run every part's agreement on every rank.
// ------------------------------------------------------------------------------------------------

// An auto pool attached with an explicit symmetric kind, routes over two parts (local below 1 MiB,
// symmetric from 1 MiB): both parts make windows. Rank 0 grows the local part, rank 1 does not. At
// commit, rank 0 fails the local part's agreement; once fixed it still joins the symmetric part's,
// as rank 1 does, so the call logs stay equal and the application collective after it pairs. Every
// rank ends in an error (rank 1 at its next agreement point, the final commit). On c7ebd93 rank 0
// stops at the first part, and rank 1's second all-gather pairs with rank 0's application collective.
TEST(Lockstep, RoutedCommitRunsEveryPart) {
  auto group = nccl_group(2);
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto_pool("auto", local_then_symmetric(), {CheckLevel::off}));
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  for (int i = 0; i < 2; ++i) comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
  std::vector<void*> fixed(2);
  for (int i = 0; i < 2; ++i) fixed[static_cast<std::size_t>(i)] = pools[static_cast<std::size_t>(i)]->allocate(2 * MiB);  // fixes the routes
  auto pool = [&](int r) -> RegisteredPool& { return *pools[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comms[static_cast<std::size_t>(r)], RegistrationKind::symmetric); },
      [&](int r) {
        if (r == 0) (void)pool(r).allocate(64 * KiB);  // the local part grows on rank 0 only
      },
      [&](int r) { pool(r).commit(); },
      [&](int r) { comms[static_cast<std::size_t>(r)]->user_collective(7); },
      [&](int r) { pool(r).commit(); },  // rank 1's next agreement point: it hears of the mismatch
  });
  EXPECT_TRUE(has(steps[2].errors[0], "AgreementError")) << steps[2].errors[0];
  for (std::size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(steps[k].log_difference, "") << "after step " << k;
  EXPECT_EQ(steps[3].errors[0], "") << "the application collective must pair with its partner";
  EXPECT_EQ(steps[3].errors[1], "") << "the application collective must pair with its partner";
  EXPECT_TRUE(!steps[2].errors[1].empty() || !steps[4].errors[1].empty()) << "rank 1 never heard of the mismatch";
  EXPECT_FALSE(group->broken());
  for (int r = 0; r < 2; ++r)
    if (pool(r).attached(*comms[static_cast<std::size_t>(r)])) pool(r).forget(*comms[static_cast<std::size_t>(r)]);
}

// ------------------------------------------------------------------------------------------------
// Item 5: an auto attach is all or nothing on every rank.
// ------------------------------------------------------------------------------------------------

// Routes over a local and a symmetric part, each with a segment before the attach. Rank 0's local
// registration fails. Once fixed, that failure is rank 0's vote in the symmetric part's attach
// agreement: every rank fails the attach, nothing stays attached or registered anywhere, and the
// application collective after it pairs. On c7ebd93 rank 0 throws before the symmetric part while
// rank 1 enters its attach agreement alone.
TEST(Lockstep, PartialAttachAllOrNothing) {
  auto group = nccl_group(2);
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto_pool("auto", local_then_symmetric(), {CheckLevel::off}));
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  for (int i = 0; i < 2; ++i) comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
  std::vector<void*> blocks;
  for (auto& p : pools) {
    blocks.push_back(p->allocate(64 * KiB));  // a local-part segment
    blocks.push_back(p->allocate(2 * MiB));   // a symmetric-part segment
  }
  group->inject_failure(LoopbackOp::register_local, 0, 1);
  auto pool = [&](int r) -> RegisteredPool& { return *pools[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comms[static_cast<std::size_t>(r)], std::nullopt); },
      [&](int r) { comms[static_cast<std::size_t>(r)]->user_collective(7); },
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(steps[0].errors[static_cast<std::size_t>(r)], "") << "rank " << r << " must fail the attach";
    EXPECT_FALSE(pool(r).attached(*comms[static_cast<std::size_t>(r)])) << "rank " << r << ": all or nothing";
  }
  EXPECT_EQ(steps[0].log_difference, "") << "after the attach";
  EXPECT_EQ(steps[1].log_difference, "") << "after the application collective";
  EXPECT_EQ(steps[1].errors[0], "");
  EXPECT_EQ(steps[1].errors[1], "");
  EXPECT_FALSE(group->broken());
  EXPECT_EQ(group->live_registrations(), 0);
  for (int r = 0; r < 2; ++r)
    if (pool(r).attached(*comms[static_cast<std::size_t>(r)])) pool(r).forget(*comms[static_cast<std::size_t>(r)]);
}


// Seeds (with a forced fault) that found issue 27's holes at c7ebd93, kept as regressions:
// 10/oom: a late-found error at detach (item 1); 21/profile: one-sided routes agreement (item 2);
// 19/oom: OOM recovery moved a block in a window on one rank (item 3); 193/oom: RegisteredPool::commit
// stopped at the first part (item 4); 45/register_local: partial auto attach (item 5).
// ================================================================================================
// The fuzzer (tests/unit/lockstep_fuzz/: programs, one run and its oracle, campaigns)
// ================================================================================================

TEST(LockstepFuzz, SeedsThatFoundIssue27) {
  const std::pair<std::uint64_t, Fault> pinned[] = {
      {10, Fault::oom}, {21, Fault::profile}, {19, Fault::oom}, {193, Fault::oom}, {45, Fault::register_local}};
  const bool verbose = env_number("NCCLPOOL_FUZZ_VERBOSE").value_or(0) != 0;
  const FuzzSetup setup{Layout::world, false, "SeedsThatFoundIssue27", /*ensure_firing=*/false};  // the programs as found
  for (const auto& [seed, fault] : pinned) (void)run_seed(seed, fault, verbose, setup);
}

// CI: a fixed seed set per setup, every fault kind in turn (seed % 8), each kind firing in some seed.
constexpr std::uint64_t kCiSeeds = 48;
constexpr std::uint64_t kCiOverlappingSeeds = 48;

TEST(LockstepFuzz, EveryRankInStepUnderOneFault) { (void)run_campaign(FuzzSetup{Layout::world, false, "EveryRankInStepUnderOneFault"}, kCiSeeds); }

// The last rank on another node (issue: an auto pool's routes across nodes): the routes agreement
// tells every rank the node count, and every rank stays in step.
TEST(LockstepFuzz, EveryRankInStepAcrossNodes) { (void)run_campaign(FuzzSetup{Layout::world, true, "EveryRankInStepAcrossNodes"}, kCiSeeds / 2); }

// Two partly overlapping groups, A = {0,1} and B = {1,2}, every pool attached to both (issue 44 item
// 6): a "no" that rank 1 hears in one group must reach the other group's ranks in the same step, which
// one world communicator cannot show (its every rank hears every no).
TEST(LockstepFuzz, EveryRankInStepOverlappingGroups) {
  (void)run_campaign(FuzzSetup{Layout::overlapping, false, "EveryRankInStepOverlappingGroups"}, kCiOverlappingSeeds);
}

// ------------------------------------------------------------------------------------------------
// The fuzzer's own checks can fail (issue 49, items 8-10).
// ------------------------------------------------------------------------------------------------

// A failing seed's replay hint replays it with its own setup: the environment it names selects that
// seed (and fault) in the test it names, the across-nodes and overlapping tests included (the
// across-nodes test read neither variable, so its hint replayed the seed without the second node).
TEST(LockstepFuzzHarness, ReplayHintSelectsTheSeedInItsOwnTest) {
  using testing_support::ScopedEnv;
  const FuzzSetup setups[] = {{Layout::world, false, "EveryRankInStepUnderOneFault"},
                          {Layout::world, true, "EveryRankInStepAcrossNodes"},
                          {Layout::overlapping, false, "EveryRankInStepOverlappingGroups"}};
  for (const FuzzSetup& setup : setups) {
    const std::string hint = replay_hint(setup, 77, Fault::oom);
    EXPECT_TRUE(has(hint, std::string("--gtest_filter=LockstepFuzz.") + setup.test)) << hint;
    const ScopedEnv seed("NCCLPOOL_FUZZ_SEED", "77"), fault("NCCLPOOL_FUZZ_FAULT", "oom"), seeds("NCCLPOOL_FUZZ_SEEDS", "");
    EXPECT_TRUE(has(hint, "NCCLPOOL_FUZZ_SEED=77") && has(hint, "NCCLPOOL_FUZZ_FAULT=oom")) << hint;
    const Selection s = select_seeds(kCiSeeds / 2);
    EXPECT_EQ(s.seeds, std::vector<std::uint64_t>{77}) << setup.test;
    EXPECT_EQ(s.forced, Fault::oom) << setup.test;
    EXPECT_FALSE(s.ci) << "a replay is not CI's set: the coverage assertion does not apply";
    const Program program = program_for(77, Fault::oom, setup);
    EXPECT_EQ(program.layout, setup.layout);
    EXPECT_EQ(!program.nodes.empty(), setup.across_nodes) << setup.test << ": the replay must put the last rank on another node too";
  }
}

// Coverage: a kind that ran and never fired is named; one that fired is not.
TEST(LockstepFuzzHarness, KindsThatNeverFiredAreNamed) {
  Coverage coverage;
  coverage[Fault::none] = {6, 0, 0};
  coverage[Fault::oom] = {6, 2, 2};
  coverage[Fault::trim_race] = {6, 0, 0};
  EXPECT_EQ(never_fired(coverage), std::vector<Fault>{Fault::trim_race});
}

// A hang is found by the group's state, not by a wall clock (a step that is only slow, as under TSan,
// is no violation): a rank that skips a collective leaves its partners' call unmatched; it times out
// and breaks the group, which the harness reports even where no other check would.
TEST(LockstepFuzzHarness, TimedOutCollectiveIsAViolation) {
  Program program = make_program(3, Fault::none);
  program.ops.insert(program.ops.begin() + static_cast<long>(program.groups.size() * program.pools.size()),
                     Op{OpKind::user_collective, 0, {}, {}, 0});
  program.skip_collective_rank = 0;  // the harness's own fault: rank 0 skips that application collective
  program.timeout = std::chrono::milliseconds(50);
  const FuzzResult result = FuzzRun(program).run();
  std::string all;
  for (const auto& v : result.violations) all += v + "\n";
  EXPECT_TRUE(has(all, "timed out (a rank never made its partner call): the group is broken")) << all;
}



// ------------------------------------------------------------------------------------------------
// Found by attacking the lockstep change on the loopback (one rank failing where it hurts most): they
// failed at 31b3a3e and pass since. A third hole, a graph capture on one rank only, is a documented
// limit (docs/registry.md, "Graph capture").
// ------------------------------------------------------------------------------------------------
// Hole 1: RegisteredPool::attach's undo stops at the first local deregistration failure.
// ------------------------------------------------------------------------------------------------
// An auto pool attached with an explicit LOCAL kind (C ABI: ncclpool_attach_* with
// NCCLPOOL_REGISTRATION_LOCAL on an auto pool) whose routes use two parts: both parts are attached as
// local before the routes agreement. Rank 1's local registration fails, so rank 1 votes no in the
// routes agreement and every rank undoes its local parts. On rank 0 the undo's first deregistration
// fails: Registry::detach then detaches the communicator regardless and throws RegistrationError; the
// undo (then routed_pool.cpp's `undo` lambda, now RegisteredPool::undo_attach) answers with forget(), which throws InvalidArgument ("not
// attached") out of the catch handler, out of undo(), so the older part is never undone.
//
// Must: the attach fails on every rank with nothing attached anywhere (docs/registry.md: "All or
// nothing, on every rank together"), and a later attach, the fault gone, succeeds on every rank.
// Did (31b3a3e): rank 0 kept the local part attached (a registration RegisteredPool no longer knows of), rank 0's
// error is the InvalidArgument of the forget, and every later attach of that communicator fails on
// EVERY rank (rank 0's part registry refuses "already attached", which is its "no" in the routes
// agreement): one transient local fault on one rank makes the pool unattachable forever.
TEST(LockstepAttack, AutoAttachUndoStopsAtALocalDeregistrationFailure) {
  auto group = nccl_group(2);
  const SizeRoutes routes({{0, RegistrationKind::local}, {MiB, RegistrationKind::symmetric}});
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  std::vector<void*> blocks;
  for (int i = 0; i < 2; ++i) {
    pools.push_back(make_auto_pool("auto", routes, {CheckLevel::off}));
    comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
    blocks.push_back(pools.back()->allocate(64 * KiB));  // a segment in the local part
    blocks.push_back(pools.back()->allocate(2 * MiB));   // a segment in the symmetric part
  }
  group->inject_failure(LoopbackOp::register_local, 1, 1);    // rank 1: its no in the routes agreement
  group->inject_failure(LoopbackOp::deregister_local, 0, 1);  // rank 0: the undo's first deregistration
  auto pool = [&](int r) -> RegisteredPool& { return *pools[static_cast<std::size_t>(r)]; };
  auto comm = [&](int r) { return comms[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::local); },
      [&](int r) { comm(r)->user_collective(7); },
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::local); },  // the retry, no fault left
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(steps[0].errors[static_cast<std::size_t>(r)], "") << "rank " << r << " must fail the attach";
  EXPECT_FALSE(has(steps[0].errors[0], "InvalidArgument")) << "rank 0's error is the undo's forget, not its cause: " << steps[0].errors[0];
  EXPECT_EQ(steps[0].log_difference, "");
  EXPECT_EQ(steps[1].log_difference, "");
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(steps[2].errors[static_cast<std::size_t>(r)], "") << "rank " << r << ": the retry must succeed once the fault is gone "
                                                                  << "(a part left attached by the failed one refuses it)";
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(pool(r).attached(*comm(r)));
    EXPECT_EQ(pool(r).parts()[static_cast<std::size_t>(RegistrationKind::local)].registry->attached(), 1u);  // once: the retry's own
  }
  for (int r = 0; r < 2; ++r) {
    for (void* b : {blocks[2 * r], blocks[2 * r + 1]}) pool(r).deallocate(b);
    if (pool(r).attached(*comm(r))) pool(r).detach(*comm(r));
  }
  pools.clear();
  // 1 = the registration whose deregistration the loopback refused (NCCL kept it; not ours any more).
  EXPECT_EQ(group->live_registrations(), 1);
}

// ------------------------------------------------------------------------------------------------
// Hole 1b: the same undo, with windows: a failed auto attach leaves windows registered on every rank
// that no one can detach.
// ------------------------------------------------------------------------------------------------
// Auto pool with routes over all three parts, attached with an explicit SYMMETRIC kind, so each part
// is a symmetric attach of its own (agreement, then windows). Parts 0 and 1 attach; part 2's window
// registration fails (the loopback fails it on every rank: a collective failure). Every rank undoes
// parts 1 then 0 collectively. Part 1's window deregistration fails (again on every rank): its
// Registry::detach removes the communicator regardless and throws RegistrationError; undo calls
// forget(), which throws InvalidArgument and ends the undo before part 0.
// Must: nothing attached, no window left (live_registrations back to 0 once the pools are gone).
// Did (31b3a3e): part 0 kept its window on every rank, RegisteredPool says "not attached" (so neither detach nor
// forget can reach it), and ~Registry later forgets it: windows leak (live_registrations stays 2).
TEST(LockstepAttack, AutoSymmetricAttachUndoLeavesWindowsBehind) {
  auto group = nccl_group(2);
  const SizeRoutes routes({{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}, {MiB, RegistrationKind::symmetric}});
  std::vector<std::unique_ptr<RegisteredPool>> pools;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  std::vector<void*> blocks;
  for (int i = 0; i < 2; ++i) {
    pools.push_back(make_auto_pool("auto", routes, {CheckLevel::off}));
    comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
    blocks.push_back(pools.back()->allocate(1 * KiB));   // part 0 (none)
    blocks.push_back(pools.back()->allocate(64 * KiB));  // part 1 (local)
    blocks.push_back(pools.back()->allocate(2 * MiB));   // part 2 (symmetric)
  }
  group->inject_failure(LoopbackOp::register_window, 0, 3);    // part 2's window: fails on every rank
  group->inject_failure(LoopbackOp::deregister_window, 0, 1);  // the undo's first window deregistration
  auto pool = [&](int r) -> RegisteredPool& { return *pools[static_cast<std::size_t>(r)]; };
  auto comm = [&](int r) { return comms[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::symmetric); },
      [&](int r) { comm(r)->user_collective(7); },
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(steps[0].errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_FALSE(pool(r).attached(*comm(r)));
    EXPECT_EQ(pool(r).parts()[static_cast<std::size_t>(RegistrationKind::none)].registry->attached(), 0u)
        << "rank " << r << ": part 0 is still attached, with its window, after the failed attach; error: "
        << steps[0].errors[static_cast<std::size_t>(r)];
  }
  EXPECT_EQ(steps[0].log_difference, "");
  EXPECT_EQ(steps[1].log_difference, "");
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) pool(r).deallocate(blocks[static_cast<std::size_t>(3 * r + k)]);
  pools.clear();  // ~Registry forgets what is still attached
  // 2 = part 1's windows whose deregistration the loopback refused (one per rank); the rest are part
  // 0's windows, which the interrupted undo never deregistered and ~Registry only forgot.
  EXPECT_EQ(group->live_registrations(), 2) << "windows leaked by the interrupted undo";
}


// ------------------------------------------------------------------------------------------------
// Found by attacking issue 29's redesign (one RegistrationKind with `none`, RegisteredPool /
// AutoPool) on the loopback: they failed at 83d93ff and pass since.
// ------------------------------------------------------------------------------------------------
// Hole 3: Registry::attach(comm, RegistrationKind::none). The one enum gained `none` (routes' kind);
// the registry took every kind but `local` for a window attach, and registered each later segment
// with register_window inside the allocation that made it (a collective call, outside any agreement,
// on the one rank that grew). Must: refused before any collective call, on every rank.
TEST(LockstepAttack, RegistryRefusesNoneKind) {
  auto group = nccl_group(2);
  std::vector<Rank> ranks;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  for (int i = 0; i < 2; ++i) {
    ranks.push_back(make_rank());
    comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
  }
  std::vector<void*> blocks(2, nullptr);
  const auto steps = run_in_steps(*group, {
      [&](int r) { ranks[static_cast<std::size_t>(r)].registry->attach(comms[static_cast<std::size_t>(r)], RegistrationKind::none); },
      [&](int r) {
        if (r == 0) blocks[0] = ranks[0].pool->allocate(MiB);  // grows on rank 0 only
      },
      [&](int r) { comms[static_cast<std::size_t>(r)]->user_collective(7); },
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(has(steps[0].errors[static_cast<std::size_t>(r)], "attached as local or symmetric")) << steps[0].errors[static_cast<std::size_t>(r)];
    EXPECT_EQ(ranks[static_cast<std::size_t>(r)].registry->attached(), 0u);
  }
  for (std::size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(steps[k].log_difference, "") << "after step " << k;
  EXPECT_EQ(steps[1].errors[0], "") << "an allocation makes no collective call";
  EXPECT_EQ(group->call_log(0), std::vector<std::string>{"user_collective(7)"});
  EXPECT_FALSE(group->broken());
  ranks[0].pool->deallocate(blocks[0]);
  EXPECT_EQ(group->live_registrations(), 0);
}

// Hole 4: an auto pool attached with another kind on one rank. The kind decides which parts' attaches
// are collective (local: none; symmetric or no kind: the symmetric part's), and it was not in the
// routes agreement: a rank attaching LOCAL returned OK with no window step, while a rank attaching
// SYMMETRIC (or with no kind) entered the symmetric part's attach agreement alone (on NCCL: paired
// with the other rank's next collective). Must: AgreementError at the routes agreement on every
// rank, nothing attached, the application collective after it pairs.
TEST(LockstepAttack, AutoAttachWithAnotherKindOnOneRank) {
  const std::optional<RegistrationKind> kinds[][2] = {{RegistrationKind::symmetric, RegistrationKind::local},
                                                     {std::nullopt, RegistrationKind::local},
                                                     {RegistrationKind::symmetric, std::nullopt}};
  for (const auto& kind : kinds) {
    auto group = nccl_group(2);
    std::vector<std::unique_ptr<RegisteredPool>> pools;
    std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
    std::vector<void*> blocks;
    for (int i = 0; i < 2; ++i) {
      pools.push_back(make_auto_pool("auto", local_then_symmetric(), {CheckLevel::off}));
      comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
      blocks.push_back(pools.back()->allocate(64 * KiB));  // a local-part segment (fixes the routes)
      blocks.push_back(pools.back()->allocate(2 * MiB));   // a symmetric-part segment
    }
    auto pool = [&](int r) -> RegisteredPool& { return *pools[static_cast<std::size_t>(r)]; };
    auto comm = [&](int r) { return comms[static_cast<std::size_t>(r)]; };
    const auto steps = run_in_steps(*group, {
        [&](int r) { pool(r).attach(comm(r), kind[r]); },
        [&](int r) { comm(r)->user_collective(7); },
    });
    const std::string what = std::string("rank 0 ") + (kind[0] ? to_string(*kind[0]) : "no kind") + ", rank 1 " + (kind[1] ? to_string(*kind[1]) : "no kind");
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(has(steps[0].errors[static_cast<std::size_t>(r)], "AgreementError") &&
                  has(steps[0].errors[static_cast<std::size_t>(r)], "attach it with another kind"))
          << what << ": rank " << r << " got: " << steps[0].errors[static_cast<std::size_t>(r)];
      EXPECT_FALSE(pool(r).attached(*comm(r))) << what;
      EXPECT_EQ(steps[1].errors[static_cast<std::size_t>(r)], "") << what << ": the application collective must pair";
    }
    EXPECT_EQ(steps[0].log_difference, "") << what;
    EXPECT_EQ(steps[1].log_difference, "") << what;
    EXPECT_FALSE(group->broken()) << what;
    EXPECT_EQ(group->live_registrations(), 0) << what;
    for (int r = 0; r < 2; ++r) {
      if (pool(r).attached(*comm(r))) pool(r).forget(*comm(r));
      for (void* b : {blocks[static_cast<std::size_t>(2 * r)], blocks[static_cast<std::size_t>(2 * r + 1)]}) pool(r).deallocate(b);
    }
  }
}

// What each attach reports (stats(comm): kind, has_windows, routed; the C ABI's kind and JSON are
// made from these): a Registry's symmetric communicator has windows too (it said 0 at 83d93ff), and
// an auto pool's routes decide has_windows for an attach with no kind.
TEST(LockstepAttack, StatsSayHowEachAttachRegisters) {
  auto group = std::make_shared<LoopbackGroup>("one", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  {
    Rank r = make_rank();
    r.registry->attach(comm, RegistrationKind::symmetric);
    EXPECT_EQ(r.registry->stats(*comm).has_windows, 1);
    r.registry->detach(*comm);
    r.registry->attach(comm, RegistrationKind::local);
    EXPECT_EQ(r.registry->stats(*comm).has_windows, 0);
    r.registry->detach(*comm);
  }
  struct Case {
    SizeRoutes routes;
    std::optional<RegistrationKind> kind;
    RegistrationKind expect_kind;
    int has_windows, routed;
  };
  const SizeRoutes no_windows({{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}});
  const Case cases[] = {
      {local_then_symmetric(), std::nullopt, RegistrationKind::symmetric, 1, 1},
      {local_then_symmetric(), RegistrationKind::local, RegistrationKind::local, 0, 0},
      {local_then_symmetric(), RegistrationKind::symmetric, RegistrationKind::symmetric, 1, 0},
      {no_windows, std::nullopt, RegistrationKind::local, 0, 1},
      {no_windows, RegistrationKind::symmetric, RegistrationKind::symmetric, 1, 0},
      {SizeRoutes(RegistrationKind::none), std::nullopt, RegistrationKind::local, 0, 1},
  };
  for (const Case& c : cases) {
    auto pool = make_auto_pool("auto", c.routes, {CheckLevel::off});
    pool->deallocate(pool->allocate(4 * KiB));  // fixes the routes (a first attach would choose them)
    pool->attach(comm, c.kind);
    const CommunicatorStats s = pool->stats(*comm);
    const std::string what = c.routes.describe() + ", attached " + (c.kind ? to_string(*c.kind) : "with no kind");
    EXPECT_EQ(s.kind, c.expect_kind) << what;
    EXPECT_EQ(s.has_windows, c.has_windows) << what;
    EXPECT_EQ(s.routed, c.routed) << what;
    pool->detach(*comm);
  }
}


}  // namespace
}  // namespace ncclpool

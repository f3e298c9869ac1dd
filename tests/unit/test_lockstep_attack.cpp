// Attacks on "lockstep by construction" (DESIGN.md, "Semantics that must hold": whether a rank takes
// part in a collective step depends only on what every rank already agreed, never on its own state;
// a local failure is this rank's "no"; windows are registered/deregistered only after an agreement in
// which every rank voted yes). Each test makes ONE rank fail or differ, on the loopback in NCCL-like
// matching with short timeouts, and states what must happen and what did happen before the fix (they
// failed at 31b3a3e, when a reviewer attacked the lockstep change; they pass since). A third hole, a
// graph capture on one rank only, is a documented limit (docs/registry.md, "Graph capture").

#include <gtest/gtest.h>

#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/routed_pool.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"

#include <barrier>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;
constexpr auto kTimeout = std::chrono::milliseconds(300);

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string describe_error(const std::exception& e) {
  if (dynamic_cast<const AgreementError*>(&e)) return std::string("AgreementError: ") + e.what();
  if (dynamic_cast<const RegistrationError*>(&e)) return std::string("RegistrationError: ") + e.what();
  if (dynamic_cast<const InvalidArgument*>(&e)) return std::string("InvalidArgument: ") + e.what();
  if (dynamic_cast<const Error*>(&e)) return std::string("Error: ") + e.what();
  return std::string("exception: ") + e.what();
}

// "" when every rank made the same collective calls so far; else both logs.
std::string call_log_difference(const LoopbackGroup& group) {
  std::vector<std::vector<std::string>> logs;
  for (int r = 0; r < group.size(); ++r) logs.push_back(group.call_log(r));
  bool differ = false;
  for (const auto& l : logs) differ = differ || l != logs.front();
  if (!differ) return "";
  std::ostringstream msg;
  msg << "collective call logs differ:";
  for (int r = 0; r < group.size(); ++r) {
    msg << " rank " << r << ": [";
    for (const auto& c : logs[static_cast<std::size_t>(r)]) msg << c << ' ';
    msg << "];";
  }
  return msg.str();
}

struct StepOutcome {
  std::vector<std::string> errors;
  std::string log_difference;
};

// Steps behind a barrier; the group holds completions, so what a non-waiting rank sees depends on the
// steps, not on thread timing. After each step the call logs are compared.
std::vector<StepOutcome> run_in_steps(LoopbackGroup& group, const std::vector<std::function<void(int)>>& steps) {
  const int n = group.size();
  std::vector<StepOutcome> out(steps.size(), StepOutcome{std::vector<std::string>(static_cast<std::size_t>(n)), ""});
  std::size_t current = 0;
  auto after_step = [&]() noexcept {
    out[current].log_difference = call_log_difference(group);
    group.release_completions();
    ++current;
  };
  group.hold_completions(true);
  std::barrier sync(n, after_step);
  (void)on_ranks(n, [&](int rank) {
    for (std::size_t k = 0; k < steps.size(); ++k) {
      try {
        steps[k](rank);
      } catch (const std::exception& e) {
        out[k].errors[static_cast<std::size_t>(rank)] = describe_error(e);
      }
      sync.arrive_and_wait();
    }
  });
  return out;
}

std::shared_ptr<LoopbackGroup> nccl_group(int size) {
  return std::make_shared<LoopbackGroup>("world", size, kTimeout, LoopbackMatching::nccl);
}

std::unique_ptr<RoutedPool> make_auto_pool(const std::string& name, const SizeRoutes& routes) {
  auto make_part = [&](Placement placement) {
    auto source = std::make_shared<SimSource>(SimSourceConfig{});
    PoolConfig config;
    config.name = name + "/" + to_string(placement);
    config.growth_chunk = 2 * MiB;
    config.deterministic = true;
    return std::make_shared<Pool>(source, config);
  };
  return std::make_unique<RoutedPool>(name, make_part, routes, "set by the test", RegistryOptions{CheckLevel::off});
}

// ------------------------------------------------------------------------------------------------
// Hole 1: RoutedPool::attach's undo stops at the first local deregistration failure.
// ------------------------------------------------------------------------------------------------
// An auto pool attached with an explicit LOCAL kind (C ABI: ncclpool_attach_* with
// NCCLPOOL_REGISTRATION_LOCAL on an auto pool) whose routes use two parts: both parts are attached as
// local before the routes agreement. Rank 1's local registration fails, so rank 1 votes no in the
// routes agreement and every rank undoes its local parts. On rank 0 the undo's first deregistration
// fails: Registry::detach then detaches the communicator regardless and throws RegistrationError; the
// undo lambda (routed_pool.cpp, `undo`) answers with forget(), which throws InvalidArgument ("not
// attached") out of the catch handler, out of undo(), so the older part is never undone.
//
// Must: the attach fails on every rank with nothing attached anywhere (docs/registry.md: "All or
// nothing, on every rank together"), and a later attach, the fault gone, succeeds on every rank.
// Did (31b3a3e): rank 0 kept the local part attached (a registration RoutedPool no longer knows of), rank 0's
// error is the InvalidArgument of the forget, and every later attach of that communicator fails on
// EVERY rank (rank 0's part registry refuses "already attached", which is its "no" in the routes
// agreement): one transient local fault on one rank makes the pool unattachable forever.
TEST(LockstepAttack, AutoAttachUndoStopsAtALocalDeregistrationFailure) {
  auto group = nccl_group(2);
  const SizeRoutes routes({{0, Placement::local}, {MiB, Placement::symmetric}});
  std::vector<std::unique_ptr<RoutedPool>> pools;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  std::vector<void*> blocks;
  for (int i = 0; i < 2; ++i) {
    pools.push_back(make_auto_pool("auto", routes));
    comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
    blocks.push_back(pools.back()->allocate(64 * KiB));  // a segment in the local part
    blocks.push_back(pools.back()->allocate(2 * MiB));   // a segment in the symmetric part
  }
  group->inject_failure(LoopbackOp::register_local, 1, 1);    // rank 1: its no in the routes agreement
  group->inject_failure(LoopbackOp::deregister_local, 0, 1);  // rank 0: the undo's first deregistration
  auto pool = [&](int r) -> RoutedPool& { return *pools[static_cast<std::size_t>(r)]; };
  auto comm = [&](int r) { return comms[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::local); },
      [&](int r) { comm(r)->user_collective(7); },
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::local); },  // the retry, no fault left
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(steps[0].errors[static_cast<std::size_t>(r)], "") << "rank " << r << " must fail the attach";
  EXPECT_FALSE(contains(steps[0].errors[0], "InvalidArgument")) << "rank 0's error is the undo's forget, not its cause: " << steps[0].errors[0];
  EXPECT_EQ(steps[0].log_difference, "");
  EXPECT_EQ(steps[1].log_difference, "");
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(steps[2].errors[static_cast<std::size_t>(r)], "") << "rank " << r << ": the retry must succeed once the fault is gone "
                                                                  << "(a part left attached by the failed one refuses it)";
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(pool(r).attached(*comm(r)));
    EXPECT_EQ(pool(r).part(Placement::local)->registry->attached(), 1u);  // once: the retry's own
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
// Did (31b3a3e): part 0 kept its window on every rank, RoutedPool says "not attached" (so neither detach nor
// forget can reach it), and ~Registry later forgets it: windows leak (live_registrations stays 2).
TEST(LockstepAttack, AutoSymmetricAttachUndoLeavesWindowsBehind) {
  auto group = nccl_group(2);
  const SizeRoutes routes({{0, Placement::none}, {64 * KiB, Placement::local}, {MiB, Placement::symmetric}});
  std::vector<std::unique_ptr<RoutedPool>> pools;
  std::vector<std::shared_ptr<LoopbackCommunicator>> comms;
  std::vector<void*> blocks;
  for (int i = 0; i < 2; ++i) {
    pools.push_back(make_auto_pool("auto", routes));
    comms.push_back(std::make_shared<LoopbackCommunicator>(group, i));
    blocks.push_back(pools.back()->allocate(1 * KiB));   // part 0 (none)
    blocks.push_back(pools.back()->allocate(64 * KiB));  // part 1 (local)
    blocks.push_back(pools.back()->allocate(2 * MiB));   // part 2 (symmetric)
  }
  group->inject_failure(LoopbackOp::register_window, 0, 3);    // part 2's window: fails on every rank
  group->inject_failure(LoopbackOp::deregister_window, 0, 1);  // the undo's first window deregistration
  auto pool = [&](int r) -> RoutedPool& { return *pools[static_cast<std::size_t>(r)]; };
  auto comm = [&](int r) { return comms[static_cast<std::size_t>(r)]; };
  const auto steps = run_in_steps(*group, {
      [&](int r) { pool(r).attach(comm(r), RegistrationKind::symmetric); },
      [&](int r) { comm(r)->user_collective(7); },
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(steps[0].errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_FALSE(pool(r).attached(*comm(r)));
    EXPECT_EQ(pool(r).part(Placement::none)->registry->attached(), 0u)
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


}  // namespace
}  // namespace ncclpool

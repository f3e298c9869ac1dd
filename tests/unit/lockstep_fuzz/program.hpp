#pragma once
// The lockstep fuzzer's programs: the same random program for every rank, made from the seed alone,
// with one local fault for one rank. Two layouts of communicators:
//  * world: 2-4 ranks, one communicator of every rank (the layout CI's first seeds were found with:
//    a world program draws exactly what it drew before the layouts, so pinned seeds replay alike);
//  * overlapping: 3 ranks and two partly overlapping groups, A = {0,1} and B = {1,2}, every pool
//    attached to both (as FSDP + expert parallel programs attach one pool to several groups): rank 1
//    agrees in both, ranks 0 and 2 in one each, so a "no" that reaches rank 1 through B must reach
//    rank 0 through A within the same step (a world communicator hides that: every rank sees it).

#include "unit/lockstep_fuzz/steps.hpp"

#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ncclpool {
namespace {

enum class Fault { none, oom, register_local, register_window, scope_throw, profile, trim_race, stop };
constexpr Fault kFaults[] = {Fault::none, Fault::oom, Fault::register_local, Fault::register_window,
                             Fault::scope_throw, Fault::profile, Fault::trim_race, Fault::stop};

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::oom: return "oom";
    case Fault::register_local: return "register_local";
    case Fault::register_window: return "register_window";
    case Fault::scope_throw: return "scope_throw";
    case Fault::profile: return "profile";
    case Fault::trim_race: return "trim_race";
    case Fault::stop: return "stop";
  }
  return "?";
}

std::optional<Fault> fault_from_name(const std::string& name) {
  for (Fault f : kFaults)
    if (name == fault_name(f)) return f;
  return std::nullopt;
}

enum class Layout { world, overlapping };
const char* layout_name(Layout l) { return l == Layout::world ? "world" : "overlapping groups A={0,1}, B={1,2}"; }

// How a pool of the program is made and attached.
enum class PoolKind { single_symmetric, single_local, auto_placed, auto_symmetric };
const char* pool_kind_name(PoolKind k) {
  switch (k) {
    case PoolKind::single_symmetric: return "single pool, symmetric";
    case PoolKind::single_local: return "single pool, local";
    case PoolKind::auto_placed: return "auto pool, kind by routes";
    case PoolKind::auto_symmetric: return "auto pool, kind symmetric";
  }
  return "?";
}

enum class OpKind { attach, detach, alloc, free, scope_use, commit, trim, user_collective, final_commit, teardown };

struct Alloc {
  int id = 0;
  std::size_t bytes = 0;
  stream_t stream = 0;
};

struct Op {
  OpKind kind = OpKind::commit;
  int pool = 0;
  Alloc alloc;                // alloc: the block; free: id and stream
  std::vector<Alloc> inside;  // scope_use: allocations made inside the scope
  int group = 0;              // attach, detach, user_collective: which communicator (its members act)
};

constexpr std::size_t kGrowthBytes = 4 * MiB;  // larger than any segment a program makes otherwise (2 MiB chunks, 3 MiB requests): always grows

struct Program {
  std::uint64_t seed = 0;
  Layout layout = Layout::world;
  int ranks = 2;
  std::vector<std::vector<int>> groups;  // by group: its members, group rank = index
  std::vector<PoolKind> pools;
  CheckLevel check = CheckLevel::off;
  bool profile_has_windows = true;  // the profile: local below 1 MiB, symmetric above; else none/local only
  std::vector<Op> ops;
  Fault fault = Fault::none;
  std::vector<std::uint64_t> nodes;  // by rank, LoopbackGroup::set_node (empty: every rank on this host)
  int fault_rank = 0;
  std::size_t fault_step = 0;
  int fault_group = 0;  // register_local/register_window: the group whose registration fails
  int oom_pool = 0;
  RegistrationKind oom_part = RegistrationKind::symmetric;
  bool growth_at_fault = false;   // the fault step starts with an allocation that must grow its pool (an OOM hits the part it routes to)
  int skip_collective_rank = -1;
  // The loopback's timeout. A program whose rank stops waits one timeout (more where groups overlap:
  // a partner that waited comes late to its other group): those get a shorter one, which only ends
  // the wait for a rank that never comes sooner; every other program keeps kTimeout, so that a slow
  // step (sanitizers) never times out where every rank calls.
  std::chrono::milliseconds timeout = kTimeout;  // the harness's self-test only: this rank skips application collectives (a hang)

  [[nodiscard]] std::string group_name(int g) const { return layout == Layout::world ? "world" : std::string(1, static_cast<char>('A' + g)); }
  [[nodiscard]] bool member(int rank, int g) const {
    for (int m : groups[static_cast<std::size_t>(g)])
      if (m == rank) return true;
    return false;
  }
  // rank's index in group g (-1: not a member).
  [[nodiscard]] int group_rank(int rank, int g) const {
    const auto& members = groups[static_cast<std::size_t>(g)];
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank) return static_cast<int>(i);
    return -1;
  }

  [[nodiscard]] std::string describe_op(const Op& op) const {
    std::ostringstream o;
    const std::string on = layout == Layout::world ? "" : " on " + group_name(op.group);
    switch (op.kind) {
      case OpKind::attach: o << "attach pool " << op.pool << on; break;
      case OpKind::detach: o << "detach pool " << op.pool << on; break;
      case OpKind::alloc: o << "alloc #" << op.alloc.id << " of " << op.alloc.bytes << " bytes on stream " << op.alloc.stream << " from pool " << op.pool; break;
      case OpKind::free: o << "free #" << op.alloc.id << " on stream " << op.alloc.stream; break;
      case OpKind::scope_use:
        o << "scope on pool " << op.pool << " allocating";
        for (const Alloc& a : op.inside) o << " #" << a.id << " (" << a.bytes << " bytes, stream " << a.stream << ")";
        if (op.inside.empty()) o << " nothing";
        break;
      case OpKind::commit: o << "commit pool " << op.pool; break;
      case OpKind::trim: o << "trim pool " << op.pool; break;
      case OpKind::user_collective: o << "application collective" << on; break;
      case OpKind::final_commit: o << "final commit of every pool"; break;
      case OpKind::teardown: o << "teardown (detach every pool, destroy)"; break;
    }
    return o.str();
  }

  [[nodiscard]] std::string describe() const {
    std::ostringstream o;
    o << "seed " << seed << " (" << layout_name(layout) << "): " << ranks << " ranks, fault " << fault_name(fault) << " on rank " << fault_rank
      << " at step " << fault_step;
    if (layout != Layout::world && (fault == Fault::register_local || fault == Fault::register_window)) o << " in group " << group_name(fault_group);
    o << ", check " << to_string(check) << ", profile " << (profile_has_windows ? "local<1MiB/symmetric" : "none<64KiB/local") << "; pools:";
    for (std::size_t i = 0; i < pools.size(); ++i) o << " [" << i << "] " << pool_kind_name(pools[i]) << ";";
    if (fault == Fault::oom)
      o << " OOM in pool " << oom_pool << " (" << (growth_at_fault ? "the part its step's " + std::to_string(kGrowthBytes) + " bytes route to" : std::string(to_string(oom_part)) + " part") << " if auto)";
    o << "\n";
    for (std::size_t k = 0; k < ops.size(); ++k) o << "  step " << k << ": " << describe_op(ops[k]) << "\n";
    return o.str();
  }
};

constexpr std::size_t kSizes[] = {4 * KiB, 64 * KiB, 256 * KiB, MiB, 1536 * KiB, 2 * MiB, 3 * MiB};

// Issue 49 item 8: a fault fires on the next call of its kind, so a program without such a call after
// the fault step tests nothing. With `ensure_firing` the program gets that call at the fault step: an
// allocation that must grow (oom), in a pool attached locally (register_local) or with windows and
// then committed (register_window) to the fault's group; an auto pool whose routes the profile decides
// (profile); an application collective of the stopped rank's group (stop). scope_throw and trim_race
// always had their step.
void make_fault_fire(Program& p, int& next_id) {
  const bool overlapping = p.layout == Layout::overlapping;
  long at = static_cast<long>(p.fault_step);
  int target = p.oom_pool;
  auto ensure_kind = [&](std::initializer_list<PoolKind> kinds) {
    for (std::size_t i = 0; i < p.pools.size(); ++i)
      for (PoolKind k : kinds)
        if (p.pools[i] == k) return void(target = static_cast<int>(i));
    p.pools[static_cast<std::size_t>(target)] = *kinds.begin();
  };
  auto grow = [&] { return Op{OpKind::alloc, target, Alloc{next_id++, kGrowthBytes, 0}, {}, 0}; };
  auto attach = [&] { return Op{OpKind::attach, target, {}, {}, p.fault_group}; };  // a no-op where attached
  std::vector<Op> ops;
  switch (p.fault) {
    case Fault::oom:
      if (overlapping) ensure_kind({PoolKind::single_symmetric, PoolKind::auto_symmetric});  // for the agreements below
      p.oom_pool = target;
      p.growth_at_fault = true;
      ops = {grow()};
      break;
    case Fault::register_local:
      ensure_kind({PoolKind::single_local});
      ops = {attach(), grow()};
      break;
    case Fault::register_window:
      ensure_kind({PoolKind::single_symmetric, PoolKind::auto_symmetric});
      ops = {attach(), grow(), Op{OpKind::commit, target, {}, {}, 0}};
      break;
    case Fault::scope_throw:  // make_program puts the scope at the fault step where none is there
      if (p.ops[static_cast<std::size_t>(at)].kind == OpKind::scope_use) ++at;
      target = p.ops[static_cast<std::size_t>(p.fault_step)].pool;
      break;
    case Fault::profile: ensure_kind({PoolKind::auto_placed}); break;
    case Fault::stop: ops = {Op{OpKind::user_collective, 0, {}, {}, p.fault_group}}; break;
    default: break;
  }
  // Where groups overlap, a commit and a trim of that pool follow: a rank with nothing to register at
  // the commit learns of a mismatch late and says no at its next step in that group; trim agrees in
  // two rounds (candidates, then every rank's verdict), so a "no" that rank 1 hears in one group must
  // reach the other group's rank through the verdict round of the same trim.
  if (overlapping && p.fault != Fault::trim_race && p.fault != Fault::none) {
    std::vector<Op> both;  // attached to both groups again where the program detached it (no-ops where attached)
    for (int g = 0; g < static_cast<int>(p.groups.size()); ++g) both.push_back(Op{OpKind::attach, target, {}, {}, g});
    ops.insert(ops.begin(), both.begin(), both.end());
    ops.push_back(Op{OpKind::commit, target, {}, {}, 0});
    ops.push_back(Op{OpKind::trim, target, {}, {}, 0});
  }
  p.ops.insert(p.ops.begin() + at, ops.begin(), ops.end());
}

// The same program for every rank, from the seed alone. `forced` overrides the fault kind. A world
// program draws what it drew before layouts existed (the overlapping layout's extra draws come where
// the world layout makes none), so the pinned seeds below replay the programs that found their holes.
Program make_program(std::uint64_t seed, std::optional<Fault> forced, Layout layout = Layout::world, bool ensure_firing = true) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const bool overlapping = layout == Layout::overlapping;
  Program p;
  p.seed = seed;
  p.layout = layout;
  p.ranks = 2 + static_cast<int>(pick(3));
  if (overlapping) {
    p.ranks = 3;
    p.groups = {{0, 1}, {1, 2}};
  } else {
    p.groups.emplace_back();
    for (int r = 0; r < p.ranks; ++r) p.groups.back().push_back(r);
  }
  const int group_count = static_cast<int>(p.groups.size());
  const std::size_t pool_count = 1 + pick(2);
  for (std::size_t i = 0; i < pool_count; ++i) p.pools.push_back(static_cast<PoolKind>(pick(4)));
  p.check = pick(4) == 0 ? CheckLevel::layout : CheckLevel::off;
  p.profile_has_windows = pick(2) == 0;

  std::vector<std::vector<bool>> attached(pool_count, std::vector<bool>(p.groups.size(), false));
  std::vector<std::pair<int, int>> live;  // (id, pool)
  int next_id = 0;
  auto new_alloc = [&](int pool) {
    Alloc a{next_id++, kSizes[pick(std::size(kSizes))], static_cast<stream_t>(pick(3))};
    live.emplace_back(a.id, pool);
    return a;
  };
  for (std::size_t i = 0; i < pool_count; ++i) {
    const bool reversed = overlapping && pick(2) == 1;  // rank 1 agrees in A then B, or B then A
    for (int j = 0; j < group_count; ++j) {
      const int g = reversed ? group_count - 1 - j : j;
      p.ops.push_back(Op{OpKind::attach, static_cast<int>(i), {}, {}, g});
      attached[i][static_cast<std::size_t>(g)] = true;
    }
  }
  const std::size_t first_steps = p.ops.size();
  const std::size_t length = 18 + pick(20);
  for (std::size_t k = 0; k < length; ++k) {
    const int pool = static_cast<int>(pick(pool_count));
    const std::size_t roll = pick(100);
    Op op{OpKind::commit, pool, {}, {}, 0};
    if (roll < 30) {
      op.kind = OpKind::alloc;
      op.alloc = new_alloc(pool);
    } else if (roll < 48 && !live.empty()) {
      op.kind = OpKind::free;
      const std::size_t which = pick(live.size());
      op.alloc.id = live[which].first;
      op.alloc.stream = static_cast<stream_t>(pick(3));
      live.erase(live.begin() + static_cast<long>(which));
    } else if (roll < 63) {
      op.kind = OpKind::scope_use;
      const std::size_t inside = pick(3);
      for (std::size_t i = 0; i < inside; ++i) op.inside.push_back(new_alloc(pool));
    } else if (roll < 75) {
      op.kind = OpKind::commit;
    } else if (roll < 81) {
      op.kind = OpKind::trim;
    } else if (roll < 87) {
      op.kind = OpKind::user_collective;
      if (overlapping) op.group = static_cast<int>(pick(p.groups.size()));
    } else if (roll < 94) {
      if (overlapping) op.group = static_cast<int>(pick(p.groups.size()));
      auto&& is_attached = attached[static_cast<std::size_t>(pool)][static_cast<std::size_t>(op.group)];
      op.kind = is_attached ? OpKind::detach : OpKind::attach;
      is_attached = !is_attached;
    } else {
      op.kind = OpKind::commit;
    }
    p.ops.push_back(op);
  }

  p.fault = forced ? *forced : kFaults[seed % std::size(kFaults)];  // a fixed seed set covers every kind
  p.fault_rank = static_cast<int>(pick(static_cast<std::size_t>(p.ranks)));
  p.fault_step = first_steps + pick(p.ops.size() - first_steps);  // after the first attaches
  p.oom_pool = static_cast<int>(pick(pool_count));
  p.oom_part = pick(3) == 0 ? RegistrationKind::local : RegistrationKind::symmetric;
  if (overlapping) {  // a group the fault rank belongs to
    std::vector<int> mine;
    for (int g = 0; g < group_count; ++g)
      if (p.member(p.fault_rank, g)) mine.push_back(g);
    p.fault_group = mine[pick(mine.size())];
  }
  if (ensure_firing) make_fault_fire(p, next_id);
  if (p.fault == Fault::stop) p.timeout = std::chrono::milliseconds(100);
  // Faults that act in a kind of step get one at their step, so that they always fire.
  if (p.fault == Fault::scope_throw && p.ops[p.fault_step].kind != OpKind::scope_use) {
    Op op{OpKind::scope_use, p.ops[p.fault_step].pool, {}, {}, 0};
    op.inside.push_back(Alloc{next_id++, 64 * KiB, 0});
    p.ops.insert(p.ops.begin() + static_cast<long>(p.fault_step), op);
  }
  if (p.fault == Fault::trim_race && p.ops[p.fault_step].kind != OpKind::trim)
    p.ops.insert(p.ops.begin() + static_cast<long>(p.fault_step), Op{OpKind::trim, p.ops[p.fault_step].pool, {}, {}, 0});
  p.ops.push_back(Op{OpKind::final_commit, 0, {}, {}, 0});  // the agreement point where late errors surface
  p.ops.push_back(Op{OpKind::teardown, 0, {}, {}, 0});
  return p;
}

bool is_auto(PoolKind k) { return k == PoolKind::auto_placed || k == PoolKind::auto_symmetric; }

std::optional<RegistrationKind> attach_kind(PoolKind k) {
  switch (k) {
    case PoolKind::single_symmetric: return RegistrationKind::symmetric;
    case PoolKind::single_local: return RegistrationKind::local;
    case PoolKind::auto_placed: return std::nullopt;
    case PoolKind::auto_symmetric: return RegistrationKind::symmetric;
  }
  return std::nullopt;
}

}  // namespace
}  // namespace ncclpool

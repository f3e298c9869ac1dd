// `ncclpool bench scope`: what one use of a pool by a communication group costs, for S segments
// shared by G groups, under three strategies:
//   ncclpool   - one pool; every segment registered once per group; a use is a scope (enter + end;
//                a scheduled scope end, the first 16 then every 16th, commits with nothing pending:
//                one enqueued agreement all-gather per symmetric group). Also: an explicit commit.
//   megatron   - one pool; each use registers the whole pool with the group and deregisters it at
//                the end (Megatron-LM's nccl_allocator pattern)
//   per-group  - one pool per group (SGLang's approach): uses are cheap, memory is G times larger
// On GPUs the groups are real NCCL communicators (one thread per GPU); without, loopback ones.

#include "bench.hpp"
#include "commands.hpp"

#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>

namespace ncclpool::tool {
namespace {

constexpr const char* kHelp =
    "usage: ncclpool bench scope [--segments 1,8,64] [--groups 1,2,4] [--chunk-mib 32] [--ranks N]\n"
    "                            [--kind symmetric|local] [--uses 10000] [--megatron-uses N] [--sim] [--json]\n"
    "\n"
    "Cost of one use of a pool of S segments (--chunk-mib each) by one of G groups, for ncclpool,\n"
    "the Megatron pattern (register the whole pool on each use, deregister after) and one pool per group.\n"
    "On GPUs (one thread per GPU, --ranks of them, default all) with NCCL; without, or with --sim, on\n"
    "loopback communicators (--ranks threads, default 2). --kind defaults to symmetric where windows work.\n";

struct Outcome {
  double setup_s = 0;    // registration before the first use
  double per_use_s = 0;       // back to back: with symmetric groups, the device's pace of agreements
  double host_per_use_s = 0;  // the calling thread's cost when the device is not behind (bursts)
  double registrations_per_use = 0;
  std::size_t reserved = 0;
  double agreements_per_use = 0;  // over the timed uses (after the first scope_period: steady state)
  double commit_host_s = 0;       // an explicit commit with nothing pending (bursts, as host_per_use_s)
};

PoolConfig pool_config(std::size_t chunk) {
  PoolConfig c;
  c.name = "bench-scope";
  c.deterministic = true;  // windows need the same layout on every rank
  c.growth_chunk = chunk;
  return c;
}

// One pool of `segments` segments (one block of `chunk` bytes each, kept live).
struct FilledPool {
  std::shared_ptr<Pool> pool;
  std::vector<void*> blocks;
  FilledPool(std::shared_ptr<SegmentSource> source, int segments, std::size_t chunk) : pool(std::make_shared<Pool>(std::move(source), pool_config(chunk))) {
    for (int s = 0; s < segments; ++s) blocks.push_back(pool->allocate(chunk));
  }
  ~FilledPool() {
    for (void* b : blocks) pool->deallocate(b);
  }
};

struct Config {
  int segments = 1, groups = 1, uses = 10000, megatron_uses = 3;
  std::size_t chunk = 32u << 20;
  RegistrationKind kind = RegistrationKind::symmetric;
};

// ncclpool (one pool registered with every group) and per-group (one pool per group, each registered
// with its own) differ only in how pools map to groups. Every rank runs the same calls in the same
// order (registration is collective); rank 0's times are reported.
Outcome run_registered(Team& team, const Config& c, bool pool_per_group) {
  Outcome out;
  const int pools = pool_per_group ? c.groups : 1;
  run_on_ranks(team.ranks(), [&](int rank, RankBarrier& sync) {
    std::vector<std::unique_ptr<FilledPool>> filled;
    std::vector<std::unique_ptr<Registry>> registries;
    for (int p = 0; p < pools; ++p) {
      filled.push_back(std::make_unique<FilledPool>(team.source(rank), c.segments, c.chunk));
      registries.push_back(std::make_unique<Registry>(filled.back()->pool));
    }
    auto registry_of_group = [&](int g) -> Registry& { return *registries[static_cast<std::size_t>(pool_per_group ? g : 0)]; };
    sync.wait();
    auto t = BenchClock::now();
    for (int g = 0; g < c.groups; ++g) registry_of_group(g).attach(team.comm(rank, g), c.kind);
    const double setup = seconds_since(t);
    auto agreements = [&] {
      std::uint64_t n = 0;
      for (int g = 0; g < c.groups; ++g) n += registry_of_group(g).stats(*team.comm(rank, g)).agreements;
      return n;
    };
    auto use = [&](int i) {
      Scope scope(registry_of_group(i % c.groups));
      scope.close();  // at scheduled scope ends: one agreement all-gather per symmetric group, enqueued, not waited for
    };
    // The first scope ends of a registry all agree (a pool grows in its first uses): past them, the steady state.
    for (int i = 0; i < static_cast<int>(RegistryOptions::kDefaultScopePeriod) * c.groups; ++i) use(i);
    const std::uint64_t agreements_before = agreements();
    t = BenchClock::now();
    for (int i = 0; i < c.uses; ++i) use(i);
    const double per_use = seconds_since(t) / c.uses;
    const double agreements_per_use = static_cast<double>(agreements() - agreements_before) / c.uses;
    // Host cost: bursts of a few uses, then (not timed) until their agreements completed, so that no
    // use waits for the device: what a use costs a thread whose GPU keeps up (the usual case: uses
    // sit between kernels). Back-to-back uses above are paced by the device instead.
    constexpr int kBurst = 4;
    auto bursts = [&](const std::function<void(int)>& body) {
      double host = 0;
      int timed = 0;
      for (int b = 0; b < std::max(1, c.uses / 10 / kBurst); ++b) {
        const auto burst = BenchClock::now();
        for (int i = 0; i < kBurst; ++i) body(timed + i);
        host += seconds_since(burst);
        timed += kBurst;
        for (int g = 0; g < c.groups; ++g) {
          Registry& r = registry_of_group(g);
          while (r.stats(*team.comm(rank, g)).agreements_in_flight != 0) r.poll();
        }
      }
      return host / timed;
    };
    const double host = bursts(use);
    // What every use cost when each scope end agreed (before the schedule): an explicit commit.
    const double commit_host = bursts([&](int i) { registry_of_group(i % c.groups).commit(); });
    std::size_t reserved = 0;
    for (const auto& f : filled) reserved += f->pool->stats().reserved_bytes;
    if (rank == 0) out = Outcome{setup, per_use, host, 0, reserved, agreements_per_use, commit_host};
    sync.wait();
    for (int g = 0; g < c.groups; ++g) registry_of_group(g).detach(*team.comm(rank, g));
  });
  return out;
}

Outcome run_megatron(Team& team, const Config& c) {
  Outcome out;
  run_on_ranks(team.ranks(), [&](int rank, RankBarrier& sync) {
    FilledPool fp(team.source(rank), c.segments, c.chunk);
    const auto segments = fp.pool->segments();
    sync.wait();
    const auto t = BenchClock::now();
    for (int i = 0; i < c.megatron_uses; ++i) {
      Communicator& comm = *team.comm(rank, i % c.groups);
      std::vector<void*> handles;
      handles.reserve(segments.size());
      for (const auto& s : segments)  // entering the context: register_mem_pool(pool, group)
        handles.push_back(registration_ops(c.kind).register_segment(comm, s.base, s.size));
      for (void* h : handles) registration_ops(c.kind).deregister_segment(comm, h);  // leaving it: deregister_mem_pool(pool, group)
    }
    const double per_use = seconds_since(t) / c.megatron_uses;
    if (rank == 0) out = Outcome{0, per_use, per_use, 2.0 * static_cast<double>(segments.size()), fp.pool->stats().reserved_bytes};
  });
  return out;
}

}  // namespace

const char* const kBenchScopeUsage = kHelp;

int cmd_bench_scope(const Args& a) {
  if (a.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::vector<int> segment_counts = parse_int_list("segments", a.get("segments", "1,8,64"), 1, 100000);
  const std::vector<int> group_counts = parse_int_list("groups", a.get("groups", "1,2,4"), 1, 64);
  Config base;
  base.chunk = static_cast<std::size_t>(a.get_int("chunk-mib", 32, 1, 1 << 20)) << 20;
  base.uses = static_cast<int>(a.get_int("uses", 10000, 1, 100000000));
  const std::string kind_name = a.get("kind", "");
  if (!kind_name.empty() && kind_name != "symmetric" && kind_name != "local") throw UsageError("--kind must be symmetric or local, not '" + kind_name + "'");

  std::string why_no_gpu;
  const int gpus = a.has("sim") ? 0 : gpu_count(&why_no_gpu);
  const bool use_gpu = gpus > 0;
  const int ranks = static_cast<int>(a.get_int("ranks", use_gpu ? gpus : 2, 1, use_gpu ? gpus : 64));
  base.megatron_uses = static_cast<int>(a.get_int("megatron-uses", use_gpu ? 3 : 20, 1, 1000000));
  const int max_groups = *std::max_element(group_counts.begin(), group_counts.end());
  std::unique_ptr<Team> team = use_gpu ? make_nccl_team(ranks, max_groups) : make_loopback_team(ranks, max_groups);
  std::string why_no_windows;
  const bool windows = team->windows(&why_no_windows);
  if (kind_name == "symmetric" && !windows) throw Unsupported("--kind symmetric: " + why_no_windows);
  base.kind = kind_name == "local" || !windows ? RegistrationKind::local : RegistrationKind::symmetric;

  Report report;
  report.suite = "scope";
  report.facts.push_back({"ranks", team->description()});
  if (!use_gpu && !a.has("sim")) report.facts.push_back({"no GPU", why_no_gpu + " -> loopback communicators"});
  report.facts.push_back({"registration", std::string(to_string(base.kind)) + (windows || base.kind == RegistrationKind::local ? "" : " (windows unavailable: " + why_no_windows + ")")});
  report.facts.push_back({"segments", format_bytes(base.chunk) + " each; uses: " + std::to_string(base.uses) + " (megatron: " + std::to_string(base.megatron_uses) + ")"});

  Table table;
  table.title = "one use of the pool by one group (uses rotate over the groups); rank 0";
  table.headers = {"S", "G", "strategy", "setup ms", "per use us", "host us/use", "agreements/use", "commit host us", "registrations/use", "reserved", "per use vs ncclpool"};
  table.keys = {"segments", "groups", "strategy", "setup_ms", "per_use_us", "host_per_use_us", "agreements_per_use", "commit_host_us", "registrations_per_use", "reserved_bytes", "ratio"};
  Progress progress("bench scope", segment_counts.size() * group_counts.size() * 3);
  double target_ratio = 0;
  for (int s : segment_counts) {
    for (int g : group_counts) {
      Config c = base;
      c.segments = s;
      c.groups = g;
      const std::string label = "S=" + std::to_string(s) + " G=" + std::to_string(g);
      progress.step(label + " ncclpool");
      const Outcome mine = run_registered(*team, c, /*pool_per_group=*/false);
      progress.step(label + " megatron");
      const Outcome megatron = run_megatron(*team, c);
      progress.step(label + " per-group");
      const Outcome per_group = run_registered(*team, c, /*pool_per_group=*/true);
      auto add = [&](const char* name, const Outcome& o) {
        table.add({integer_cell(s), integer_cell(g), text_cell(name), number_cell(o.setup_s * 1e3, 2), number_cell(o.per_use_s * 1e6, 3),
                   number_cell(o.host_per_use_s * 1e6, 3), number_cell(o.agreements_per_use, 3), number_cell(o.commit_host_s * 1e6, 3),
                   number_cell(o.registrations_per_use, 0), bytes_cell(o.reserved), number_cell(o.per_use_s / mine.per_use_s, 1)});
      };
      add("ncclpool", mine);
      add("megatron", megatron);
      add("per-group", per_group);
      if (s == 64 && g == 2) target_ratio = megatron.per_use_s / mine.per_use_s;
    }
  }
  progress.finish();
  report.tables.push_back(std::move(table));
  if (target_ratio > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "S = 64, G = 2 (%s): a use costs %.0fx less with ncclpool than with the Megatron pattern", to_string(base.kind), target_ratio);
    report.notes.push_back(buf);
  }
  report.notes.push_back("per-group uses cost what ncclpool's do, but reserve G times the memory");
  report.notes.push_back("per use: uses back to back, after the registry's first 16 scope ends (each of which agrees); every 16th "
                         "scope end then agrees (one all-gather per symmetric group: agreements/use). host us/use: bursts of 4 uses "
                         "with the device caught up in between: the calling thread's cost. commit host us: the same for an explicit "
                         "commit with nothing pending (one agreement per symmetric group), what every use cost when each scope "
                         "end agreed");
  print(report, a.json);
  return 0;
}

}  // namespace ncclpool::tool

// `ncclpool bench coll`: argument handling and output; the measurement is in gpu_coll*.cpp.

#include "bench.hpp"
#include "commands.hpp"

#include <ncclpool/errors.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ncclpool::tool {
namespace {

constexpr const char* kHelp =
    "usage: ncclpool bench coll [--ops all_gather,reduce_scatter,all_reduce] [--kinds none,local,symmetric[,ce]]\n"
    "                           [--min 1K] [--max 1G] [--factor 2] [--warmup 5] [--iters 20] [--ranks N]\n"
    "                           [--no-check] [--auto] [--auto-pool [--pool-for op|any]] [--graph [--replays 5]] [--rounds 1]\n"
    "                           [--compute] [--json]\n"
    "\n"
    "Bus bandwidth and time of collectives on ncclpool memory, one thread per GPU, with no registration,\n"
    "local registration (ncclCommRegister) and symmetric windows, measured with nccl-tests' conventions\n"
    "(size, busbw formula, warm-up, out-of-place and in-place) so the figures compare with nccl-tests -R 0/1/2.\n"
    "--auto adds the kind ncclpool would choose for each size class (the cheapest kind to hold unless a costlier\n"
    "one measured >= 2% faster there), measured again. --auto-pool adds buffers allocated from the library's auto\n"
    "pool (registration 'auto': routed by size to a none, local or symmetric part as this machine's profile or\n"
    "the built-in routes say), with its ratio to the best kind and to none; its buffers are asked for their op\n"
    "(ncclpool_alloc_for), or with --pool-for any for no collective (ncclpool_alloc: the routes' 'any', what\n"
    "torch's allocations through ncclpool.torch get outside a collective scope). --graph captures the --iters\n"
    "launches in a CUDA graph and times --replays replays of it: no host launch cost, so small sizes are resolved\n"
    "(NCCL may register captured buffers itself, NCCL_GRAPH_REGISTER). --rounds N measures every point N times,\n"
    "the kinds in an order rotated each round, and reports medians and each row's spread (max - min over rounds /\n"
    "median): ratios within the spread are noise. --compute also runs each collective beside a compute-bound\n"
    "kernel on another stream, as a training step overlaps them, and reports the collective's time meanwhile and\n"
    "how much longer the two take than the compute alone (what its CTAs cost the compute). Kind ce (not measured\n"
    "unless named) puts the buffers in windows of a communicator made with NCCL's CTA policy ZERO: NCCL >= 2.28\n"
    "moves all-gather with the copy engines there (no SMs; needs 2+ ranks in one node and symmetric kernels on:\n"
    "NCCLPOOL_SYMMETRIC_KERNELS); it is measured for all-gather only (NCCL's copy engines carry no reduction).\n"
    "Needs GPUs; without, it says why and exits 1.\n";

std::vector<std::string> split_names(const std::string& option, const std::string& text, const std::vector<std::string>& allowed) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == item;
    if (!ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw UsageError("--" + option + ": '" + item + "' is not one of " + list);
    }
    out.push_back(item);
  }
  if (out.empty()) throw UsageError("--" + option + " needs at least one value");
  return out;
}

}  // namespace

const char* const kBenchCollUsage = kHelp;

CollOptions parse_coll_options(const Args& a) {
  CollOptions o;
  o.ops = split_names("ops", a.get("ops", "all_gather,reduce_scatter,all_reduce"), {"all_gather", "reduce_scatter", "all_reduce"});
  o.kinds = split_names("kinds", a.get("kinds", "none,local,symmetric"), {"none", "local", "symmetric", "ce"});
  o.min_bytes = parse_bytes("min", a.get("min", "1K"));
  o.max_bytes = parse_bytes("max", a.get("max", "1G"));
  if (o.min_bytes > o.max_bytes) throw UsageError("--min is larger than --max");
  o.factor = static_cast<int>(a.get_int("factor", 2, 2, 1024));
  o.warmup = static_cast<int>(a.get_int("warmup", 5, 0, 100000));
  o.iters = static_cast<int>(a.get_int("iters", 20, 1, 1000000));
  o.ranks = static_cast<int>(a.get_int("ranks", 0, 0, 1024));
  o.check = !a.has("no-check");
  o.auto_kind = a.has("auto");
  // --auto picks among the registration kinds; ce is another communicator, never a pick (gpu_coll.cpp).
  if (o.auto_kind && std::find_if(o.kinds.begin(), o.kinds.end(), [](const std::string& k) { return k != "ce"; }) == o.kinds.end())
    throw UsageError("--auto picks the fastest of none, local and symmetric: name at least one of them in --kinds (ce is another "
                     "communicator, not a registration kind)");
  o.auto_pool = a.has("auto-pool");
  const std::string pool_for = a.get("pool-for", "op");
  if (pool_for != "op" && pool_for != "any") throw UsageError("--pool-for: '" + pool_for + "' is not one of op, any");
  if (a.has("pool-for") && !o.auto_pool) throw UsageError("--pool-for says how --auto-pool's buffers are asked for: add --auto-pool");
  o.pool_for_any = pool_for == "any";
  o.graph = a.has("graph");
  o.replays = static_cast<int>(a.get_int("replays", 5, 1, 100000));
  o.rounds = static_cast<int>(a.get_int("rounds", 1, 1, 1000));
  o.compute = a.has("compute");
  return o;
}

int cmd_bench_coll(const Args& a) {
  if (a.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const CollOptions o = parse_coll_options(a);
  Report report;
  report.suite = "coll";
  run_coll(o, report);
  print(report, a.json);
  return 0;
}

}  // namespace ncclpool::tool

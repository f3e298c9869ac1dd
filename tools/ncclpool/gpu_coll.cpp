// `ncclpool bench coll` on GPUs: all-gather, reduce-scatter and all-reduce on ncclpool memory with
// no registration, local registration (ncclCommRegister) and symmetric windows, measured the way
// nccl-tests measures (doc/PERFORMANCE.md of NVIDIA/nccl-tests):
//   * one thread per GPU, float data, sum; sizes from min to max by a factor;
//   * size = total bytes of the gathered output (all-gather), of the scattered input
//     (reduce-scatter), of the buffer (all-reduce); the per-rank count is rounded down to fit;
//   * warm-up launches, then `iters` launches back to back, one stream synchronize, host time / iters,
//     averaged over the ranks; out-of-place and in-place (nccl-tests' buffer offsets);
//   * algbw = size / time, busbw = algbw * (n-1)/n (all-gather, reduce-scatter) or 2(n-1)/n (all-reduce);
//   * a check run before the timing (known inputs, sampled outputs): the `wrong` column.
// The three kinds share one pool per GPU (its segments registered with a second communicator locally
// and as windows with a third): exactly the situation ncclpool is for.

#include "gpu_coll.hpp"

#include "core/environment.hpp"

#include <ncclpool/nccl.hpp>

#include <set>


namespace ncclpool::tool {
namespace {

std::vector<std::size_t> size_sweep(const CollOptions& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= static_cast<std::size_t>(o.factor)) {
    sizes.push_back(b);
    if (o.factor < 2) break;
  }
  return sizes;
}

std::string nvls_setting() {
  const char* v = environment::nccl_nvls_enable();
  return v ? v : "(unset)";
}

}  // namespace

using namespace coll;

void run_coll(const CollOptions& o, Report& report) {
  std::string why;
  const int gpus = gpu_count(&why);
  if (gpus == 0) throw Unsupported("bench coll needs GPUs: " + why);
  const int ranks = o.ranks == 0 ? gpus : o.ranks;
  // Every collective on windows below follows symmetric_fence (RankRunner::measure_on): with NCCL's
  // hazard, `auto` then measures the symmetric kernels fenced, as ncclpool.torch runs them.
  prefer_symmetric_fence();
  if (ranks > gpus) throw InvalidArgument("--ranks " + std::to_string(ranks) + ": there are " + std::to_string(gpus) + " GPU(s)");
  Sweep sweep;
  sweep.ranks = ranks;
  std::vector<int>& kinds = sweep.kinds;
  for (const auto& k : o.kinds) kinds.push_back(kind_index(k));
  auto measures = [&kinds](int kind) { return std::find(kinds.begin(), kinds.end(), kind) != kinds.end(); };
  auto skip = [&](int kind, const std::string& reason) {
    kinds.erase(std::remove(kinds.begin(), kinds.end(), kind), kinds.end());
    report.notes.push_back(std::string(kKindNames[kind]) + " skipped: " + reason);
  };
  // Group k carries kind k (none, local, symmetric, ce: made with CTA policy ZERO); 4: the auto pool.
  if (measures(kCopyEngine) && std::none_of(o.ops.begin(), o.ops.end(), [](const std::string& op) { return kind_carries(kCopyEngine, op); }))
    skip(kCopyEngine, "measured for all-gather only, and --ops has none");  // no ZERO-policy communicator and windows for nothing
  const int nccl_version = nccl_info().version;  // nccl_info() also looks for other NCCL copies: once
  if (measures(kCopyEngine) && nccl_version < kNcclFirstWithCtaPolicy) skip(kCopyEngine, "NCCL " + std::to_string(nccl_version) + " has no CTA policy (needs >= 2.28)");
  auto team = make_nccl_team(ranks, o.auto_pool ? 5 : 4, measures(kCopyEngine) ? std::set<int>{kCopyEngine} : std::set<int>{});
  std::string why_no_windows;
  if ((measures(kSymmetric) || measures(kCopyEngine)) && !team->windows(&why_no_windows)) {
    if (measures(kSymmetric)) skip(kSymmetric, why_no_windows);
    if (measures(kCopyEngine)) skip(kCopyEngine, why_no_windows);
  }
  if (measures(kCopyEngine)) {
    // NCCL's copy engines need windows with its symmetric flag (the NCCL-version guard may leave it
    // off: NCCL then runs its ring kernels on them), more than one rank, and a driver >= 12.5.
    const SymmetricKernels guard = symmetric_kernels_on(0);
    if (!guard.enabled)
      report.notes.push_back("ce: symmetric kernels are off in this process (" + guard.why +
                             "), so windows carry no symmetric flag and NCCL cannot use its copy engines: ce measures ring kernels on windows. "
                             "NCCLPOOL_SYMMETRIC_KERNELS=on to measure the copy engines");
    if (ranks == 1) report.notes.push_back("ce: one rank, so NCCL copies locally and no copy engine collective runs");
    if (std::any_of(o.ops.begin(), o.ops.end(), [](const std::string& op) { return !kind_carries(kCopyEngine, op); }))
      report.notes.push_back("ce: all-gather only (NCCL's copy engines carry no reduction)");
  }
  if (kinds.empty()) throw Unsupported("no registration kind left to measure");
  sweep.sizes = size_sweep(o);
  const std::vector<std::size_t>& sizes = sweep.sizes;

  report.facts.push_back({"ranks", team->description()});
  report.facts.push_back({"method", "nccl-tests conventions: float sum, warm-up " + std::to_string(o.warmup) + ", iters " + std::to_string(o.iters) +
                                        (o.graph ? " captured in a CUDA graph, " + std::to_string(o.replays) + " replays timed" : std::string()) +
                                        ", host time per op averaged over ranks, busbw = algbw x (n-1)/n (AG, RS) or 2(n-1)/n (AR)"});
  report.facts.push_back({"memory", "one ncclpool pool per GPU (cuMem, deterministic); none = communicator without registration, local = "
                                    "ncclCommRegister, symmetric = ncclCommWindowRegister, ce = windows on a communicator made with CTA policy ZERO"});
  report.facts.push_back({"environment", "NCCL_NVLS_ENABLE=" + nvls_setting()});
  // What `ncclpool tune` needs to tell a profile's machine (GPU model, NCCL version, rank count).
  {
    std::vector<GpuDescription> gpu_list;
    std::vector<PeerLink> links;
    describe_gpus(gpu_list, links);
    report.facts.push_back({"gpu", gpu_list.empty() ? "" : gpu_list.front().name});
    report.facts.push_back({"nccl_version", std::to_string(nccl_version)});
    report.facts.push_back({"rank_count", std::to_string(ranks)});
  }

  Shared& shared = sweep.shared;
  // What a round measures at each point; round r starts r places further along this list, so that
  // no kind is always measured first (right after the previous size) or last. The benchmark's own
  // --auto choice depends on the kinds' times and comes after them.
  std::vector<std::string> columns;
  for (int k : kinds) columns.push_back(kKindNames[k]);
  if (o.auto_pool) columns.push_back("pool");
  std::size_t steps_per_round = 0;
  for (const auto& op : o.ops)
    for (const auto& column : columns)
      steps_per_round += sizes.size() * (column_carries(column, op) ? 1 : 0);
  if (o.auto_kind) steps_per_round += o.ops.size() * sizes.size();
  Progress progress("bench coll", static_cast<std::size_t>(o.rounds) * steps_per_round);
  std::map<std::string, int>& auto_choice = sweep.auto_choice;
  std::map<std::string, std::string>& pool_part = sweep.pool_part;
  std::string& pool_routes = sweep.pool_routes;
  std::string& compute_description = sweep.compute_description;
  std::mutex choice_mutex;
  run_on_ranks(ranks, [&](int rank, RankBarrier& sync) {
    RankRunner runner(*team, rank, o);
    if (rank == 0) compute_description = runner.compute_description();
    for (int k : kinds) runner.attach(k);  // collective per communicator, same order everywhere
    if (o.auto_pool) {
      runner.attach_auto_pool();
      if (rank == 0) pool_routes = runner.auto_routes();
    }
    sync.wait();
    for (int round = 0; round < o.rounds; ++round) {
      const std::string round_label = o.rounds > 1 ? "round " + std::to_string(round + 1) + "/" + std::to_string(o.rounds) + ": " : "";
      for (const auto& op : o.ops) {
        for (const auto [count, size] : points_for(op, sizes, ranks)) {
          for (std::size_t i = 0; i < columns.size(); ++i) {
            const std::string& column = columns[(i + static_cast<std::size_t>(round)) % columns.size()];
            if (!column_carries(column, op)) continue;  // the same on every rank: o and op alone
            if (rank == 0) progress.step(round_label + op + " " + format_bytes(size) + " " + (column == "pool" ? "auto pool" : column));
            if (column == "pool") {
              const std::string part = runner.measure_auto_pool(op, count, size, shared.at(key_of(op, size, "pool", false), ranks, round),
                                                                shared.at(key_of(op, size, "pool", true), ranks, round), sync);
              if (rank == 0) {
                std::lock_guard lock(choice_mutex);
                pool_part[op + "/" + std::to_string(size)] = part;
              }
              continue;
            }
            for (bool in_place : {false, true})
              runner.measure(op, count, kind_index(column), in_place, shared.at(key_of(op, size, column, in_place), ranks, round), sync);
          }
          if (o.auto_kind) {
            sync.wait();  // every rank's times are in: all ranks pick the same kind
            // Kinds are tried from the cheapest to hold (none, local, symmetric: a window costs a
            // collective registration and whole chunks); a costlier kind wins only where it is
            // measurably faster (medians of the rounds so far), so noise does not flip the choice
            // between equal kinds.
            std::vector<int> by_cost;  // the registration kinds: ce is another communicator, not a registration
            for (int k : kinds)
              if (k != kCopyEngine) by_cost.push_back(k);
            std::sort(by_cost.begin(), by_cost.end());
            int best = by_cost[0];
            double best_time = 0;
            for (int k : by_cost) {
              const double t = shared.get(key_of(op, size, kKindNames[k], false)).median + shared.get(key_of(op, size, kKindNames[k], true)).median;
              if (k == by_cost[0] || t < best_time * (1 - kAutoMargin)) best = k, best_time = t;
            }
            if (rank == 0) {
              std::lock_guard lock(choice_mutex);
              auto_choice[op + "/" + std::to_string(size)] = best;
              progress.step(round_label + op + " " + format_bytes(size) + " auto (" + kKindNames[best] + ")");
            }
            for (bool in_place : {false, true}) runner.measure(op, count, best, in_place, shared.at(key_of(op, size, "auto", in_place), ranks, round), sync);
          }
        }
      }
    }
    sync.wait();
  });
  progress.finish();

  report_sweep(o, sweep, report);
}

}  // namespace ncclpool::tool

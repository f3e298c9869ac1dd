// `ncclpool bench alloc`: hot-path latency of allocate + free for ncclpool and the CUDA driver's
// own ways (cuMemAllocAsync from a memory pool, cuMemAlloc) on one GPU, or ncclpool on the
// simulator without one. Three patterns:
//   same stream  - allocate and free on one stream (the cached, steady-state path)
//   cross stream - allocations alternate between streams A and B (ncclpool: each stream soon reuses a
//                  block of its own; a hand-over that does happen is ncclpool_stream_handoff_bench's)
//   growth       - the first allocation after the cache was emptied (new memory from the device)

#include "bench.hpp"
#include "commands.hpp"

#include <cstdio>

namespace ncclpool::tool {
namespace {

constexpr const char* kHelp =
    "usage: ncclpool bench alloc [--device N] [--sizes 4K,1M,64M] [--repeats 5] [--min-ms 50]\n"
    "                            [--growth-iters 20] [--live N] [--comms K] [--sim] [--json]\n"
    "\n"
    "Latency of allocate + free (nanoseconds per pair, median of the repeats) on one stream, across two\n"
    "streams, and of growth (the first allocation after the cache was emptied). On a GPU: ncclpool over\n"
    "cuMem, cuMemAllocFromPoolAsync from a driver memory pool (release threshold: keep everything), and\n"
    "cuMemAlloc/cuMemFree. Without a GPU, or with --sim: ncclpool on the simulator.\n"
    "  --live N    before timing, N live 4 KiB blocks and N free ones between them in ncclpool's pools\n"
    "              (the cost must not grow with them)\n"
    "  --comms K   adds a column: an ncclpool pool under a Registry with K communicators attached\n"
    "              (local registration; on a GPU, K single-rank NCCL communicators)\n"
    "  --min-ms X  the shortest a timed round may take, 0 to 60000 (a round runs at least 16 pairs)\n";

}  // namespace

const char* const kBenchAllocUsage = kHelp;

int cmd_bench_alloc(const Args& a) {
  if (a.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::vector<std::size_t> sizes = parse_byte_list("sizes", a.get("sizes", "4K,1M,64M"));
  const int repeats = static_cast<int>(a.get_int("repeats", 5, 1, 1000));
  const double min_s = a.get_double("min-ms", 50.0, 0.0, 60000.0) / 1000.0;
  const int growth_iters = static_cast<int>(a.get_int("growth-iters", 20, 1, 100000));
  const int device = static_cast<int>(a.get_int("device", 0, 0, 1023));

  std::string why_no_gpu;
  const bool use_gpu = !a.has("sim") && gpu_count(&why_no_gpu) > 0;
  if (use_gpu && device >= gpu_count(nullptr)) throw UsageError("--device " + std::to_string(device) + ": there are " + std::to_string(gpu_count(nullptr)) + " GPU(s)");
  AllocTarget target = use_gpu ? make_gpu_alloc_target(device) : make_sim_alloc_target();
  const auto live = static_cast<std::size_t>(a.get_int("live", 0, 0, 10000000));
  const int comms = static_cast<int>(a.get_int("comms", 0, 0, 64));
  if (comms > 0) {
    if (use_gpu && device != 0) throw UsageError("--comms: the NCCL communicators are made on GPU 0; use --device 0");
    std::shared_ptr<Team> team = use_gpu ? make_nccl_team(1, comms) : make_loopback_team(1, comms);
    target.strategies.push_back(make_registered_pool_strategy(
        std::string(use_gpu ? "ncclpool" : "ncclpool (sim)") + ", " + std::to_string(comms) + " comm" + (comms > 1 ? "s" : ""), team));
  }

  Report report;
  report.suite = "alloc";
  report.facts.push_back({"target", target.description});
  if (!use_gpu && !a.has("sim")) report.facts.push_back({"no GPU", why_no_gpu + " -> simulator"});
  report.facts.push_back({"timing", "median of " + std::to_string(repeats) + " rounds of >= " + std::to_string(static_cast<int>(min_s * 1000)) +
                                        " ms; growth: " + std::to_string(growth_iters) + " first allocations"});
  if (live > 0)
    report.facts.push_back({"population", std::to_string(live) + " live and " + std::to_string(live) +
                                              " free 4 KiB blocks in each ncclpool pool while timing"});

  Table table;
  table.title = "allocate + free, ns per pair (growth: ns per allocation)";
  table.headers = {"size", "pattern"};
  table.keys = {"bytes", "pattern"};
  for (const auto& s : target.strategies) {
    table.headers.push_back(s->name());
    table.keys.push_back(s->name());
  }
  if (target.has_driver_reference) {
    table.headers.push_back("speed-up vs " + target.strategies[1]->name());
    table.keys.push_back("speedup");
  }
  // The population: 2N blocks on stream 0, every other one freed (N free blocks between N live).
  std::vector<std::vector<void*>> populations(target.strategies.size());
  for (std::size_t i = 0; i < target.strategies.size() && live > 0; ++i) {
    AllocStrategy& st = *target.strategies[i];
    if (!st.is_ncclpool()) continue;
    std::vector<void*> all;
    all.reserve(2 * live);
    for (std::size_t k = 0; k < 2 * live; ++k) all.push_back(st.allocate(4096, target.streams[0]));
    for (std::size_t k = 0; k < all.size(); ++k) {
      if (k % 2) {
        st.deallocate(all[k], target.streams[0]);
      } else {
        populations[i].push_back(all[k]);
      }
    }
  }

  const char* patterns[] = {"same stream", "cross stream", "growth"};
  Progress progress("bench alloc", sizes.size() * 3 * target.strategies.size());
  const stream_t s0 = target.streams[0], s1 = target.streams[1];
  for (std::size_t bytes : sizes) {
    for (const char* pattern : patterns) {
      std::vector<Cell> row{bytes_cell(bytes), text_cell(pattern)};
      std::vector<double> medians;
      for (auto& strategy : target.strategies) {
        progress.step(format_bytes(bytes) + " " + pattern + " " + strategy->name());
        AllocStrategy& st = *strategy;
        std::vector<double> rounds;
        const std::string p = pattern;
        if (p == "same stream") {
          rounds = time_rounds(repeats, min_s, [&](std::size_t n) {
            for (std::size_t i = 0; i < n; ++i) st.deallocate(st.allocate(bytes, s0), s0);
          });
        } else if (p == "cross stream") {
          rounds = time_rounds(repeats, min_s, [&](std::size_t n) {
            for (std::size_t i = 0; i < n; ++i) st.deallocate(st.allocate(bytes, i % 2 ? s1 : s0), i % 2 ? s1 : s0);
          });
        } else {  // growth: only the allocation after release_cached() is timed
          for (int i = 0; i < growth_iters; ++i) {
            st.release_cached();
            const auto t = BenchClock::now();
            void* ptr = st.allocate(bytes, s0);
            rounds.push_back(seconds_since(t));
            st.deallocate(ptr, s0);
          }
        }
        const double per_op = median(rounds);
        medians.push_back(per_op);
        row.push_back(number_cell(per_op * 1e9, per_op * 1e9 < 100 ? 1 : 0));
      }
      if (target.has_driver_reference) row.push_back(number_cell(medians[1] / medians[0], 2));
      table.add(std::move(row));
    }
  }
  progress.finish();
  for (std::size_t i = 0; i < populations.size(); ++i)
    for (void* p : populations[i]) target.strategies[i]->deallocate(p, target.streams[0]);
  report.tables.push_back(std::move(table));
  if (target.has_driver_reference)
    report.notes.push_back("speed-up = " + target.strategies[1]->name() + " time / " + target.strategies[0]->name() + " time (> 1: ncclpool is faster)");
  report.notes.push_back("cross stream alternates the two streams; the driver's pools reuse memory across them, ncclpool's second stream "
                         "passes over the first one's unpublished block once and then each stream reuses a block of its own (docs/pool.md)");
  print(report, a.json);
  return 0;
}

}  // namespace ncclpool::tool

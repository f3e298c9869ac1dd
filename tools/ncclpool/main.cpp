// ncclpool: see what ncclpool does on this machine and on your workload.
//
//   ncclpool info [--json]
//   ncclpool replay TRACE [options]          (ncclpool replay --help)
//   ncclpool bench alloc|scope|coll|memory [options]   (ncclpool bench SUITE --help)
//   ncclpool tune [options]                  (ncclpool tune --help)

#include "commands.hpp"
#include "trace.hpp"

#include <ncclpool/errors.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: ncclpool <command> [options]\n"
    "\n"
    "commands:\n"
    "  info                   the environment as ncclpool sees it: CUDA, NCCL, window support, sources\n"
    "  replay TRACE           replay an allocation trace (ncclpool CSV or a torch memory snapshot as JSON)\n"
    "                         through a shared pool and through one pool per group, on the simulator\n"
    "  bench alloc            allocate/free latency: ncclpool vs cuMemAllocAsync pools vs cuMemAlloc (simulator without GPU)\n"
    "  bench scope            cost of a pool use by a group: ncclpool vs re-registering (Megatron) vs one pool per group\n"
    "  bench coll             collective bandwidth on pool memory per registration kind, nccl-tests conventions (GPU)\n"
    "  bench memory           peak reserved vs live for a multi-group workload, shared vs per-group pools\n"
    "  tune                   measure this machine's profile (kinds per size, symmetric CTA count) for the library (GPU)\n"
    "  version\n"
    "\n"
    "Every command takes --json for machine-readable output; `ncclpool <command> --help` for its options.\n";

constexpr const char* kVersionUsage = "usage: ncclpool version\n";
constexpr const char* kBenchUsage =
    "usage: ncclpool bench alloc|scope|coll|memory [options]   (`ncclpool bench SUITE --help` for a suite's options)\n";

// Commands that take options only: a stray word is an error, not ignored (issue 47).
ncclpool::tool::Args no_positional(ncclpool::tool::Args a, const std::string& command) {
  if (!a.positional.empty()) throw ncclpool::tool::UsageError(command + " takes no arguments, not '" + a.positional[0] + "'");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ncclpool::tool;
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty() || rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    std::fputs(kUsage, rest.empty() ? stderr : stdout);
    return rest.empty() ? 2 : 0;
  }
  const std::string command = rest[0];
  rest.erase(rest.begin());
  // A usage error prints the usage of the command it is about (the top-level one for an unknown command).
  const char* usage = kUsage;
  try {
    if (command == "version") {
      usage = kVersionUsage;
      const Args a = no_positional(Args::parse(rest, {}, {"help"}), "version");
      if (a.has("help")) {
        std::fputs(kVersionUsage, stdout);
        return 0;
      }
      std::puts(a.json ? "{\"version\":\"" NCCLPOOL_TOOL_VERSION "\"}" : NCCLPOOL_TOOL_VERSION);
      return 0;
    }
    if (command == "info") {
      usage = kInfoUsage;
      return cmd_info(Args::parse(rest, {}, {"help"}));
    }
    if (command == "replay") {
      usage = kReplayUsage;
      return cmd_replay(Args::parse(rest, {"format", "group-by", "device", "level", "kind", "growth-chunk-mib", "min-segment-mib", "window-ms", "timeline", "convert", "scale"}, {"help"}));
    }
    if (command == "tune") {
      usage = kTuneUsage;
      return cmd_tune(no_positional(Args::parse(rest, {"rounds", "ctas", "min", "max", "factor", "iters", "warmup", "ranks", "out", "from", "gpu", "nccl-version", "replays", "keep", "run-timeout"}, {"help", "graph", "eager", "no-compute", "copy-engine", "no-copy-engine"}), "tune"));
    }
    if (command == "bench") {
      usage = kBenchUsage;
      if (rest.empty()) throw UsageError("bench needs a suite: alloc, scope, coll or memory");
      const std::string suite = rest[0];
      rest.erase(rest.begin());
      if (suite == "--help" || suite == "-h") {
        std::fputs(kBenchUsage, stdout);
        return 0;
      }
      if (suite == "memory") {
        usage = kBenchMemoryUsage;
        return cmd_bench_memory(no_positional(Args::parse(rest, {"trace", "layers", "steps", "kind", "growth-chunk-mib", "min-segment-mib", "window-ms", "timeline", "format", "group-by", "device", "level", "scale"}, {"help"}), "bench memory"));
      }
      if (suite == "alloc") {
        usage = kBenchAllocUsage;
        return cmd_bench_alloc(no_positional(Args::parse(rest, {"device", "sizes", "repeats", "min-ms", "growth-iters", "live", "comms"}, {"help", "sim"}), "bench alloc"));
      }
      if (suite == "scope") {
        usage = kBenchScopeUsage;
        return cmd_bench_scope(no_positional(Args::parse(rest, {"segments", "groups", "chunk-mib", "ranks", "kind", "uses", "megatron-uses"}, {"help", "sim"}), "bench scope"));
      }
      if (suite == "coll") {
        usage = kBenchCollUsage;
        return cmd_bench_coll(no_positional(Args::parse(rest, {"ops", "kinds", "min", "max", "factor", "warmup", "iters", "ranks", "replays", "rounds", "pool-for"}, {"help", "no-check", "auto", "auto-pool", "graph", "compute"}), "bench coll"));
      }
      throw UsageError("unknown bench suite '" + suite + "' (available: alloc, scope, coll, memory)");
    }
    throw UsageError("unknown command '" + command + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ncclpool: %s\n\n%s", e.what(), usage);
    return 2;
  } catch (const TraceError& e) {
    std::fprintf(stderr, "ncclpool: bad trace: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ncclpool: %s\n", e.what());
    return 1;
  }
}

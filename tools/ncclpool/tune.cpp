// `ncclpool tune`: measures this machine's profile with `bench coll` child processes (one per round
// and symmetric CTA count, alternating, so that drift hits every setting alike) and writes it where
// the library looks for it (profile.hpp). `--from` builds one from runs made before.

#include "bench.hpp"
#include "commands.hpp"
#include "tune.hpp"

#include <ncclpool/errors.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <unistd.h>

namespace ncclpool::tool {
namespace {

constexpr const char* kHelp =
    "usage: ncclpool tune [--rounds 3] [--ctas nccl,16,32] [--min 16K] [--max 1G] [--factor 4] [--iters 30]\n"
    "                     [--warmup 5] [--ranks N] [--replays 5 | --eager] [--no-compute] [--copy-engine] [--keep DIR]\n"
    "                     [--run-timeout 900] [--out PATH] [--json]\n"
    "       ncclpool tune --from CTAS=FILE[,CTAS=FILE...] [--gpu NAME --nccl-version V --ranks N] [--out PATH]\n"
    "\n"
    "Measures this machine's profile: `bench coll` (none, local and symmetric registration; all-gather,\n"
    "reduce-scatter, all-reduce) once per round and symmetric CTA count (nccl = NCCL's own choice), in\n"
    "alternating rounds, each collective alone and beside a compute-bound kernel (bench coll --compute; a\n"
    "training step overlaps them, and the symmetric kernels' CTAs are SMs the compute does not get). It picks\n"
    "the CTA count with the fastest symmetric kernels alone among those whose steps with compute beside are\n"
    "within 1% of the best, and, per op and size, the cheapest kind to hold unless a costlier one is >= 2%\n"
    "faster alone (medians over rounds; counts are judged where every setting's runs spread by <= 5%).\n"
    "--copy-engine also measures all-gather on the copy engines (bench coll kind ce) and records\n"
    "copy_engine_all_gather when its steps with compute beside are >= 1% shorter than the chosen kind's from\n"
    "1 MiB, in place where the runs have it (as FSDP2 and Megatron-FSDP all-gather). Off by default (so is\n"
    "--no-copy-engine, still accepted): the copy engines did not win enough in training on 2x H200 to turn on.\n"
    "Where this process's symmetric kernels are off (the NCCL-version guard, NCCLPOOL_SYMMETRIC_KERNELS), only\n"
    "NCCL's own CTA count runs unless --ctas is given (no count changes NCCL's ring kernels; the profile records\n"
    "none) and no copy engines. Forced on with NCCL 2.28.0-2.30.6 on sm_90+, runs beside the compute load hung\n"
    "on 2x H200 with NCCL 2.28.x (docs/tool.md, \"tune\"): tune says so first.\n"
    "--run-timeout S ends tune with an error naming the run when one bench coll run takes longer than S seconds\n"
    "(a hang; default 900). --no-compute measures alone only (faster). --keep DIR saves each run's JSON. Writes\n"
    "the profile as JSON to --out, else $NCCLPOOL_PROFILE, else ~/.cache/ncclpool/profile.json, where\n"
    "the library reads it (the symmetric kernels' CTA count of a process on this GPU model, NCCL version\n"
    "and rank count). --from builds it from `bench coll --json` files instead (no GPU needed). Progress\n"
    "on stderr. The collectives alone are timed as CUDA-graph replays (bench coll --graph, --replays each):\n"
    "eager launches leave small sizes to noise; --eager times eager launches instead. The runs beside\n"
    "compute launch eagerly.\n";

// A CTA setting as --ctas and --from name it: "nccl" or a count NCCL accepts.
std::string ctas_label(const std::string& c, const std::string& option) {
  if (c != "nccl" && (c.empty() || c.size() > 2 || c.find_first_not_of("0123456789") != std::string::npos || std::stoi(c) < 1 || std::stoi(c) > 64))
    throw UsageError("--" + option + ": '" + c + "' is neither 'nccl' nor a count from 1 to 64");
  return c;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

const char* const kTuneUsage = kHelp;

int cmd_tune(const Args& a) {
  if (a.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  std::vector<CollRun> runs;
  std::vector<std::string> plan_notes;  // what the runs measure and risk here (plan_tune_runs)
  MachineFacts given;
  std::string measuring_started;  // when the runs made here began (not set for --from)
  given.gpu = a.get("gpu", "");
  given.nccl_version = static_cast<int>(a.get_int("nccl-version", 0, 0, 1 << 30));
  given.ranks = static_cast<int>(a.get_int("ranks", 0, 0, 1024));
  if (a.has("from")) {
    for (const char* measuring : {"copy-engine", "no-copy-engine", "run-timeout"})
      if (a.has(measuring)) throw UsageError(std::string("--") + measuring + " is for measuring; --from reads runs made before");
    std::stringstream list(a.get("from", ""));
    for (std::string item; std::getline(list, item, ',');) {
      const auto eq = item.find('=');
      if (eq == std::string::npos) throw UsageError("--from: '" + item + "' is not CTAS=FILE (CTAS: nccl or a count)");
      const std::string file = item.substr(eq + 1);
      const std::string text = read_input_file(file, "--from");  // a file that is not there: exit 1 (docs/tool.md)
      try {
        runs.push_back({ctas_label(item.substr(0, eq), "from"), parse_json(text)});
      } catch (const JsonError& e) {
        throw InvalidArgument("tune: " + file + ": " + e.what());
      }
    }
  } else {
    if (a.has("eager") && a.has("graph")) throw UsageError("--eager and --graph exclude each other");
    if (a.has("copy-engine") && a.has("no-copy-engine")) throw UsageError("--copy-engine and --no-copy-engine exclude each other");
    std::vector<std::string> ctas;
    std::stringstream list(a.get("ctas", "nccl,16,32"));
    for (std::string c; std::getline(list, c, ',');) ctas.push_back(ctas_label(c, "ctas"));
    std::string why;
    if (gpu_count(&why) == 0) throw Unsupported("tune needs GPUs: " + why + " (--from builds a profile from bench coll runs made elsewhere)");
    const int rounds = static_cast<int>(a.get_int("rounds", 3, 1, 1000));
    std::vector<std::string> coll_args = {"--min", a.get("min", "16K"), "--max", a.get("max", "1G"), "--factor", a.get("factor", "4"),
                                          "--iters", a.get("iters", "30"), "--warmup", a.get("warmup", "5")};
    if (given.ranks != 0) coll_args.insert(coll_args.end(), {"--ranks", std::to_string(given.ranks)});
    // CUDA-graph replays by default: eager launches below 1 MiB spread by 15-40% from round to round
    // on 2x H200 against 2-4% for replays (docs/benchmarks/coll.md), and a profile's small classes
    // are only evidence when resolved. --graph is accepted for the scripts written before.
    if (!a.has("eager")) coll_args.insert(coll_args.end(), {"--graph", "--replays", std::to_string(a.get_int("replays", 5, 1, 100000))});
    if (!a.has("no-compute")) coll_args.push_back("--compute");
    // The children decide their symmetric kernels as this process would (same NCCL, environment, GPU,
    // and the fence declared: bench coll declares it).
    prefer_symmetric_fence();
    const TunePlan plan = plan_tune_runs(symmetric_kernels_on(0), ctas, a.has("ctas"), !a.has("no-compute"), a.has("copy-engine"));
    for (const auto& note : plan.notes) std::fprintf(stderr, "tune: %s\n", note.c_str());
    plan_notes = plan.notes;
    // ce: the copy-engine all-gather the profile may choose (judged with compute beside); asked for
    // only (--copy-engine), see kHelp. --no-copy-engine, the earlier opt-out, is the default now.
    if (plan.copy_engine) coll_args.insert(coll_args.end(), {"--kinds", "none,local,symmetric,ce"});
    const long long run_timeout_s = a.get_int("run-timeout", 900, 1, 7 * 24 * 3600);
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) throw BackendError("tune: cannot find this program (/proc/self/exe): " + ec.message());
    int done = 0;
    const auto start = std::chrono::steady_clock::now();
    measuring_started = utc_now();
    for (int r = 1; r <= rounds; ++r)
      for (const auto& c : plan.ctas) {
        std::fprintf(stderr, "tune: round %d/%d, symmetric CTAs %s (%d of %zu runs, %.0f s so far)\n", r, rounds, c.c_str(), ++done,
                     static_cast<std::size_t>(rounds) * plan.ctas.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        const std::string json = run_bench_coll_child(self, c, coll_args, run_timeout_s, 10, plan.hang_hint);
        if (a.has("keep")) {  // each run's raw JSON, for the record (docs/benchmarks/data/)
          const std::filesystem::path dir = a.get("keep", "");
          std::filesystem::create_directories(dir);
          const std::filesystem::path file = dir / ("coll-ctas-" + c + "-round-" + std::to_string(r) + ".json");
          std::ofstream keep(file, std::ios::binary);
          keep << json;
          if (!keep) throw BackendError("tune: could not write " + file.string());
        }
        runs.push_back({c, parse_json(json)});
      }
  }
  Report report;
  report.suite = "tune";
  report.notes = plan_notes;
  Profile profile = build_profile(runs, given, report);
  if (!a.has("from") && profile.measured == kUnknownWhen) profile.measured = measuring_started;  // the runs made here
  const std::string path = a.get("out", profile_path(profile.ranks));  // one profile per rank count
  if (path.empty()) throw UsageError("no place for the profile: give --out (NCCLPOOL_PROFILE, XDG_CACHE_HOME and HOME are unset)");
  if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) std::filesystem::create_directories(parent);
  const std::string text = profile_to_json(profile);
  (void)parse_profile(text, path);  // what the library will read back
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw BackendError("tune: could not write the profile to " + path);
  report.facts.push_back({"profile", path});
  print(report, a.json);
  if (!a.json) std::printf("profile written to %s\n", path.c_str());
  return 0;
}

}  // namespace ncclpool::tool

// `ncclpool replay TRACE` and `ncclpool bench memory`: both replay a trace (a file, or the synthetic
// FSDP+EP step) through a shared pool and through one pool per group, on the simulator.

#include "commands.hpp"
#include "replay.hpp"
#include "report.hpp"
#include "workloads.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <set>
#include <memory>
#include <stdexcept>

namespace ncclpool::tool {
namespace {

constexpr const char* kReplayHelp =
    "usage: ncclpool replay TRACE [--format auto|csv|torch] [--group-by none|stream] [--device N]\n"
    "                       [--level blocks|segments]\n"
    "                       [--kind symmetric|local] [--growth-chunk-mib N] [--min-segment-mib N] [--window-ms X]\n"
    "                       [--scale F] [--timeline FILE.csv] [--convert FILE.csv] [--json]\n"
    "\n"
    "TRACE is ncclpool CSV (alloc,<id>,<bytes>,<stream>,<group> / free,<id>) or a torch memory snapshot\n"
    "written as JSON by scripts/record-torch-trace.py. torch records no group: --group-by stream makes\n"
    "one group per stream. The replay runs on the simulator with one-rank loopback communicators, so the\n"
    "pool and the registry are the real ones; registration time is estimated with --window-ms (default\n"
    "15, measured on 4x H200) per window or 7 us per local registration. --timeline writes memory over\n"
    "time (for plotting), --convert writes the trace as ncclpool CSV. --level segments (torch snapshots)\n"
    "replays PyTorch's segments instead of the tensors' blocks: what ncclpool serves under torch's caching\n"
    "allocator (the torch layer); then 'recording allocator' is what torch reserved without ncclpool.\n"
    "--growth-chunk-mib N (>= 1) sets the pools' growth chunk (default: 1024 symmetric, 2 local);\n"
    "--min-segment-mib N (>= 1) the smallest segment growth makes (default: growth chunk / 128): larger,\n"
    "fewer windows for more reserve. On torch snapshots 'recording allocator' also shows the windows torch's\n"
    "register_mem_pool(symm=True) makes: one per segment PyTorch made, per group.\n"
    "--scale F multiplies every allocation's size by F (the same request sequence at another scale, to\n"
    "see whether a figure holds beyond one size mix).\n";

ReplayOptions replay_options(const Args& a) {
  ReplayOptions o;
  const std::string kind = a.get("kind", "symmetric");
  const std::optional<RegistrationKind> parsed = registration_kind_from_string(kind);
  if (!parsed || !registration_ops(*parsed).attachable) throw UsageError("--kind must be symmetric or local, not '" + kind + "'");
  o.kind = *parsed;
  // Absent: the pool's default (1 GiB symmetric, 2 MiB local); given, at least 1 MiB.
  o.growth_chunk = static_cast<std::size_t>(a.get_int("growth-chunk-mib", 0, 1, 1 << 20)) << 20;
  o.min_segment = static_cast<std::size_t>(a.get_int("min-segment-mib", 0, 1, 1 << 20)) << 20;
  o.window_ms = a.get_double("window-ms", 15.0, 0.0, 1e7);
  o.timeline_path = a.get("timeline", "");
  auto progress = std::make_shared<Progress>("replaying", 0);  // silent unless stderr is a terminal
  o.progress = [progress](std::size_t done, std::size_t total) {
    progress->update(done, total, "events");
    if (done == total) progress->finish();
  };
  return o;
}

TraceOptions trace_options(const Args& a) {
  TraceOptions t;
  const std::string format = a.get("format", "auto");
  if (format == "auto") t.format = TraceFormat::automatic;
  else if (format == "csv") t.format = TraceFormat::csv;
  else if (format == "torch") t.format = TraceFormat::torch;
  else throw UsageError("--format must be auto, csv or torch, not '" + format + "'");
  const std::string by = a.get("group-by", "none");
  if (by == "none") t.group_by = GroupBy::none;
  else if (by == "stream") t.group_by = GroupBy::stream;
  else throw UsageError("--group-by must be none or stream, not '" + by + "'");
  t.device = static_cast<int>(a.get_int("device", -1, 0, 1023));  // absent: -1, the first device with events
  const std::string level = a.get("level", "blocks");
  if (level == "blocks") t.level = TraceLevel::blocks;
  else if (level == "segments") t.level = TraceLevel::segments;
  else throw UsageError("--level must be blocks or segments, not '" + level + "'");
  return t;
}

int run(const Trace& trace, const Args& a, const ReplayOptions& options, const std::string& title) {
  if (a.has("convert")) {
    std::FILE* f = std::fopen(a.get("convert", "").c_str(), "w");
    if (f == nullptr) throw std::runtime_error("--convert: cannot write " + a.get("convert", "") + ": " + std::strerror(errno));
    const std::string csv = to_csv(trace);
    std::fwrite(csv.data(), 1, csv.size(), f);
    std::fclose(f);
  }
  const ReplayResult r = replay(trace, options);
  if (a.json) {
    std::puts(format_json(r).c_str());
  } else {
    std::fputs(format_text(r, title).c_str(), stdout);
    if (trace.skipped_frees || trace.live_at_end)
      std::printf("trace: %zu frees of blocks allocated before recording were skipped; %zu blocks never freed\n", trace.skipped_frees,
                  trace.live_at_end);
  }
  return 0;
}

// The options that say how to read a torch snapshot: refused for a CSV trace and without a trace.
constexpr const char* kTorchOptions[] = {"group-by", "device", "level"};

// Replays the trace at `path` with the replay options (bad ones are reported before the trace is
// read), its sizes times --scale if given.
int replay_file(const Args& a, const std::string& path, const std::string& title_prefix) {
  const TraceOptions to = trace_options(a);
  const ReplayOptions options = replay_options(a);
  const double scale = a.get_double("scale", 1.0, 1e-6, 1e6);
  // An output that is the trace itself would overwrite it (issue 47): refused before anything is written.
  for (const char* output : {"convert", "timeline"}) {
    std::error_code ec;
    if (a.has(output) && std::filesystem::equivalent(path, a.get(output, ""), ec))
      throw UsageError(std::string("--") + output + " " + a.get(output, "") + " is the trace being replayed; give another file");
  }
  Trace trace = load_trace(path, to);
  if (trace.format == "csv")
    for (const char* option : kTorchOptions)
      if (a.has(option))
        throw UsageError(std::string("--") + option + " applies to torch snapshots; " + path + " is an ncclpool CSV trace");
  std::string title = title_prefix + path + " (" + trace.format + ")";
  if (a.has("scale")) {
    scale_sizes(trace, scale);
    title += ", sizes x " + a.get("scale", "");
  }
  if (trace.format == "torch-snapshot" && to.group_by == GroupBy::none) {
    // torch records no group: without --group-by the comparison has one group, where a shared pool is moot.
    std::set<std::uint64_t> streams;
    for (const TraceEvent& ev : trace.events)
      if (ev.op == TraceEvent::Op::alloc) streams.insert(ev.stream);
    title += "\ngroups: torch records none, so the whole trace is one group and the shared pool is the per-group pool; --group-by stream "
             "makes one group per stream (this trace has " + std::to_string(streams.size()) + "), the groups a shared pool is for";
  }
  return run(trace, a, options, title);
}

constexpr const char* kBenchMemoryHelp =
    "usage: ncclpool bench memory [--trace FILE [replay options]] [--layers N] [--steps N]\n"
    "                             [--kind symmetric|local] [--growth-chunk-mib N] [--min-segment-mib N] [--scale F] [--timeline F] [--json]\n"
    "Without --trace: one rank of a synthetic FSDP + EP step (dp, edp and ep groups).\n";

}  // namespace

const char* const kReplayUsage = kReplayHelp;
const char* const kBenchMemoryUsage = kBenchMemoryHelp;

int cmd_replay(const Args& a) {
  if (a.has("help")) {
    std::fputs(kReplayHelp, stdout);
    return 0;
  }
  if (a.positional.size() != 1) throw UsageError("replay needs exactly one TRACE file");
  return replay_file(a, a.positional[0], "replay of ");
}

int cmd_bench_memory(const Args& a) {
  if (a.has("help")) {
    std::fputs(kBenchMemoryHelp, stdout);
    return 0;
  }
  if (a.has("trace")) return replay_file(a, a.get("trace", ""), "bench memory: ");
  if (a.has("format")) throw UsageError("--format applies to a trace: give --trace FILE");
  for (const char* option : kTorchOptions)
    if (a.has(option)) throw UsageError(std::string("--") + option + " applies to a torch snapshot: give --trace FILE");
  const ReplayOptions options = replay_options(a);
  FsdpEpShape shape;
  shape.layers = static_cast<int>(a.get_int("layers", shape.layers, 1, 10000));
  shape.steps = static_cast<int>(a.get_int("steps", shape.steps, 1, 1000));
  const double scale = a.get_double("scale", 1.0, 1e-6, 1e6);
  Trace trace = make_fsdp_ep_trace(shape);
  std::string title = "bench memory: synthetic FSDP + EP step, " + std::to_string(shape.layers) + " layers x " + std::to_string(shape.steps) +
                      " steps (one rank)";
  if (a.has("scale")) {
    scale_sizes(trace, scale);
    title += ", sizes x " + a.get("scale", "");
  }
  return run(trace, a, options, title);
}

}  // namespace ncclpool::tool

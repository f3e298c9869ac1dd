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

// samples[op][bytes][kind or "symmetric@CTAS"] = one value per run (out-of-place)
using Kinds = std::map<std::string, std::vector<double>>;
using Samples = std::map<std::string, std::map<std::size_t, Kinds>>;

// Where the runs resolve a difference of CTA counts: every setting's runs within 5% of their median.
// Elsewhere (eager launches of small sizes: 10-50% run to run) a median says more about the noise
// than about the count, and weighing those points like the rest once picked 16 CTAs on 2x H200
// where 32 was faster at every size from 4 MiB (docs/benchmarks/coll.md).
constexpr double kResolvedSpread = 0.05;

// The CTA settings' geometric means of symmetric medians (INFINITY where one lacks a point) over the
// points the runs resolve, or over every point if none is resolved (one round: no spread to judge).
struct CtaScores {
  std::map<std::string, double> geomean;
  std::size_t points = 0, all_points = 0;
  bool resolved_only = false;
};
CtaScores score_ctas(const Samples& samples, const std::vector<std::string>& ctas_values) {
  auto spread = [](const std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return (*hi - *lo) / median(v);
  };
  auto is_resolved = [&](const Kinds& kinds) {
    return std::all_of(ctas_values.begin(), ctas_values.end(), [&](const std::string& c) {
      auto it = kinds.find("symmetric@" + c);
      return it != kinds.end() && spread(it->second) <= kResolvedSpread;
    });
  };
  std::vector<const Kinds*> all, resolved;
  for (const auto& [op, sizes] : samples)
    for (const auto& [bytes, kinds] : sizes) {
      all.push_back(&kinds);
      if (is_resolved(kinds)) resolved.push_back(&kinds);
    }
  CtaScores scores;
  scores.resolved_only = !resolved.empty();
  const std::vector<const Kinds*>& judged = scores.resolved_only ? resolved : all;
  scores.points = judged.size();
  scores.all_points = all.size();
  for (const auto& c : ctas_values) {
    double log_sum = 0;
    for (const Kinds* kinds : judged) {
      auto it = kinds->find("symmetric@" + c);
      log_sum += it == kinds->end() ? INFINITY : std::log(median(it->second));
    }
    scores.geomean[c] = judged.empty() ? INFINITY : std::exp(log_sum / static_cast<double>(judged.size()));
  }
  return scores;
}

// "nccl 1.26, 16 1.04, 32 1" (each relative to `best`), "over 20 of 27 points, those whose runs ...".
std::string describe_scores(const CtaScores& s, const std::vector<std::string>& ctas_values, const std::string& best) {
  std::ostringstream out;
  out << std::setprecision(3);
  for (const auto& c : ctas_values) out << (out.tellp() > 0 ? ", " : "") << c << " " << s.geomean.at(c) / s.geomean.at(best);
  out << "; over " << s.points << " of " << s.all_points << " points"
      << (s.resolved_only ? ", those whose runs spread <= 5% for every setting" : ": no point's runs spread <= 5%, so all");
  return out.str();
}

std::string fact(const Json& doc, std::string_view key) {
  const Json* facts = doc.find("facts");
  const Json* v = facts != nullptr ? facts->find(key) : nullptr;
  return v != nullptr && v->type == Json::Type::string ? v->string : "";
}

// The machine of one run, its facts over `given`'s where it has them.
MachineFacts machine_of(const Json& doc, const MachineFacts& given) {
  MachineFacts m = given;
  if (const std::string g = fact(doc, "gpu"); !g.empty() && given.gpu.empty()) m.gpu = g;
  if (const std::string v = fact(doc, "nccl_version"); !v.empty() && given.nccl_version == 0) m.nccl_version = std::stoi(v);
  if (const std::string r = fact(doc, "rank_count"); !r.empty() && given.ranks == 0) m.ranks = std::stoi(r);
  return m;
}

Cell spread_cell(const std::vector<double>& v, int decimals = 1) {
  if (v.empty()) return text_cell("-");
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.*f [%.*f-%.*f]", decimals, median(v), decimals, *std::min_element(v.begin(), v.end()), decimals,
                *std::max_element(v.begin(), v.end()));
  return text_cell(buf);
}

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

namespace {

bool has_copy_engine(const std::map<std::size_t, Kinds>& sizes) {
  for (const auto& [bytes, kinds] : sizes)
    if (kinds.count("ce") != 0) return true;
  return false;
}

// All-gather on the copy engines (bench coll kind ce: windows on a communicator made with CTA policy
// ZERO) pays off only where it frees SMs for compute that runs beside it; alone it may well be slower.
// So it is judged on the steps with compute beside: over the all-gather sizes from 1 MiB (below, a
// step hardly notices the collective), the geometric mean of ce's step over the step of the kind the
// profile chose there; yes when ce's is >= 1% shorter. In place where the runs have it: the helpers
// that use the answer (FSDP2's, Megatron-FSDP's) all-gather in place, the shard a slice of the
// output, and there the copy engines fare better (2x H200: 0.93 of the symmetric kernels' steps in
// place, 1.12 out of place; docs/benchmarks/coll.md). No compute runs, one rank (NCCL copies
// locally) or no ce runs: no, and the note says why.
bool decide_copy_engine(const Samples& steps, const Samples& steps_in_place, const Profile& profile, const std::string& best_ctas,
                        Report& report) {
  constexpr std::size_t kFromBytes = std::size_t{1} << 20;
  auto no = [&report](const std::string& why) {
    report.notes.push_back("copy-engine all-gather: not chosen (" + why + ")");
    return false;
  };
  if (profile.ranks < 2) return no("one rank: NCCL copies locally, no copy-engine collective ran");
  const bool in_place = steps_in_place.count("all_gather") != 0;
  const Samples& judged = in_place ? steps_in_place : steps;
  const auto all_gather = judged.find("all_gather");
  if (all_gather == judged.end()) return no("no all-gather runs with compute beside (--no-compute)");
  double log_sum = 0;
  int points = 0;
  for (const auto& [bytes, kinds] : all_gather->second) {
    if (bytes < kFromBytes) continue;
    const auto ce = kinds.find("ce");
    const ProfileClass* chosen_class = nullptr;
    for (const ProfileClass& c : profile.classes)
      if (c.min_bytes <= bytes) chosen_class = &c;
    if (ce == kinds.end() || ce->second.empty() || chosen_class == nullptr || chosen_class->kind.count("all_gather") == 0) continue;
    const std::string chosen = to_string(chosen_class->kind.at("all_gather"));
    const auto other = kinds.find(chosen == "symmetric" ? "symmetric@" + best_ctas : chosen);
    if (other == kinds.end() || other->second.empty()) continue;
    log_sum += std::log(median(ce->second) / median(other->second));
    ++points;
  }
  if (points == 0) return no("no ce runs with compute beside from 1 MiB: not measured (tune --copy-engine; for --from, bench coll --kinds ...,ce; NCCL >= 2.28)");
  const double ratio = std::exp(log_sum / points);
  char text[160];
  std::snprintf(text, sizeof text, "step with compute beside %.3f of the chosen kind's (geometric mean over %d %s all-gather sizes from 1 MiB)", ratio,
                points, in_place ? "in-place" : "out-of-place");
  if (ratio > 0.99) return no(std::string(text) + ", not >= 1% shorter");
  report.notes.push_back(std::string("copy-engine all-gather: chosen, ") + text);
  return true;
}

}  // namespace

const char* const kTuneUsage = kHelp;

Profile build_profile(const std::vector<CollRun>& runs, const MachineFacts& given, Report& report) {
  if (runs.empty()) throw InvalidArgument("tune: no bench coll runs");
  const MachineFacts machine = machine_of(runs.front().doc, given);
  Samples samples;  // times in us
  Samples steps;    // with the compute load beside (bench coll --compute): step time / compute alone
  Samples steps_in_place;  // the same of the in-place rows (the copy-engine decision's)
  std::vector<std::string> ctas_values;
  bool kernels_off = false;  // a run's windows had no symmetric flag (bench coll's fact; older runs: on)
  for (const CollRun& run : runs) {
    kernels_off = kernels_off || fact(run.doc, "symmetric_kernels") == "off";
    const MachineFacts m = machine_of(run.doc, given);
    if (m.gpu != machine.gpu || m.nccl_version != machine.nccl_version || m.ranks != machine.ranks)
      throw InvalidArgument("tune: the runs are from different machines (" + machine.gpu + ", NCCL " + std::to_string(machine.nccl_version) + ", " +
                            std::to_string(machine.ranks) + " ranks vs " + m.gpu + ", NCCL " + std::to_string(m.nccl_version) + ", " + std::to_string(m.ranks) + ")");
    if (std::find(ctas_values.begin(), ctas_values.end(), run.ctas) == ctas_values.end()) ctas_values.push_back(run.ctas);
    const Json* tables = run.doc.find("tables");
    if (tables == nullptr || tables->type != Json::Type::array) throw InvalidArgument("tune: a run has no tables (not `bench coll --json` output?)");
    for (const Json& table : tables->array) {
      const Json* title = table.find("title");
      const Json* rows = table.find("rows");
      if (title == nullptr || rows == nullptr || rows->type != Json::Type::array) continue;
      const std::string op = title->string.substr(0, title->string.find(' '));
      if (op != "all_gather" && op != "reduce_scatter" && op != "all_reduce") continue;
      for (const Json& row : rows->array) {
        const Json* placement = row.find("placement");
        const Json* bytes = row.find("bytes");
        if (placement == nullptr || bytes == nullptr || (placement->string != "out" && placement->string != "in")) continue;
        if (const Json* wrong = row.find("wrong"); wrong != nullptr && wrong->number != 0)
          throw InvalidArgument("tune: a run has wrong results at " + op + " " + std::to_string(bytes->integer) + " bytes: not used");
        const auto size = static_cast<std::size_t>(bytes->integer);
        const bool out_of_place = placement->string == "out";
        if (!out_of_place && op != "all_gather") continue;  // in place: only for the copy-engine decision
        for (const char* kind : {"none", "local", "symmetric", "ce"}) {
          // ce's all-gather runs on the copy engines, whatever the CTA count: its runs pool over the settings.
          const std::string name = kind == std::string("symmetric") ? "symmetric@" + run.ctas : kind;
          if (const Json* us = row.find(std::string(kind) + "_us"); out_of_place && us != nullptr && us->type == Json::Type::number)
            samples[op][size][name].push_back(us->number);
          if (const Json* step = row.find(std::string(kind) + "_step"); step != nullptr && step->type == Json::Type::number && step->number > 0)
            (out_of_place ? steps : steps_in_place)[op][size][name].push_back(step->number);
        }
      }
    }
  }
  if (machine.gpu.empty() || machine.nccl_version == 0 || machine.ranks == 0)
    throw InvalidArgument("tune: the runs do not say their GPU, NCCL version and rank count (older bench coll): give --gpu, --nccl-version and --ranks");
  if (samples.empty()) throw InvalidArgument("tune: the runs hold no all-gather, reduce-scatter or all-reduce times");

  // The CTA count. Alone: the smallest geometric mean of symmetric medians (score_ctas). With the
  // compute load beside (runs of bench coll --compute), a count that buys collective speed with
  // SMs the compute needed shows in the steps: the count is then the fastest alone among those whose
  // steps are within 1% of the best count's, so that a training step that overlaps its collectives
  // never pays for a faster exposed one. NCCL's own count when within 1% of the choice.
  const CtaScores alone = score_ctas(samples, ctas_values);
  std::vector<std::string> eligible = ctas_values;
  std::string step_note;
  if (!steps.empty()) {
    const CtaScores beside = score_ctas(steps, ctas_values);
    std::string best_step = ctas_values.front();
    for (const auto& c : ctas_values)
      if (beside.geomean.at(c) < beside.geomean.at(best_step)) best_step = c;
    if (std::isfinite(beside.geomean.at(best_step))) {
      eligible.clear();
      for (const auto& c : ctas_values)
        if (beside.geomean.at(c) <= 1.01 * beside.geomean.at(best_step)) eligible.push_back(c);
      std::string list;
      for (const auto& c : eligible) list += (list.empty() ? "" : ", ") + c;
      step_note = "; with compute beside, step time relative to " + best_step + ": " + describe_scores(beside, ctas_values, best_step) +
                  "; within 1% of the best step: " + list;
    }
  }
  std::string best = eligible.front();
  for (const auto& c : eligible)
    if (alone.geomean.at(c) < alone.geomean.at(best)) best = c;
  const bool symmetric_measured = std::isfinite(alone.geomean.at(best));
  if (!symmetric_measured) {  // no symmetric times at every size (no windows here): NCCL's own
    best = "nccl";
    report.notes.push_back("symmetric was not measured at every size (windows unsupported?): the profile keeps NCCL's CTA count");
  }
  if (symmetric_measured && std::find(eligible.begin(), eligible.end(), "nccl") != eligible.end() && alone.geomean.at("nccl") <= 1.01 * alone.geomean.at(best))
    best = "nccl";
  if (kernels_off)  // NCCL ran ring kernels on the windows: no count was measured, the library keeps its default
    report.notes.push_back("symmetric CTAs: not measured (the runs had the symmetric kernels off, the NCCL-version guard); the profile "
                           "leaves the library's default");
  else if (symmetric_measured)
    report.notes.push_back("symmetric CTAs: " + best + " (alone, geometric mean of symmetric times relative to it: " + describe_scores(alone, ctas_values, best) +
                           step_note + ")");

  Profile profile;
  profile.gpu = machine.gpu;
  profile.nccl_version = machine.nccl_version;
  profile.ranks = machine.ranks;
  profile.symmetric_ctas = best == "nccl" || kernels_off ? 0 : std::stoi(best);
  // Measured only where the runs had the kernels on and symmetric times at every size (else the
  // profile keeps NCCL's count or the library's default, and says so above).
  profile.symmetric_ctas_measured = !kernels_off && symmetric_measured;
  // When the runs were made: their own "measured" fact (the latest), never the time of this call
  // (tune --from reads runs made before). Runs without it: unknown; cmd_tune stamps the runs it made.
  for (const CollRun& run : runs)
    if (const std::string when = fact(run.doc, "measured"); when > profile.measured) profile.measured = when;
  if (profile.measured.empty()) profile.measured = kUnknownWhen;
  std::map<std::size_t, ProfileClass> classes;
  std::vector<double> noise_small, noise_large;  // spread of the chosen kind, below and from 256 KiB
  for (const auto& [op, sizes] : samples) {
    Table t;
    t.title = op + " (" + std::to_string(machine.ranks) + " ranks): time us, median [min-max] over runs";
    t.headers = {"size", "none", "local"};
    t.keys = {"bytes", "none_us", "local_us"};
    for (const auto& c : ctas_values) {
      t.headers.push_back("symmetric " + c);
      t.keys.push_back("symmetric_" + c + "_us");
    }
    const bool ce_measured = has_copy_engine(sizes);
    if (ce_measured) {
      t.headers.push_back("ce");
      t.keys.push_back("ce_us");
    }
    t.headers.push_back("kind");
    t.keys.push_back("kind");
    for (const auto& [bytes, kinds] : sizes) {
      // Cheapest to hold first; a costlier kind only when >= 2% faster than the choice so far.
      std::string chosen;
      double chosen_us = INFINITY;
      const std::vector<double>* chosen_runs = nullptr;
      for (const std::string kind : {"none", "local", "symmetric"}) {
        auto it = kinds.find(kind == "symmetric" ? "symmetric@" + best : kind);
        if (it == kinds.end()) continue;
        const double us = median(it->second);
        if (chosen.empty() || us <= 0.98 * chosen_us) {
          chosen = kind;
          chosen_us = us;
          chosen_runs = &it->second;
        }
      }
      if (chosen_runs == nullptr) throw InvalidArgument("tune: no times of any kind for " + op + " at " + std::to_string(bytes) + " bytes");
      classes[bytes].min_bytes = bytes;
      classes[bytes].kind[op] = *registration_kind_from_string(chosen);  // one of the three names above
      // Run-to-run noise of what was chosen: (max - min) / median over the runs.
      const auto [lo, hi] = std::minmax_element(chosen_runs->begin(), chosen_runs->end());
      (bytes < 256 * 1024 ? noise_small : noise_large).push_back((*hi - *lo) / chosen_us);
      std::vector<Cell> row{bytes_cell(bytes)};
      for (const char* k : {"none", "local"}) row.push_back(spread_cell(kinds.count(k) ? kinds.at(k) : std::vector<double>{}));
      for (const auto& c : ctas_values) row.push_back(spread_cell(kinds.count("symmetric@" + c) ? kinds.at("symmetric@" + c) : std::vector<double>{}));
      if (ce_measured) row.push_back(spread_cell(kinds.count("ce") ? kinds.at("ce") : std::vector<double>{}));
      row.push_back(text_cell(chosen));
      t.add(std::move(row));
    }
    report.tables.push_back(std::move(t));
  }
  for (const auto& [op, sizes] : steps) {  // what each setting's collectives cost a step with compute beside them
    Table t;
    t.title = op + " (" + std::to_string(machine.ranks) + " ranks) with compute beside: step time / compute alone, median [min-max] over runs";
    t.headers = {"size", "none", "local"};
    t.keys = {"bytes", "none_step", "local_step"};
    for (const auto& c : ctas_values) {
      t.headers.push_back("symmetric " + c);
      t.keys.push_back("symmetric_" + c + "_step");
    }
    const bool ce_measured = has_copy_engine(sizes);
    if (ce_measured) {
      t.headers.push_back("ce");
      t.keys.push_back("ce_step");
    }
    for (const auto& [bytes, kinds] : sizes) {
      std::vector<Cell> row{bytes_cell(bytes)};
      for (const char* k : {"none", "local"}) row.push_back(spread_cell(kinds.count(k) ? kinds.at(k) : std::vector<double>{}, 3));
      for (const auto& c : ctas_values) row.push_back(spread_cell(kinds.count("symmetric@" + c) ? kinds.at("symmetric@" + c) : std::vector<double>{}, 3));
      if (ce_measured) row.push_back(spread_cell(kinds.count("ce") ? kinds.at("ce") : std::vector<double>{}, 3));
      t.add(std::move(row));
    }
    report.tables.push_back(std::move(t));
  }
  for (auto& [bytes, c] : classes) profile.classes.push_back(std::move(c));
  if (kernels_off)
    report.notes.push_back("copy-engine all-gather: not chosen (the runs had the symmetric kernels off: NCCL uses its copy engines only on "
                           "windows with the symmetric flag, so ce measured ring kernels)");
  else
    profile.copy_engine_all_gather = decide_copy_engine(steps, steps_in_place, profile, best, report);
  report.facts.push_back({"machine", machine.gpu + ", NCCL " + std::to_string(machine.nccl_version) + ", " + std::to_string(machine.ranks) + " ranks"});
  report.facts.push_back({"runs", std::to_string(runs.size()) + " bench coll runs, CTA settings " + std::to_string(ctas_values.size())});
  report.notes.push_back("kind per op and size: the cheapest to hold (none < local < symmetric) unless a costlier one's median is >= 2% faster");
  auto pct = [](const std::vector<double>& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", median(v) * 100);
    return v.empty() ? std::string("-") : std::string(buf);
  };
  report.notes.push_back("noise (max - min over runs, relative to the median, of the chosen kind; median over sizes): below 256 KiB " + pct(noise_small) +
                         ", from 256 KiB " + pct(noise_large) + ": where it exceeds the differences between kinds, the choice there is a toss-up");
  return profile;
}

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
    // The children decide their symmetric kernels as this process would (same NCCL, environment, GPU).
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
  const std::string path = a.get("out", profile_path());
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

// `ncclpool tune`'s profile from `bench coll` runs (build_profile, tune.hpp), by concern: reading the
// runs, the CTA count, the kind per op and size, the step tables, the copy-engine decision. Pure: tested
// on the CPU with runs recorded on GPUs. The command that makes the runs is tune.cpp.

#include "bench.hpp"
#include "tune.hpp"

#include <ncclpool/errors.hpp>
#include <ncclpool/registration.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

namespace ncclpool::tool {
namespace {

// samples[op][bytes][kind, or symmetric_key(CTAS)] = one value per run (out-of-place)
using Kinds = std::map<std::string, std::vector<double>>;
using Samples = std::map<std::string, std::map<std::size_t, Kinds>>;

// The symmetric kind's times are kept per CTA setting: "symmetric@32", "symmetric@nccl".
std::string symmetric_key(const std::string& ctas) { return std::string(to_string(RegistrationKind::symmetric)) + "@" + ctas; }
// The key of kind `kind` (a RegistrationKind's name, or "ce") under CTA setting `ctas`.
std::string kind_key(const std::string& kind, const std::string& ctas) {
  return kind == to_string(RegistrationKind::symmetric) ? symmetric_key(ctas) : kind;
}

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
      auto it = kinds.find(symmetric_key(c));
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
      auto it = kinds->find(symmetric_key(c));
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
    const auto other = kinds.find(kind_key(chosen, best_ctas));
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

// ---------------------------------------------------------------- build_profile, by concern

// What the runs measured, read once: the machine, the times alone and with compute beside, the CTA
// settings in the order of the runs, and whether the runs had the symmetric kernels off.
struct Measured {
  MachineFacts machine;
  Samples samples;         // times in us
  Samples steps;           // with the compute load beside (bench coll --compute): step time / compute alone
  Samples steps_in_place;  // the same of the in-place rows (the copy-engine decision's)
  std::vector<std::string> ctas_values;
  bool kernels_off = false;  // a run's windows had no symmetric flag (bench coll's fact; older runs: on)
};

// One table row of `op` in a run made under `ctas`: its times and steps per kind.
void read_row(const Json& row, const std::string& op, const std::string& ctas, Measured& m) {
  const Json* placement = row.find("placement");
  const Json* bytes = row.find("bytes");
  if (placement == nullptr || bytes == nullptr || (placement->string != "out" && placement->string != "in")) return;
  if (const Json* wrong = row.find("wrong"); wrong != nullptr && wrong->number != 0)
    throw InvalidArgument("tune: a run has wrong results at " + op + " " + std::to_string(bytes->integer) + " bytes: not used");
  const auto size = static_cast<std::size_t>(bytes->integer);
  const bool out_of_place = placement->string == "out";
  if (!out_of_place && op != "all_gather") return;  // in place: only for the copy-engine decision
  for (const char* kind : {"none", "local", "symmetric", "ce"}) {
    // ce's all-gather runs on the copy engines, whatever the CTA count: its runs pool over the settings.
    const std::string name = kind_key(kind, ctas);
    if (const Json* us = row.find(std::string(kind) + "_us"); out_of_place && us != nullptr && us->type == Json::Type::number)
      m.samples[op][size][name].push_back(us->number);
    if (const Json* step = row.find(std::string(kind) + "_step"); step != nullptr && step->type == Json::Type::number && step->number > 0)
      (out_of_place ? m.steps : m.steps_in_place)[op][size][name].push_back(step->number);
  }
}

Measured read_runs(const std::vector<CollRun>& runs, const MachineFacts& given) {
  Measured m;
  m.machine = machine_of(runs.front().doc, given);
  const MachineFacts& machine = m.machine;
  for (const CollRun& run : runs) {
    m.kernels_off = m.kernels_off || fact(run.doc, "symmetric_kernels") == "off";
    const MachineFacts r = machine_of(run.doc, given);
    if (r.gpu != machine.gpu || r.nccl_version != machine.nccl_version || r.ranks != machine.ranks)
      throw InvalidArgument("tune: the runs are from different machines (" + machine.gpu + ", NCCL " + std::to_string(machine.nccl_version) + ", " +
                            std::to_string(machine.ranks) + " ranks vs " + r.gpu + ", NCCL " + std::to_string(r.nccl_version) + ", " + std::to_string(r.ranks) + ")");
    if (std::find(m.ctas_values.begin(), m.ctas_values.end(), run.ctas) == m.ctas_values.end()) m.ctas_values.push_back(run.ctas);
    const Json* tables = run.doc.find("tables");
    if (tables == nullptr || tables->type != Json::Type::array) throw InvalidArgument("tune: a run has no tables (not `bench coll --json` output?)");
    for (const Json& table : tables->array) {
      const Json* title = table.find("title");
      const Json* rows = table.find("rows");
      if (title == nullptr || rows == nullptr || rows->type != Json::Type::array) continue;
      const std::string op = title->string.substr(0, title->string.find(' '));
      if (op != "all_gather" && op != "reduce_scatter" && op != "all_reduce") continue;
      for (const Json& row : rows->array) read_row(row, op, run.ctas, m);
    }
  }
  if (machine.gpu.empty() || machine.nccl_version == 0 || machine.ranks == 0)
    throw InvalidArgument("tune: the runs do not say their GPU, NCCL version and rank count (older bench coll): give --gpu, --nccl-version and --ranks");
  if (m.samples.empty()) throw InvalidArgument("tune: the runs hold no all-gather, reduce-scatter or all-reduce times");
  return m;
}

// The CTA settings whose steps with compute beside are within 1% of the best one's (all of them
// without such runs), and the note that says so (left empty without).
std::vector<std::string> ctas_eligible_beside_compute(const Measured& m, std::string& step_note) {
  if (m.steps.empty()) return m.ctas_values;
  const CtaScores beside = score_ctas(m.steps, m.ctas_values);
  std::string best_step = m.ctas_values.front();
  for (const auto& c : m.ctas_values)
    if (beside.geomean.at(c) < beside.geomean.at(best_step)) best_step = c;
  if (!std::isfinite(beside.geomean.at(best_step))) return m.ctas_values;
  std::vector<std::string> eligible;
  for (const auto& c : m.ctas_values)
    if (beside.geomean.at(c) <= 1.01 * beside.geomean.at(best_step)) eligible.push_back(c);
  std::string list;
  for (const auto& c : eligible) list += (list.empty() ? "" : ", ") + c;
  step_note = "; with compute beside, step time relative to " + best_step + ": " + describe_scores(beside, m.ctas_values, best_step) +
              "; within 1% of the best step: " + list;
  return eligible;
}

// The CTA count. Alone: the smallest geometric mean of symmetric medians (score_ctas). With the
// compute load beside (runs of bench coll --compute), a count that buys collective speed with
// SMs the compute needed shows in the steps: the count is then the fastest alone among those whose
// steps are within 1% of the best count's, so that a training step that overlaps its collectives
// never pays for a faster exposed one. NCCL's own count when within 1% of the choice.
struct CtaChoice {
  std::string best;                 // "nccl" or a count
  bool symmetric_measured = false;  // symmetric times at every size
};
CtaChoice choose_ctas(const Measured& m, Report& report) {
  const CtaScores alone = score_ctas(m.samples, m.ctas_values);
  std::string step_note;
  const std::vector<std::string> eligible = ctas_eligible_beside_compute(m, step_note);
  CtaChoice choice{eligible.front(), false};
  std::string& best = choice.best;
  for (const auto& c : eligible)
    if (alone.geomean.at(c) < alone.geomean.at(best)) best = c;
  choice.symmetric_measured = std::isfinite(alone.geomean.at(best));
  if (!choice.symmetric_measured) {  // no symmetric times at every size (no windows here): NCCL's own
    best = "nccl";
    report.notes.push_back("symmetric was not measured at every size (windows unsupported?): the profile keeps NCCL's CTA count");
  }
  if (choice.symmetric_measured && std::find(eligible.begin(), eligible.end(), "nccl") != eligible.end() &&
      alone.geomean.at("nccl") <= 1.01 * alone.geomean.at(best))
    best = "nccl";
  if (m.kernels_off)  // NCCL ran ring kernels on the windows: no count was measured, the library keeps its default
    report.notes.push_back("symmetric CTAs: not measured (the runs had the symmetric kernels off, the NCCL-version guard); the profile "
                           "leaves the library's default");
  else if (choice.symmetric_measured)
    report.notes.push_back("symmetric CTAs: " + best + " (alone, geometric mean of symmetric times relative to it: " +
                           describe_scores(alone, m.ctas_values, best) + step_note + ")");
  return choice;
}

// A table over the kinds and CTA settings: size, none, local, each setting, ce (where measured);
// `what`: the keys' suffix, "us" or "step".
Table kinds_table(const std::string& title, const std::vector<std::string>& ctas_values, bool ce_measured, const std::string& what) {
  Table t;
  t.title = title;
  t.headers = {"size", "none", "local"};
  t.keys = {"bytes", "none_" + what, "local_" + what};
  for (const auto& c : ctas_values) {
    t.headers.push_back("symmetric " + c);
    t.keys.push_back("symmetric_" + c + "_" + what);
  }
  if (ce_measured) {
    t.headers.push_back("ce");
    t.keys.push_back("ce_" + what);
  }
  return t;
}

// A row's cells after the size, as kinds_table heads them.
void add_kind_cells(std::vector<Cell>& row, const Kinds& kinds, const std::vector<std::string>& ctas_values, bool ce_measured, int decimals) {
  const auto cell = [&](const std::string& key) { return spread_cell(kinds.count(key) ? kinds.at(key) : std::vector<double>{}, decimals); };
  for (const char* k : {"none", "local"}) row.push_back(cell(k));
  for (const auto& c : ctas_values) row.push_back(cell(symmetric_key(c)));
  if (ce_measured) row.push_back(cell("ce"));
}

// Cheapest to hold first (kinds in increasing order of cost); a costlier kind only when >= 2% faster
// than the choice so far. The kind's name and its runs (nullptr: no times of any kind).
std::pair<std::string, const std::vector<double>*> cheapest_kind(const Kinds& kinds, const std::string& best_ctas) {
  std::string chosen;
  double chosen_us = INFINITY;
  const std::vector<double>* chosen_runs = nullptr;
  for (int k = 0; k < kRegistrationKinds; ++k) {
    const std::string kind = to_string(static_cast<RegistrationKind>(k));
    auto it = kinds.find(kind_key(kind, best_ctas));
    if (it == kinds.end()) continue;
    const double us = median(it->second);
    if (chosen.empty() || us <= 0.98 * chosen_us) {
      chosen = kind;
      chosen_us = us;
      chosen_runs = &it->second;
    }
  }
  return {chosen, chosen_runs};
}

// The kind for a buffer that names no collective at `bytes`, where the collectives' kinds (`c`)
// differ: the one whose worst median over the collectives, each against that collective's fastest
// kind, is the smallest, a tie going to the cheaper kind. No 2% margin for the cheaper kind (as
// cheapest_kind has): it would keep a worst case up to 2% above the smallest, which is what this pick
// is for. Where they agree: none (pick_of takes their kind). Each collective's times are those of its
// nearest measured size at or below `bytes` (its sizes differ from the others' at rank counts that are
// no power of two). The majority pick this replaces cost up to 9% at 4 ranks, where all-gather,
// reduce-scatter and all-reduce each want another kind from 512 MiB (docs/benchmarks/coll.md).
std::optional<RegistrationKind> any_kind(const Samples& samples, std::size_t bytes, const ProfileClass& c, const std::string& best_ctas) {
  const RegistrationKind first = c.kind.begin()->second;
  if (std::all_of(c.kind.begin(), c.kind.end(), [&](const auto& op_kind) { return op_kind.second == first; })) return std::nullopt;
  // Per collective measured at or below `bytes`: each kind's median over its fastest kind's (INFINITY: not measured).
  std::vector<std::array<double, kRegistrationKinds>> ratios;
  for (const auto& [op, sizes] : samples) {
    auto at = sizes.upper_bound(bytes);
    if (at == sizes.begin()) continue;  // this collective's sizes start above: not measured here
    --at;
    std::array<double, kRegistrationKinds> us;
    for (int k = 0; k < kRegistrationKinds; ++k) {
      const auto it = at->second.find(kind_key(to_string(static_cast<RegistrationKind>(k)), best_ctas));
      us[static_cast<std::size_t>(k)] = it == at->second.end() ? INFINITY : median(it->second);
    }
    const double fastest = *std::min_element(us.begin(), us.end());
    for (double& u : us) u /= fastest;
    ratios.push_back(us);
  }
  std::optional<RegistrationKind> chosen;
  double chosen_worst = INFINITY;
  for (int k = 0; k < kRegistrationKinds; ++k) {
    double worst = 0;
    for (const auto& r : ratios) worst = std::max(worst, r[static_cast<std::size_t>(k)]);
    if (worst < chosen_worst) {  // INFINITY (a collective lacks this kind's times) never is
      chosen = static_cast<RegistrationKind>(k);
      chosen_worst = worst;
    }
  }
  return chosen;
}

// Per op and size the kind (profile.classes) and its table. Returns the note on the run-to-run noise
// of what was chosen (the report's last).
std::string choose_kinds(const Measured& m, const std::string& best, Profile& profile, Report& report) {
  std::map<std::size_t, ProfileClass> classes;
  std::vector<double> noise_small, noise_large;  // spread of the chosen kind, below and from 256 KiB
  for (const auto& [op, sizes] : m.samples) {
    const bool ce_measured = has_copy_engine(sizes);
    Table t = kinds_table(op + " (" + std::to_string(m.machine.ranks) + " ranks): time us, median [min-max] over runs", m.ctas_values, ce_measured, "us");
    t.headers.push_back("kind");
    t.keys.push_back("kind");
    for (const auto& [bytes, kinds] : sizes) {
      const auto [chosen, chosen_runs] = cheapest_kind(kinds, best);
      if (chosen_runs == nullptr) throw InvalidArgument("tune: no times of any kind for " + op + " at " + std::to_string(bytes) + " bytes");
      classes[bytes].min_bytes = bytes;
      classes[bytes].kind[op] = *registration_kind_from_string(chosen);  // a RegistrationKind's name
      // Run-to-run noise of what was chosen: (max - min) / median over the runs.
      const auto [lo, hi] = std::minmax_element(chosen_runs->begin(), chosen_runs->end());
      (bytes < 256 * 1024 ? noise_small : noise_large).push_back((*hi - *lo) / median(*chosen_runs));
      std::vector<Cell> row{bytes_cell(bytes)};
      add_kind_cells(row, kinds, m.ctas_values, ce_measured, 1);
      row.push_back(text_cell(chosen));
      t.add(std::move(row));
    }
    report.tables.push_back(std::move(t));
  }
  // Every class names every collective measured at or below it: at rank counts that are no power of
  // two the collectives' sizes differ, and a class made at one collective's size carries the others'
  // kinds from the classes before it.
  std::map<std::string, RegistrationKind, std::less<>> carried;
  for (auto& [bytes, c] : classes) {
    for (const auto& [op, kind] : c.kind) carried.insert_or_assign(op, kind);
    c.kind = carried;
    c.any = any_kind(m.samples, bytes, c, best);
    profile.classes.push_back(std::move(c));
  }
  auto pct = [](const std::vector<double>& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", median(v) * 100);
    return v.empty() ? std::string("-") : std::string(buf);
  };
  return "noise (max - min over runs, relative to the median, of the chosen kind; median over sizes): below 256 KiB " + pct(noise_small) +
         ", from 256 KiB " + pct(noise_large) + ": where it exceeds the differences between kinds, the choice there is a toss-up";
}

// What each setting's collectives cost a step with compute beside them.
void add_step_tables(const Measured& m, Report& report) {
  for (const auto& [op, sizes] : m.steps) {
    const bool ce_measured = has_copy_engine(sizes);
    Table t = kinds_table(op + " (" + std::to_string(m.machine.ranks) + " ranks) with compute beside: step time / compute alone, median [min-max] over runs",
                          m.ctas_values, ce_measured, "step");
    for (const auto& [bytes, kinds] : sizes) {
      std::vector<Cell> row{bytes_cell(bytes)};
      add_kind_cells(row, kinds, m.ctas_values, ce_measured, 3);
      t.add(std::move(row));
    }
    report.tables.push_back(std::move(t));
  }
}

}  // namespace

Profile build_profile(const std::vector<CollRun>& runs, const MachineFacts& given, Report& report) {
  if (runs.empty()) throw InvalidArgument("tune: no bench coll runs");
  const Measured m = read_runs(runs, given);
  const CtaChoice ctas = choose_ctas(m, report);
  Profile profile;
  profile.gpu = m.machine.gpu;
  profile.nccl_version = m.machine.nccl_version;
  profile.ranks = m.machine.ranks;
  profile.symmetric_ctas = ctas.best == "nccl" || m.kernels_off ? 0 : std::stoi(ctas.best);
  // Measured only where the runs had the kernels on and symmetric times at every size (else the
  // profile keeps NCCL's count or the library's default, and says so above).
  profile.symmetric_ctas_measured = !m.kernels_off && ctas.symmetric_measured;
  // When the runs were made: their own "measured" fact (the latest), never the time of this call
  // (tune --from reads runs made before). Runs without it: unknown; cmd_tune stamps the runs it made.
  for (const CollRun& run : runs)
    if (const std::string when = fact(run.doc, "measured"); when > profile.measured) profile.measured = when;
  if (profile.measured.empty()) profile.measured = kUnknownWhen;
  const std::string noise = choose_kinds(m, ctas.best, profile, report);
  add_step_tables(m, report);
  if (m.kernels_off)
    report.notes.push_back("copy-engine all-gather: not chosen (the runs had the symmetric kernels off: NCCL uses its copy engines only on "
                           "windows with the symmetric flag, so ce measured ring kernels)");
  else
    profile.copy_engine_all_gather = decide_copy_engine(m.steps, m.steps_in_place, profile, ctas.best, report);
  report.facts.push_back({"machine", m.machine.gpu + ", NCCL " + std::to_string(m.machine.nccl_version) + ", " + std::to_string(m.machine.ranks) + " ranks"});
  report.facts.push_back({"runs", std::to_string(runs.size()) + " bench coll runs, CTA settings " + std::to_string(m.ctas_values.size())});
  report.notes.push_back("kind per op and size: the cheapest to hold (none < local < symmetric) unless a costlier one's median is >= 2% faster");
  report.notes.push_back("kind for buffers that name no collective (\"any\"), where the ops' kinds differ: the smallest worst time over the ops, "
                         "each against its fastest kind (a tie: the cheaper kind)");
  report.notes.push_back(noise);
  return profile;
}

}  // namespace ncclpool::tool

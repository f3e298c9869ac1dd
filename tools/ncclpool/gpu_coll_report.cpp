// `ncclpool bench coll`: the report of a sweep: one table per op (rows per size and placement,
// nccl-tests' columns per kind, medians over the rounds), the bus bandwidth summary, the --auto and
// --auto-pool ratios, and the facts a profile needs. report_sweep calls one function per part.

#include "gpu_coll.hpp"

#include <ncclpool/nccl.hpp>

#include <cstdio>

namespace ncclpool::tool::coll {
namespace {

// What the rows found, for the notes after the tables: the worst ratios of auto and of the pool to
// the best single kind (from 64 KiB, the targets' range, and below it), each row's largest spread,
// and the wrong results.
struct Findings {
  double worst_auto = 0;
  std::string worst_auto_at;
  double worst_pool = 0, worst_pool_vs_none = 0, worst_pool_small = 0;
  std::string worst_pool_at, worst_pool_vs_none_at, worst_pool_small_at;
  std::vector<double> spread_small, spread_large;  // per row, the largest spread of its columns
  int wrong_total = 0;
};

// The columns' keys, as the tables show them: the kinds measured, then auto and pool.
std::vector<std::string> measured_columns(const CollOptions& o, const std::vector<int>& kinds) {
  std::vector<std::string> measured;
  for (int k : kinds) measured.push_back(kKindNames[k]);
  if (o.auto_kind) measured.push_back("auto");
  if (o.auto_pool) measured.push_back("pool");
  return measured;
}

// The columns an op has: ce only where it carries the op.
std::vector<std::string> columns_of(const std::vector<std::string>& measured, const std::string& op) {
  std::vector<std::string> names;
  for (const auto& name : measured)
    if (column_carries(name, op)) names.push_back(name);
  return names;
}

// The table of one op, headed: size, count, placement, each kind's time and busbw (and with compute
// beside, its time and step), auto's and the pool's columns, spread, wrong.
Table op_table(const CollOptions& o, const std::string& op, int ranks, const std::vector<int>& op_kinds) {
  Table t;
  t.title = op + " (" + std::to_string(ranks) + " ranks): time us, busbw GB/s" + (o.rounds > 1 ? ", medians of " + std::to_string(o.rounds) + " rounds" : "");
  t.headers = {"size", "count", "place"};
  t.keys = {"bytes", "count", "placement"};
  auto add_kind_columns = [&](const std::string& header, const std::string& key) {
    for (const auto& [h, k] : std::vector<std::pair<std::string, std::string>>{{" us", "_us"}, {" busbw", "_busbw"}}) {
      t.headers.push_back(header + h);
      t.keys.push_back(key + k);
    }
    if (o.compute) {
      t.headers.push_back(header + " beside us");
      t.keys.push_back(key + "_beside_us");
      t.headers.push_back(header + " step");
      t.keys.push_back(key + "_step");
    }
  };
  for (int k : op_kinds) add_kind_columns(kKindNames[k], kKindNames[k]);
  if (o.auto_kind) {
    t.headers.push_back("auto kind");
    t.keys.push_back("auto_kind");
    add_kind_columns("auto", "auto");
    t.headers.push_back("auto/best");
    t.keys.push_back("auto_vs_best");
  }
  if (o.auto_pool) {
    t.headers.push_back("pool part");
    t.keys.push_back("pool_part");
    add_kind_columns("pool", "pool");
    for (const char* h : {"pool/best", "pool/none"}) t.headers.push_back(h);
    for (const char* k : {"pool_vs_best", "pool_vs_none"}) t.keys.push_back(k);
  }
  if (o.rounds > 1) {
    t.headers.push_back("spread %");
    t.keys.push_back("spread_pct");
  }
  t.headers.push_back("wrong");
  t.keys.push_back("wrong");
  return t;
}

// auto/best and pool/best are judged as auto was chosen: per size class, out-of-place + in-place
// time, against the single kind with the lowest such sum.
struct Ratios {
  double auto_ratio = 0, pool_ratio = 0, pool_vs_none = 0;
};
Ratios ratios_at(const CollOptions& o, Sweep& sweep, const std::string& op, std::size_t size, const std::vector<int>& op_kinds, Findings& f) {
  auto class_time = [&](const std::string& kind) {
    return sweep.shared.get(key_of(op, size, kind, false)).median + sweep.shared.get(key_of(op, size, kind, true)).median;
  };
  double best_class = 0;  // over the registration kinds (ce is another communicator, which auto and the pool never pick)
  for (int k : op_kinds)
    if (k != kCopyEngine) best_class = best_class == 0 ? class_time(kKindNames[k]) : std::min(best_class, class_time(kKindNames[k]));
  Ratios r;
  r.auto_ratio = o.auto_kind && best_class > 0 ? class_time("auto") / best_class : 0;
  if (r.auto_ratio > f.worst_auto) {
    f.worst_auto = r.auto_ratio;
    f.worst_auto_at = op + " " + format_bytes(size);
  }
  r.pool_ratio = o.auto_pool && best_class > 0 ? class_time("pool") / best_class : 0;
  const bool none_measured = std::find(sweep.kinds.begin(), sweep.kinds.end(), kNone) != sweep.kinds.end();
  r.pool_vs_none = o.auto_pool && none_measured ? class_time("pool") / class_time("none") : 0;
  const std::string at = op + " " + format_bytes(size);
  if (size >= 64 * 1024) {
    if (r.pool_ratio > f.worst_pool) f.worst_pool = r.pool_ratio, f.worst_pool_at = at;
    if (r.pool_vs_none > f.worst_pool_vs_none) f.worst_pool_vs_none = r.pool_vs_none, f.worst_pool_vs_none_at = at;
  } else if (r.pool_ratio > f.worst_pool_small) {
    f.worst_pool_small = r.pool_ratio, f.worst_pool_small_at = at;
  }
  return r;
}

// The row of one size and placement.
std::vector<Cell> op_row(const CollOptions& o, Sweep& sweep, const std::string& op, const Point& point, bool in_place,
                         const std::vector<int>& op_kinds, const std::vector<std::string>& op_measured, const Ratios& r, Findings& f) {
  const std::size_t size = point.size;
  std::vector<Cell> row{bytes_cell(size), integer_cell(static_cast<long long>(point.count)), text_cell(in_place ? "in" : "out")};
  double row_spread = 0;
  auto add = [&](const std::string& name) {
    const std::string key = key_of(op, size, name, in_place);
    const OverRounds time = sweep.shared.get(key);
    row.push_back(number_cell(time.median * 1e6, 2));
    row.push_back(number_cell(busbw_gbs(op, size, time.median, sweep.ranks), 2));
    if (o.compute) {
      row.push_back(number_cell(sweep.shared.get(key, &Measurement::beside).median * 1e6, 2));
      row.push_back(number_cell(sweep.shared.get(key, &Measurement::step).median, 3));
    }
    row_spread = std::max(row_spread, time.spread);
    f.wrong_total += sweep.shared.wrong(key);
  };
  for (int k : op_kinds) add(kKindNames[k]);
  if (o.auto_kind) {
    row.push_back(text_cell(kKindNames[sweep.auto_choice[op + "/" + std::to_string(size)]]));
    add("auto");
    row.push_back(number_cell(r.auto_ratio, 3));
  }
  if (o.auto_pool) {
    row.push_back(text_cell(sweep.pool_part[op + "/" + std::to_string(size)]));
    add("pool");
    row.push_back(number_cell(r.pool_ratio, 3));
    row.push_back(number_cell(r.pool_vs_none, 3));
  }
  if (o.rounds > 1) {
    row.push_back(number_cell(row_spread * 100, 1));
    (size >= 64 * 1024 ? f.spread_large : f.spread_small).push_back(row_spread);
  }
  int wrong = 0;
  for (const auto& name : op_measured) wrong += sweep.shared.wrong(key_of(op, size, name, in_place));
  row.push_back(integer_cell(wrong));
  return row;
}

// Per op and kind, nccl-tests' "Avg bus bandwidth" (over sizes and both placements) and the peak.
Table bus_bandwidth_summary(const CollOptions& o, Sweep& sweep, const std::vector<std::string>& measured) {
  Table summary;
  summary.title = "summary: bus bandwidth GB/s";
  summary.headers = {"op", "kind", "avg busbw", "peak busbw", "at size"};
  summary.keys = {"op", "kind", "avg_busbw", "peak_busbw", "peak_bytes"};
  for (const auto& op : o.ops) {
    for (const auto& name : columns_of(measured, op)) {
      double sum = 0, peak = 0;
      std::size_t peak_size = 0;
      int samples = 0;
      for (const Point& point : points_for(op, sweep.sizes, sweep.ranks)) {
        const std::size_t size = point.size;
        for (bool in_place : {false, true}) {
          const double busbw = busbw_gbs(op, size, sweep.shared.get(key_of(op, size, name, in_place)).median, sweep.ranks);
          sum += busbw;
          ++samples;
          if (busbw > peak) peak = busbw, peak_size = size;
        }
      }
      summary.add({text_cell(op), text_cell(name), number_cell(samples ? sum / samples : 0, 2), number_cell(peak, 2), bytes_cell(peak_size)});
    }
  }
  return summary;
}

// What auto chose per op ("all_gather: symmetric 1 KiB..64 MiB, local 128 MiB..1 GiB") and how it fared.
void add_auto_notes(const CollOptions& o, Sweep& sweep, const Findings& f, Report& report) {
  for (const auto& op : o.ops) {
    std::string line = "auto chose for " + op + ":";
    int current = -1;
    std::size_t from = 0, last = 0;
    auto flush = [&] {
      if (current >= 0) line += std::string(" ") + kKindNames[current] + " " + format_bytes(from) + (from == last ? "" : ".." + format_bytes(last)) + ";";
    };
    for (const Point& point : points_for(op, sweep.sizes, sweep.ranks)) {
      const int k = sweep.auto_choice[op + "/" + std::to_string(point.size)];
      if (k != current) {
        flush();
        current = k;
        from = point.size;
      }
      last = point.size;
    }
    flush();
    report.notes.push_back(line);
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "auto vs the best single kind per size class (out-of-place + in-place time): worst ratio %.3f (%s); > 1 = auto slower",
                f.worst_auto, f.worst_auto_at.c_str());
  report.notes.push_back(buf);
  report.notes.push_back("auto = per size class, the cheapest kind to hold (none < local < symmetric) unless a costlier one was >= 2% "
                         "faster (out-of-place + in-place time), measured again");
}

void add_pool_notes(const CollOptions& o, const Sweep& sweep, const Findings& f, Report& report) {
  report.facts.push_back({"auto_pool_routes", sweep.pool_routes});
  report.facts.push_back({"auto_pool_buffers", o.pool_for_any ? "any" : "op"});
  const char* asked = o.pool_for_any ? "naming no collective: ncclpool_alloc, the routes' 'any'" : "for the op: ncclpool_alloc_for";
  char buf[440];
  std::snprintf(buf, sizeof buf,
                "auto pool (buffers from the library's auto pool, routed by message size %s) vs the best single kind per size class "
                "(out-of-place + in-place time): worst %.3f (%s) from 64 KiB, %.3f (%s) below; vs none: worst %.3f (%s) from 64 KiB; "
                "> 1 = the pool slower",
                asked, f.worst_pool, f.worst_pool_at.c_str(), f.worst_pool_small, f.worst_pool_small_at.c_str(), f.worst_pool_vs_none, f.worst_pool_vs_none_at.c_str());
  report.notes.push_back(buf);
}

// The rounds and their spread; the compute load beside.
void add_method_notes(const CollOptions& o, const Sweep& sweep, const Findings& f, Report& report) {
  report.facts.push_back({"rounds", std::to_string(o.rounds)});
  if (o.rounds > 1) {
    auto summary_of = [](std::vector<double> v) {
      if (v.empty()) return std::string("-");
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f%% (max %.1f%%)", median(v) * 100, *std::max_element(v.begin(), v.end()) * 100);
      return std::string(buf);
    };
    report.notes.push_back(std::to_string(o.rounds) + " rounds, each measuring the kinds in an order rotated by one: times are medians over the rounds; "
                           "spread % = the largest (max - min) / median over rounds of a row's columns, median over rows " + summary_of(f.spread_small) +
                           " below 64 KiB, " + summary_of(f.spread_large) + " from 64 KiB: ratios closer to 1 than that are noise");
  }
  if (o.compute) {
    report.facts.push_back({"compute_load", sweep.compute_description});
    report.notes.push_back("compute beside: each collective launched (eagerly, on a stream of the greatest priority, as FSDP2's) next to a chunk of the "
                           "compute load on another stream, the streams joined "
                           "at start and end; the chunk takes 10 us + size x busbw factor / 300 GB/s alone (about 1.2x the collective at "
                           "H200's NVLink speed). beside us = the collective's time per op meanwhile; step = the time until both are done / "
                           "the compute load alone (1.000: the collective cost the step nothing)");
  }
}

// The facts a profile needs (the CTA count and where it came from, whether the symmetric kernels ran),
// and the check of the results (throws when one was wrong).
void add_kernel_facts_and_check(int ranks, const Findings& f, Report& report) {
  const SymmetricCtas ctas = symmetric_ctas();  // decided at this run's first symmetric attach
  report.facts.push_back({"symmetric_ctas", ctas.decided ? std::to_string(ctas.ctas) : "-"});
  report.facts.push_back({"symmetric_ctas_source", ctas.source});
  // Whether windows carried the symmetric flag (the NCCL-version guard): without it no CTA count
  // applied, and `ncclpool tune` records none.
  const SymmetricKernels kernels = symmetric_kernels_on(0);
  report.facts.push_back({"symmetric_kernels", kernels.enabled ? "on" : "off"});
  // Whether each collective on windows followed a fence (the decision `fence`), and of which kind.
  report.facts.push_back({"symmetric_fence", kernels.fence ? to_string(symmetric_fence_kind()) : "none"});
  if (ranks == 1) report.notes.push_back("1 rank: bus bandwidth is 0 by definition (factor (n-1)/n); times are still meaningful");
  report.notes.push_back(f.wrong_total == 0 ? "check: every sampled result was right" : "check: " + std::to_string(f.wrong_total) + " sampled results were WRONG");
  if (f.wrong_total != 0) throw BackendError("bench coll: " + std::to_string(f.wrong_total) + " wrong results\n" + report.text());
}

}  // namespace

void report_sweep(const CollOptions& o, Sweep& sweep, Report& report) {
  const std::vector<std::string> measured = measured_columns(o, sweep.kinds);
  Findings f;
  // Tables: one per op, rows per size and placement; every time is the median over the rounds.
  for (const auto& op : o.ops) {
    std::vector<int> op_kinds;  // ce only where it carries the op
    for (int k : sweep.kinds)
      if (kind_carries(k, op)) op_kinds.push_back(k);
    const std::vector<std::string> op_measured = columns_of(measured, op);
    Table t = op_table(o, op, sweep.ranks, op_kinds);
    for (const Point& point : points_for(op, sweep.sizes, sweep.ranks)) {
      const Ratios r = ratios_at(o, sweep, op, point.size, op_kinds, f);
      for (bool in_place : {false, true}) t.add(op_row(o, sweep, op, point, in_place, op_kinds, op_measured, r, f));
    }
    report.tables.push_back(std::move(t));
  }
  report.tables.push_back(bus_bandwidth_summary(o, sweep, measured));
  if (o.auto_kind) add_auto_notes(o, sweep, f, report);
  if (o.auto_pool) add_pool_notes(o, sweep, f, report);
  add_method_notes(o, sweep, f, report);
  add_kernel_facts_and_check(sweep.ranks, f, report);
}

}  // namespace ncclpool::tool::coll

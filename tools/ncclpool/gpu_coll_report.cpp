// `ncclpool bench coll`: the report of a sweep: one table per op (rows per size and placement,
// nccl-tests' columns per kind, medians over the rounds), the bus bandwidth summary, the --auto and
// --auto-pool ratios, and the facts a profile needs.

#include "gpu_coll.hpp"

#include <ncclpool/nccl.hpp>

#include <cstdio>

namespace ncclpool::tool::coll {

void report_sweep(const CollOptions& o, Sweep& sweep, Report& report) {
  const int ranks = sweep.ranks;
  const std::vector<int>& kinds = sweep.kinds;
  const std::vector<std::size_t>& sizes = sweep.sizes;
  Shared& shared = sweep.shared;
  std::map<std::string, int>& auto_choice = sweep.auto_choice;
  std::map<std::string, std::string>& pool_part = sweep.pool_part;
  const std::string& pool_routes = sweep.pool_routes;
  const std::string& compute_description = sweep.compute_description;

  // Tables: one per op, rows per size and placement, nccl-tests' columns per kind; every time is
  // the median over the rounds.
  std::vector<std::string> measured;  // the columns' keys, as the table shows them
  for (int k : kinds) measured.push_back(kKindNames[k]);
  if (o.auto_kind) measured.push_back("auto");
  if (o.auto_pool) measured.push_back("pool");
  double worst_auto = 0;
  std::string worst_auto_at;
  double worst_pool = 0, worst_pool_vs_none = 0;  // from 64 KiB (the targets' range), and below it
  double worst_pool_small = 0;
  std::string worst_pool_at, worst_pool_vs_none_at, worst_pool_small_at;
  std::vector<double> spread_small, spread_large;  // per row, the largest spread of its columns
  int wrong_total = 0;
  // The kinds (and so the columns) an op has: ce only where it carries the op.
  auto kinds_of = [&kinds](const std::string& op) {
    std::vector<int> carried;
    for (int k : kinds)
      if (kind_carries(k, op)) carried.push_back(k);
    return carried;
  };
  auto measured_of = [&](const std::string& op) {
    std::vector<std::string> names;
    for (const auto& name : measured)
      if (column_carries(name, op)) names.push_back(name);
    return names;
  };
  for (const auto& op : o.ops) {
    const std::vector<int> op_kinds = kinds_of(op);
    const std::vector<std::string> op_measured = measured_of(op);
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
    for (const auto [count, size] : points_for(op, sizes, ranks)) {
      // auto/best is judged as auto was chosen: per size class, out-of-place + in-place time,
      // against the single kind with the lowest such sum.
      auto class_time = [&](const std::string& kind) {
        return shared.get(key_of(op, size, kind, false)).median + shared.get(key_of(op, size, kind, true)).median;
      };
      double best_class = 0;  // over the registration kinds (ce is another communicator, which auto and the pool never pick)
      for (int k : op_kinds)
        if (k != kCopyEngine) best_class = best_class == 0 ? class_time(kKindNames[k]) : std::min(best_class, class_time(kKindNames[k]));
      const double auto_ratio = o.auto_kind && best_class > 0 ? class_time("auto") / best_class : 0;
      if (auto_ratio > worst_auto) {
        worst_auto = auto_ratio;
        worst_auto_at = op + " " + format_bytes(size);
      }
      const double pool_ratio = o.auto_pool && best_class > 0 ? class_time("pool") / best_class : 0;
      const bool none_measured = std::find(kinds.begin(), kinds.end(), kNone) != kinds.end();
      const double pool_vs_none = o.auto_pool && none_measured ? class_time("pool") / class_time("none") : 0;
      const std::string at = op + " " + format_bytes(size);
      if (size >= 64 * 1024) {
        if (pool_ratio > worst_pool) worst_pool = pool_ratio, worst_pool_at = at;
        if (pool_vs_none > worst_pool_vs_none) worst_pool_vs_none = pool_vs_none, worst_pool_vs_none_at = at;
      } else if (pool_ratio > worst_pool_small) {
        worst_pool_small = pool_ratio, worst_pool_small_at = at;
      }
      for (bool in_place : {false, true}) {
        std::vector<Cell> row{bytes_cell(size), integer_cell(static_cast<long long>(count)), text_cell(in_place ? "in" : "out")};
        double row_spread = 0;
        auto add = [&](const std::string& name) {
          const std::string key = key_of(op, size, name, in_place);
          const OverRounds time = shared.get(key);
          row.push_back(number_cell(time.median * 1e6, 2));
          row.push_back(number_cell(busbw_gbs(op, size, time.median, ranks), 2));
          if (o.compute) {
            row.push_back(number_cell(shared.get(key, &Measurement::beside).median * 1e6, 2));
            row.push_back(number_cell(shared.get(key, &Measurement::step).median, 3));
          }
          row_spread = std::max(row_spread, time.spread);
          wrong_total += shared.wrong(key);
        };
        for (int k : op_kinds) add(kKindNames[k]);
        if (o.auto_kind) {
          row.push_back(text_cell(kKindNames[auto_choice[op + "/" + std::to_string(size)]]));
          add("auto");
          row.push_back(number_cell(auto_ratio, 3));
        }
        if (o.auto_pool) {
          row.push_back(text_cell(pool_part[op + "/" + std::to_string(size)]));
          add("pool");
          row.push_back(number_cell(pool_ratio, 3));
          row.push_back(number_cell(pool_vs_none, 3));
        }
        if (o.rounds > 1) {
          row.push_back(number_cell(row_spread * 100, 1));
          (size >= 64 * 1024 ? spread_large : spread_small).push_back(row_spread);
        }
        int wrong = 0;
        for (const auto& name : op_measured) wrong += shared.wrong(key_of(op, size, name, in_place));
        row.push_back(integer_cell(wrong));
        t.add(std::move(row));
      }
    }
    report.tables.push_back(std::move(t));
  }

  // Summary: per op and kind, nccl-tests' "Avg bus bandwidth" (over sizes and both placements) and the peak.
  Table summary;
  summary.title = "summary: bus bandwidth GB/s";
  summary.headers = {"op", "kind", "avg busbw", "peak busbw", "at size"};
  summary.keys = {"op", "kind", "avg_busbw", "peak_busbw", "peak_bytes"};
  for (const auto& op : o.ops) {
    for (const auto& name : measured_of(op)) {
      double sum = 0, peak = 0;
      std::size_t peak_size = 0;
      int samples = 0;
      for (const Point& point : points_for(op, sizes, ranks)) {
        const std::size_t size = point.size;
        for (bool in_place : {false, true}) {
          const double busbw = busbw_gbs(op, size, shared.get(key_of(op, size, name, in_place)).median, ranks);
          sum += busbw;
          ++samples;
          if (busbw > peak) peak = busbw, peak_size = size;
        }
      }
      summary.add({text_cell(op), text_cell(name), number_cell(samples ? sum / samples : 0, 2), number_cell(peak, 2), bytes_cell(peak_size)});
    }
  }
  report.tables.push_back(std::move(summary));

  if (o.auto_kind) {
    for (const auto& op : o.ops) {  // "all_gather: symmetric 1 KiB..64 MiB, local 128 MiB..1 GiB"
      std::string line = "auto chose for " + op + ":";
      int current = -1;
      std::size_t from = 0, last = 0;
      auto flush = [&] {
        if (current >= 0) line += std::string(" ") + kKindNames[current] + " " + format_bytes(from) + (from == last ? "" : ".." + format_bytes(last)) + ";";
      };
      for (const Point& point : points_for(op, sizes, ranks)) {
        const std::size_t size = point.size;
        const int k = auto_choice[op + "/" + std::to_string(size)];
        if (k != current) {
          flush();
          current = k;
          from = size;
        }
        last = size;
      }
      flush();
      report.notes.push_back(line);
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "auto vs the best single kind per size class (out-of-place + in-place time): worst ratio %.3f (%s); > 1 = auto slower",
                  worst_auto, worst_auto_at.c_str());
    report.notes.push_back(buf);
    report.notes.push_back("auto = per size class, the cheapest kind to hold (none < local < symmetric) unless a costlier one was >= 2% "
                           "faster (out-of-place + in-place time), measured again");
  }
  if (o.auto_pool) {
    report.facts.push_back({"auto_pool_routes", pool_routes});
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "auto pool (buffers from the library's auto pool, routed by message size) vs the best single kind per size class "
                  "(out-of-place + in-place time): worst %.3f (%s) from 64 KiB, %.3f (%s) below; vs none: worst %.3f (%s) from 64 KiB; "
                  "> 1 = the pool slower",
                  worst_pool, worst_pool_at.c_str(), worst_pool_small, worst_pool_small_at.c_str(), worst_pool_vs_none, worst_pool_vs_none_at.c_str());
    report.notes.push_back(buf);
  }
  report.facts.push_back({"rounds", std::to_string(o.rounds)});
  if (o.rounds > 1) {
    auto summary_of = [](std::vector<double> v) {
      if (v.empty()) return std::string("-");
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f%% (max %.1f%%)", median(v) * 100, *std::max_element(v.begin(), v.end()) * 100);
      return std::string(buf);
    };
    report.notes.push_back(std::to_string(o.rounds) + " rounds, each measuring the kinds in an order rotated by one: times are medians over the rounds; "
                           "spread % = the largest (max - min) / median over rounds of a row's columns, median over rows " + summary_of(spread_small) +
                           " below 64 KiB, " + summary_of(spread_large) + " from 64 KiB: ratios closer to 1 than that are noise");
  }
  if (o.compute) {
    report.facts.push_back({"compute_load", compute_description});
    report.notes.push_back("compute beside: each collective launched (eagerly, on a stream of the greatest priority, as FSDP2's) next to a chunk of the "
                           "compute load on another stream, the streams joined "
                           "at start and end; the chunk takes 10 us + size x busbw factor / 300 GB/s alone (about 1.2x the collective at "
                           "H200's NVLink speed). beside us = the collective's time per op meanwhile; step = the time until both are done / "
                           "the compute load alone (1.000: the collective cost the step nothing)");
  }
  const SymmetricCtas ctas = symmetric_ctas();  // decided at this run's first symmetric attach
  report.facts.push_back({"symmetric_ctas", ctas.decided ? std::to_string(ctas.ctas) : "-"});
  report.facts.push_back({"symmetric_ctas_source", ctas.source});
  // Whether windows carried the symmetric flag (the NCCL-version guard): without it no CTA count
  // applied, and `ncclpool tune` records none.
  report.facts.push_back({"symmetric_kernels", symmetric_kernels_on(0).enabled ? "on" : "off"});
  if (ranks == 1) report.notes.push_back("1 rank: bus bandwidth is 0 by definition (factor (n-1)/n); times are still meaningful");
  report.notes.push_back(wrong_total == 0 ? "check: every sampled result was right" : "check: " + std::to_string(wrong_total) + " sampled results were WRONG");
  if (wrong_total != 0) throw BackendError("bench coll: " + std::to_string(wrong_total) + " wrong results\n" + report.text());
}

}  // namespace ncclpool::tool::coll

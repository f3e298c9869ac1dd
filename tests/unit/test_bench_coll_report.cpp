// `ncclpool bench coll`'s report (gpu_coll_report.cpp) from a sweep filled by hand: what it shows
// does not need a GPU. Built where the tool's GPU parts are (the CUDA and NCCL headers).
#include "gpu_coll.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

using namespace ncclpool::tool;
using namespace ncclpool::tool::coll;

namespace {
bool has_key(const Table& t, const std::string& key) { return std::find(t.keys.begin(), t.keys.end(), key) != t.keys.end(); }

// Every kind the sweep measures for `op` at every size, both placements, one round of 2 ranks.
void fill(Sweep& sweep, const std::string& op, const std::vector<std::string>& kinds, double seconds) {
  for (const Point& p : points_for(op, sweep.sizes, sweep.ranks))
    for (const auto& kind : kinds)
      for (bool in_place : {false, true}) {
        Measurement& m = sweep.shared.at(key_of(op, p.size, kind, in_place), sweep.ranks, 0);
        std::fill(m.seconds.begin(), m.seconds.end(), seconds);
      }
}
}  // namespace

TEST(BenchCollReport, CopyEngineIsAnAllGatherColumnOnly) {
  CollOptions o;
  o.ops = {"all_gather", "reduce_scatter"};
  o.kinds = {"none", "ce"};
  Sweep sweep;
  sweep.ranks = 2;
  sweep.kinds = {kNone, kCopyEngine};
  sweep.sizes = {1u << 20};
  EXPECT_TRUE(kind_carries(kCopyEngine, "all_gather"));
  EXPECT_FALSE(kind_carries(kCopyEngine, "reduce_scatter"));
  EXPECT_FALSE(kind_carries(kCopyEngine, "all_reduce"));
  EXPECT_TRUE(kind_carries(kSymmetric, "all_reduce"));
  fill(sweep, "all_gather", {"none", "ce"}, 20e-6);
  fill(sweep, "reduce_scatter", {"none"}, 30e-6);  // what the sweep measures: no ce for a reduction
  Report report;
  report_sweep(o, sweep, report);
  ASSERT_GE(report.tables.size(), 3u);
  const Table& gather = report.tables[0];
  const Table& scatter = report.tables[1];
  EXPECT_TRUE(has_key(gather, "ce_us")) << gather.text();
  EXPECT_TRUE(has_key(scatter, "none_us")) << scatter.text();
  EXPECT_FALSE(has_key(scatter, "ce_us")) << scatter.text();  // no empty ce column for a reduction
  const Table& summary = report.tables[2];
  for (const auto& row : summary.rows) {
    const std::string line = row[0].text + " " + row[1].text;
    EXPECT_NE(line, "reduce_scatter ce") << summary.text();
  }
}

// --auto-pool's report says how the pool's buffers were asked (the fact auto_pool_buffers and the
// note's wording): for their op by default, naming no collective with --pool-for any.
TEST(BenchCollReport, AutoPoolSaysHowItsBuffersWereAsked) {
  for (const bool any : {false, true}) {
    CollOptions o;
    o.ops = {"all_reduce"};
    o.kinds = {"none", "symmetric"};
    o.auto_pool = true;
    o.pool_for_any = any;
    Sweep sweep;
    sweep.ranks = 2;
    sweep.kinds = {kNone, kSymmetric};
    sweep.sizes = {1u << 20};
    sweep.pool_routes = "symmetric (built-in routes)";
    fill(sweep, "all_reduce", {"none", "symmetric", "pool"}, 20e-6);
    sweep.pool_part["all_reduce/" + std::to_string(1u << 20)] = "symmetric";
    Report report;
    report_sweep(o, sweep, report);
    std::string said;
    for (const auto& [key, value] : report.facts)
      if (key == "auto_pool_buffers") said = value;
    EXPECT_EQ(said, any ? "any" : "op");
    const std::string wording = any ? "naming no collective: ncclpool_alloc" : "for the op: ncclpool_alloc_for";
    EXPECT_TRUE(std::any_of(report.notes.begin(), report.notes.end(), [&](const std::string& n) { return n.find(wording) != std::string::npos; }))
        << "no note says '" << wording << "'";
  }
}

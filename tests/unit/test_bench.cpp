// The `ncclpool bench` pieces that run without a GPU: report rendering, argument lists, the
// nccl-tests bus-bandwidth factors, rank threads and their barrier, and the alloc and scope
// suites' simulator side (real pools, registries and loopback communicators).
#include "bench.hpp"
#include "commands.hpp"
#include "json.hpp"
#include "report.hpp"
#include "tune.hpp"

#include "common/scoped_env.hpp"

#include <ncclpool/errors.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/routes.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

using namespace ncclpool::tool;

TEST(Report, TextAlignsNumbersRightAndJsonKeepsTypes) {
  Report r;
  r.suite = "demo";
  r.facts = {{"target", "simulator"}};
  Table t;
  t.title = "a table";
  t.headers = {"size", "name", "ns"};
  t.keys = {"bytes", "name", "ns"};
  t.add({bytes_cell(4096), text_cell("x"), number_cell(12.345, 1)});
  t.add({bytes_cell(64ull << 20), text_cell("longer"), number_cell(1234.5, 1)});
  t.add({bytes_cell(3000), text_cell("-"), text_cell("-")});
  r.tables.push_back(t);
  r.notes = {"a note"};
  const std::string text = r.text();
  EXPECT_NE(text.find("ncclpool bench demo"), std::string::npos);
  EXPECT_NE(text.find("   4 KiB x        12.3"), std::string::npos) << text;
  EXPECT_NE(text.find("  64 MiB longer 1234.5"), std::string::npos) << text;
  EXPECT_NE(text.find("* a note"), std::string::npos);

  const Json j = parse_json(r.json());
  EXPECT_EQ(j.find("suite")->string, "demo");
  EXPECT_EQ(j.find("facts")->find("target")->string, "simulator");
  const auto& rows = j.find("tables")->array.at(0).find("rows")->array;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].find("bytes")->as_int("bytes"), 64ll << 20);
  EXPECT_DOUBLE_EQ(rows[0].find("ns")->number, 12.345);  // full precision, not the shown digits
  EXPECT_EQ(rows[2].find("ns")->type, Json::Type::null);  // "-" is no value
  EXPECT_EQ(rows[2].find("bytes")->as_int("bytes"), 3000);
}

TEST(BenchArgs, SizesAndLists) {
  EXPECT_EQ(parse_bytes("x", "4096"), 4096u);
  EXPECT_EQ(parse_bytes("x", "4K"), 4096u);
  EXPECT_EQ(parse_bytes("x", "64MiB"), 64ull << 20);
  EXPECT_EQ(parse_bytes("x", "1g"), 1ull << 30);
  EXPECT_EQ(parse_byte_list("sizes", "4K,1M"), (std::vector<std::size_t>{4096, 1u << 20}));
  EXPECT_EQ(parse_int_list("groups", "1,2,4", 1, 64), (std::vector<int>{1, 2, 4}));
  for (const char* bad : {"", "0", "4X", "K", "-1", "1T"}) EXPECT_THROW(parse_bytes("sizes", bad), UsageError) << bad;
  EXPECT_THROW(parse_int_list("groups", "1,,2", 1, 64), UsageError);
  EXPECT_THROW(parse_int_list("groups", "65", 1, 64), UsageError);
  try {
    parse_bytes("min", "4X");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--min: '4X' is not a size"), std::string::npos) << e.what();
  }
}

TEST(BenchArgs, CollOptionsAreChecked) {
  auto parse = [](std::vector<std::string> argv) {
    return parse_coll_options(Args::parse(argv, {"ops", "kinds", "min", "max", "factor", "warmup", "iters", "ranks", "pool-for"}, {"no-check", "auto", "auto-pool"}));
  };
  const CollOptions d = parse({});
  EXPECT_FALSE(d.auto_pool);
  EXPECT_FALSE(d.pool_for_any);  // the pool's buffers are asked for their op unless told
  EXPECT_TRUE(parse({"--auto-pool", "--pool-for", "any"}).pool_for_any);
  EXPECT_FALSE(parse({"--auto-pool", "--pool-for", "op"}).pool_for_any);
  EXPECT_THROW(parse({"--auto-pool", "--pool-for", "all_reduce"}), UsageError);
  EXPECT_THROW(parse({"--pool-for", "any"}), UsageError);  // without --auto-pool it would measure nothing
  EXPECT_EQ(d.min_bytes, 1024u);
  EXPECT_EQ(d.max_bytes, 1ull << 30);
  EXPECT_EQ(d.warmup, 5);  // nccl-tests' defaults
  EXPECT_EQ(d.iters, 20);
  EXPECT_TRUE(d.check);
  const CollOptions o = parse({"--ops", "all_reduce", "--kinds", "local,symmetric", "--min", "1M", "--max", "8M", "--auto", "--auto-pool", "--no-check"});
  EXPECT_EQ(o.ops, std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(o.kinds, (std::vector<std::string>{"local", "symmetric"}));
  EXPECT_TRUE(o.auto_kind);
  EXPECT_TRUE(o.auto_pool);
  EXPECT_FALSE(o.check);
  EXPECT_THROW(parse({"--ops", "broadcast"}), UsageError);
  EXPECT_THROW(parse({"--kinds", "global"}), UsageError);
  EXPECT_THROW(parse({"--kinds", "ce", "--auto"}), UsageError);  // nothing for --auto to pick (was an empty vector's [0])
  EXPECT_THROW(parse({"--kinds", "ce,ce", "--auto"}), UsageError);
  EXPECT_TRUE(parse({"--kinds", "none,ce", "--auto"}).auto_kind);
  EXPECT_THROW(parse({"--min", "2M", "--max", "1M"}), UsageError);
  EXPECT_THROW(parse({"--factor", "1"}), UsageError);
}

TEST(BenchMath, BusBandwidthFactorsOfNcclTests) {
  EXPECT_DOUBLE_EQ(busbw_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor("reduce_scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor("all_reduce", 1), 0.0);
}

TEST(BenchRanks, BarrierSynchronizesAndAFailureStopsTheOthers) {
  std::atomic<int> before{0}, seen_all{0};
  run_on_ranks(4, [&](int, RankBarrier& sync) {
    ++before;
    sync.wait();
    if (before.load() == 4) ++seen_all;
    sync.wait();
  });
  EXPECT_EQ(seen_all.load(), 4);
  // Rank 2 fails before the barrier: the others must not wait forever, and the real error wins.
  try {
    run_on_ranks(4, [&](int rank, RankBarrier& sync) {
      if (rank == 2) throw std::runtime_error("boom");
      sync.wait();
    });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 2: boom");
  }
}

TEST(BenchAlloc, SimTargetMeasuresEveryPattern) {
  AllocTarget t = make_sim_alloc_target();
  ASSERT_EQ(t.strategies.size(), 1u);
  AllocStrategy& s = *t.strategies[0];
  std::vector<std::size_t> calls;  // the count of each call of the body: calibration, then the rounds
  const auto rounds = time_rounds(2, 0.001, [&](std::size_t n) {
    calls.push_back(n);
    for (std::size_t i = 0; i < n; ++i) s.deallocate(s.allocate(4096, t.streams[i % 2]), t.streams[i % 2]);
  });
  // What is checked is what was run, not a timing (any timing passes "> 0" once the clock ticks):
  // both rounds ran the count the calibration settled on, and each gave a per-operation time.
  ASSERT_EQ(rounds.size(), 2u);
  ASSERT_GE(calls.size(), 3u);
  EXPECT_GE(calls.front(), 16u);
  EXPECT_EQ(calls[calls.size() - 1], calls[calls.size() - 3]);
  EXPECT_EQ(calls[calls.size() - 2], calls[calls.size() - 3]);
  for (double r : rounds) EXPECT_TRUE(std::isfinite(r) && r >= 0) << r;
  s.release_cached();  // growth starts from an empty pool
  void* p = s.allocate(1 << 20, t.streams[0]);
  EXPECT_NE(p, nullptr);
  s.deallocate(p, t.streams[0]);
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
}

TEST(BenchScope, LoopbackTeamRegistersAndCountsBackToZero) {
  auto team = make_loopback_team(2, 2);
  EXPECT_EQ(team->ranks(), 2);
  EXPECT_TRUE(team->windows(nullptr));
  run_on_ranks(2, [&](int rank, RankBarrier& sync) {
    auto pool = std::make_shared<ncclpool::Pool>(team->source(rank), ncclpool::PoolConfig{.name = "t", .deterministic = true});
    void* block = pool->allocate(4u << 20);
    ncclpool::Registry registry(pool);
    for (int g = 0; g < 2; ++g) registry.attach(team->comm(rank, g), ncclpool::RegistrationKind::symmetric);
    sync.wait();
    registry.check_invariants();
    EXPECT_EQ(registry.stats(*team->comm(rank, 1)).registered_segments, 1u);
    for (int g = 0; g < 2; ++g) registry.detach(*team->comm(rank, g));
    pool->deallocate(block);
  });
}

TEST(BenchGpu, WithoutGpusTheGpuPartsSayWhy) {
  std::string why;
  if (gpu_count(&why) > 0) GTEST_SKIP() << "GPUs here";
  EXPECT_FALSE(why.empty());
  Report r;
  EXPECT_THROW(run_coll(CollOptions{}, r), ncclpool::Error);
  EXPECT_THROW(make_nccl_team(2, 1), ncclpool::Error);
}

// `ncclpool tune` from the bench coll runs recorded on 2x H200 (docs/benchmarks/coll.md: seven runs
// with NCCL's symmetric CTA count, five with 32, alternating).
namespace {
const std::filesystem::path kRecorded = std::filesystem::path(NCCLPOOL_TEST_DATA) / "../../docs/benchmarks/data";

Json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_input_file(path.string(), "recorded bench coll run"));  // a missing file says so
}

std::vector<CollRun> recorded_coll_runs() {
  std::vector<CollRun> runs;
  for (const auto& entry : std::filesystem::directory_iterator(kRecorded / "2026-11-23-coll-symctas-2xh200-237829c")) {
    const std::string name = entry.path().filename().string();
    runs.push_back({name.find("ncclpool") != std::string::npos ? "32" : "nccl", read_json_file(entry.path())});
  }
  return runs;
}

// The bench coll run on 4x H200 that src/routing/builtin/sm90-4ranks.json was made from (32 CTAs).
Json recorded_4rank_coll_run() {
  return read_json_file(kRecorded / "2026-11-28-gpu-check-4xh200-issue46/call1-cuda-pdl-torch-sglang-tool-coll-9b78ee8/bench-coll.json");
}
}  // namespace

// tune --from reads runs made before: the profile says when they were made (here: not said), never
// the time it was built; and a count is "measured" only where symmetric times were (issue 49).
TEST(Tune, ProfileFromRecordedRunsKeepsTheirTimeAndWhatWasMeasured) {
  std::vector<CollRun> runs = recorded_coll_runs();
  Report report;
  ncclpool::Profile p = build_profile(runs, {"NVIDIA H200", 22809, 2}, report);
  EXPECT_EQ(p.measured, ncclpool::tool::kUnknownWhen);
  EXPECT_TRUE(p.symmetric_ctas_measured);
  Json when;
  when.type = Json::Type::string;
  when.string = "2026-11-23T06:00:00Z";
  runs[3].doc.object["facts"].object["measured"] = when;
  when.string = "2026-11-22T06:00:00Z";
  runs[5].doc.object["facts"].object["measured"] = when;
  Report dated;
  EXPECT_EQ(build_profile(runs, {"NVIDIA H200", 22809, 2}, dated).measured, "2026-11-23T06:00:00Z");  // the latest run's
  // No symmetric times at any size (windows refused): NCCL's count kept, and not said to be measured.
  for (CollRun& run : runs)
    for (Json& table : run.doc.object["tables"].array)
      for (Json& row : table.object["rows"].array) row.object.erase("symmetric_us");
  Report none;
  p = build_profile(runs, {"NVIDIA H200", 22809, 2}, none);
  EXPECT_EQ(p.symmetric_ctas, 0);
  EXPECT_FALSE(p.symmetric_ctas_measured);
  EXPECT_NE(none.text().find("symmetric was not measured at every size"), std::string::npos) << none.text();
  EXPECT_FALSE(ncclpool::parse_profile(ncclpool::profile_to_json(p), "t").symmetric_ctas_measured);
}

TEST(Tune, ProfileFromRecordedRuns) {
  const std::vector<CollRun> runs = recorded_coll_runs();
  ASSERT_EQ(runs.size(), 12u);
  Report report;
  // These runs predate the gpu / nccl_version / rank_count facts: without them the tune refuses.
  EXPECT_THROW((void)build_profile(runs, {}, report), ncclpool::InvalidArgument);
  const ncclpool::Profile p = build_profile(runs, {"NVIDIA H200", 22809, 2}, report);
  EXPECT_EQ(p.symmetric_ctas, 32);  // NCCL's count is 1.26x slower over the sweep
  ASSERT_EQ(p.classes.size(), 9u);  // 16 KiB .. 1 GiB, factor 4
  EXPECT_EQ(p.classes.front().min_bytes, 16u * 1024);
  for (const auto& c : p.classes) {
    EXPECT_EQ(c.kind.size(), 3u);
    if (c.min_bytes < 256 * 1024) continue;  // below, every kind is within the runs' noise
    for (const auto& [op, kind] : c.kind) {
      EXPECT_EQ(kind, ncclpool::RegistrationKind::symmetric) << op << " " << c.min_bytes;
    }
  }
  EXPECT_EQ(report.tables.size(), 3u);
  EXPECT_NE(report.text().find("symmetric CTAs: 32"), std::string::npos) << report.text();
  // The profile reads back as the library will read it.
  EXPECT_EQ(ncclpool::parse_profile(ncclpool::profile_to_json(p), "t").classes.size(), 9u);
}

// A buffer that names no collective serves them all: where their kinds differ, the profile's "any"
// is the kind with the smallest worst case over them (the bench coll run on 4x H200 that made the
// 4-rank built-in routes: from 512 MiB all-gather wants local, reduce-scatter symmetric, all-reduce
// none; the majority pick put such buffers on none, 1.09x all-gather's best there).
TEST(Tune, BuffersNamingNoCollectiveGetTheSmallestWorstCase) {
  Report report;
  const ncclpool::Profile p = build_profile({{"32", recorded_4rank_coll_run()}}, {"NVIDIA H200", 22809, 4}, report);
  std::map<std::size_t, std::optional<ncclpool::RegistrationKind>> any;
  for (const auto& c : p.classes) {
    const auto first = c.kind.begin()->second;
    const bool agree = std::all_of(c.kind.begin(), c.kind.end(), [&](const auto& k) { return k.second == first; });
    EXPECT_EQ(c.any.has_value(), !agree) << c.min_bytes;  // written only where the collectives differ
    any[c.min_bytes] = c.any;
  }
  EXPECT_EQ(any.at(512u << 20), ncclpool::RegistrationKind::local) << report.text();
  EXPECT_EQ(any.at(1u << 30), ncclpool::RegistrationKind::local) << report.text();
  // The library reads it back and routes buffers that name no collective by it.
  const ncclpool::Profile back = ncclpool::parse_profile(ncclpool::profile_to_json(p), "t");
  EXPECT_EQ(ncclpool::routes_from_profile(back, true).for_request(512u << 20), ncclpool::RegistrationKind::local);
  EXPECT_NE(report.text().find("name no collective"), std::string::npos) << report.text();
}

// At rank counts that are no power of two all-gather's and reduce-scatter's sizes (multiples of 4 x
// ranks) fall between all-reduce's: every class still names every collective (its kind carried from
// the classes before), and "any" weighs each collective at its nearest size below.
TEST(Tune, CollectivesMeasuredAtOtherSizesKeepTheirKindsInEveryClass) {
  Json doc = recorded_4rank_coll_run();
  for (Json& table : doc.object["tables"].array) {  // as at 3 ranks: 64 MiB is 67108860 bytes for these two
    const std::string& title = table.object["title"].string;
    if (title.rfind("all_gather", 0) != 0 && title.rfind("reduce_scatter", 0) != 0) continue;
    for (Json& row : table.object["rows"].array)
      if (row.object.count("bytes")) row.object["bytes"].integer -= 4;
  }
  Report report;
  const ncclpool::Profile p = build_profile({{"32", doc}}, {"NVIDIA H200", 22809, 4}, report);
  for (const auto& c : p.classes) {
    if (c.min_bytes < 1024) continue;  // below all-reduce's first size only the other two were measured
    EXPECT_EQ(c.kind.size(), 3u) << c.min_bytes;
  }
  // Between 256 MiB - 4 (all-gather's class) and 256 MiB (all-reduce's) all-gather keeps its own kind.
  const auto ag = ncclpool::routes_from_profile(p, true, ncclpool::Collective::all_gather);
  EXPECT_EQ(ag.for_request(100u << 20), ncclpool::RegistrationKind::symmetric) << ag.describe();
  EXPECT_EQ(ncclpool::routes_from_profile(p, true).for_request(600u << 20), ncclpool::RegistrationKind::local)
      << ncclpool::routes_from_profile(p, true).describe();
}

// The count is judged where the runs resolve it: a setting that looks faster only at sizes whose runs
// spread by tens of percent (eager small sizes) does not win over one faster where they agree.
TEST(Tune, TheCtaCountIsJudgedWhereTheRunsAgree) {
  std::vector<CollRun> runs;
  for (const CollRun& run : recorded_coll_runs()) {
    if (run.ctas != "32") continue;
    runs.push_back(run);
    CollRun other = run;
    other.ctas = "16";
    for (auto& table : other.doc.object["tables"].array)
      for (auto& row : table.object["rows"].array) {
        Json& us = row.object["symmetric_us"];
        // "16": 40% faster below 1 MiB (where, below, one run is made 3x slower: noise), 3% slower from 1 MiB.
        us.number *= row.object["bytes"].integer < (1 << 20) ? 0.6 : 1.03;
      }
    runs.push_back(std::move(other));
  }
  ASSERT_EQ(runs.size(), 10u);
  for (auto& table : runs[1].doc.object["tables"].array)  // the first "16" run: noisy small sizes
    for (auto& row : table.object["rows"].array)
      if (row.object["bytes"].integer < (1 << 20)) row.object["symmetric_us"].number *= 3;
  for (auto& table : runs[0].doc.object["tables"].array)  // and the first "32" run too
    for (auto& row : table.object["rows"].array)
      if (row.object["bytes"].integer < (1 << 20)) row.object["symmetric_us"].number *= 3;
  Report report;
  const ncclpool::Profile p = build_profile(runs, {"NVIDIA H200", 22809, 2}, report);
  EXPECT_EQ(p.symmetric_ctas, 32) << report.text();
  EXPECT_NE(report.text().find("those whose runs spread <= 5%"), std::string::npos) << report.text();
}

// With the compute load beside (bench coll --compute), a count that is faster alone but slows the
// steps it overlaps with by more than 1% over the best count is not chosen; within 1% it is.
namespace {
std::vector<CollRun> runs_with_steps(double step_16, double step_32) {
  std::vector<CollRun> runs;
  for (const CollRun& run : recorded_coll_runs()) {
    if (run.ctas != "32") continue;
    CollRun with_32 = run, with_16 = run;
    with_16.ctas = "16";
    for (CollRun* r : {&with_32, &with_16})
      for (auto& table : r->doc.object["tables"].array)
        for (auto& row : table.object["rows"].array) {
          if (!row.object.count("symmetric_us")) continue;
          if (r == &with_16) row.object["symmetric_us"].number *= 1.03;  // 16: 3% slower alone
          for (const char* kind : {"none", "local"}) row.object[std::string(kind) + "_step"] = parse_json("1.0");
          row.object["symmetric_step"] = parse_json(std::to_string(r == &with_16 ? step_16 : step_32));
        }
    runs.push_back(std::move(with_32));
    runs.push_back(std::move(with_16));
  }
  return runs;
}
}  // namespace

TEST(Tune, ACountThatSlowsStepsWithComputeBesideIsNotChosen) {
  Report report;
  ncclpool::Profile p = build_profile(runs_with_steps(1.02, 1.10), {"NVIDIA H200", 22809, 2}, report);
  EXPECT_EQ(p.symmetric_ctas, 16) << report.text();
  EXPECT_NE(report.text().find("with compute beside"), std::string::npos) << report.text();
  EXPECT_NE(report.text().find("within 1% of the best step: 16"), std::string::npos) << report.text();
  Report again;
  p = build_profile(runs_with_steps(1.02, 1.025), {"NVIDIA H200", 22809, 2}, again);
  EXPECT_EQ(p.symmetric_ctas, 32) << again.text();  // its steps within 1%: the faster alone wins
  std::size_t step_tables = 0;
  for (const Table& t : again.tables) step_tables += t.title.find("with compute beside") != std::string::npos ? 1 : 0;
  EXPECT_EQ(step_tables, 3u);
}

// Copy-engine all-gather (kind ce) goes into the profile only when its steps with compute beside are
// >= 1% shorter than the chosen kind's from 1 MiB; never from one rank or from runs without ce.
namespace {
std::vector<CollRun> with_copy_engine_steps(std::vector<CollRun> runs, double ce_step) {
  for (CollRun& run : runs)
    for (auto& table : run.doc.object["tables"].array)
      for (auto& row : table.object["rows"].array) {
        if (!row.object.count("symmetric_us")) continue;
        row.object["ce_us"] = parse_json(std::to_string(row.object["symmetric_us"].number * 1.2));  // slower alone
        row.object["ce_step"] = parse_json(std::to_string(ce_step));
      }
  return runs;
}
}  // namespace

TEST(Tune, CopyEngineAllGatherIsChosenOnlyWhereItShortensTheStep) {
  Report report;
  ncclpool::Profile p = build_profile(with_copy_engine_steps(runs_with_steps(1.02, 1.025), 1.0), {"NVIDIA H200", 22809, 2}, report);
  EXPECT_TRUE(p.copy_engine_all_gather) << report.text();  // 1.0 against symmetric@32's 1.025
  EXPECT_NE(report.text().find("copy-engine all-gather: chosen"), std::string::npos) << report.text();
  Report close;
  p = build_profile(with_copy_engine_steps(runs_with_steps(1.02, 1.025), 1.02), {"NVIDIA H200", 22809, 2}, close);
  EXPECT_FALSE(p.copy_engine_all_gather) << close.text();  // 0.995: within 1%
  EXPECT_NE(close.text().find("not >= 1% shorter"), std::string::npos) << close.text();
  Report one_rank;
  p = build_profile(with_copy_engine_steps(runs_with_steps(1.02, 1.025), 1.0), {"NVIDIA H200", 22809, 1}, one_rank);
  EXPECT_FALSE(p.copy_engine_all_gather);
  EXPECT_NE(one_rank.text().find("one rank"), std::string::npos) << one_rank.text();
  Report without;
  p = build_profile(runs_with_steps(1.02, 1.025), {"NVIDIA H200", 22809, 2}, without);
  EXPECT_FALSE(p.copy_engine_all_gather);
  EXPECT_NE(without.text().find("no ce runs"), std::string::npos) << without.text();
  Report alone;
  p = build_profile(recorded_coll_runs(), {"NVIDIA H200", 22809, 2}, alone);  // no compute runs
  EXPECT_FALSE(p.copy_engine_all_gather);
  EXPECT_NE(alone.text().find("no all-gather runs with compute beside"), std::string::npos) << alone.text();
}

// The helpers all-gather in place (FSDP2's and Megatron-FSDP's shard is a slice of the output), so the
// copy engines are judged on the in-place rows where the runs have them: on 2x H200 they won there
// (0.93 of the symmetric kernels' steps) and lost out of place (1.12).
namespace {
bool in_place_row(const ncclpool::Json& row) {
  const auto placement = row.object.find("placement");
  return placement != row.object.end() && placement->second.string == "in";
}

std::vector<CollRun> with_placed_copy_engine_steps(std::vector<CollRun> runs, double out_step, double in_step, bool keep_in_place = true) {
  for (CollRun& run : runs)
    for (auto& table : run.doc.object["tables"].array) {
      auto& rows = table.object["rows"].array;
      if (!keep_in_place)
        rows.erase(std::remove_if(rows.begin(), rows.end(), in_place_row), rows.end());
      for (auto& row : rows) {
        if (!row.object.count("symmetric_us")) continue;
        const bool in = in_place_row(row);
        row.object["ce_us"] = parse_json(std::to_string(row.object["symmetric_us"].number * 1.2));
        row.object["ce_step"] = parse_json(std::to_string(in ? in_step : out_step));
      }
    }
  return runs;
}
}  // namespace

TEST(Tune, CopyEngineAllGatherIsJudgedInPlaceWhereTheRunsHaveIt) {
  std::size_t in_rows = 0;
  for (const CollRun& run : recorded_coll_runs())
    for (const auto& table : run.doc.object.at("tables").array)
      for (const auto& row : table.object.at("rows").array) in_rows += in_place_row(row) ? 1 : 0;
  ASSERT_GT(in_rows, 0u) << "the recorded runs have no in-place rows: this test would judge nothing";
  Report report;
  ncclpool::Profile p = build_profile(with_placed_copy_engine_steps(runs_with_steps(1.02, 1.025), 1.15, 0.95), {"NVIDIA H200", 22809, 2}, report);
  EXPECT_TRUE(p.copy_engine_all_gather) << report.text();  // in place 0.95 against 1.025
  EXPECT_NE(report.text().find("in-place all-gather sizes"), std::string::npos) << report.text();
  Report worse_in_place;
  p = build_profile(with_placed_copy_engine_steps(runs_with_steps(1.02, 1.025), 0.95, 1.15), {"NVIDIA H200", 22809, 2}, worse_in_place);
  EXPECT_FALSE(p.copy_engine_all_gather) << worse_in_place.text();  // out of place would have said yes
  Report out_only;
  p = build_profile(with_placed_copy_engine_steps(runs_with_steps(1.02, 1.025), 0.95, 1.15, false), {"NVIDIA H200", 22809, 2}, out_only);
  EXPECT_TRUE(p.copy_engine_all_gather) << out_only.text();  // runs without in-place rows: out of place
  EXPECT_NE(out_only.text().find("out-of-place all-gather sizes"), std::string::npos) << out_only.text();
}

TEST(Tune, RunsFromTwoMachinesAreRefused) {
  std::vector<CollRun> runs = recorded_coll_runs();
  runs.resize(2);
  runs[1].doc.object["facts"].object["gpu"] = ncclpool::parse_json("\"NVIDIA H100\"");
  Report report;
  try {
    (void)build_profile(runs, {"", 22809, 2}, report);
    FAIL() << "two machines accepted";
  } catch (const ncclpool::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("different machines"), std::string::npos) << e.what();
  }
}


TEST(Tune, WithoutSymmetricTimesTheProfileKeepsNcclsCountAndHoldsNoWindows) {
  std::vector<CollRun> runs = recorded_coll_runs();
  for (CollRun& run : runs)  // as bench coll writes it where windows are unsupported
    for (auto& table : run.doc.object["tables"].array)
      for (auto& row : table.object["rows"].array) row.object.erase("symmetric_us");
  Report report;
  const ncclpool::Profile p = build_profile(runs, {"NVIDIA H200", 22809, 2}, report);
  EXPECT_EQ(p.symmetric_ctas, 0);
  for (const auto& c : p.classes)
    for (const auto& [op, kind] : c.kind) EXPECT_NE(kind, ncclpool::RegistrationKind::symmetric) << op << " " << c.min_bytes;
  EXPECT_NE(report.text().find("symmetric was not measured"), std::string::npos) << report.text();
}

// Runs whose windows had no symmetric flag (bench coll's fact "symmetric_kernels": "off", the
// NCCL-version guard's default on NCCL 2.28-2.30.6): NCCL ran ring kernels, so no CTA count and no
// copy engines were measured, and the profile says so instead of recording NCCL's count.
TEST(Tune, RunsWithTheSymmetricKernelsOffRecordNoCtaCountAndNoCopyEngines) {
  // Two `tune --copy-engine` runs of 2x H200 (NCCL 2.28.9, kernels forced on), with compute beside
  // and ce: as recorded they choose 16 CTAs and the copy engines (0.914)...
  const std::filesystem::path dir =
      std::filesystem::path(NCCLPOOL_TEST_DATA) / "../../docs/benchmarks/data/2026-11-27-gpu-check-2xh200-s5/call1-wheel-toolbench/tunece-runs";
  std::vector<CollRun> runs;
  for (const char* ctas : {"nccl", "16"}) {
    std::ifstream in(dir / ("coll-ctas-" + std::string(ctas) + "-round-1.json"));
    std::ostringstream text;
    text << in.rdbuf();
    runs.push_back({ctas, parse_json(text.str())});
  }
  Report report;
  ncclpool::Profile p = build_profile(runs, {}, report);
  EXPECT_TRUE(p.symmetric_ctas_measured);
  EXPECT_EQ(p.symmetric_ctas, 16);
  EXPECT_TRUE(p.copy_engine_all_gather);
  // ... and the same runs said to have had the kernels off choose neither.
  for (CollRun& run : runs) {
    Json off;
    off.type = Json::Type::string;
    off.string = "off";
    run.doc.object["facts"].object["symmetric_kernels"] = off;
  }
  runs.front().doc.object["facts"].object["symmetric_kernels"].string = "on";  // one run off is enough
  Report off_report;
  p = build_profile(runs, {}, off_report);
  EXPECT_FALSE(p.symmetric_ctas_measured);
  EXPECT_EQ(p.symmetric_ctas, 0);
  EXPECT_FALSE(p.copy_engine_all_gather);
  const std::string text = off_report.text();
  EXPECT_NE(text.find("symmetric CTAs: not measured"), std::string::npos) << text;
  EXPECT_EQ(text.find("symmetric CTAs: 16"), std::string::npos) << text;
  EXPECT_NE(text.find("copy-engine all-gather: not chosen (the runs had the symmetric kernels off"), std::string::npos) << text;
  EXPECT_FALSE(ncclpool::parse_profile(ncclpool::profile_to_json(p), "t").symmetric_ctas_measured);
}

// Which runs tune makes under the NCCL-version guard's decision (docs/tool.md, "tune").
TEST(TunePlan, WithSymmetricKernelsOffOnlyNcclsOwnCountIsMeasured) {
  ncclpool::SymmetricKernels off;
  off.enabled = false;
  off.hazard = true;
  off.why = "off: the guard";
  const std::vector<std::string> all = {"nccl", "16", "32"};
  TunePlan plan = plan_tune_runs(off, all, /*ctas_given=*/false, /*compute=*/true);
  EXPECT_EQ(plan.ctas, std::vector<std::string>{"nccl"});  // a count NCCL never uses would be chosen from noise
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("(off: the guard)"), std::string::npos) << plan.notes[0];
  EXPECT_NE(plan.notes[0].find("NCCL's choice only"), std::string::npos) << plan.notes[0];
  EXPECT_EQ(plan.hang_hint, "");
  plan = plan_tune_runs(off, {"16", "32"}, /*ctas_given=*/true, true);  // asked for: run, and say they change nothing
  EXPECT_EQ(plan.ctas, (std::vector<std::string>{"16", "32"}));
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("change nothing there"), std::string::npos) << plan.notes[0];
  EXPECT_TRUE(plan_tune_runs(off, {"nccl"}, true, true).notes.empty());
  // The copy engines need windows with the symmetric flag: asked for, dropped with a note.
  plan = plan_tune_runs(off, all, false, true, /*copy_engine=*/true);
  EXPECT_FALSE(plan.copy_engine);
  ASSERT_EQ(plan.notes.size(), 2u);
  EXPECT_NE(plan.notes[0].find("--copy-engine: not measured"), std::string::npos) << plan.notes[0];
}

TEST(TunePlan, ForcedOnWithTheHazardWarnsOfHangsBesideTheComputeLoad) {
  ncclpool::SymmetricKernels on;
  on.hazard = true;
  const std::vector<std::string> all = {"nccl", "16", "32"};
  TunePlan plan = plan_tune_runs(on, all, false, /*compute=*/true);
  EXPECT_EQ(plan.ctas, all);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("hung on 2x H200 with NCCL 2.28.3 and 2.28.9"), std::string::npos) << plan.notes[0];
  EXPECT_NE(plan.hang_hint.find("known to hang"), std::string::npos) << plan.hang_hint;
  plan = plan_tune_runs(on, all, false, /*compute=*/false, /*copy_engine=*/true);  // alone, no run hung
  EXPECT_EQ(plan.ctas, all);
  EXPECT_TRUE(plan.copy_engine);
  EXPECT_TRUE(plan.notes.empty());
  EXPECT_EQ(plan.hang_hint, "");
  on.fence = true;  // the decision `fence` (tune declares it): the warning stays, saying so
  plan = plan_tune_runs(on, all, false, /*compute=*/true);
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("fenced"), std::string::npos) << plan.notes[0];
  EXPECT_NE(plan.hang_hint.find("known to hang"), std::string::npos) << plan.hang_hint;
  on.fence = false;
  on.hazard = false;  // NCCL >= 2.30.7
  plan = plan_tune_runs(on, all, false, true);
  EXPECT_EQ(plan.ctas, all);
  EXPECT_TRUE(plan.notes.empty());
  EXPECT_EQ(plan.hang_hint, "");
}

namespace {
// Stand-ins for the ncclpool binary tune runs as its bench coll child: shell scripts, in a folder of
// the build tree (a /tmp mounted noexec could not run them), removed after each test.
class TuneChild : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string fake_tool(const std::string& name, const std::string& body) {
    std::filesystem::create_directories(dir_);
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path.string();
  }

 private:
  std::filesystem::path dir_ = std::filesystem::path(NCCLPOOL_TEST_SCRATCH) / ("tune_child_" + std::to_string(::getpid()));
};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ncclpool::BackendError& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_F(TuneChild, GetsItsCtaSettingAndArguments) {
  const ncclpool::testing_support::ScopedEnv nccl("NCCL_SYM_CTAS", "8");  // the child must not see it: the setting is NCCLPOOL_SYM_CTAS
  const std::string out = run_bench_coll_child(
      fake_tool("echoes", "echo \"args=$* ctas=$NCCLPOOL_SYM_CTAS nccl=${NCCL_SYM_CTAS:-unset}\""), "16", {"--min", "16K", "--compute"}, 30);
  EXPECT_EQ(out, "args=bench coll --json --min 16K --compute ctas=16 nccl=unset\n");
}

TEST_F(TuneChild, ThatHangsEndsTuneWithAnErrorNamingTheRun) {
  // As on 2x H200 (NCCL 2.28.9, symmetric kernels forced on), where runs beside the compute load
  // never finished and tune waited until the caller's timeout: now the run is ended at
  // --run-timeout, by TERM...
  std::string what = error_of([&] { (void)run_bench_coll_child(fake_tool("hangs", "exec sleep 60"), "32", {}, 1); });
  EXPECT_NE(what.find("symmetric CTAs 32 did not finish within 1 s (--run-timeout)"), std::string::npos) << what;
  // ... or by KILL when it ignores TERM; with the known cause, where tune has one, in the error.
  what = error_of([&] { (void)run_bench_coll_child(fake_tool("deaf", "trap '' TERM\nwhile :; do sleep 0.1; done"), "nccl", {}, 1, 1, "; the cause"); });
  EXPECT_NE(what.find("symmetric CTAs nccl did not finish within 1 s (--run-timeout)"), std::string::npos) << what;
  EXPECT_NE(what.find("longer limit; the cause. `"), std::string::npos) << what;
}

TEST_F(TuneChild, ThatFailsOrIsKilledEarlyIsNotTakenForAHang) {
  std::string what = error_of([&] { (void)run_bench_coll_child(fake_tool("fails", "exit 3"), "nccl", {}, 30); });
  EXPECT_NE(what.find("failed (exit 3,"), std::string::npos) << what;
  // Killed by something else long before the limit (the OOM killer, say): its signal, not a hang.
  what = error_of([&] { (void)run_bench_coll_child(fake_tool("killed", "kill -KILL $$"), "16", {}, 30); });
  EXPECT_EQ(what.find("did not finish"), std::string::npos) << what;
  EXPECT_NE(what.find("signal 9"), std::string::npos) << what;
}

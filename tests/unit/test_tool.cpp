// The `ncclpool` tool's pieces: JSON reader, trace parsers (CSV, torch snapshot), replay on the
// simulator and its output formats.
#include "commands.hpp"
#include "json.hpp"
#include "replay.hpp"
#include "trace.hpp"
#include "workloads.hpp"

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace ncclpool::tool;

namespace {
constexpr std::size_t MiB = 1ull << 20;
const std::string kData = NCCLPOOL_TEST_DATA;
// The traces recorded on 2x H200 (scripts/record-torch-trace.py), under kData/traces/.
constexpr const char* kRecordedTraces[] = {"decode_2gpu.json", "fsdp2_2gpu.json", "fsdp_ep_2gpu.json", "megatron_fsdp_2gpu.json"};
}  // namespace

TEST(Json, ParsesNestedDocuments) {
  const Json j = parse_json(R"({"a": [1, -2, 3.5, true, null, "x\"\n\u0041"], "b": {"c": 12345678901234}})");
  ASSERT_EQ(j.type, Json::Type::object);
  const Json* a = j.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array.size(), 6u);
  EXPECT_EQ(a->array[1].as_int("x"), -2);
  EXPECT_DOUBLE_EQ(a->array[2].number, 3.5);
  EXPECT_FALSE(a->array[2].is_integer);
  EXPECT_TRUE(a->array[3].boolean);
  EXPECT_EQ(a->array[5].string, "x\"\nA");
  EXPECT_EQ(j.find("b")->find("c")->as_int("c"), 12345678901234);
  EXPECT_EQ(j.find("missing"), nullptr);
}

TEST(Json, ErrorsNameTheOffset) {
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "\"abc", "tru", "[1] 2", "{\"a\":-}"}) {
    try {
      parse_json(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const JsonError& e) {
      EXPECT_NE(std::string(e.what()).find("at byte"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(json_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

TEST(CsvTrace, ReadsEventsAndGroups) {
  const Trace t = load_trace(kData + "/two_groups.csv", {});
  EXPECT_EQ(t.format, "csv");
  EXPECT_EQ(t.groups, (std::vector<std::string>{"dp", "ep"}));
  ASSERT_EQ(t.events.size(), 8u);
  EXPECT_EQ(t.events[1].size, 1 * MiB);
  EXPECT_EQ(t.events[1].stream, 1u);
  EXPECT_EQ(t.events[1].group, 1);
  EXPECT_EQ(t.live_at_end, 0u);
}

TEST(CsvTrace, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"alloc,1,100,0,dp\nalloc,1,100,0,dp\n", "t.csv:2: id 1 is already live"},
      {"free,9\n", "t.csv:1: free of id 9, which is not live"},
      {"alloc,1,x,0,dp\n", "t.csv:1: size 'x' is not a non-negative integer"},
      {"alloc,1,0,0,dp\n", "t.csv:1: size 0"},
      {"alloc,1,10,0\n", "t.csv:1: 'alloc' needs 4 fields"},
      {"resize,1\n", "t.csv:1: unknown event 'resize'"},
      {"# only a comment\n\n", "t.csv: no events"},
  };
  for (const auto& c : cases) {
    try {
      parse_csv_trace(c.text, "t.csv");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
  }
}

TEST(Trace, ADirectoryOrJsonThatIsNoSnapshotIsSaidSo) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ncclpool_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto message = [](const std::string& path, TraceFormat format) {
    TraceOptions o;
    o.format = format;
    try {
      (void)load_trace(path, o);
    } catch (const TraceError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Was: "cannot open" for a directory, or (auto) its empty read taken as CSV.
  EXPECT_EQ(message(dir.string(), TraceFormat::automatic), dir.string() + ": is a directory; give a trace file (ncclpool CSV, or a torch memory snapshot as JSON)");
  // Was: `[]` read as CSV ("unknown event '[]'").
  for (const auto& [text, holding] : {std::pair{"[]", "a list"}, {"  [{\"device_traces\": []}]\n", "a list"}, {"{\"a\": 1}", "an object"}}) {
    const std::filesystem::path file = dir / "t.json";
    std::ofstream(file) << text;
    const std::string m = message(file.string(), TraceFormat::automatic);
    if (std::string(holding) == "a list")
      EXPECT_EQ(m.find(file.string() + ": JSON holding a list, not a torch memory snapshot (an object with 'device_traces'"), 0u) << m;
    else
      EXPECT_NE(m.find("no 'device_traces' list"), std::string::npos) << m;
  }
  std::filesystem::remove_all(dir);
}

TEST(Info, NcclVersionsAreWrittenAsNcclWritesThem) {
  EXPECT_EQ(nccl_version_text(22809), "2.28.9");
  EXPECT_EQ(nccl_version_text(23007), "2.30.7");
  EXPECT_EQ(nccl_version_text(2708), "2.7.8");  // the code before 2.9: major * 1000 + minor * 100 + patch
  EXPECT_EQ(nccl_version_text(0), "0");         // none (the simulator's profiles)
}

TEST(TorchSnapshot, UsesCompletedFreesAndSkipsEarlierBlocks) {
  const Trace t = load_trace(kData + "/torch_snapshot_small.json", {});
  EXPECT_EQ(t.format, "torch-snapshot");
  EXPECT_EQ(t.skipped_frees, 1u);  // address 1000 was allocated before recording
  ASSERT_EQ(t.events.size(), 5u);  // 3 allocs, 2 frees (free_requested ignored)
  EXPECT_EQ(t.events[0].size, 4 * MiB);
  EXPECT_EQ(t.events[2].op, TraceEvent::Op::free);
  EXPECT_EQ(t.events[2].id, t.events[0].id);
  EXPECT_EQ(t.events[3].id, 2u);  // the address was reused: a new id
  EXPECT_EQ(t.live_at_end, 1u);
  EXPECT_EQ(t.groups, (std::vector<std::string>{"all"}));

  TraceOptions by_stream;
  by_stream.group_by = GroupBy::stream;
  EXPECT_EQ(load_trace(kData + "/torch_snapshot_small.json", by_stream).groups, (std::vector<std::string>{"stream 0", "stream 7"}));
  TraceOptions device0;
  device0.device = 0;
  EXPECT_THROW(load_trace(kData + "/torch_snapshot_small.json", device0), TraceError);  // empty
  device0.device = 5;
  EXPECT_THROW(load_trace(kData + "/torch_snapshot_small.json", device0), TraceError);
  EXPECT_THROW(parse_torch_snapshot("{\"segments\": []}", "x.json", {}), TraceError);
}

TEST(TorchSnapshot, SegmentLevelReplaysTorchsSegmentsNotTheTensors) {
  TraceOptions segments;
  segments.level = TraceLevel::segments;
  const std::string snapshot =
      "{\"device_traces\": [[{\"action\": \"segment_alloc\", \"addr\": 4096, \"size\": 20971520, \"stream\": 0},"
      " {\"action\": \"alloc\", \"addr\": 4096, \"size\": 1048576, \"stream\": 0},"
      " {\"action\": \"segment_alloc\", \"addr\": 99999744, \"size\": 2097152, \"stream\": 7},"
      " {\"action\": \"segment_free\", \"addr\": 4096, \"size\": 20971520, \"stream\": 0},"
      " {\"action\": \"segment_free\", \"addr\": 12345, \"size\": 2097152, \"stream\": 0}]]}";
  const Trace t = parse_torch_snapshot(snapshot, "s.json", segments);
  ASSERT_EQ(t.events.size(), 3u);  // two segments, one free; the tensor is not an event at this level
  EXPECT_EQ(t.events[0].size, 20 * MiB);
  EXPECT_EQ(t.events[1].size, 2 * MiB);
  EXPECT_EQ(t.events[1].stream, 7u);
  EXPECT_EQ(t.events[2].op, TraceEvent::Op::free);
  EXPECT_EQ(t.events[2].id, t.events[0].id);
  EXPECT_EQ(t.skipped_frees, 1u);  // a segment made before recording
  EXPECT_EQ(t.live_at_end, 1u);
  EXPECT_EQ(t.recorded_peak_reserved, 22 * MiB);
}

// PyTorch's reserve for the trace's tensors: segments made during the recording (pieces of an
// expandable one included, an unmap cutting a piece in two), plus the trace's tensors that live in
// segments made before it; a release of such an older segment changes nothing (it held tensors the
// trace does not have).
TEST(TorchSnapshot, RecordedReserveCountsOlderSegmentsOnlyThroughTheTracesTensors) {
  const std::string snapshot =
      "{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1000000000, \"size\": 3145728, \"stream\": 0},"
      " {\"action\": \"segment_free\", \"addr\": 2000000000, \"size\": 67108864, \"stream\": 0},"
      " {\"action\": \"segment_map\", \"addr\": 4194304, \"size\": 8388608, \"stream\": 0},"
      " {\"action\": \"alloc\", \"addr\": 4194304, \"size\": 6291456, \"stream\": 0},"
      " {\"action\": \"segment_unmap\", \"addr\": 10485760, \"size\": 2097152, \"stream\": 0},"
      " {\"action\": \"free_completed\", \"addr\": 1000000000, \"size\": 3145728, \"stream\": 0},"
      " {\"action\": \"segment_map\", \"addr\": 10485760, \"size\": 8388608, \"stream\": 0},"
      " {\"action\": \"alloc\", \"addr\": 11534336, \"size\": 1048576, \"stream\": 0}]]}";
  const Trace t = parse_torch_snapshot(snapshot, "s.json", {});
  // 3 MiB older + 8 MiB mapped = 11; the unmap leaves 6 + 3 = 9; the free 6; the new map 6 + 8 = 14
  // (its tensor is inside it). Without the unmap it would read 16; with the older release, 0.
  EXPECT_EQ(t.recorded_peak_reserved, 14 * MiB);
  EXPECT_EQ(t.recorded_older_segment_peak, 3 * MiB);
  EXPECT_EQ(t.skipped_frees, 0u);
}

// Addresses near INT64_MAX made the reserve's signed sums overflow (UBSan): refused, naming the event.
TEST(TorchSnapshot, AddressRangesThatOverflowAreRefusedNamingTheEvent) {
  const std::string segment = "{\"action\": \"segment_alloc\", \"addr\": 4194304, \"size\": 2097152, \"stream\": 0}";
  const std::pair<std::string, std::string> cases[] = {
      {"{\"action\": \"segment_map\", \"addr\": 9223372036854775000, \"size\": 2097152, \"stream\": 0},"
       " {\"action\": \"alloc\", \"addr\": 9223372036854775000, \"size\": 4096, \"stream\": 0}",
       "s.json: device 0 event 0 (segment_map): addr 9223372036854775000 + size 2097152 is past the largest address"},
      {segment + ", {\"action\": \"alloc\", \"addr\": 9223372036854775000, \"size\": 4096, \"stream\": 0}",
       "s.json: device 0 event 1 (alloc): addr 9223372036854775000 + size 4096 is past the largest address"},
      {segment + ", {\"action\": \"segment_free\", \"addr\": 4194304, \"size\": -2097152, \"stream\": 0}",
       "s.json: device 0 event 1 (segment_free): negative addr 4194304 or size -2097152"},
      {"{\"action\": \"alloc\", \"addr\": 18446744073709551616, \"size\": 4096, \"stream\": 0}",
       "s.json: device 0 event 0 (alloc): JSON: addr is not an integer"},
  };
  for (const auto& [events, why] : cases) {
    const std::string snapshot = "{\"device_traces\": [[" + events + "]]}";
    try {
      (void)parse_torch_snapshot(snapshot, "s.json", {});
      ADD_FAILURE() << "accepted " << snapshot;
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(Trace, ScaleSizesMultipliesEveryAllocationAndDropsTheRecordedFigure) {
  Trace t = load_trace(kData + "/two_groups.csv", {});
  std::vector<std::size_t> before;
  for (const auto& ev : t.events) before.push_back(ev.size);
  t.recorded_peak_reserved = 1;
  scale_sizes(t, 2.5);
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    if (t.events[i].op == TraceEvent::Op::alloc) {
      EXPECT_EQ(t.events[i].size, static_cast<std::size_t>(static_cast<double>(before[i]) * 2.5));
    }
  }
  EXPECT_EQ(t.recorded_peak_reserved, 0u);
  scale_sizes(t, 1e-9);  // never below one byte
  for (const auto& ev : t.events) {
    if (ev.op == TraceEvent::Op::alloc) {
      EXPECT_EQ(ev.size, 1u);
    }
  }
}

TEST(Replay, SharedPoolAgainstPoolPerGroup) {
  const Trace t = load_trace(kData + "/two_groups.csv", {});
  ReplayOptions o;
  o.kind = ncclpool::RegistrationKind::local;
  o.growth_chunk = 4 * MiB;
  const ReplayResult r = replay(t, o);
  EXPECT_EQ(r.events, 8u);
  // Shared: one 4 MiB segment holds ids 1+2, then 3+2; id 4 (4 MiB, with 3 live) needs a second one.
  EXPECT_EQ(r.shared.peak_live, 6 * MiB);  // ids 3 and 4
  EXPECT_EQ(r.shared.segments, 2u);
  EXPECT_EQ(r.shared.peak_reserved, 8 * MiB);
  EXPECT_EQ(r.shared_registrations_per_group, (std::vector<std::size_t>{2, 2}));
  // Per group: dp one segment; ep's 1 MiB (at least chunk / 16) gets a 2 MiB segment of its own, too
  // small for id 4's 4 MiB after the free: a second one (the empty one stays, registered).
  ASSERT_EQ(r.per_group.size(), 2u);
  EXPECT_EQ(r.per_group[0].segments, 1u);
  EXPECT_EQ(r.per_group[1].segments, 2u);
  EXPECT_EQ(r.per_group_peak_reserved, 10 * MiB);
  EXPECT_EQ(r.per_group[0].registrations + r.per_group[1].registrations, 3u);

  const std::string json = format_json(r);
  const Json j = parse_json(json);  // the JSON output is valid JSON
  EXPECT_EQ(j.find("shared")->find("segments")->as_int("segments"), 2);
  EXPECT_EQ(j.find("kind")->string, "local");
  const std::string text = format_text(r, "title");
  EXPECT_NE(text.find("shared pool"), std::string::npos);
  EXPECT_NE(text.find("one pool per group"), std::string::npos);
  EXPECT_NE(text.find("dp=2 ep=2"), std::string::npos) << text;
  // The trade-off the table measures is stated above it.
  EXPECT_NE(text.find("trade-off: memory (peak reserved) against registration (count, and time estimated at 7 us a local registration)"), std::string::npos) << text;
}

TEST(Replay, SymmetricWindowsCountOncePerChunkAndGroup) {
  FsdpEpShape shape;
  shape.layers = 4;
  shape.steps = 2;
  const Trace t = make_fsdp_ep_trace(shape);
  EXPECT_EQ(t.groups.size(), 3u);
  const ReplayResult r = replay(t, {});
  EXPECT_EQ(r.growth_chunk, 1024 * MiB);
  for (std::size_t regs : r.shared_registrations_per_group) EXPECT_EQ(regs, r.shared.segments);
  EXPECT_GE(r.shared.peak_reserved, r.shared.peak_live);
  EXPECT_GT(r.shared_registration_ms, 0);
  std::size_t sum = 0;
  for (const auto& p : r.per_group) sum += p.segments;
  EXPECT_EQ(r.per_group_registration_ms, static_cast<double>(sum) * 15.0);
}

// Traces recorded on 2x H200 with scripts/record-torch-trace.py (torch 2.11): the real formats parse
// and replay, and the shared pool registers each segment once with every group.
TEST(RecordedTraces, ReplayThroughSharedAndPerGroupPools) {
  // FSDP2 and FSDP+EP: compute, all-gather and reduce-scatter streams; Megatron-FSDP (recorded by
  // bench/megatron_fsdp_bench.py --allocator none --snapshot): compute and one communication stream.
  const std::pair<const char*, std::size_t> traces[] = {
      {"fsdp2_2gpu.json", 3}, {"fsdp_ep_2gpu.json", 3}, {"megatron_fsdp_2gpu.json", 2}};
  for (const auto& [name, groups] : traces) {
    SCOPED_TRACE(name);
    TraceOptions by_stream;
    by_stream.group_by = GroupBy::stream;
    const Trace t = load_trace(kData + "/traces/" + name, by_stream);
    EXPECT_GT(t.events.size(), 1000u);
    EXPECT_EQ(t.groups.size(), groups);
    ReplayOptions o;
    o.growth_chunk = 256 * MiB;
    const ReplayResult r = replay(t, o);
    EXPECT_GE(r.shared.peak_reserved, r.shared.peak_live);
    EXPECT_GT(r.shared.peak_live, 1024 * MiB);
    for (std::size_t regs : r.shared_registrations_per_group) EXPECT_EQ(regs, r.shared.segments);
    EXPECT_EQ(r.shared.peak_live, r.per_group_peak_live);  // same blocks, split differently
  }
}

// A tensor-parallel decode loop with CUDA graphs (scripts/record-torch-trace.py --layout decode, 2x
// H200): small (352 MiB live at the peak), one stream per captured graph besides the default one.
TEST(RecordedTraces, DecodeWithGraphsReplays) {
  TraceOptions by_stream;
  by_stream.group_by = GroupBy::stream;
  const Trace t = load_trace(kData + "/traces/decode_2gpu.json", by_stream);
  EXPECT_GT(t.events.size(), 400u);
  EXPECT_EQ(t.groups.size(), 6u);
  ReplayOptions o;
  o.growth_chunk = 64 * MiB;
  const ReplayResult r = replay(t, o);
  EXPECT_GT(r.shared.peak_live, 300 * MiB);
  EXPECT_GE(r.shared.peak_reserved, r.shared.peak_live);
  for (std::size_t regs : r.shared_registrations_per_group) EXPECT_EQ(regs, r.shared.segments);
  EXPECT_EQ(r.shared.peak_live, r.per_group_peak_live);
}

// The torch layer's view (`replay --level segments`: torch's segments, as the layer's pools run):
// on every recorded trace the shared pool reserves at most 4% over the segments torch holds, and at
// most 9% at any of seven scales of the same request sequence (the last ramped chunk past the
// segment budget: Megatron-FSDP x0.75, 1.082). With whole ramped chunks below the budget (before
// own sizes) decode x1.25 reserved 1.60 times what torch held; with chunks that doubled, 1.41 at x1.
TEST(RecordedTraces, TorchLayerSegmentsStayCloseToWhatTorchHolds) {
  for (const char* name : kRecordedTraces) {
    TraceOptions segments;
    segments.group_by = GroupBy::stream;
    segments.level = TraceLevel::segments;
    const Trace recorded = load_trace(kData + "/traces/" + name, segments);
    for (double scale : {0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0}) {
      SCOPED_TRACE(std::string(name) + " x" + std::to_string(scale));
      Trace t = recorded;
      if (scale != 1.0) scale_sizes(t, scale);
      const ReplayResult r = replay(t, ReplayOptions{});
      EXPECT_EQ(r.growth_chunk, 1024 * MiB);
      EXPECT_GE(r.shared.peak_reserved, r.shared.peak_live);
      const double bound = scale == 1.0 ? 1.04 : 1.09;
      EXPECT_LE(static_cast<double>(r.shared.peak_reserved), bound * static_cast<double>(r.shared.peak_live));
      EXPECT_LE(r.shared.segments, 64u + r.shared.peak_reserved / r.growth_chunk);  // the budget: windows stay few
      if (scale != 1.0) continue;
      // At this level what torch held is what was live: the recording allocator's line reads 1.000,
      // also for Megatron-FSDP, whose recording released segments made before it began.
      EXPECT_EQ(r.recorded_peak_reserved, r.shared.peak_live);
      EXPECT_EQ(r.recorded_older_segment_peak, 0u);
    }
  }
}

// The growth trade-off of docs/benchmarks/growth.md, in windows per group against torch's own
// register_mem_pool(symm=True), a window per segment PyTorch made (at the segments level, the torch
// layer): the default makes no more windows than torch on any recorded trace; min_segment 2 GiB at
// most a tenth of them (1 GiB: 4 of FSDP2's 39, just over a tenth), each at a measured reserve.
TEST(RecordedTraces, MinSegmentTradesReserveForWindowsAgainstTorchsOwnRegistration) {
  const std::pair<const char*, std::size_t> torch_segments[] = {
      {"decode_2gpu.json", 21}, {"fsdp2_2gpu.json", 39}, {"fsdp_ep_2gpu.json", 42}, {"megatron_fsdp_2gpu.json", 72}};
  for (const auto& [name, segments] : torch_segments) {
    SCOPED_TRACE(name);
    TraceOptions options;
    options.group_by = GroupBy::stream;
    options.level = TraceLevel::segments;
    const Trace t = load_trace(kData + "/traces/" + name, options);
    EXPECT_EQ(t.recorded_segments, segments);
    ReplayOptions o;
    o.window_ms = 3.2;
    const ReplayResult by_default = replay(t, o);
    EXPECT_EQ(by_default.recorded_segments, segments);
    EXPECT_LE(by_default.shared_registrations_per_group.front(), segments);
    EXPECT_DOUBLE_EQ(by_default.recorded_registration_ms, static_cast<double>(segments * t.groups.size()) * 3.2);
    o.min_segment = 1024 * MiB;
    const ReplayResult one_gib = replay(t, o);
    EXPECT_LE(one_gib.shared_registrations_per_group.front() * 9, segments);
    EXPECT_LE(static_cast<double>(one_gib.shared.peak_reserved), 1.14 * static_cast<double>(one_gib.shared.peak_live) + 1024.0 * MiB);
    o.min_segment = 2048 * MiB;
    const ReplayResult two_gib = replay(t, o);
    EXPECT_LE(two_gib.shared_registrations_per_group.front() * 10, segments);
    const Json j = parse_json(format_json(two_gib));
    EXPECT_EQ(j.find("min_segment")->as_int("min_segment"), static_cast<std::int64_t>(2048 * MiB));
    EXPECT_EQ(j.find("recorded_segments")->as_int("recorded_segments"), static_cast<std::int64_t>(segments));
    const std::string text = format_text(two_gib, name);
    EXPECT_NE(text.find("min segment 2048.0 MiB"), std::string::npos) << text;
    EXPECT_NE(text.find("PyTorch's register_mem_pool " + std::to_string(segments) + " (a window per segment PyTorch made)"), std::string::npos) << text;
  }
}

// The tensors' view, against what PyTorch held for the same tensors: the default pool (1 GiB
// chunks, as symmetric pools) needs no more than PyTorch's allocator on any recorded trace. The
// FSDP recordings began after the model existed, and some of their tensors went into its
// segments: PyTorch's figure is then a lower bound (1.287 and 1.323 over live), and still above the
// pool's. Decode: within the segment budget the pool grows by its requests' sizes, not by chunks.
TEST(RecordedTraces, TensorsNeedNoMoreThanPyTorchsAllocator) {
  for (const char* name : kRecordedTraces) {
    SCOPED_TRACE(name);
    TraceOptions tensors;
    tensors.group_by = GroupBy::stream;
    const Trace t = load_trace(kData + "/traces/" + name, tensors);
    const ReplayResult r = replay(t, ReplayOptions{});
    EXPECT_EQ(r.growth_chunk, 1024 * MiB);
    EXPECT_GE(r.recorded_peak_reserved, r.shared.peak_live);
    EXPECT_LE(r.shared.peak_reserved, r.recorded_peak_reserved);
    const bool fsdp = std::string(name) == "fsdp2_2gpu.json" || std::string(name) == "fsdp_ep_2gpu.json";
    EXPECT_EQ(r.recorded_older_segment_peak > 100 * MiB, fsdp);
    const std::string text = format_text(r, name);
    EXPECT_EQ(text.find("a lower bound") != std::string::npos, r.recorded_older_segment_peak > 0) << text;
  }
}

// ---- Issue 47: bad input gets a clear error, never a hang, a lost file or invalid JSON ----------

TEST(TorchSnapshot, TwoAllocsAtOneAddressWithoutAFreeAreRefused) {
  // The CSV equivalent (an id allocated twice) is refused; a snapshot used to replay with the first block's free lost.
  const std::string snapshot =
      "{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 4096, \"size\": 512, \"stream\": 0},"
      " {\"action\": \"alloc\", \"addr\": 4096, \"size\": 1024, \"stream\": 0}]]}";
  try {
    (void)parse_torch_snapshot(snapshot, "s.json", {});
    ADD_FAILURE() << "accepted two allocs at one address";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("s.json: device 0 event 1 (alloc): address 4096 is already live"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_csv_trace("alloc,1,512,0,g\nalloc,1,1024,0,g\n", "t.csv"), TraceError);
  // Freed in between: the address is reused, a new block.
  const std::string reused =
      "{\"device_traces\": [[{\"action\": \"alloc\", \"addr\": 4096, \"size\": 512, \"stream\": 0},"
      " {\"action\": \"free_completed\", \"addr\": 4096, \"size\": 512, \"stream\": 0},"
      " {\"action\": \"alloc\", \"addr\": 4096, \"size\": 1024, \"stream\": 0}]]}";
  EXPECT_EQ(parse_torch_snapshot(reused, "s.json", {}).events.size(), 3u);
}

TEST(Args, FlagsTakeNoValueAndNumbersAreFinite) {
  EXPECT_THROW((void)Args::parse({"--json=no"}, {}, {}), UsageError);
  EXPECT_THROW((void)Args::parse({"--sim=0"}, {}, {"sim"}), UsageError);
  EXPECT_TRUE(Args::parse({"--json"}, {}, {}).json);
  for (const char* bad : {"inf", "-inf", "nan", "1e300", "infinity"}) {
    const Args a = Args::parse({"--min-ms", bad}, {"min-ms"}, {});
    try {
      (void)a.get_double("min-ms", 50, 0, 60000);
      ADD_FAILURE() << "accepted --min-ms " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--min-ms must be a finite number from 0 to 60000, not '" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
    // Without an upper bound still finite: --window-ms inf made "inf" and "-nan" in replay's JSON.
    if (std::string(bad) != "1e300") {
      EXPECT_THROW((void)Args::parse({"--window-ms", bad}, {"window-ms"}, {}).get_double("window-ms", 15, 0), UsageError) << bad;
    }
  }
  EXPECT_DOUBLE_EQ(Args::parse({"--min-ms", "1.5"}, {"min-ms"}, {}).get_double("min-ms", 50, 0, 60000), 1.5);
}

TEST(Replay, JsonIsValidWhateverTheNumbers) {
  ReplayResult r;
  r.registration_unit_ms = std::numeric_limits<double>::infinity();
  r.shared_registration_ms = std::nan("");
  r.per_group_registration_ms = -std::numeric_limits<double>::infinity();
  const std::string json = format_json(r);
  EXPECT_NO_THROW((void)parse_json(json)) << json;
  EXPECT_EQ(json.find("inf"), std::string::npos) << json;
  EXPECT_EQ(json.find("nan"), std::string::npos) << json;
  EXPECT_NE(json.find("\"registration_unit_ms\":null"), std::string::npos) << json;
}

TEST(Files, ADirectoryOrAMissingFileIsSaidSo) {
  const std::string dir = NCCLPOOL_TEST_SCRATCH;
  try {
    (void)read_input_file(dir, "--from");
    ADD_FAILURE() << "read a directory";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "--from: " + dir + ": is a directory; give a file");
  }
  try {
    (void)read_input_file("/nonexistent/x.json", "--from");
    ADD_FAILURE() << "read a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "--from: cannot open /nonexistent/x.json: No such file or directory");
  }
}

TEST(Environment, InfoAndThePoolReadNcclpoolCheckAlike) {
  // `ncclpool info` said the values were accepted; a pool then refused them (issue 47). One parse: check_level_from_env.
  for (const char* variable : {"NCCLPOOL_CHECK", "NCCLPOOL_SGLANG_KIND"}) ::unsetenv(variable);
  for (const char* good : {"off", "0", "layout", "2", "collectives"}) {
    ::setenv("NCCLPOOL_CHECK", good, 1);
    EXPECT_NO_THROW((void)ncclpool::check_level_from_env()) << good;
    EXPECT_TRUE(ncclpool::environment_problems().empty()) << good;
  }
  ::setenv("NCCLPOOL_CHECK", "everything", 1);
  EXPECT_THROW((void)ncclpool::check_level_from_env(), ncclpool::InvalidArgument);
  auto problems = ncclpool::environment_problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].variable, "NCCLPOOL_CHECK");
  EXPECT_NE(problems[0].message.find("NCCLPOOL_CHECK='everything' is not one of off, layout, collectives"), std::string::npos) << problems[0].message;
  ::unsetenv("NCCLPOOL_CHECK");
  // NCCLPOOL_SGLANG_KIND: ncclpool.sglang reads it (tests/python/test_misuse.py holds the two to one answer).
  for (const char* good : {"", "auto", "symmetric", "local"}) {
    ::setenv("NCCLPOOL_SGLANG_KIND", good, 1);
    EXPECT_TRUE(ncclpool::environment_problems().empty()) << good;
  }
  ::setenv("NCCLPOOL_SGLANG_KIND", "foo", 1);
  problems = ncclpool::environment_problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("NCCLPOOL_SGLANG_KIND='foo' is not one of auto, symmetric, local"), std::string::npos) << problems[0].message;
  ::unsetenv("NCCLPOOL_SGLANG_KIND");
}

// The replay engine: feeds a trace to a shared pool and to per-group pools, with real registries.

#include "replay.hpp"

#include "json.hpp"
#include "report.hpp"

#include <ncclpool/loopback.hpp>
#include <ncclpool/sim.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace ncclpool::tool {
namespace {

constexpr std::size_t kMiB = 1ull << 20;

/// One pool over the simulator with its own one-rank communicators.
struct ReplayPool {
  ReplayPool(const std::string& name, const std::vector<std::string>& group_names, const ReplayOptions& o,
             std::size_t chunk) {
    SimSourceConfig sim;
    sim.capacity = 1ull << 44;  // address space only (MAP_NORESERVE): the trace decides the peak
    PoolConfig config;
    config.name = name;
    config.growth_chunk = chunk;
    config.min_segment = o.min_segment;
    config.alignment = o.alignment;
    config.deterministic = registration_ops(o.kind).needs_deterministic_pool;
    outcome.name = name;
    registry = std::make_unique<Registry>(std::make_shared<Pool>(std::make_shared<SimSource>(sim), config));
    for (const auto& g : group_names) {
      groups.push_back(std::make_shared<LoopbackGroup>(name + "/" + g, 1));
      comms.push_back(std::make_shared<LoopbackCommunicator>(groups.back(), 0));
      registry->attach(comms.back(), o.kind);
    }
  }
  ~ReplayPool() {
    for (auto& c : comms) registry->detach(*c);
  }
  ReplayPool(const ReplayPool&) = delete;
  ReplayPool& operator=(const ReplayPool&) = delete;

  void* allocate(std::size_t size, std::uint64_t stream) {
    void* p = registry->pool().allocate(size, stream);
    registry->commit();  // a scope end after each allocation: windows for new segments
    track();
    return p;
  }
  // `publish`: the free is published to every stream at once, as the torch layer's frees are
  // (ncclpool_torch_free: torch hands back whole segments, rarely); a program's own frees are not.
  void deallocate(void* p, std::uint64_t stream, bool publish) {
    registry->pool().deallocate(p);
    if (publish) registry->pool().publish_frees(stream);
    track();
  }
  void track() {
    const PoolStats s = registry->pool().stats();
    if (s.reserved_bytes > outcome.peak_reserved) outcome.at_peak = registry->pool().memory_breakdown();  // rare: growth
    outcome.peak_reserved = std::max(outcome.peak_reserved, s.reserved_bytes);
    outcome.peak_live = std::max(outcome.peak_live, s.allocated_bytes);
    live = s.allocated_bytes;
    reserved = s.reserved_bytes;
  }
  PoolOutcome finish() {
    if (outcome.peak_reserved != 0)
      outcome.fragmentation_at_peak = 1.0 - static_cast<double>(outcome.peak_live) / static_cast<double>(outcome.peak_reserved);
    outcome.segments = registry->pool().stats().segments_created;
    for (auto& c : comms) outcome.registrations += registry->stats(*c).registrations;
    return outcome;
  }

  std::unique_ptr<Registry> registry;
  std::vector<std::shared_ptr<LoopbackGroup>> groups;
  std::vector<std::shared_ptr<Communicator>> comms;
  PoolOutcome outcome;
  std::size_t live = 0, reserved = 0;
};

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  return buf;
}

}  // namespace

ReplayResult replay(const Trace& trace, const ReplayOptions& o) {
  ReplayResult r;
  r.events = trace.events.size();
  r.groups = trace.groups;
  r.recorded_peak_reserved = trace.recorded_peak_reserved;
  r.recorded_older_segment_peak = trace.recorded_older_segment_peak;
  r.recorded_segments = trace.recorded_segments;
  r.min_segment = o.min_segment;
  r.kind = o.kind;
  r.growth_chunk = o.growth_chunk != 0 ? o.growth_chunk : registration_ops(o.kind).default_growth_chunk;
  ReplayPool shared("shared", trace.groups, o, r.growth_chunk);
  std::vector<std::unique_ptr<ReplayPool>> per_group;
  for (const auto& g : trace.groups) per_group.push_back(std::make_unique<ReplayPool>("group " + g, std::vector<std::string>{g}, o, r.growth_chunk));

  struct Live {
    void* shared;
    void* own;
    int group;
    std::uint64_t stream;
  };
  const bool torch_layer = trace.torch_segments;
  std::unordered_map<std::uint64_t, Live> live;
  std::ofstream timeline;
  if (!o.timeline_path.empty()) {
    timeline.open(o.timeline_path);
    // Not the trace's fault: no "bad trace" (issue 47).
    if (!timeline) throw std::runtime_error(o.timeline_path + ": cannot write the timeline: " + std::strerror(errno));
    timeline << "event,live_bytes,shared_reserved_bytes,per_group_reserved_bytes\n";
  }
  const std::size_t step = std::max<std::size_t>(1, trace.events.size() / 100);
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& ev = trace.events[i];
    if (ev.op == TraceEvent::Op::alloc) {
      Live l{shared.allocate(ev.size, ev.stream), nullptr, ev.group, ev.stream};
      l.own = per_group[static_cast<std::size_t>(ev.group)]->allocate(ev.size, ev.stream);
      live.emplace(ev.id, l);
    } else {
      auto it = live.find(ev.id);
      if (it == live.end()) throw TraceError("event " + std::to_string(i) + ": free of id " + std::to_string(ev.id) + ", which is not live");
      shared.deallocate(it->second.shared, it->second.stream, torch_layer);
      per_group[static_cast<std::size_t>(it->second.group)]->deallocate(it->second.own, it->second.stream, torch_layer);
      live.erase(it);
    }
    std::size_t sum_reserved = 0, sum_live = 0;
    for (auto& p : per_group) {
      sum_reserved += p->reserved;
      sum_live += p->live;
    }
    r.per_group_peak_reserved = std::max(r.per_group_peak_reserved, sum_reserved);
    r.per_group_peak_live = std::max(r.per_group_peak_live, sum_live);
    if (timeline) timeline << i << ',' << shared.live << ',' << shared.reserved << ',' << sum_reserved << '\n';
    if (o.progress && (i % step == 0 || i + 1 == trace.events.size())) o.progress(i + 1, trace.events.size());
  }
  for (auto& [id, l] : live) {  // blocks the trace never freed
    shared.deallocate(l.shared, l.stream, torch_layer);
    per_group[static_cast<std::size_t>(l.group)]->deallocate(l.own, l.stream, torch_layer);
  }
  r.shared = shared.finish();
  r.shared.name = "shared";
  for (auto& c : shared.comms) r.shared_registrations_per_group.push_back(shared.registry->stats(*c).registrations);
  for (auto& p : per_group) r.per_group.push_back(p->finish());
  const double unit_ms = registration_ops(o.kind).windows ? o.window_ms : o.local_us / 1000.0;
  r.registration_unit_ms = unit_ms;
  r.shared_registration_ms = static_cast<double>(r.shared.registrations) * unit_ms;
  std::size_t per_group_regs = 0;
  for (const auto& p : r.per_group) per_group_regs += p.registrations;
  r.per_group_registration_ms = static_cast<double>(per_group_regs) * unit_ms;
  r.recorded_registration_ms = static_cast<double>(r.recorded_segments * r.groups.size()) * unit_ms;
  return r;
}

std::string format_text(const ReplayResult& r, const std::string& title) {
  std::ostringstream out;
  char line[256];
  out << title << "\n";
  std::snprintf(line, sizeof line, "%zu events, %zu group(s), %s registration, growth chunk %s, min segment %s\n", r.events,
                r.groups.size(), to_string(r.kind), mib(r.growth_chunk).c_str(),
                r.min_segment ? mib(r.min_segment).c_str() : "growth chunk / 128");
  out << line;
  // The trade-off the table measures, stated once above it.
  if (registration_ops(r.kind).windows)
    std::snprintf(line, sizeof line, "%.3g ms a window (--window-ms)", r.registration_unit_ms);
  else
    std::snprintf(line, sizeof line, "%.3g us a local registration", r.registration_unit_ms * 1000);
  const std::string unit = line;
  out << "trade-off: memory (peak reserved) against registration (count, and time estimated at " << unit
      << "): one pool shared by the groups keeps one reserve and registers it with every group; one pool per group registers each segment "
         "once but reserves for each group apart\n\n";
  std::snprintf(line, sizeof line, "%-22s %14s %14s %10s %10s %10s %14s\n", "", "peak reserved", "peak live", "reserved/", "segments",
                "registr.", "registr. time");
  out << line;
  std::snprintf(line, sizeof line, "%-22s %14s %14s %10s %10s %10s %14s\n", "", "", "", "live", "", "", "(estimated)");
  out << line;
  auto row = [&](const std::string& name, std::size_t reserved, std::size_t peak_live, std::size_t segments, std::size_t regs, double ms) {
    std::snprintf(line, sizeof line, "%-22s %14s %14s %10.3f %10zu %10zu %11.1f ms\n", name.c_str(), mib(reserved).c_str(),
                  mib(peak_live).c_str(), peak_live ? static_cast<double>(reserved) / static_cast<double>(peak_live) : 0.0, segments, regs, ms);
    out << line;
  };
  row("shared pool", r.shared.peak_reserved, r.shared.peak_live, r.shared.segments, r.shared.registrations, r.shared_registration_ms);
  std::size_t segs = 0, regs = 0;
  for (const auto& p : r.per_group) {
    segs += p.segments;
    regs += p.registrations;
  }
  row("one pool per group", r.per_group_peak_reserved, r.per_group_peak_live, segs, regs, r.per_group_registration_ms);
  for (std::size_t g = 0; g < r.per_group.size(); ++g) {
    const auto& p = r.per_group[g];
    row("  " + r.groups[g], p.peak_reserved, p.peak_live, p.segments, p.registrations, static_cast<double>(p.registrations) * r.registration_unit_ms);
  }
  if (r.recorded_peak_reserved > 0) {  // what PyTorch's own allocator held for the same tensors
    char ratio[16];
    std::snprintf(ratio, sizeof ratio, "%s%.3f", r.recorded_older_segment_peak > 0 ? ">=" : "",
                  static_cast<double>(r.recorded_peak_reserved) / static_cast<double>(r.shared.peak_live));
    // Its registration: what torch's register_mem_pool(symm=True) makes, a window per segment and group.
    std::snprintf(line, sizeof line, "%-22s %14s %14s %10s %10zu %10zu %11.1f ms\n", "recording allocator", mib(r.recorded_peak_reserved).c_str(),
                  mib(r.shared.peak_live).c_str(), ratio, r.recorded_segments, r.recorded_segments * r.groups.size(), r.recorded_registration_ms);
    out << line;
    if (r.recorded_older_segment_peak > 0)
      out << "  (a lower bound: up to " << mib(r.recorded_older_segment_peak)
          << " of the trace's tensors sat in segments PyTorch made before the recording began, whose other bytes the trace does not show)\n";
  }
  std::snprintf(line, sizeof line, "\nshared pool: %.1f%% of the peak reserved bytes never held live data; registrations per group:", 100 * r.shared.fragmentation_at_peak);
  out << line;
  for (std::size_t g = 0; g < r.groups.size(); ++g) out << ' ' << r.groups[g] << '=' << r.shared_registrations_per_group[g];
  out << "\n";
  if (r.recorded_segments > 0 && !r.shared_registrations_per_group.empty()) {
    // The trade-off against torch's own symmetric pool, which registers each of its segments.
    const std::size_t ours = r.shared_registrations_per_group.front();
    std::snprintf(line, sizeof line,
                  "windows per group: shared pool %zu, PyTorch's register_mem_pool %zu (a window per segment PyTorch made%s): %.3gx; "
                  "peak reserved %.3fx PyTorch's\n",
                  ours, r.recorded_segments, r.recorded_older_segment_peak > 0 ? " during the recording; older ones are windows for both" : "",
                  static_cast<double>(ours) / static_cast<double>(r.recorded_segments),
                  static_cast<double>(r.shared.peak_reserved) / static_cast<double>(r.recorded_peak_reserved));
    out << line;
  }
  const MemoryBreakdown& m = r.shared.at_peak;
  if (m.reserved > 0) {
    auto part = [&](std::size_t bytes) { return mib(bytes) + " (" + std::to_string(static_cast<int>(100.0 * static_cast<double>(bytes) / static_cast<double>(m.reserved) + 0.5)) + "%)"; };
    out << "shared pool at its peak (" << mib(m.reserved) << "): live " << part(m.requested) << ", rounding " << part(m.rounding)
        << ", free in used segments " << part(m.free_in_used_segments) << " [never used " << mib(m.never_used)
        << ", one stream only " << mib(m.other_streams_only) << "], empty segments " << part(m.empty_segments) << "\n";
  }
  if (r.per_group_peak_reserved > 0) {
    std::snprintf(line, sizeof line, "shared / per-group peak reserved: %.3f\n",
                  static_cast<double>(r.shared.peak_reserved) / static_cast<double>(r.per_group_peak_reserved));
    out << line;
  }
  return out.str();
}

std::string format_json(const ReplayResult& r) {
  std::ostringstream out;
  auto pool = [&](const PoolOutcome& p) {
    out << "{\"name\":" << json_quote(p.name) << ",\"peak_reserved_bytes\":" << p.peak_reserved << ",\"peak_live_bytes\":" << p.peak_live
        << ",\"segments\":" << p.segments << ",\"registrations\":" << p.registrations
        << ",\"fragmentation_at_peak\":" << json_number(p.fragmentation_at_peak) << ",\"at_peak\":" << to_json(p.at_peak) << "}";
  };
  out << "{\"events\":" << r.events << ",\"kind\":\"" << to_string(r.kind) << "\",\"growth_chunk\":" << r.growth_chunk
      << ",\"min_segment\":" << r.min_segment << ",\"registration_unit_ms\":" << json_number(r.registration_unit_ms) << ",\"groups\":[";
  for (std::size_t g = 0; g < r.groups.size(); ++g) out << (g ? "," : "") << json_quote(r.groups[g]);
  out << "],\"shared\":";
  pool(r.shared);
  out << ",\"shared_registrations_per_group\":[";
  for (std::size_t g = 0; g < r.shared_registrations_per_group.size(); ++g) out << (g ? "," : "") << r.shared_registrations_per_group[g];
  out << "],\"shared_registration_ms\":" << json_number(r.shared_registration_ms) << ",\"per_group\":[";
  for (std::size_t g = 0; g < r.per_group.size(); ++g) {
    if (g) out << ',';
    pool(r.per_group[g]);
  }
  out << "],\"per_group_peak_reserved_bytes\":" << r.per_group_peak_reserved << ",\"per_group_peak_live_bytes\":" << r.per_group_peak_live
      << ",\"per_group_registration_ms\":" << json_number(r.per_group_registration_ms) << ",\"recorded_peak_reserved_bytes\":" << r.recorded_peak_reserved
      << ",\"recorded_older_segment_bytes\":" << r.recorded_older_segment_peak << ",\"recorded_segments\":" << r.recorded_segments
      << ",\"recorded_registration_ms\":" << json_number(r.recorded_registration_ms) << "}";
  return out.str();
}

}  // namespace ncclpool::tool

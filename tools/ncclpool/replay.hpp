#pragma once
// Replays a trace through real ncclpool pools on the simulator, twice: one pool shared by every group
// (each segment registered with every group), and one pool per group (SGLang's approach). Every
// group is a one-rank loopback communicator, so registrations go through the real registry.

#include "trace.hpp"

#include <ncclpool/registry.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ncclpool::tool {

struct ReplayOptions {
  RegistrationKind kind = RegistrationKind::symmetric;
  std::size_t growth_chunk = 0;   // 0: 1 GiB for symmetric, 2 MiB for local
  std::size_t min_segment = 0;    // PoolConfig::min_segment (0: growth_chunk / 128)
  std::size_t alignment = 512;
  double window_ms = 15.0;        // measured cost of one window registration (4x H200)
  double local_us = 7.0;          // measured cost of one local registration
  std::string timeline_path;      // CSV of memory over time (event, live, shared reserved, per-group reserved)
  std::function<void(std::size_t done, std::size_t total)> progress;  // optional
};

struct PoolOutcome {
  std::string name;
  std::size_t peak_reserved = 0;
  std::size_t peak_live = 0;
  std::size_t segments = 0;          // segments created
  std::size_t registrations = 0;     // over all its groups
  double fragmentation_at_peak = 0;  // 1 - peak live / peak reserved
  MemoryBreakdown at_peak;           // where the bytes were when reserved first reached its peak
};

struct ReplayResult {
  std::size_t events = 0;
  std::vector<std::string> groups;
  PoolOutcome shared;
  std::vector<std::size_t> shared_registrations_per_group;
  std::vector<PoolOutcome> per_group;
  std::size_t per_group_peak_reserved = 0;  // peak of the sum over the per-group pools
  std::size_t per_group_peak_live = 0;
  std::size_t growth_chunk = 0;
  std::size_t min_segment = 0;  // as given (0: growth_chunk / 128)
  RegistrationKind kind = RegistrationKind::symmetric;
  double shared_registration_ms = 0;   // estimated with window_ms / local_us
  double per_group_registration_ms = 0;
  double registration_unit_ms = 0;     // the estimate's cost of one registration
  std::size_t recorded_peak_reserved = 0;  // the recording allocator's own (torch traces), 0 if unknown
  std::size_t recorded_older_segment_peak = 0;  // of the trace's tensors, in segments made before recording (lower bound)
  std::size_t recorded_segments = 0;  // torch: segments made during the recording = register_mem_pool's windows per group
  double recorded_registration_ms = 0;  // their registration with every group, estimated as the pools'
};

/// @throws TraceError / ncclpool::Error.
ReplayResult replay(const Trace& trace, const ReplayOptions& options);

std::string format_text(const ReplayResult& r, const std::string& title);
std::string format_json(const ReplayResult& r);

}  // namespace ncclpool::tool

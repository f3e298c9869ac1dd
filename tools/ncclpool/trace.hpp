#pragma once
// Allocation traces the tool replays: ncclpool's own CSV, and PyTorch memory snapshots
// (torch.cuda.memory._snapshot() written as JSON by scripts/record-torch-trace.py).
//
// CSV, one event per line ('#' starts a comment, blank lines are skipped):
//   alloc,<id>,<bytes>,<stream>,<group>      a block of <bytes> for <group> (a name), ordered on <stream>
//   free,<id>                                frees the live block <id>
// ids are any integers unique among live blocks (an id may be reused after its free).

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ncclpool::tool {

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TraceEvent {
  enum class Op : std::uint8_t { alloc, free };
  Op op = Op::alloc;
  std::uint64_t id = 0;
  std::size_t size = 0;      // alloc only
  std::uint64_t stream = 0;  // alloc only
  int group = 0;             // alloc only: index into Trace::groups
};

struct Trace {
  std::string format;               // "csv" or "torch-snapshot"
  bool torch_segments = false;      // the requests are PyTorch's segments (--level segments): the torch layer's view
  std::vector<std::string> groups;  // names, in order of first use
  std::vector<TraceEvent> events;
  std::size_t skipped_frees = 0;    // frees of blocks allocated before recording started (torch)
  std::size_t live_at_end = 0;      // blocks never freed
  /// torch: the most memory the recording allocator (PyTorch's own caching allocator) held for the
  /// trace's own tensors: at each event, the segments it made during the recording and still holds,
  /// plus the trace's live tensors that sit in segments made before the recording began (their
  /// other bytes held tensors the trace does not replay, or free memory: unknown, so with any such
  /// tensor the figure is a lower bound). 0 when the trace has no segment events.
  std::size_t recorded_peak_reserved = 0;
  /// torch: the most of the trace's live tensors that sat, at one time, in segments made before the
  /// recording began (0: the figure above is PyTorch's whole reserve for the trace).
  std::size_t recorded_older_segment_peak = 0;
  /// torch: the segments the recording allocator made during the recording (segment_alloc /
  /// segment_map events): the windows per group that torch's register_mem_pool(symm=True), which
  /// registers every segment of its pool, would make for them. 0 when unknown.
  std::size_t recorded_segments = 0;

  int group_index(const std::string& name);  // adds the name if new
};

enum class TraceFormat { automatic, csv, torch };
/// How torch snapshot allocations are split into groups (torch records no group).
enum class GroupBy { none, stream };
/// What of a torch snapshot is replayed: the tensors' blocks (what a pool serving tensors directly
/// would see), or PyTorch's segments (what ncclpool sees under torch's caching allocator: the torch
/// layer, where torch asks the pluggable allocator for segments and carves tensors itself).
enum class TraceLevel { blocks, segments };

struct TraceOptions {
  TraceFormat format = TraceFormat::automatic;
  GroupBy group_by = GroupBy::none;
  TraceLevel level = TraceLevel::blocks;
  int device = -1;  // torch: which device's trace; -1 = the first with events
};

/// Reads and validates a trace. @throws TraceError naming the file, line (CSV) and the problem.
Trace load_trace(const std::string& path, const TraceOptions& options);
Trace parse_csv_trace(const std::string& text, const std::string& name);
Trace parse_torch_snapshot(const std::string& text, const std::string& name, const TraceOptions& options);
/// Multiplies every allocation's size by `factor` (> 0; at least 1 byte each): the same sequence of
/// requests at another scale (`replay --scale`). The recording allocator's figures no longer apply
/// and are dropped.
void scale_sizes(Trace& trace, double factor);
/// Writes a trace as CSV (what `ncclpool replay --convert` prints).
std::string to_csv(const Trace& trace);

}  // namespace ncclpool::tool

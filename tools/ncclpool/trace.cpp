// Trace readers: ncclpool CSV and PyTorch memory snapshots.

#include <algorithm>
#include "trace.hpp"

#include "json.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ncclpool::tool {

int Trace::group_index(const std::string& name) {
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (groups[i] == name) return static_cast<int>(i);
  groups.push_back(name);
  return static_cast<int>(groups.size() - 1);
}

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) {
    const auto b = field.find_first_not_of(" \t\r");
    const auto e = field.find_last_not_of(" \t\r");
    fields.push_back(b == std::string::npos ? "" : field.substr(b, e - b + 1));
  }
  return fields;
}

std::uint64_t number(const std::string& s, const std::string& where, const char* what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty())
    throw TraceError(where + ": " + what + " '" + s + "' is not a non-negative integer");
  return v;
}

// What the recording allocator held for the trace's tensors (Trace::recorded_peak_reserved).
// Segments made before the recording began are not counted, and neither are their releases: such a
// segment held tensors allocated before the recording (which the trace cannot replay), and its
// release goes with their frees. A free or unmap is matched by address range against the segments
// (or mapped pieces of expandable segments) made during the recording.
struct RecordedReserve {
  std::map<std::int64_t, std::int64_t> made;  // base -> size of memory mapped during the recording
  std::int64_t held = 0;                      // bytes of it still held
  std::unordered_map<std::int64_t, std::int64_t> in_older;  // live trace tensors in segments made before: address -> size
  std::int64_t older_live = 0;                // their bytes
  std::int64_t peak = 0;
  std::int64_t older_live_peak = 0;

  void add(std::int64_t base, std::int64_t size) {
    if (size <= 0) return;
    made[base] = size;
    held += size;
    note_peak();
  }
  // Takes [base, base + size) out of what was made during the recording, splitting ranges it cuts.
  void remove(std::int64_t base, std::int64_t size) {
    const std::int64_t end = base + size;
    auto it = made.upper_bound(base);
    if (it != made.begin()) --it;
    while (it != made.end() && it->first < end) {
      const std::int64_t r_base = it->first, r_end = it->first + it->second;
      if (r_end <= base) {
        ++it;
        continue;
      }
      it = made.erase(it);
      held -= std::min(end, r_end) - std::max(base, r_base);
      if (r_base < base) made[r_base] = base - r_base;
      if (r_end > end) it = made.emplace(end, r_end - end).first;
    }
  }
  // A trace tensor: counted while it lives if it sits in a segment made before the recording.
  void tensor_allocated(std::int64_t address, std::int64_t size) {
    if (made_during_recording(address)) return;
    in_older[address] = size;
    older_live += size;
    note_peak();
  }
  void tensor_freed(std::int64_t address) {
    if (auto it = in_older.find(address); it != in_older.end()) {
      older_live -= it->second;
      in_older.erase(it);
    }
  }
  [[nodiscard]] bool made_during_recording(std::int64_t address) const {
    auto it = made.upper_bound(address);
    if (it == made.begin()) return false;
    --it;
    return address < it->first + it->second;
  }
  void note_peak() {
    peak = std::max(peak, held + older_live);
    older_live_peak = std::max(older_live_peak, older_live);
  }
};

}  // namespace

Trace parse_csv_trace(const std::string& text, const std::string& name) {
  Trace trace;
  trace.format = "csv";
  std::unordered_set<std::uint64_t> live;
  std::istringstream in(text);
  std::string line;
  for (std::size_t lineno = 1; std::getline(in, line); ++lineno) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(lineno);
    const auto f = split(line);
    TraceEvent ev;
    if (f[0] == "alloc") {
      if (f.size() != 5) throw TraceError(where + ": 'alloc' needs 4 fields: alloc,<id>,<bytes>,<stream>,<group>");
      ev.op = TraceEvent::Op::alloc;
      ev.id = number(f[1], where, "id");
      ev.size = number(f[2], where, "size");
      if (ev.size == 0) throw TraceError(where + ": size 0");
      ev.stream = number(f[3], where, "stream");
      if (f[4].empty()) throw TraceError(where + ": empty group name");
      ev.group = trace.group_index(f[4]);
      if (!live.insert(ev.id).second) throw TraceError(where + ": id " + f[1] + " is already live");
    } else if (f[0] == "free") {
      if (f.size() != 2) throw TraceError(where + ": 'free' needs 1 field: free,<id>");
      ev.op = TraceEvent::Op::free;
      ev.id = number(f[1], where, "id");
      if (live.erase(ev.id) == 0) throw TraceError(where + ": free of id " + f[1] + ", which is not live");
    } else {
      throw TraceError(where + ": unknown event '" + f[0] + "' (expected alloc or free)");
    }
    trace.events.push_back(ev);
  }
  if (trace.events.empty()) throw TraceError(name + ": no events");
  trace.live_at_end = live.size();
  return trace;
}

Trace parse_torch_snapshot(const std::string& text, const std::string& name, const TraceOptions& options) {
  Json doc;
  try {
    doc = parse_json(text);
  } catch (const JsonError& e) {
    throw TraceError(name + ": " + e.what());
  }
  if (doc.type != Json::Type::object) {
    static const char* const kTypes[] = {"null", "true or false", "a number", "a string", "a list", "an object"};
    throw TraceError(name + ": JSON holding " + kTypes[static_cast<int>(doc.type)] +
                     ", not a torch memory snapshot (an object with 'device_traces', as torch.cuda.memory._snapshot() gives; "
                     "scripts/record-torch-trace.py writes one); an ncclpool trace is CSV: alloc,<id>,<bytes>,<stream>,<group> / free,<id>");
  }
  const Json* traces = doc.find("device_traces");
  if (traces == nullptr || traces->type != Json::Type::array)
    throw TraceError(name + ": no 'device_traces' list: is this torch.cuda.memory._snapshot() output? (record with "
                     "torch.cuda.memory._record_memory_history() enabled; scripts/record-torch-trace.py does)");
  int device = options.device;
  if (device < 0) {
    for (std::size_t d = 0; d < traces->array.size(); ++d)
      if (!traces->array[d].array.empty()) {
        device = static_cast<int>(d);
        break;
      }
    if (device < 0) throw TraceError(name + ": every device trace is empty (was memory history recording on?)");
  }
  if (device >= static_cast<int>(traces->array.size()))
    throw TraceError(name + ": no trace for device " + std::to_string(device) + " (the snapshot has " +
                     std::to_string(traces->array.size()) + ")");
  const auto& events = traces->array[static_cast<std::size_t>(device)].array;
  // free_completed is when the memory is really back (after the stream caught up); use
  // free_requested only for snapshots that have no free_completed at all.
  bool has_completed = false;
  for (const auto& e : events)
    if (const Json* a = e.find("action"); a && a->string == "free_completed") has_completed = true;
  const std::string free_action = has_completed ? "free_completed" : "free_requested";

  Trace trace;
  trace.format = "torch-snapshot";
  std::unordered_map<std::int64_t, std::uint64_t> live;  // address -> id
  std::uint64_t next_id = 0;
  RecordedReserve recorded;
  const bool segments = options.level == TraceLevel::segments;
  trace.torch_segments = segments;
  auto field = [](const Json& e, const char* key) -> std::int64_t {
    const Json* v = e.find(key);
    return v ? v->as_int(key) : 0;
  };
  auto add_alloc = [&](const Json& e, std::uint64_t id, std::size_t size) {
    TraceEvent ev;
    ev.id = id;
    ev.size = size;
    ev.stream = static_cast<std::uint64_t>(field(e, "stream"));
    ev.group = trace.group_index(options.group_by == GroupBy::stream ? "stream " + std::to_string(ev.stream) : "all");
    live[field(e, "addr")] = id;
    trace.events.push_back(ev);
  };
  auto add_free = [&](const Json& e) {
    auto it = live.find(field(e, "addr"));
    if (it == live.end()) {
      ++trace.skipped_frees;  // allocated (or the segment made) before recording began
      return;
    }
    TraceEvent ev;
    ev.op = TraceEvent::Op::free;
    ev.id = it->second;
    live.erase(it);
    trace.events.push_back(ev);
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Json& e = events[i];
    const Json* action = e.find("action");
    if (action == nullptr) continue;
    auto where = [&] { return name + ": device " + std::to_string(device) + " event " + std::to_string(i) + " (" + action->string + ")"; };
    // RecordedReserve adds addresses and sizes as int64: [addr, addr + size) must be a range there.
    auto check_range = [&] {
      const std::int64_t addr = field(e, "addr"), size = field(e, "size");
      if (addr < 0 || size < 0)
        throw TraceError(where() + ": negative addr " + std::to_string(addr) + " or size " + std::to_string(size));
      if (size > std::numeric_limits<std::int64_t>::max() - addr)
        throw TraceError(where() + ": addr " + std::to_string(addr) + " + size " + std::to_string(size) + " is past the largest address");
    };
    try {
      if (action->string == "segment_alloc" || action->string == "segment_map" || action->string == "segment_free" ||
          action->string == "segment_unmap") {
        check_range();
        const std::int64_t size = field(e, "size");
        const bool grows = action->string == "segment_alloc" || action->string == "segment_map";
        if (grows) recorded.add(field(e, "addr"), size);
        else recorded.remove(field(e, "addr"), size);
        if (grows && size > 0) ++trace.recorded_segments;
        if (!segments) continue;
        // The torch layer's view: each segment (or mapped piece of an expandable one) is one request.
        if (!grows) {
          add_free(e);
        } else if (size > 0) {
          add_alloc(e, next_id++, static_cast<std::size_t>(size));
        }
      } else if (segments) {
        continue;  // tensors live inside torch's segments: not ncclpool's business at this level
      } else if (action->string == "alloc") {
        check_range();
        const std::uint64_t id = next_id++;
        const auto size = static_cast<std::size_t>(field(e, "size"));
        if (size == 0) continue;
        // As the CSV reader refuses an id that is live: replaying it would lose the first block's free.
        if (live.count(field(e, "addr")) != 0)
          throw TraceError(where() + ": address " + std::to_string(field(e, "addr")) + " is already live (an alloc there had no " +
                           free_action + " before this one)");
        add_alloc(e, id, size);
        recorded.tensor_allocated(field(e, "addr"), static_cast<std::int64_t>(size));
      } else if (action->string == free_action) {
        recorded.tensor_freed(field(e, "addr"));
        add_free(e);
      }
    } catch (const JsonError& err) {
      throw TraceError(where() + ": " + err.what());
    }
  }
  if (trace.events.empty()) throw TraceError(name + ": device " + std::to_string(device) + " has no alloc events");
  trace.live_at_end = live.size();
  trace.recorded_peak_reserved = static_cast<std::size_t>(recorded.peak);
  trace.recorded_older_segment_peak = static_cast<std::size_t>(recorded.older_live_peak);
  return trace;
}

Trace load_trace(const std::string& path, const TraceOptions& options) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw TraceError(path + ": is a directory; give a trace file (ncclpool CSV, or a torch memory snapshot as JSON)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  TraceFormat format = options.format;
  if (format == TraceFormat::automatic) {
    const auto first = text.find_first_not_of(" \t\r\n");
    // JSON (an object or a list: what is not a torch snapshot is reported as JSON), else CSV.
    format = first != std::string::npos && (text[first] == '{' || text[first] == '[') ? TraceFormat::torch : TraceFormat::csv;
  }
  return format == TraceFormat::torch ? parse_torch_snapshot(text, path, options) : parse_csv_trace(text, path);
}

void scale_sizes(Trace& trace, double factor) {
  for (auto& ev : trace.events)
    if (ev.op == TraceEvent::Op::alloc) ev.size = std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(ev.size) * factor));
  trace.recorded_peak_reserved = 0;
  trace.recorded_older_segment_peak = 0;
  trace.recorded_segments = 0;
}

std::string to_csv(const Trace& trace) {
  std::ostringstream out;
  out << "# ncclpool trace (from " << trace.format << "): alloc,<id>,<bytes>,<stream>,<group> | free,<id>\n";
  for (const auto& ev : trace.events) {
    if (ev.op == TraceEvent::Op::alloc)
      out << "alloc," << ev.id << ',' << ev.size << ',' << ev.stream << ',' << trace.groups[static_cast<std::size_t>(ev.group)] << '\n';
    else
      out << "free," << ev.id << '\n';
  }
  return out.str();
}

}  // namespace ncclpool::tool

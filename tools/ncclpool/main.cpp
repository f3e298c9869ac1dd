// ncclpool: see what ncclpool does on this machine and on your workload.
//
//   ncclpool info [--json]
//   ncclpool replay TRACE [options]          (ncclpool replay --help)
//   ncclpool bench memory [options]          (ncclpool bench memory --help)

#include "commands.hpp"
#include "trace.hpp"

#include <ncclpool/errors.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ncclpool::tool {

Args Args::parse(const std::vector<std::string>& argv, const std::vector<std::string>& valued, const std::vector<std::string>& flags) {
  Args a;
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "-") {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    const auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "json") {
      a.json = true;
    } else if (in(flags, name)) {
      a.options[name] = "1";
    } else if (in(valued, name)) {
      if (eq == std::string::npos) {
        if (i + 1 >= argv.size()) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      a.options[name] = value;
    } else {
      throw UsageError("unknown option --" + name);
    }
  }
  return a;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() ? fallback : it->second;
}

long long Args::get_int(const std::string& name, long long fallback, long long min, long long max) const {
  if (!has(name)) return fallback;
  const std::string& s = options.at(name);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < min || v > max)
    throw UsageError("--" + name + " must be an integer in " + std::to_string(min) + ".." + std::to_string(max) + ", not '" + s + "'");
  return v;
}

double Args::get_double(const std::string& name, double fallback, double min) const {
  if (!has(name)) return fallback;
  const std::string& s = options.at(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || v < min) throw UsageError("--" + name + " must be a number >= " + std::to_string(min) + ", not '" + s + "'");
  return v;
}

}  // namespace ncclpool::tool

namespace {

constexpr const char* kUsage =
    "usage: ncclpool <command> [options]\n"
    "\n"
    "commands:\n"
    "  info                   the environment as ncclpool sees it: CUDA, NCCL, window support, sources\n"
    "  replay TRACE           replay an allocation trace (ncclpool CSV or a torch memory snapshot as JSON)\n"
    "                         through a shared pool and through one pool per group, on the simulator\n"
    "  bench memory           peak reserved vs live for a multi-group workload, shared vs per-group pools\n"
    "  version\n"
    "\n"
    "Every command takes --json for machine-readable output; `ncclpool <command> --help` for its options.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace ncclpool::tool;
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (rest.empty() || rest[0] == "--help" || rest[0] == "-h" || rest[0] == "help") {
    std::fputs(kUsage, rest.empty() ? stderr : stdout);
    return rest.empty() ? 2 : 0;
  }
  const std::string command = rest[0];
  rest.erase(rest.begin());
  try {
    if (command == "version") {
      std::puts(NCCLPOOL_TOOL_VERSION);
      return 0;
    }
    if (command == "info") return cmd_info(Args::parse(rest, {}, {}));
    if (command == "replay") return cmd_replay(Args::parse(rest, {"format", "group-by", "device", "kind", "growth-chunk-mib", "window-ms", "timeline", "convert"}, {"help"}));
    if (command == "bench") {
      if (rest.empty()) throw UsageError("bench needs a suite: memory (alloc, scope and coll: see the open issue)");
      const std::string suite = rest[0];
      rest.erase(rest.begin());
      if (suite == "memory")
        return cmd_bench_memory(Args::parse(rest, {"trace", "layers", "steps", "kind", "growth-chunk-mib", "window-ms", "timeline", "format", "group-by", "device"}, {"help"}));
      throw UsageError("unknown bench suite '" + suite + "' (available: memory)");
    }
    throw UsageError("unknown command '" + command + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ncclpool: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const TraceError& e) {
    std::fprintf(stderr, "ncclpool: bad trace: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ncclpool: %s\n", e.what());
    return 1;
  }
}

#pragma once
// The subcommands of the `ncclpool` tool and the argument reader they share.

#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

// NCCLPOOL_TOOL_VERSION comes from CMake (tools/CMakeLists.txt: project()'s version).

namespace ncclpool::tool {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `--name value`, `--flag` and positional arguments, checked against what a command accepts.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  bool json = false;

  /// @param valued options that take a value; @param flags options without one (--json is always known).
  static Args parse(const std::vector<std::string>& argv, const std::vector<std::string>& valued, const std::vector<std::string>& flags);
  [[nodiscard]] bool has(const std::string& name) const { return options.count(name) != 0; }
  [[nodiscard]] std::string get(const std::string& name, const std::string& fallback) const;
  [[nodiscard]] long long get_int(const std::string& name, long long fallback, long long min, long long max) const;
  /// A finite number in [min, max] (NaN and infinities are refused), or fallback when the option is absent.
  [[nodiscard]] double get_double(const std::string& name, double fallback, double min,
                                  double max = std::numeric_limits<double>::infinity()) const;
};

/// The whole of the file at `path` that option `what` names. @throws std::runtime_error (exit 1)
/// saying it is a directory, or why it cannot be opened.
std::string read_input_file(const std::string& path, const std::string& what);

/// NCCL's version code as NCCL prints it: 22809 -> "2.28.9" (2708 -> "2.7.8"; below 1000 as is).
std::string nccl_version_text(int version);

/// Each command's --help text, printed after a usage error in that command.
extern const char* const kInfoUsage;
extern const char* const kReplayUsage;
extern const char* const kBenchMemoryUsage;
extern const char* const kBenchAllocUsage;
extern const char* const kBenchScopeUsage;
extern const char* const kBenchCollUsage;
extern const char* const kTuneUsage;

int cmd_info(const Args& args);
int cmd_replay(const Args& args);
int cmd_bench_memory(const Args& args);
int cmd_bench_alloc(const Args& args);
int cmd_bench_scope(const Args& args);
int cmd_bench_coll(const Args& args);
int cmd_tune(const Args& args);

}  // namespace ncclpool::tool

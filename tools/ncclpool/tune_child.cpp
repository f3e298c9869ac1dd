// `ncclpool tune`'s bench coll children: one process per round and CTA setting (NCCL reads the
// count once per process), each bounded in time.

#include "tune.hpp"

#include <ncclpool/errors.hpp>

#include <chrono>
#include <cstdio>
#include <sys/wait.h>

namespace ncclpool::tool {

// The child runs under coreutils' timeout: a collective that hangs must end tune with an error, not
// hold it (and the GPUs) until someone kills it; a killed child's GPU memory and contexts go with its
// process. --foreground keeps the child in tune's process group, so that a Ctrl-C or an outer
// timeout that ends tune ends the child too (timeout would otherwise move it into a group of its
// own, and an orphan would hold the GPUs), and makes timeout exit 137 itself after its KILL under
// any /bin/sh. 124 and 137 also come from a child killed otherwise (the OOM killer), so they count
// as the limit only when it has passed.
std::string run_bench_coll_child(const std::string& self, const std::string& ctas, const std::vector<std::string>& coll_args, long long timeout_s,
                                 long long kill_after_s) {
  const std::string bench = "'" + self + "' bench coll --json";
  std::string cmd = "env -u NCCL_SYM_CTAS NCCLPOOL_SYM_CTAS=" + ctas + " timeout --foreground -k " + std::to_string(kill_after_s) + " " +
                    std::to_string(timeout_s) + " " + bench;
  for (const auto& a : coll_args) cmd += " " + a;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw BackendError("tune: could not start `" + cmd + "`");
  std::string out;
  char buf[65536];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status == -1) throw BackendError("tune: could not wait for `" + cmd + "`");
  if (WIFSIGNALED(status))
    throw BackendError("tune: `" + cmd + "` was killed by signal " + std::to_string(WTERMSIG(status)) + " after " + std::to_string(static_cast<long long>(seconds)) + " s");
  const int code = WEXITSTATUS(status);
  if ((code == 124 || code == 137) && seconds >= static_cast<double>(timeout_s))  // TERM at the limit, or KILL kill_after_s later
    throw BackendError("tune: the bench coll run with symmetric CTAs " + ctas + " did not finish within " + std::to_string(timeout_s) +
                       " s (--run-timeout) and was ended: a collective hung, or the run needs a longer limit. `" + cmd + "`");
  if (code == 127) throw BackendError("tune: could not run `" + cmd + "` (is coreutils' timeout on the PATH?)");
  if (code != 0)
    throw BackendError("tune: `" + cmd + "` failed (exit " + std::to_string(code) + (code > 128 ? ": signal " + std::to_string(code - 128) : std::string()) +
                       ", after " + std::to_string(static_cast<long long>(seconds)) + " s); its error is above");
  return out;
}

}  // namespace ncclpool::tool

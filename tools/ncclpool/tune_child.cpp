// `ncclpool tune`'s bench coll children: which to run (the CTA settings this process's symmetric
// kernels make sense of), and each as a process of its own per round and setting (NCCL reads the
// count once per process), bounded in time.

#include "tune.hpp"

#include <ncclpool/errors.hpp>

#include <chrono>
#include <cstdio>
#include <sys/wait.h>

namespace ncclpool::tool {

TunePlan plan_tune_runs(const SymmetricKernels& kernels, const std::vector<std::string>& ctas, bool ctas_given, bool compute, bool copy_engine) {
  TunePlan plan{ctas, {}, {}, copy_engine};
  if (!kernels.enabled) {
    if (copy_engine) {
      plan.copy_engine = false;
      plan.notes.push_back("--copy-engine: not measured, since the symmetric kernels are off in this process: NCCL uses its copy engines only "
                           "on windows with the symmetric flag");
    }
    // NCCL_SYM_CTAS sizes the symmetric kernels only: timing counts NCCL never uses would pick a
    // count from noise (on NCCL 2.28-2.30.6 on Hopper this is the guard's default).
    const bool one = ctas.size() == 1 && ctas.front() == "nccl";
    if (!ctas_given) plan.ctas = {"nccl"};
    if (!ctas_given || !one)
      plan.notes.push_back("symmetric kernels are off in this process (" + kernels.why + "): NCCL runs its ring kernels on the windows and " +
                           (ctas_given ? "the CTA counts given (--ctas) change nothing there, measured anyway"
                                       : "no CTA count changes them, so tune measures NCCL's choice only") +
                           "; the kinds are judged on windows without the symmetric flag");
  } else if (kernels.hazard && compute) {
    // Fenced (tune declares the fence, so `auto` is `fence` here): whether the fence also prevents
    // the hang is not measured yet, so the warning stays.
    plan.notes.push_back(std::string(kernels.fence ? "symmetric kernels on and fenced (the decision `fence`: every bench coll collective on windows "
                                                     "follows ncclpool's fence; whether that avoids the hang below is not measured yet)"
                                                   : "symmetric kernels forced on (NCCLPOOL_SYMMETRIC_KERNELS=on)") +
                         " with an NCCL whose symmetric kernels lack the "
                         "grid-dependency sync (2.28.0-2.30.6 on sm_90+): runs beside the compute load hung on 2x H200 with NCCL 2.28.3 and 2.28.9 "
                         "(5 of 10, unfenced), none with 2.30.7 (0 of 21). A hang ends tune after --run-timeout; NCCL >= 2.30.7, --no-compute, "
                         "or NCCLPOOL_SYMMETRIC_KERNELS=off avoids it (docs/tool.md, \"tune\")");
    plan.hang_hint = "; on this NCCL, symmetric kernels beside the compute load are known to hang (NCCL < 2.30.7: use a newer NCCL or --no-compute)";
  }
  return plan;
}

// The child runs under coreutils' timeout: a collective that hangs must end tune with an error, not
// hold it (and the GPUs) until someone kills it; a killed child's GPU memory and contexts go with its
// process. --foreground keeps the child in tune's process group, so that a Ctrl-C or an outer
// timeout that ends tune ends the child too (timeout would otherwise move it into a group of its
// own, and an orphan would hold the GPUs), and makes timeout exit 137 itself after its KILL under
// any /bin/sh. 124 and 137 also come from a child killed otherwise (the OOM killer), so they count
// as the limit only when it has passed.
std::string run_bench_coll_child(const std::string& self, const std::string& ctas, const std::vector<std::string>& coll_args, long long timeout_s,
                                 long long kill_after_s, const std::string& hang_hint) {
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
                       " s (--run-timeout) and was ended: a collective hung, or the run needs a longer limit" + hang_hint + ". `" + cmd + "`");
  if (code == 127) throw BackendError("tune: could not run `" + cmd + "` (is coreutils' timeout on the PATH?)");
  if (code != 0)
    throw BackendError("tune: `" + cmd + "` failed (exit " + std::to_string(code) + (code > 128 ? ": signal " + std::to_string(code - 128) : std::string()) +
                       ", after " + std::to_string(static_cast<long long>(seconds)) + " s); its error is above");
  return out;
}

}  // namespace ncclpool::tool

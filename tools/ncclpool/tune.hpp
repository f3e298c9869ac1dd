#pragma once
// `ncclpool tune`: a profile (profile.hpp) from `bench coll` runs, one per round and symmetric CTA
// count (NCCL reads the count once per process, so each is a process of its own), alternating.

#include "json.hpp"
#include "report.hpp"

#include <ncclpool/nccl.hpp>
#include <ncclpool/profile.hpp>

#include <string>
#include <vector>

namespace ncclpool::tool {

/// One `bench coll --json` output and the CTA setting it ran under ("nccl" or a count).
struct CollRun {
  std::string ctas;
  Json doc;
};

/// What the runs cannot say about themselves (runs written before bench coll recorded them).
struct MachineFacts {
  std::string gpu;
  int nccl_version = 0;
  int ranks = 0;
};

/// Profile::measured of a profile built from runs that do not say when they were made (bench coll
/// runs record no date; `tune --from` must not stamp them with the time it reads them).
inline constexpr const char* kUnknownWhen = "unknown (the runs do not say when they were made)";

/// Builds the profile from the runs (pure: tested on CPU with runs recorded on GPUs) and fills
/// `report` with the medians, spreads and choices. `given` fills facts the runs lack.
/// Rules: the CTA count whose symmetric times have the smallest geometric mean over the ops and sizes
/// whose runs agree within 5% (every point if none does), among the counts whose steps with compute
/// beside (runs of bench coll --compute, where there are) are within 1% of the best; NCCL's own
/// choice when within 1% of it. Per op and size the cheapest kind to hold (none < local < symmetric)
/// unless a costlier one's median is >= 2% faster. `measured`: the latest of the runs' "measured"
/// facts, else kUnknownWhen; `symmetric_ctas_measured` only where symmetric times were measured at
/// every size with the kernels on.
/// @throws InvalidArgument when runs disagree on the machine or lack what is needed.
Profile build_profile(const std::vector<CollRun>& runs, const MachineFacts& given, Report& report);

/// The runs tune makes, given this process's symmetric-kernel decision (`kernels`: the NCCL-version
/// guard, as the children will decide it) and the CTA settings asked for.
struct TunePlan {
  std::vector<std::string> ctas;   ///< the settings to run, in order
  std::vector<std::string> notes;  ///< what the user must know about them (stderr and the report)
  std::string hang_hint;           ///< the likely cause, added to a run-timeout error ("" if none known)
  bool copy_engine = false;        ///< measure kind ce (asked for, and possible here)
};

/// Pure. Kernels off: windows carry no symmetric flag, NCCL runs no symmetric kernel and a CTA count
/// changes nothing, so NCCL's own choice only unless `ctas_given` (then as asked, with a note); and
/// no copy engines either (they need the flag), so `copy_engine` asked for is dropped with a note.
/// Kernels on with the hazard (NCCL 2.28.0-2.30.6 on sm_90+) and `compute`: a note and a hang hint
/// (runs beside the compute load hung on 2x H200 with NCCL 2.28.3 and 2.28.9, none with 2.30.7).
TunePlan plan_tune_runs(const SymmetricKernels& kernels, const std::vector<std::string>& ctas, bool ctas_given, bool compute, bool copy_engine = false);

/// Runs `SELF bench coll --json ARGS` as a child with the symmetric CTA setting `ctas` (NCCL_SYM_CTAS
/// unset, NCCLPOOL_SYM_CTAS=ctas) and returns its stdout. A child still running after `timeout_s`
/// seconds is ended (coreutils' timeout in the foreground: TERM, KILL `kill_after_s` later); it stays
/// in the caller's process group, so a signal that ends the caller ends it too. ARGS go to the shell
/// as they are: pass only options tune made.
/// @throws BackendError naming the setting and the limit (and `hang_hint`, if any) when the child was
///         ended at the limit, with the signal when it was killed, or with its exit code when it failed.
std::string run_bench_coll_child(const std::string& self, const std::string& ctas, const std::vector<std::string>& coll_args, long long timeout_s,
                                 long long kill_after_s = 10, const std::string& hang_hint = "");

}  // namespace ncclpool::tool

// Whether windows carry NCCL_WIN_COLL_SYMMETRIC (see SymmetricKernels in nccl.hpp). No NCCL or CUDA
// needed: built in every configuration, so that the policy is tested on machines without GPUs; the
// NCCL communicator applies it with its NCCL version, compute capability and driver version.

#include <ncclpool/nccl.hpp>

#include "core/environment.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ncclpool {
namespace {

std::string version_text(int v) { return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100); }

std::mutex g_mutex;
SymmetricKernels g_decided;  // guarded by g_mutex; decided once per process

}  // namespace

bool symmetric_kernels_hazard(int nccl_version, int cc_major, int driver_version) noexcept {
  // 2.28.0 dropped the sync from the symmetric kernels; 2.30.7 restored it. PDL needs sm_90 and 12.3.
  return nccl_version >= 22800 && nccl_version < 23007 && cc_major >= 9 && driver_version >= 12030;
}

SymmetricKernels choose_symmetric_kernels(const char* setting, int nccl_version, int cc_major, int driver_version) {
  SymmetricKernels out;
  out.decided = true;
  out.hazard = symmetric_kernels_hazard(nccl_version, cc_major, driver_version);
  const std::string hazard = "NCCL " + version_text(nccl_version) +
                             " launches its symmetric kernels with PDL but without cudaGridDependencySynchronize() (2.28.0-2.30.6): "
                             "after a kernel that triggers its dependents early on the same stream they can read their input before it "
                             "is written";
  std::string v = setting != nullptr ? setting : "";
  if (v != "" && v != "auto" && v != "on" && v != "off") {
    out.ignored_setting = true;
    v = "auto";
  }
  const std::string ignored = out.ignored_setting ? std::string(" (NCCLPOOL_SYMMETRIC_KERNELS='") + setting + "' is not auto, on or off: ignored)" : "";
  if (v == "off") {
    out.enabled = false;
    out.why = "off: NCCLPOOL_SYMMETRIC_KERNELS=off (windows are registered without NCCL_WIN_COLL_SYMMETRIC)";
  } else if (v == "on") {
    out.why = out.hazard ? "on: NCCLPOOL_SYMMETRIC_KERNELS=on, although " + hazard : "on: NCCLPOOL_SYMMETRIC_KERNELS=on";
  } else if (out.hazard) {
    out.enabled = false;
    out.why = "off: " + hazard + "; windows are registered without NCCL_WIN_COLL_SYMMETRIC (zero-copy, NCCL's ring kernels) and auto " +
              "pools route no size to windows. Use NCCL >= 2.30.7, or NCCLPOOL_SYMMETRIC_KERNELS=on where no kernel before a " +
              "collective on its stream triggers early (docs/python.md, \"NCCL versions\")" + ignored;
  } else {
    out.why = "on: NCCL " + version_text(nccl_version) + " has no known hazard with them on this GPU and driver" + ignored;
  }
  return out;
}

SymmetricKernels apply_symmetric_kernels(int nccl_version, int cc_major, int driver_version) {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  g_decided = choose_symmetric_kernels(environment::symmetric_kernels(), nccl_version, cc_major, driver_version);
  if (g_decided.ignored_setting || (!g_decided.enabled && g_decided.hazard))
    std::fprintf(stderr, "ncclpool: symmetric kernels %s\n", g_decided.why.c_str());
  return g_decided;
}

SymmetricKernels symmetric_kernels() {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  SymmetricKernels undecided;
  undecided.why = "not decided yet: decided at the process's first symmetric attach of an NCCL communicator";
  return undecided;
}

}  // namespace ncclpool

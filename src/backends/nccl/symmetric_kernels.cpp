// Whether windows carry NCCL_WIN_COLL_SYMMETRIC and whether collectives on them are fenced (see
// SymmetricKernels in nccl.hpp), the fence's policy (choose_symmetric_fence) and the process's fence
// state (fence_state.hpp). No NCCL or CUDA needed: built in every configuration, so that the policy
// is tested on machines without GPUs; the NCCL communicator applies it with its NCCL version,
// compute capability and driver version, and symmetric_fence (fence.cpp) launches what it says.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

#include "core/environment.hpp"
#include "fence_state.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace ncclpool {
namespace {

std::string version_text(int v) { return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100); }

std::mutex g_mutex;
SymmetricKernels g_decided;  // guarded by g_mutex; decided once per process
bool g_declared = false;     // guarded by g_mutex: prefer_symmetric_fence was called

// The first NCCL whose communicators carry their own graph-mixing setting (ncclConfig_t.graphUsageMode).
constexpr int kNcclFirstWithGraphUsageMode = 22900;

}  // namespace

namespace nccl {
FenceState& fence_state() noexcept {
  static FenceState state;
  return state;
}
}  // namespace nccl

bool symmetric_kernels_hazard(int nccl_version, int cc_major, int driver_version) noexcept {
  // 2.28.0 dropped the sync from the symmetric kernels; 2.30.7 restored it. PDL needs sm_90 and 12.3.
  return nccl_version >= 22800 && nccl_version < 23007 && cc_major >= 9 && driver_version >= 12030;
}

SymmetricKernels choose_symmetric_kernels(const char* setting, int nccl_version, int cc_major, int driver_version, bool fence_declared) {
  SymmetricKernels out;
  out.decided = true;
  out.nccl_version = nccl_version;
  out.fence_declared = fence_declared;
  out.hazard = symmetric_kernels_hazard(nccl_version, cc_major, driver_version);
  // Texts kept under ncclpool_features_t's 512 bytes for `why`.
  const std::string hazard = "NCCL " + version_text(nccl_version) +
                             "'s symmetric kernels (2.28.0-2.30.6) use PDL without cudaGridDependencySynchronize(): after a kernel that "
                             "triggers its dependents early they can read their input before it is written";
  std::string v = setting != nullptr ? setting : "";
  if (v != "" && v != "auto" && v != "on" && v != "off" && v != "fence") {
    out.ignored_setting = true;
    v = "auto";
  }
  const std::string ignored = out.ignored_setting ? std::string(" (NCCLPOOL_SYMMETRIC_KERNELS='") + setting + "': not auto, on, off or fence: ignored)" : "";
  if (v == "off") {
    out.enabled = false;
    out.decision = "off";
    out.why = "off: NCCLPOOL_SYMMETRIC_KERNELS=off (windows are registered without NCCL_WIN_COLL_SYMMETRIC)";
  } else if (v == "on") {
    out.why = out.hazard ? "on: NCCLPOOL_SYMMETRIC_KERNELS=on, unfenced, although " + hazard : "on: NCCLPOOL_SYMMETRIC_KERNELS=on";
  } else if (out.hazard && (v == "fence" || fence_declared)) {
    out.fence = true;
    out.decision = "fence";
    out.why = "fence: " + hazard + "; windows carry NCCL_WIN_COLL_SYMMETRIC and every collective on them that ncclpool launches or wraps " +
              "follows a fence (NCCLPOOL_SYMMETRIC_FENCE); others call ncclpool_symmetric_fence first (" +
              (v == "fence" ? "NCCLPOOL_SYMMETRIC_KERNELS=fence)" : "auto, the fence declared)") + ignored;
  } else if (out.hazard) {
    out.enabled = false;
    out.decision = "guard";
    out.why = "guard: " + hazard + "; windows go without NCCL_WIN_COLL_SYMMETRIC, auto pools route no size to windows. " +
              "NCCL >= 2.30.7, NCCLPOOL_SYMMETRIC_KERNELS=fence|on, or ncclpool_prefer_symmetric_fence (ncclpool.torch calls it) " +
              "change it (docs/python.md)" + ignored;
  } else {
    out.why = "on: NCCL " + version_text(nccl_version) + " has no known hazard with them on this GPU and driver" +
              (v == "fence" ? std::string(": no fence needed (NCCLPOOL_SYMMETRIC_KERNELS=fence)") : std::string()) + ignored;
  }
  return out;
}

SymmetricKernels apply_symmetric_kernels(int nccl_version, int cc_major, int driver_version) {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  g_decided = choose_symmetric_kernels(environment::symmetric_kernels(), nccl_version, cc_major, driver_version, g_declared);
  nccl::FenceState& state = nccl::fence_state();
  state.kind.store(static_cast<int>(choose_symmetric_fence_kind(environment::symmetric_fence())));
  state.active.store(g_decided.fence);
  if (g_decided.ignored_setting || (!g_decided.enabled && g_decided.hazard))
    std::fprintf(stderr, "ncclpool: symmetric kernels %s\n", g_decided.why.c_str());
  return g_decided;
}

SymmetricKernels symmetric_kernels() {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  SymmetricKernels undecided;
  undecided.fence_declared = g_declared;
  undecided.why = "not decided yet: decided at the process's first symmetric attach of an NCCL communicator";
  return undecided;
}

void prefer_symmetric_fence() {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided && g_decided.decision == "guard")
    throw InvalidState("the fence was declared (ncclpool_prefer_symmetric_fence) after this process decided its symmetric kernels at its "
                       "first symmetric attach: " + g_decided.why + ". Declare it before the first attach (import ncclpool.torch and call "
                       "init() first), or set NCCLPOOL_SYMMETRIC_KERNELS on every rank");
  g_declared = true;
}

bool symmetric_fence_declared() noexcept {
  std::lock_guard lock(g_mutex);
  return g_declared;
}

const char* to_string(SymmetricFenceKind kind) noexcept {
  return kind == SymmetricFenceKind::memset ? "memset" : kind == SymmetricFenceKind::node ? "node" : "kernel";
}

SymmetricFenceKind choose_symmetric_fence_kind(const char* setting, bool* ignored) {
  const std::string v = setting != nullptr ? setting : "";
  if (ignored != nullptr) *ignored = !v.empty() && v != "kernel" && v != "memset" && v != "node";
  // node by default: eagerly the kernel, in a capture an empty node, which costs no launch (measured
  // in decode/graph at 4x H200: 0.94-1.00 of the unfenced kernels where the kernel fence was 0.80-0.99).
  return v == "memset" ? SymmetricFenceKind::memset : v == "kernel" ? SymmetricFenceKind::kernel : SymmetricFenceKind::node;
}

SymmetricFenceKind symmetric_fence_kind() {
  {
    std::lock_guard lock(g_mutex);
    if (g_decided.decided) return static_cast<SymmetricFenceKind>(nccl::fence_state().kind.load());
  }
  return choose_symmetric_fence_kind(environment::symmetric_fence());
}

SymmetricFenceStep choose_symmetric_fence(const SymmetricKernels& kernels, bool capturing, const char* graph_mixing_support) noexcept {
  if (!kernels.decided || !kernels.fence) return {false, "no fence: the decision is not `fence`"};
  if (!capturing) return {true, "fence: a collective on windows, enqueued eagerly"};
  if (kernels.nccl_version >= kNcclFirstWithGraphUsageMode)
    return {true, "fence: in a capture, NCCL >= 2.29 (a communicator's graphUsageMode can turn graph mixing off unseen)"};
  // NCCL reads the variable with strtoll(value, nullptr, 0): a set value that parses to 0 (any text
  // without a leading number included) turns mixing off; an out-of-range one keeps the default (on).
  bool mixing = true;
  if (graph_mixing_support != nullptr && *graph_mixing_support != '\0') {
    errno = 0;
    const long long v = std::strtoll(graph_mixing_support, nullptr, 0);
    mixing = errno != 0 || v != 0;
  }
  if (mixing) return {false, "no fence: in a capture, NCCL < 2.29 with graph mixing on adds an event-wait node before its kernel"};
  return {true, "fence: in a capture with NCCL_GRAPH_MIXING_SUPPORT=0 (no event-wait node before NCCL's kernel)"};
}

SymmetricFenceStats symmetric_fence_stats() noexcept {
  const nccl::FenceState& s = nccl::fence_state();
  return {s.calls.load(std::memory_order_relaxed), s.launched.load(std::memory_order_relaxed), s.skipped_in_capture.load(std::memory_order_relaxed)};
}

}  // namespace ncclpool

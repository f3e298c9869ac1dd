// The symmetric kernels' CTA count (see SymmetricCtas in nccl.hpp). No NCCL or CUDA needed: built in
// every configuration, so that the policy is tested on machines without GPUs; the NCCL communicator
// calls apply_symmetric_ctas with its device's compute capability and the profile its creator looked
// up (NcclCommunicatorOptions::profile_lookup) before registering a window. Reads no files. Also the
// process's declaration that its symmetric collectives overlap compute (prefer_nccl_symmetric_ctas).

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

#include "core/environment.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ncclpool {
namespace {

// NCCL caps NCCL_SYM_CTAS at its largest symmetric launch (ncclSymkMaxBlocks, 64 in 2.27-2.28).
constexpr int kMaxSymmetricCtas = 64;

// Measured defaults, by compute capability major. Hopper (H100/H200): 32, from the decode
// all-reduce and `bench coll` on 2x H200 (docs/benchmarks/decode.md, coll.md), where nothing
// overlaps the collective. In training, where every all-gather and reduce-scatter overlaps compute,
// it cost time at 4 GPUs (fsdp2.md, megatron-fsdp.md): the training layers declare
// prefer_nccl_symmetric_ctas, and the default yields to NCCL's choice there. A GPU not listed keeps
// NCCL's choice.
int measured_default(int cc_major) { return cc_major == 9 ? 32 : 0; }

std::mutex g_mutex;
SymmetricCtas g_decided;          // guarded by g_mutex; decided once per process
bool g_nccl_preferred = false;    // guarded by g_mutex: prefer_nccl_symmetric_ctas was called
bool g_decided_by_default = false; // guarded by g_mutex: g_decided is ncclpool's measured default, which the declaration would have changed

}  // namespace

SymmetricCtas choose_symmetric_ctas(const char* nccl_sym_ctas, const char* ncclpool_sym_ctas, int cc_major, int cc_minor, const ProfileLookup* profile,
                                    bool nccl_ctas_preferred) {
  SymmetricCtas out;
  out.decided = true;
  if (nccl_sym_ctas != nullptr && *nccl_sym_ctas != '\0') {
    errno = 0;
    char* end = nullptr;
    const long v = std::strtol(nccl_sym_ctas, &end, 0);
    out.ctas = (errno == 0 && end != nccl_sym_ctas && v > 0) ? static_cast<int>(v < kMaxSymmetricCtas ? v : kMaxSymmetricCtas) : 0;
    out.source = std::string("NCCL_SYM_CTAS=") + nccl_sym_ctas + " from the environment (left as it is)";
    return out;
  }
  if (ncclpool_sym_ctas != nullptr && *ncclpool_sym_ctas != '\0') {
    const std::string v = ncclpool_sym_ctas;
    if (v == "nccl") {
      out.source = "NCCL's own choice (NCCLPOOL_SYM_CTAS=nccl)";
      return out;
    }
    errno = 0;
    char* end = nullptr;
    const long n = std::strtol(ncclpool_sym_ctas, &end, 10);
    const bool digits_only = v.find_first_not_of("0123456789") == std::string::npos;
    if (!digits_only || errno != 0 || end == ncclpool_sym_ctas || *end != '\0' || n < 1 || n > kMaxSymmetricCtas) {
      out.ignored_setting = true;
      out.source = "NCCL's own choice: NCCLPOOL_SYM_CTAS='" + v + "' is neither 'nccl' nor a count from 1 to " + std::to_string(kMaxSymmetricCtas) + ", ignored";
      return out;
    }
    out.ctas = static_cast<int>(n);
    out.set_by_ncclpool = true;
    out.source = "NCCLPOOL_SYM_CTAS=" + v;
    return out;
  }
  if (profile != nullptr && profile->profile && profile->profile->symmetric_ctas_measured) {
    const Profile& p = *profile->profile;
    out.ctas = p.symmetric_ctas;
    out.set_by_ncclpool = p.symmetric_ctas > 0;
    out.source = (p.symmetric_ctas > 0 ? std::string("the profile ") : std::string("NCCL's own choice, as the profile ")) + profile->path +
                 " (measured " + p.measured + " on " + p.gpu + ", NCCL " + std::to_string(p.nccl_version) + ", " + std::to_string(p.ranks) + " ranks)";
    return out;
  }
  // A profile that exists but does not apply is named; a missing one is the normal case.
  std::string about_profile = profile != nullptr && !profile->why_not.empty() && profile->why_not.rfind("no profile", 0) != 0 ? "; " + profile->why_not : "";
  if (profile != nullptr && profile->profile)  // measured with the symmetric kernels off: no count to take
    about_profile = "; the profile " + profile->path + " measured no count (its runs had the symmetric kernels off)";
  const std::string gpu = "compute capability " + std::to_string(cc_major) + "." + std::to_string(cc_minor);
  if (const int n = measured_default(cc_major); n > 0) {
    if (nccl_ctas_preferred) {  // the declaration: the measured default yields
      // Short: ncclpool_features_t keeps 255 bytes of the source, and a profile's note follows.
      out.source = "NCCL's own choice (overlap declared: ncclpool_prefer_nccl_symmetric_ctas; else " + std::to_string(n) + " for " + gpu + ")" +
                   about_profile;
      return out;
    }
    out.ctas = n;
    out.set_by_ncclpool = true;
    out.source = "ncclpool's default for " + gpu + " (measured on H200; NCCLPOOL_SYM_CTAS=nccl keeps NCCL's choice)" + about_profile;
    return out;
  }
  out.source = "NCCL's own choice: ncclpool has no measured count for " + gpu + about_profile;
  return out;
}

SymmetricCtas apply_symmetric_ctas(int cc_major, int cc_minor, const ProfileLookup* profile) {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  const char* nccl_setting = environment::nccl_sym_ctas();
  const char* ncclpool_setting = environment::ncclpool_sym_ctas();
  SymmetricCtas d = choose_symmetric_ctas(nccl_setting, ncclpool_setting, cc_major, cc_minor, profile, g_nccl_preferred);
  // Whether a later declaration would have changed this decision (only the measured default yields).
  const bool by_default = !g_nccl_preferred && d.set_by_ncclpool &&
                          choose_symmetric_ctas(nccl_setting, ncclpool_setting, cc_major, cc_minor, profile, true).ctas != d.ctas;
  if (d.set_by_ncclpool && !environment::set_nccl_sym_ctas(d.ctas)) {
    d.ctas = 0;
    d.set_by_ncclpool = false;
    d.source = "NCCL's own choice: setting NCCL_SYM_CTAS failed (errno " + std::to_string(errno) + ")";
  }
  if (d.ignored_setting) std::fprintf(stderr, "ncclpool: symmetric kernels' CTAs: %s\n", d.source.c_str());
  g_decided = d;
  g_decided_by_default = by_default && d.set_by_ncclpool;
  return d;
}

SymmetricCtas symmetric_ctas() {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided) return g_decided;
  SymmetricCtas undecided;
  undecided.source = "not decided yet: decided at the process's first symmetric attach of an NCCL communicator";
  return undecided;
}

void prefer_nccl_symmetric_ctas() {
  std::lock_guard lock(g_mutex);
  if (g_decided.decided && g_decided_by_default)
    throw InvalidState("NCCL's own symmetric CTA count was preferred (ncclpool_prefer_nccl_symmetric_ctas) after this process decided its "
                       "count at its first symmetric attach: " + std::to_string(g_decided.ctas) + " CTAs, " + g_decided.source +
                       ". Call it before the first attach (create the FSDP2 helper, ncclpool.torch.fsdp.enable, or call "
                       "ncclpool.torch.megatron.install() first), or set NCCLPOOL_SYM_CTAS=nccl on every rank");
  g_nccl_preferred = true;
}

bool nccl_symmetric_ctas_preferred() noexcept {
  std::lock_guard lock(g_mutex);
  return g_nccl_preferred;
}

}  // namespace ncclpool

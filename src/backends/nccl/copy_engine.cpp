// Whether this rank votes for copy-engine all-gather (see CopyEngineVote in nccl.hpp). No NCCL or
// CUDA needed: built in every configuration, so that the policy is tested on machines without GPUs;
// copy_engine_vote (library.cpp) applies it with the loaded NCCL, the symmetric-kernels decision and
// the caller's profile lookup.

#include <ncclpool/nccl.hpp>

#include <string>

namespace ncclpool {
namespace {

constexpr int kDefaultStreamFixed = 22907;  // copy-engine collectives on the null stream: fixed in 2.29.7 (NCCL #2003)

std::string version_text(int v) { return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100); }

}  // namespace

CopyEngineVote choose_copy_engine(CopyEngineRequest requested, const char* setting, int nccl_version, const SymmetricKernels& kernels,
                                  const ProfileLookup* profile) {
  CopyEngineVote out;
  std::string v = setting != nullptr ? setting : "";
  if (v != "" && v != "auto" && v != "on" && v != "off") {
    out.ignored_setting = true;
    v = "auto";
  }
  const std::string ignored = out.ignored_setting ? std::string(" (NCCLPOOL_COPY_ENGINE='") + setting + "' is not auto, on or off: ignored)" : "";
  if (v == "off") {
    out.why = "off: NCCLPOOL_COPY_ENGINE=off";
    return out;
  }
  if (requested == CopyEngineRequest::off) {
    out.why = "off: not requested (copy_engine=False)" + ignored;
    return out;
  }
  if (nccl_version < kNcclFirstWithCtaPolicy) {
    out.why = nccl_version == 0 ? "off: no NCCL loaded" : "off: NCCL " + version_text(nccl_version) + " has no CTA policy (copy-engine collectives: NCCL >= 2.28)";
    return out;
  }
  if (!kernels.enabled) {
    out.why = "off: symmetric kernels are off in this process (" + kernels.why +
              "); the copy engines need windows with NCCL_WIN_COLL_SYMMETRIC and NCCL falls back to its symmetric kernels where it cannot "
              "use them" + ignored;
    return out;
  }
  const std::string caveat = nccl_version < kDefaultStreamFixed
                                 ? " (NCCL " + version_text(nccl_version) + " fails copy-engine collectives on the default stream: run them on a side stream or async)"
                                 : "";
  if (requested == CopyEngineRequest::on || v == "on") {
    out.use = true;
    out.why = std::string("on: ") + (requested == CopyEngineRequest::on ? "requested (copy_engine=True)" : "NCCLPOOL_COPY_ENGINE=on") + caveat + ignored;
    return out;
  }
  if (profile != nullptr && profile->profile && profile->profile->copy_engine_all_gather) {
    out.use = true;
    out.why = "on: this machine's profile (" + profile->path + ") measured copy-engine all-gather faster with compute beside" + caveat + ignored;
    return out;
  }
  if (profile != nullptr && profile->profile)
    out.why = "off: this machine's profile (" + profile->path + ") did not measure copy-engine all-gather faster" + ignored;
  else
    out.why = "off by default: no profile of this machine says copy-engine all-gather is faster" +
              (profile != nullptr && !profile->why_not.empty() ? " (" + profile->why_not + ")" : std::string()) + "; copy_engine=True or NCCLPOOL_COPY_ENGINE=on to use it" + ignored;
  return out;
}

}  // namespace ncclpool

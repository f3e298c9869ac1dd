// Status codes, the thread-local last error, version and feature queries.

#include "handles.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>

#include "core/node.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace ncclpool::capi {
namespace {
thread_local std::string last_message;
thread_local ncclpool_status_t last_code = NCCLPOOL_SUCCESS;
}  // namespace

ncclpool_status_t fail(ncclpool_status_t status, const std::string& message) noexcept {
  last_code = status;
  try {
    last_message = message;
  } catch (...) {
    last_message.clear();  // out of host memory: the status still tells
  }
  return status;
}

}  // namespace ncclpool::capi

using ncclpool::capi::guarded;
using ncclpool::capi::require;

extern "C" {

const char* ncclpool_status_string(ncclpool_status_t status) {
  switch (status) {
    case NCCLPOOL_SUCCESS: return "success";
    case NCCLPOOL_ERROR_INTERNAL: return "internal_error";
    default:
      if (status >= NCCLPOOL_ERROR_INVALID_ARGUMENT && status <= NCCLPOOL_ERROR_AGREEMENT)
        return ncclpool::to_string(static_cast<ncclpool::ErrorCode>(status));
      return "unknown_status";
  }
}

const char* ncclpool_last_error(void) { return ncclpool::capi::last_message.c_str(); }
ncclpool_status_t ncclpool_last_status(void) { return ncclpool::capi::last_code; }
void ncclpool_clear_last_error(void) {
  ncclpool::capi::last_code = NCCLPOOL_SUCCESS;
  ncclpool::capi::last_message.clear();
}

int ncclpool_version(void) { return NCCLPOOL_VERSION_MAJOR * 10000 + NCCLPOOL_VERSION_MINOR * 100 + NCCLPOOL_VERSION_PATCH; }

const char* ncclpool_version_string(void) {
#define NCCLPOOL_STR2(x) #x
#define NCCLPOOL_STR(x) NCCLPOOL_STR2(x)
  return NCCLPOOL_STR(NCCLPOOL_VERSION_MAJOR) "." NCCLPOOL_STR(NCCLPOOL_VERSION_MINOR) "." NCCLPOOL_STR(NCCLPOOL_VERSION_PATCH);
#undef NCCLPOOL_STR
#undef NCCLPOOL_STR2
}

ncclpool_status_t ncclpool_get_features(ncclpool_features_t* features) {
  return guarded("ncclpool_get_features", [&] {
    require(features, "features");
    constexpr std::size_t kFirstSize = offsetof(ncclpool_features_t, symmetric_ctas_decided);  // the struct before the CTA fields
    const std::size_t size = features->struct_size;
    if (size < kFirstSize)
      throw ncclpool::InvalidArgument("features->struct_size is " + std::to_string(size) + ", expected at least " + std::to_string(kFirstSize) +
                                      " (set it to sizeof(ncclpool_features_t))");
    ncclpool_features_t out{};
#if defined(NCCLPOOL_HAVE_CUDA)
    out.built_with_cuda = 1;
#endif
    std::string cuda_why;
    out.cuda_available = ncclpool::cuda_available(&cuda_why) ? 1 : 0;
    out.cuda_device_count = ncclpool::cuda_device_count();
    const ncclpool::NcclInfo nccl = ncclpool::nccl_info();
    out.nccl_available = nccl.available ? 1 : 0;
    out.nccl_version = nccl.version;
    out.nccl_windows = nccl.windows ? 1 : 0;
    out.nccl_reused_loaded = nccl.reused_loaded ? 1 : 0;
    auto copy = [](char* dst, std::size_t cap, const std::string& src) {
      std::size_t n = std::min(cap - 1, src.size());
      if (n < src.size())  // cut before a whole UTF-8 character, never inside one (a profile's path may be any)
        while (n > 0 && (static_cast<unsigned char>(src[n]) & 0xC0) == 0x80) --n;
      std::memcpy(dst, src.data(), n);
      dst[n] = '\0';
    };
    copy(out.nccl_library, sizeof out.nccl_library, nccl.library_path);
    std::string why;
    if (!out.cuda_available) why = "CUDA: " + cuda_why;
    if (!nccl.available) why += (why.empty() ? "" : "; ") + std::string("NCCL: ") + nccl.why_not;
    copy(out.why_not, sizeof out.why_not, why);
    const ncclpool::SymmetricCtas ctas = ncclpool::symmetric_ctas();
    out.symmetric_ctas_decided = ctas.decided ? 1 : 0;
    out.symmetric_ctas = ctas.ctas;
    copy(out.symmetric_ctas_source, sizeof out.symmetric_ctas_source, ctas.source);
    const ncclpool::SymmetricKernels kernels = ncclpool::symmetric_kernels_on(0);
    out.symmetric_kernels_decided = kernels.decided ? 1 : 0;
    out.symmetric_kernels_enabled = kernels.enabled ? 1 : 0;
    out.symmetric_kernels_hazard = kernels.hazard ? 1 : 0;
    copy(out.symmetric_kernels_why, sizeof out.symmetric_kernels_why, kernels.why);
    copy(out.symmetric_kernels_decision, sizeof out.symmetric_kernels_decision, kernels.decision);
    out.symmetric_fence_declared = ncclpool::symmetric_fence_declared() ? 1 : 0;
    copy(out.symmetric_fence_kind, sizeof out.symmetric_fence_kind, ncclpool::to_string(ncclpool::symmetric_fence_kind()));
    const ncclpool::SymmetricFenceStats fences = ncclpool::symmetric_fence_stats();
    out.symmetric_fence_calls = fences.calls;
    out.symmetric_fences_launched = fences.launched;
    out.symmetric_fences_skipped_in_capture = fences.skipped_in_capture;
    out.symmetric_ctas_nccl_preferred = ncclpool::nccl_symmetric_ctas_preferred() ? 1 : 0;
    out.nccl_other_copies = static_cast<int>(nccl.other_copies.size());
    if (!nccl.other_copies.empty()) {
      out.nccl_other_version = nccl.other_copies.front().version;
      copy(out.nccl_other_library, sizeof out.nccl_other_library, nccl.other_copies.front().path);
    }
    out.struct_size = std::min(size, sizeof out);
    std::memcpy(features, &out, out.struct_size);  // a caller's older, smaller struct gets its fields only
  });
}

ncclpool_status_t ncclpool_copy_engine_vote(int requested, int device, int ranks, int* use, char* why, size_t why_size) {
  return guarded("ncclpool_copy_engine_vote", [&] {
    require(use, "use");
    if (why == nullptr && why_size != 0) throw ncclpool::InvalidArgument("why is NULL with why_size " + std::to_string(why_size));
    if (requested < -1 || requested > 1) throw ncclpool::InvalidArgument("requested is " + std::to_string(requested) + ": -1 (auto), 0 (off) or 1 (on)");
    if (device < 0) throw ncclpool::InvalidArgument("device is " + std::to_string(device));
    if (ranks < 1) throw ncclpool::InvalidArgument("ranks is " + std::to_string(ranks) + ", at least 1");
    const ncclpool::CopyEngineVote vote =
        ncclpool::copy_engine_vote(static_cast<ncclpool::CopyEngineRequest>(requested), device, ranks,
                                   [](const ncclpool::MachineKey& m) { return ncclpool::find_profile(m.gpu, m.nccl_version, m.ranks); });
    *use = vote.use ? 1 : 0;
    if (why_size != 0) {
      const std::size_t n = std::min(why_size - 1, vote.why.size());
      std::memcpy(why, vote.why.data(), n);
      why[n] = '\0';
    }
  });
}

ncclpool_status_t ncclpool_node_id(uint64_t* node) {
  return guarded("ncclpool_node_id", [&] {
    require(node, "node");
    *node = ncclpool::detail::process_node();
  });
}

}  // extern "C"

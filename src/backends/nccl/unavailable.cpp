// Built instead of the NCCL backend when cuda.h / nccl.h were not found at build time.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

#include "fence_state.hpp"

namespace ncclpool {

namespace {
const char* const kWhy = "ncclpool was built without the CUDA toolkit headers (cuda.h, nccl.h)";
}

NcclInfo nccl_info() {
  NcclInfo info;
  info.why_not = kWhy;
  return info;
}
SymmetricKernels symmetric_kernels_on(int, bool) {
  SymmetricKernels out;
  out.enabled = false;
  out.decision = "off";
  out.why = kWhy;
  return out;
}
CopyEngineVote copy_engine_vote(CopyEngineRequest, int, int, const std::function<ProfileLookup(const MachineKey&)>&) {
  CopyEngineVote out;
  out.why = std::string("off: ") + kWhy;
  return out;
}
// No NCCL backend: no attach can decide `fence`, so there is never a fence to launch (counted).
bool symmetric_fence(::CUstream_st*) {
  nccl::fence_state().calls.fetch_add(1, std::memory_order_relaxed);
  return false;
}
std::shared_ptr<Communicator> make_nccl_communicator(void*, NcclCommunicatorOptions) { throw Unsupported(kWhy); }
std::shared_ptr<SegmentSource> make_nccl_source(int) { throw Unsupported(kWhy); }

}  // namespace ncclpool

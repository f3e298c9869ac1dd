// Built instead of the NCCL backend when cuda.h / nccl.h were not found at build time.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

namespace ncclpool {

namespace {
const char* const kWhy = "ncclpool was built without the CUDA toolkit headers (cuda.h, nccl.h)";
}

NcclInfo nccl_info() {
  NcclInfo info;
  info.why_not = kWhy;
  return info;
}
SymmetricKernels symmetric_kernels_on(int) {
  SymmetricKernels out;
  out.enabled = false;
  out.why = kWhy;
  return out;
}
CopyEngineVote copy_engine_vote(CopyEngineRequest, int, int, const std::function<ProfileLookup(const MachineKey&)>&) {
  CopyEngineVote out;
  out.why = std::string("off: ") + kWhy;
  return out;
}
std::shared_ptr<Communicator> make_nccl_communicator(void*, NcclCommunicatorOptions) { throw Unsupported(kWhy); }
std::shared_ptr<SegmentSource> make_nccl_source(int) { throw Unsupported(kWhy); }

}  // namespace ncclpool

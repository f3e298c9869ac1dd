// Built instead of the CUDA backend when cuda.h was not found at build time.

#include <ncclpool/cuda.hpp>
#include <ncclpool/errors.hpp>

namespace ncclpool {

namespace {
const char* const kWhy = "ncclpool was built without the CUDA headers (cuda.h); rebuild with the CUDA toolkit installed";
}

bool cuda_available(std::string* why) {
  if (why) *why = kWhy;
  return false;
}
int cuda_device_count() noexcept { return 0; }
std::shared_ptr<SegmentSource> make_cuda_source(int) { throw Unsupported(kWhy); }
std::shared_ptr<SegmentSource> make_vmm_source(const VmmSourceOptions&) { throw Unsupported(kWhy); }

}  // namespace ncclpool

// C ABI: the symmetric fence (nccl.hpp, SymmetricKernels and symmetric_fence): the process's
// declaration that its collectives on windows follow the fence, and the fence itself. Beside it the
// process's other declaration about its symmetric kernels: that its symmetric collectives overlap
// compute, so NCCL's own CTA count is preferred (SymmetricCtas, prefer_nccl_symmetric_ctas).

#include "handles.hpp"

#include <ncclpool/nccl.hpp>

using ncclpool::capi::guarded;

extern "C" {

ncclpool_status_t ncclpool_prefer_symmetric_fence(void) {
  return guarded("ncclpool_prefer_symmetric_fence", [] { ncclpool::prefer_symmetric_fence(); });
}

ncclpool_status_t ncclpool_prefer_nccl_symmetric_ctas(void) {
  return guarded("ncclpool_prefer_nccl_symmetric_ctas", [] { ncclpool::prefer_nccl_symmetric_ctas(); });
}

ncclpool_status_t ncclpool_symmetric_fence(void* stream, int* launched) {
  if (launched != nullptr) *launched = 0;
  return guarded("ncclpool_symmetric_fence", [&] {
    const bool done = ncclpool::symmetric_fence(static_cast<::CUstream_st*>(stream));
    if (launched != nullptr) *launched = done ? 1 : 0;
  });
}

}  // extern "C"

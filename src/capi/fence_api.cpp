// C ABI: the symmetric fence (nccl.hpp, SymmetricKernels and symmetric_fence): the process's
// declaration that its collectives on windows follow the fence, and the fence itself.

#include "handles.hpp"

#include <ncclpool/nccl.hpp>

using ncclpool::capi::guarded;

extern "C" {

ncclpool_status_t ncclpool_prefer_symmetric_fence(void) {
  return guarded("ncclpool_prefer_symmetric_fence", [] { ncclpool::prefer_symmetric_fence(); });
}

ncclpool_status_t ncclpool_symmetric_fence(void* stream, int* launched) {
  if (launched != nullptr) *launched = 0;
  return guarded("ncclpool_symmetric_fence", [&] {
    const bool done = ncclpool::symmetric_fence(static_cast<::CUstream_st*>(stream));
    if (launched != nullptr) *launched = done ? 1 : 0;
  });
}

}  // extern "C"

#pragma once
// The CUDA driver as the tools, benches and GPU tests see it: the library's table
// (src/backends/cuda/driver.hpp, loaded once, in libncclpool) plus the entry points only they call
// (driver memory pools, graphs, copies and memsets, kernels from PTX, peer queries), resolved from
// the library's libcuda handle. The library's own table stays the list of what the library calls.

#include "backends/cuda/driver.hpp"

namespace ncclpool::tool {

#define NCCLPOOL_BENCH_CUDA_FUNCTIONS(X)                                                             \
  X(cuStreamSynchronize) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemsetD8_v2)                       \
  X(cuMemsetD32Async) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphDestroy)              \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuMemPoolCreate)            \
  X(cuMemPoolDestroy) X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo) X(cuMemAllocFromPoolAsync)          \
  X(cuMemFreeAsync) X(cuDeviceGetP2PAttribute) X(cuDeviceGetPCIBusId) X(cuFuncSetAttribute)           \
  X(cuCtxGetStreamPriorityRange) X(cuStreamCreateWithPriority)
// cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel and cuMemsetD8Async are the
// library's own (its symmetric fence: src/backends/cuda/fence.cpp), in the table above.

// A copy of the library's table (its function pointers: the state stays the library's) with the
// benches' entry points after it.
struct BenchDriver : cuda::Driver {
#define NCCLPOOL_DECLARE_BENCH_FN(name) decltype(&::name) name = nullptr;
  NCCLPOOL_BENCH_CUDA_FUNCTIONS(NCCLPOOL_DECLARE_BENCH_FN)
#undef NCCLPOOL_DECLARE_BENCH_FN
  // cuEventElapsedTime_v2 where the driver has it (CUDA >= 12.8), else cuEventElapsedTime.
  decltype(&::cuEventElapsedTime) event_elapsed_time = nullptr;
};

// The loaded driver with the benches' entry points. Throws Unsupported with the reason when there
// is no driver or it lacks one of them.
const BenchDriver& bench_driver();

}  // namespace ncclpool::tool

#pragma once
// The CUDA driver API, loaded at run time from libcuda.so.1 (dlopen), so that libncclpool links and
// runs on machines without a GPU. Only the entry points ncclpool uses are resolved. cuda.h supplies
// the types and prototypes; nothing links against libcuda.

#include <ncclpool/errors.hpp>

#include <cuda.h>

#include <string>

namespace ncclpool::cuda {

#define NCCLPOOL_CUDA_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)         \
  X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease_v2) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxSynchronize)     \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemGetInfo_v2) X(cuMemGetAllocationGranularity)          \
  X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap)         \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)        \
  X(cuEventQuery) X(cuEventSynchronize) X(cuStreamWaitEvent) X(cuStreamIsCapturing)             \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize) X(cuStreamQuery) X(cuMemcpyHtoD_v2)             \
  X(cuMemcpyDtoH_v2) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuGetErrorName) X(cuGetErrorString)     \
  X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphDestroy) X(cuMemsetD32Async)                 \
  X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo)                    \
  X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuDeviceCanAccessPeer) X(cuDeviceGetP2PAttribute)      \
  X(cuDeviceGetPCIBusId) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) \
  X(cuMemHostGetDevicePointer_v2) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) \
  X(cuPointerGetAttribute)

struct Driver {
#define NCCLPOOL_DECLARE_FN(name) decltype(&::name) name = nullptr;
  NCCLPOOL_CUDA_FUNCTIONS(NCCLPOOL_DECLARE_FN)
#undef NCCLPOOL_DECLARE_FN
  int version = 0;  // cuDriverGetVersion, e.g. 13000
  std::string library_path;
};

// The loaded driver (cuInit done). Throws Unsupported with the reason when there is none.
const Driver& driver();
// Same, without throwing: nullptr and `why` when unavailable.
const Driver* try_driver(std::string* why) noexcept;

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
std::string error_text(CUresult result);

// Throws BackendError (OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY) naming `what` when result != 0.
void check(CUresult result, const std::string& what);

// Makes `context` current for a scope, restoring the previous one (no-op when already current).
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// A retained primary context of a device (what the CUDA runtime and PyTorch use).
class PrimaryContext {
 public:
  explicit PrimaryContext(int device);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  [[nodiscard]] CUcontext get() const noexcept { return context_; }
  [[nodiscard]] CUdevice device() const noexcept { return device_; }
  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }

 private:
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

}  // namespace ncclpool::cuda

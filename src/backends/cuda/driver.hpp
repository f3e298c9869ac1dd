#pragma once
// The CUDA driver API, loaded at run time from libcuda.so.1 (dlopen), so that libncclpool links and
// runs on machines without a GPU. Only the entry points ncclpool uses are resolved. cuda.h supplies
// the types and prototypes; nothing links against libcuda. Internal: compiled into libncclpool only
// and exported (NCCLPOOL_INTERNAL) for ncclpool's tools, benches and tests, which share this loader.

#include <ncclpool/errors.hpp>
#include <ncclpool/export.hpp>

#include <cuda.h>

#include <string>

namespace ncclpool::cuda {

// The entry points the library calls. The tools, benches and GPU tests call more through their own
// table (tools/ncclpool/bench_driver.hpp), resolved from the same libcuda handle.
#define NCCLPOOL_CUDA_FUNCTIONS(X)                                                              \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)         \
  X(cuDeviceTotalMem_v2) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                    \
  X(cuDevicePrimaryCtxRelease_v2) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxSynchronize)     \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemGetInfo_v2) X(cuMemGetAllocationGranularity)          \
  X(cuMemCreate) X(cuMemRelease) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap)         \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)        \
  X(cuEventQuery) X(cuEventSynchronize) X(cuStreamWaitEvent) X(cuStreamIsCapturing) X(cuThreadExchangeStreamCaptureMode)             \
  X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamQuery) X(cuGetErrorName) X(cuGetErrorString) \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2)             \
  X(cuMemHostGetDevicePointer_v2) X(cuPointerGetAttribute) X(cuStreamGetCtx) X(cuModuleLoadData)  \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemsetD8Async)

// Optional: nullptr where the driver lacks them (older than CUDA 12.3); their callers fall back. The
// versioned names, as cuda.h's macros name them (dlsym takes the name as written). Headers older than
// 12.3 declare none of them: the table then has none, and the node fence is the kernel.
#if CUDA_VERSION >= 12030
#define NCCLPOOL_CUDA_OPTIONAL_FUNCTIONS(X) \
  X(cuStreamGetCaptureInfo_v3) X(cuStreamUpdateCaptureDependencies_v2) X(cuGraphAddEmptyNode)
#else
#define NCCLPOOL_CUDA_OPTIONAL_FUNCTIONS(X)
#endif

struct Driver {
#define NCCLPOOL_DECLARE_FN(name) decltype(&::name) name = nullptr;
  NCCLPOOL_CUDA_FUNCTIONS(NCCLPOOL_DECLARE_FN)
  NCCLPOOL_CUDA_OPTIONAL_FUNCTIONS(NCCLPOOL_DECLARE_FN)
#undef NCCLPOOL_DECLARE_FN
  int version = 0;  // cuDriverGetVersion, e.g. 13000
  std::string library_path;
  void* handle = nullptr;  // dlopen's handle of libcuda.so.1: the tools resolve their own entry points from it
};

// The loaded driver (cuInit done). Throws Unsupported with the reason when there is none.
NCCLPOOL_INTERNAL const Driver& driver();
// Same, without throwing: nullptr and `why` when unavailable.
NCCLPOOL_INTERNAL const Driver* try_driver(std::string* why) noexcept;

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
NCCLPOOL_INTERNAL std::string error_text(CUresult result);

// Throws BackendError (OutOfMemory for CUDA_ERROR_OUT_OF_MEMORY) naming `what` when result != 0.
NCCLPOOL_INTERNAL void check(CUresult result, const std::string& what);

// Makes `context` current for a scope, restoring the previous one (no-op when already current).
class NCCLPOOL_INTERNAL ScopedContext {
 public:
  explicit ScopedContext(CUcontext context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// Puts the calling thread in relaxed stream-capture mode for a scope (cuThreadExchangeStreamCaptureMode),
// restoring its mode after: a collective step the program makes outside any capture of its own may
// run while another thread captures a graph in global mode, which would otherwise refuse this thread's
// "unsafe" calls (event queries, NCCL's launch) or be broken by them. Never throws.
class NCCLPOOL_INTERNAL RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept {
    if (const Driver* d = try_driver(nullptr); d && d->cuThreadExchangeStreamCaptureMode && d->cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS)
      driver_ = d;
  }
  ~RelaxedCaptureMode() {
    if (driver_) driver_->cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  const Driver* driver_ = nullptr;
};

// A retained primary context of a device (what the CUDA runtime and PyTorch use).
class NCCLPOOL_INTERNAL PrimaryContext {
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

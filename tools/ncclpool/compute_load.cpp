// The compute load (compute_load.hpp): the PTX kernel, the driver entry points only it needs, the
// calibration.

#include "compute_load.hpp"
#include "compute_load_ptx.hpp"

#include "backends/cuda/driver.hpp"

#include <ncclpool/errors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <dlfcn.h>

namespace ncclpool::tool {

// Entry points the library does not use, resolved here so that the library keeps needing only its
// own (cuEventElapsedTime_v2 came with CUDA 12.8's driver; a library user's older driver must not
// fail for a benchmark's sake). The library has loaded libcuda already (RTLD_GLOBAL).
struct ComputeLoad::Api {
  decltype(&::cuModuleLoadData) module_load = nullptr;
  decltype(&::cuModuleUnload) module_unload = nullptr;
  decltype(&::cuModuleGetFunction) get_function = nullptr;
  decltype(&::cuFuncSetAttribute) set_attribute = nullptr;
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuEventElapsedTime) elapsed = nullptr;
  decltype(&::cuCtxGetStreamPriorityRange) priority_range = nullptr;
  decltype(&::cuStreamCreateWithPriority) create_stream = nullptr;

  static const Api& get() {
    static const Api api = resolve();
    return api;
  }

 private:
  static Api resolve() {
    (void)cuda::driver();  // loads libcuda, or throws Unsupported saying why
    void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) throw Unsupported("the compute load: libcuda.so.1 is not loaded");
    Api a;
    auto find = [handle](const char* name) {
      void* f = ::dlsym(handle, name);
      if (f == nullptr) throw Unsupported(std::string("the compute load needs ") + name + " (CUDA driver too old)");
      return f;
    };
    a.module_load = reinterpret_cast<decltype(a.module_load)>(find("cuModuleLoadData"));
    a.module_unload = reinterpret_cast<decltype(a.module_unload)>(find("cuModuleUnload"));
    a.get_function = reinterpret_cast<decltype(a.get_function)>(find("cuModuleGetFunction"));
    a.set_attribute = reinterpret_cast<decltype(a.set_attribute)>(find("cuFuncSetAttribute"));
    a.launch_kernel = reinterpret_cast<decltype(a.launch_kernel)>(find("cuLaunchKernel"));
    a.priority_range = reinterpret_cast<decltype(a.priority_range)>(find("cuCtxGetStreamPriorityRange"));
    a.create_stream = reinterpret_cast<decltype(a.create_stream)>(find("cuStreamCreateWithPriority"));
    void* elapsed = ::dlsym(handle, "cuEventElapsedTime_v2");
    a.elapsed = reinterpret_cast<decltype(a.elapsed)>(elapsed != nullptr ? elapsed : find("cuEventElapsedTime"));
    ::dlclose(handle);  // drops the reference NOLOAD took; the library's stays
    return a;
  }
};

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kIters = 256;  // FMA steps per thread: a block runs for a few microseconds
// As a GEMM tile does, a block holds a large share of its SM's shared memory (two fit on an H100 or
// H200 SM): an SM that runs a collective's CTA has room for fewer of them.
constexpr unsigned kSharedBytes = 96 * 1024;
constexpr int kCalibrationWaves = 16;

}  // namespace

ComputeLoad::ComputeLoad(CUdevice device, CUstream stream) : api_(&Api::get()) {
  const cuda::Driver& d = cuda::driver();
  CUcontext context = nullptr;
  cuda::check(d.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context == nullptr) throw InvalidArgument("the compute load needs a current CUDA context");
  if (CUresult r = api_->module_load(&module_, kComputeLoadPtx); r != CUDA_SUCCESS)
    throw Unsupported("the compute load: the driver could not JIT-compile its PTX: " + cuda::error_text(r));
  try {
    cuda::check(api_->get_function(&function_, module_, "ncclpool_compute_load"), "cuModuleGetFunction");
    cuda::check(d.cuDeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute");
    shared_bytes_ = api_->set_attribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(kSharedBytes)) == CUDA_SUCCESS ? kSharedBytes : 0;
    cuda::check(d.cuMemAlloc_v2(&out_, kThreads * sizeof(float)), "cuMemAlloc");
    int least = 0, greatest = 0;
    cuda::check(api_->priority_range(&least, &greatest), "cuCtxGetStreamPriorityRange");
    cuda::check(api_->create_stream(&priority_stream_, CU_STREAM_NON_BLOCKING, greatest), "cuStreamCreateWithPriority");
    // Calibration: enough waves that the launch's own cost is small; once to warm up, once timed.
    const unsigned blocks = static_cast<unsigned>(sms_) * 2 * kCalibrationWaves;
    CUevent start = nullptr, end = nullptr;
    cuda::check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    struct Events {
      const cuda::Driver& d;
      CUevent& a;
      CUevent& b;
      ~Events() {
        if (a) d.cuEventDestroy_v2(a);
        if (b) d.cuEventDestroy_v2(b);
      }
    } events{d, start, end};
    cuda::check(d.cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
    enqueue(blocks, stream);
    cuda::check(d.cuEventRecord(start, stream), "cuEventRecord");
    enqueue(blocks, stream);
    cuda::check(d.cuEventRecord(end, stream), "cuEventRecord");
    cuda::check(d.cuEventSynchronize(end), "cuEventSynchronize");
    const double us = static_cast<double>(elapsed_ms(start, end)) * 1000;
    if (!(us > 0)) throw BackendError("the compute load: calibration measured no time");
    blocks_per_us_ = blocks / us;
  } catch (...) {
    if (priority_stream_ != nullptr) d.cuStreamDestroy_v2(priority_stream_);
    if (out_ != 0) d.cuMemFree_v2(out_);
    api_->module_unload(module_);
    throw;
  }
}

ComputeLoad::~ComputeLoad() {
  const cuda::Driver& d = cuda::driver();
  d.cuCtxSynchronize();  // no launch of ours still running on the module
  d.cuStreamDestroy_v2(priority_stream_);
  d.cuMemFree_v2(out_);
  api_->module_unload(module_);
}

void ComputeLoad::enqueue(unsigned blocks, CUstream stream) const {
  CUdeviceptr out = out_;
  unsigned iters = kIters;
  void* params[] = {&out, &iters};
  const CUresult r = api_->launch_kernel(function_, blocks, 1, 1, kThreads, 1, 1, shared_bytes_, stream, params, nullptr);
  cuda::check(r, "cuLaunchKernel (compute load)");
}

void ComputeLoad::launch(double microseconds, CUstream stream) const {
  const double blocks = std::max(static_cast<double>(sms_), std::round(microseconds * blocks_per_us_));
  enqueue(static_cast<unsigned>(blocks), stream);
}

float ComputeLoad::elapsed_ms(CUevent start, CUevent end) const {
  float ms = 0;
  cuda::check(api_->elapsed(&ms, start, end), "cuEventElapsedTime");
  return ms;
}

std::string ComputeLoad::description() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%d SMs, blocks of %u threads x %u FMA steps with %u KiB shared memory each, %.1f blocks/us", sms_, kThreads,
                kIters * 4, shared_bytes_ / 1024, blocks_per_us_);
  return buf;
}

}  // namespace ncclpool::tool

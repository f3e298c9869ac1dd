// The compute load (compute_load.hpp): the PTX kernel, its launch and the calibration. The driver
// entry points it needs that the library does not use (modules, kernel launches, stream priorities,
// event timing) come from the benches' table (bench_driver.hpp).

#include "compute_load.hpp"
#include "compute_load_ptx.hpp"

#include "bench_driver.hpp"

#include <ncclpool/errors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ncclpool::tool {

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kIters = 256;  // FMA steps per thread: a block runs for a few microseconds
// As a GEMM tile does, a block holds a large share of its SM's shared memory (two fit on an H100 or
// H200 SM): an SM that runs a collective's CTA has room for fewer of them.
constexpr unsigned kSharedBytes = 96 * 1024;
constexpr int kCalibrationWaves = 16;

}  // namespace

ComputeLoad::ComputeLoad(CUdevice device, CUstream stream) : d_(&bench_driver()) {
  const BenchDriver& d = *d_;
  CUcontext context = nullptr;
  cuda::check(d.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context == nullptr) throw InvalidArgument("the compute load needs a current CUDA context");
  if (CUresult r = d_->cuModuleLoadData(&module_, kComputeLoadPtx); r != CUDA_SUCCESS)
    throw Unsupported("the compute load: the driver could not JIT-compile its PTX: " + cuda::error_text(r));
  try {
    cuda::check(d_->cuModuleGetFunction(&function_, module_, "ncclpool_compute_load"), "cuModuleGetFunction");
    cuda::check(d.cuDeviceGetAttribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device), "cuDeviceGetAttribute");
    shared_bytes_ = d_->cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(kSharedBytes)) == CUDA_SUCCESS ? kSharedBytes : 0;
    cuda::check(d.cuMemAlloc_v2(&out_, kThreads * sizeof(float)), "cuMemAlloc");
    int least = 0, greatest = 0;
    cuda::check(d_->cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
    cuda::check(d_->cuStreamCreateWithPriority(&priority_stream_, CU_STREAM_NON_BLOCKING, greatest), "cuStreamCreateWithPriority");
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
    d_->cuModuleUnload(module_);
    throw;
  }
}

ComputeLoad::~ComputeLoad() {
  const BenchDriver& d = *d_;
  d.cuCtxSynchronize();  // no launch of ours still running on the module
  d.cuStreamDestroy_v2(priority_stream_);
  d.cuMemFree_v2(out_);
  d_->cuModuleUnload(module_);
}

void ComputeLoad::enqueue(unsigned blocks, CUstream stream) const {
  CUdeviceptr out = out_;
  unsigned iters = kIters;
  void* params[] = {&out, &iters};
  const CUresult r = d_->cuLaunchKernel(function_, blocks, 1, 1, kThreads, 1, 1, shared_bytes_, stream, params, nullptr);
  cuda::check(r, "cuLaunchKernel (compute load)");
}

void ComputeLoad::launch(double microseconds, CUstream stream) const {
  const double blocks = std::max(static_cast<double>(sms_), std::round(microseconds * blocks_per_us_));
  enqueue(static_cast<unsigned>(blocks), stream);
}

float ComputeLoad::elapsed_ms(CUevent start, CUevent end) const {
  float ms = 0;
  cuda::check(d_->event_elapsed_time(&ms, start, end), "cuEventElapsedTime");
  return ms;
}

std::string ComputeLoad::description() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%d SMs, blocks of %u threads x %u FMA steps with %u KiB shared memory each, %.1f blocks/us", sms_, kThreads,
                kIters * 4, shared_bytes_ / 1024, blocks_per_us_);
  return buf;
}

}  // namespace ncclpool::tool

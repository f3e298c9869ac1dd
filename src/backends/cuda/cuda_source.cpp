// `cuda` source: plain device memory from cuMemAlloc in the device's primary context.
// Not exportable, so it cannot back NCCL symmetric windows (local registration works).

#include "driver.hpp"
#include "stream_ordering.hpp"

#include <ncclpool/cuda.hpp>

#include <memory>

namespace ncclpool {

namespace cuda {
namespace {

class CudaSource final : public SegmentSource {
 public:
  explicit CudaSource(int device) : context_(device), ordering_(context_.get()) {
    const Driver& d = driver();
    std::size_t total = 0;
    check(d.cuDeviceTotalMem_v2(&total, context_.device()), "cuDeviceTotalMem");
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof name, context_.device());
    props_.kind = SourceKind::cuda;
    props_.description = "cuda device " + std::to_string(device) + " (" + name + ", cuMemAlloc)";
    props_.device = device;
    props_.granularity = 2ull << 20;
    props_.alignment = 256;  // cuMemAlloc guarantees at least this
    props_.capacity = total;
    props_.device_accessible = true;
    props_.window_capable = false;
  }
  [[nodiscard]] const SourceProperties& properties() const noexcept override { return props_; }

  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override {
    ScopedContext scope(context_.get());
    CUdeviceptr ptr = 0;
    check(driver().cuMemAlloc_v2(&ptr, size), props_.description + ": cuMemAlloc(" + std::to_string(size) + ")");
    return SegmentAllocation{reinterpret_cast<void*>(ptr), size, 0};
  }

  void deallocate(const SegmentAllocation& segment) noexcept override {
    try {
      ScopedContext scope(context_.get());
      driver().cuMemFree_v2(reinterpret_cast<CUdeviceptr>(segment.base));
    } catch (...) {
      // No way to report from here; the driver is gone or the context is broken.
    }
  }

  [[nodiscard]] StreamOrdering& ordering() noexcept override { return ordering_; }

 private:
  PrimaryContext context_;
  CudaStreamOrdering ordering_;
  SourceProperties props_;
};

}  // namespace
}  // namespace cuda

bool cuda_available(std::string* why) {
  const cuda::Driver* d = cuda::try_driver(why);
  if (d == nullptr) return false;
  int count = 0;
  if (d->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    if (why) *why = "the CUDA driver loaded but reports no device";
    return false;
  }
  return true;
}

int cuda_device_count() noexcept {
  const cuda::Driver* d = cuda::try_driver(nullptr);
  int count = 0;
  if (d == nullptr || d->cuDeviceGetCount(&count) != CUDA_SUCCESS) return 0;
  return count;
}

std::shared_ptr<SegmentSource> make_cuda_source(int device) { return std::make_shared<cuda::CudaSource>(device); }

}  // namespace ncclpool

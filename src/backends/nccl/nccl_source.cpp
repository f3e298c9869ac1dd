// `nccl` source: ncclMemAlloc / ncclMemFree, the memory NCCL recommends for symmetric windows.

#include "library.hpp"

#include "../cuda/driver.hpp"
#include "../cuda/stream_ordering.hpp"

#include <ncclpool/errors.hpp>

namespace ncclpool {

namespace nccl {
namespace {

class NcclSource final : public SegmentSource {
 public:
  explicit NcclSource(int device) : lib_(library()), context_(device), ordering_(context_.get()) {
    const cuda::Driver& d = cuda::driver();
    std::size_t total = 0;
    cuda::check(d.cuDeviceTotalMem_v2(&total, context_.device()), "cuDeviceTotalMem");
    props_.kind = SourceKind::nccl;
    props_.description = "nccl device " + std::to_string(device) + " (ncclMemAlloc, NCCL " + std::to_string(lib_.info.version) + ")";
    props_.device = device;
    props_.granularity = 2ull << 20;
    props_.alignment = 4096;  // ncclMemAlloc returns cuMem-granular addresses; we rely on less
    props_.capacity = total;
    props_.device_accessible = true;
    props_.window_capable = lib_.info.windows;
  }
  const SourceProperties& properties() const noexcept override { return props_; }

  SegmentAllocation allocate(std::size_t size) override {
    cuda::ScopedContext scope(context_.get());  // ncclMemAlloc allocates on the current device
    void* ptr = nullptr;
    const ncclResult_t r = lib_.ncclMemAlloc(&ptr, size);
    if (r != ncclSuccess) {
      std::size_t free = 0, total = 0;
      cuda::driver().cuMemGetInfo_v2(&free, &total);
      const std::string msg = props_.description + ": ncclMemAlloc(" + std::to_string(size) + ") failed: " + error_text(r);
      if (free < size) throw OutOfMemory(msg + " (" + std::to_string(free) + " bytes free)");
      throw BackendError(msg);
    }
    return SegmentAllocation{ptr, size, 0};
  }

  void deallocate(const SegmentAllocation& segment) noexcept override {
    try {
      cuda::ScopedContext scope(context_.get());
      lib_.ncclMemFree(segment.base);
    } catch (...) {
    }
  }

  StreamOrdering& ordering() noexcept override { return ordering_; }

 private:
  const Library& lib_;
  cuda::PrimaryContext context_;
  cuda::CudaStreamOrdering ordering_;
  SourceProperties props_;
};

}  // namespace
}  // namespace nccl

std::shared_ptr<SegmentSource> make_nccl_source(int device) { return std::make_shared<nccl::NcclSource>(device); }

}  // namespace ncclpool

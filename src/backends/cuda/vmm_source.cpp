// `vmm` source: cuMem virtual memory. Each segment is one physical allocation (cuMemCreate) mapped
// into its own reserved VA range with read/write access for the device. The handle types include
// POSIX FD (what NCCL's peer mapping and symmetric windows use) and fabric where the device allows.
// Every step is undone in reverse if a later one fails: no half-built segment survives.
// A source that constructs has allocated (and released) one granule: it is known to work.

#include "driver.hpp"
#include "stream_ordering.hpp"

#include <ncclpool/cuda.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace ncclpool {

namespace cuda {
namespace {

int attribute(CUdevice device, CUdevice_attribute attr) {
  int value = 0;
  if (driver().cuDeviceGetAttribute(&value, attr, device) != CUDA_SUCCESS) return 0;
  return value;
}

// Optional properties (fabric handles need IMEX channels; host-NUMA memory may refuse fabric
// handles or the GPUDirect RDMA flag) are dropped one at a time until cuMemCreate accepts the rest.
// The answer is probed once per process, location and request with a one-granule allocation and cached,
// so the driver sees (and compute-sanitizer reports) the refused calls only once.
void settle_optional_properties(CUmemAllocationProp& prop, std::size_t granularity) {
  static std::mutex mutex;
  // Keyed by what was asked for too: sources with other options probe on their own.
  static std::map<std::tuple<int, int, unsigned, unsigned char>, std::pair<unsigned, unsigned char>> settled;
  const auto key = std::make_tuple(static_cast<int>(prop.location.type), prop.location.id,
                                   static_cast<unsigned>(prop.requestedHandleTypes), prop.allocFlags.gpuDirectRDMACapable);
  std::lock_guard lock(mutex);
  if (auto it = settled.find(key); it != settled.end()) {
    prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(it->second.first);
    prop.allocFlags.gpuDirectRDMACapable = it->second.second;
    return;
  }
  const Driver& d = driver();
  for (;;) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult r = d.cuMemCreate(&handle, granularity, &prop, 0);
    if (r == CUDA_SUCCESS) {
      d.cuMemRelease(handle);
      break;
    }
    const bool optional_left = (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0 || prop.allocFlags.gpuDirectRDMACapable != 0;
    if (!optional_left || (r != CUDA_ERROR_NOT_PERMITTED && r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE)) {
      check(r, "vmm source: cuMemCreate probe of " + std::to_string(granularity) + " bytes");
    }
    if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) != 0) {
      prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(prop.requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_FABRIC);
    } else {
      prop.allocFlags.gpuDirectRDMACapable = 0;
    }
  }
  settled[key] = {static_cast<unsigned>(prop.requestedHandleTypes), prop.allocFlags.gpuDirectRDMACapable};
}

class VmmSource final : public SegmentSource {
 public:
  explicit VmmSource(const VmmSourceOptions& options) : context_(options.device), ordering_(context_.get()) {
    const Driver& d = driver();
    const CUdevice dev = context_.device();
    const std::string who = "vmm source (device " + std::to_string(options.device) + ")";
    if (!attribute(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED))
      throw Unsupported(who + ": the device does not support cuMem virtual memory management");
    const bool host = options.location == VmmLocation::host_numa;
    if (host && !attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED))
      throw Unsupported(who + ": the device does not support host-NUMA locations for cuMem memory");
    int numa_node = options.numa_node;
    if (host && numa_node < 0) {
      // -1: the host NUMA node closest to the device (node 0 where the system reports none).
      numa_node = std::max(0, attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID));
    }

    unsigned handle_types = 0;
    if (attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED))
      handle_types |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (options.allow_fabric && attribute(dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED))
      handle_types |= CU_MEM_HANDLE_TYPE_FABRIC;
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = host ? numa_node : options.device;
    prop_.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
    if (attribute(dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)) prop_.allocFlags.gpuDirectRDMACapable = 1;

    std::size_t minimum = 0, recommended = 0;
    check(d.cuMemGetAllocationGranularity(&minimum, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM), who + ": cuMemGetAllocationGranularity");
    check(d.cuMemGetAllocationGranularity(&recommended, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), who + ": cuMemGetAllocationGranularity");
    std::size_t granularity = recommended;
    if (options.granularity != 0) {
      if (options.granularity % minimum != 0)
        throw InvalidArgument(who + ": granularity " + std::to_string(options.granularity) + " is not a multiple of the device minimum " + std::to_string(minimum));
      granularity = options.granularity;
    }

    std::size_t capacity = 0;
    if (host) {
      capacity = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    } else {
      check(d.cuDeviceTotalMem_v2(&capacity, dev), who + ": cuDeviceTotalMem");
    }
    {
      ScopedContext scope(context_.get());
      settle_optional_properties(prop_, granularity);
    }
    access_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access_.location.id = options.device;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    props_.kind = SourceKind::vmm;
    props_.device = options.device;
    props_.granularity = granularity;
    props_.alignment = granularity;
    props_.capacity = capacity;
    props_.device_accessible = true;
    props_.window_capable = !host && (prop_.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
    describe();
  }

  [[nodiscard]] const SourceProperties& properties() const noexcept override { return props_; }

  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override {
    const Driver& d = driver();
    ScopedContext scope(context_.get());
    const std::string what = props_.description + ": ";
    CUmemGenericAllocationHandle handle = 0;
    CUresult r = d.cuMemCreate(&handle, size, &prop_, 0);
    check(r, what + "cuMemCreate(" + std::to_string(size) + ")");
    CUdeviceptr ptr = 0;
    r = d.cuMemAddressReserve(&ptr, size, props_.alignment, 0, 0);
    if (r != CUDA_SUCCESS) {
      d.cuMemRelease(handle);
      check(r, what + "cuMemAddressReserve(" + std::to_string(size) + ")");
    }
    r = d.cuMemMap(ptr, size, 0, handle, 0);
    if (r != CUDA_SUCCESS) {
      d.cuMemAddressFree(ptr, size);
      d.cuMemRelease(handle);
      check(r, what + "cuMemMap");
    }
    r = d.cuMemSetAccess(ptr, size, &access_, 1);
    if (r != CUDA_SUCCESS) {
      d.cuMemUnmap(ptr, size);
      d.cuMemAddressFree(ptr, size);
      d.cuMemRelease(handle);
      check(r, what + "cuMemSetAccess");
    }
    return SegmentAllocation{reinterpret_cast<void*>(ptr), size, static_cast<std::uintptr_t>(handle)};
  }

  void deallocate(const SegmentAllocation& segment) noexcept override {
    const cuda::Driver* d = try_driver(nullptr);
    if (d == nullptr) return;
    const auto ptr = reinterpret_cast<CUdeviceptr>(segment.base);
    d->cuMemUnmap(ptr, segment.size);
    d->cuMemRelease(static_cast<CUmemGenericAllocationHandle>(segment.handle));
    d->cuMemAddressFree(ptr, segment.size);
  }

  [[nodiscard]] StreamOrdering& ordering() noexcept override { return ordering_; }

 private:
  void describe() {
    std::string handles;
    if (prop_.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) handles += "posix-fd";
    if (prop_.requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC) handles += handles.empty() ? "fabric" : "+fabric";
    if (handles.empty()) handles = "no shareable handle";
    if (prop_.allocFlags.gpuDirectRDMACapable) handles += ", gdr";
    const bool host = prop_.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    props_.description = "vmm device " + std::to_string(props_.device) +
                         (host ? " (host NUMA node " + std::to_string(prop_.location.id) + ", " : " (device memory, ") + handles + ")";
  }

  PrimaryContext context_;
  CudaStreamOrdering ordering_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  SourceProperties props_;
};

}  // namespace
}  // namespace cuda

std::shared_ptr<SegmentSource> make_vmm_source(const VmmSourceOptions& options) {
  return std::make_shared<cuda::VmmSource>(options);
}

}  // namespace ncclpool

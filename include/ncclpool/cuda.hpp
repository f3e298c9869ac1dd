#pragma once
/// @file cuda.hpp
/// @brief CUDA segment sources. The CUDA driver (libcuda.so.1) is loaded at run time, so a program
/// linked with ncclpool runs on machines without a GPU; these functions then throw Unsupported.

#include <ncclpool/export.hpp>
#include <ncclpool/segment_source.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace ncclpool {

/// @brief Whether the CUDA driver loads and sees at least one device; if not, `why` says why.
NCCLPOOL_API bool cuda_available(std::string* why = nullptr);
/// @brief Number of CUDA devices (0 when the driver is missing).
NCCLPOOL_API int cuda_device_count() noexcept;

/// @brief Plain device memory from cuMemAlloc on `device` (its primary context). Cannot back
/// symmetric windows. @throws Unsupported without a driver/device, InvalidArgument for a bad ordinal.
NCCLPOOL_API std::shared_ptr<SegmentSource> make_cuda_source(int device);

/// Where cuMem physical memory lives.
enum class VmmLocation : int {
  device = 0,     ///< the GPU's own memory
  host_numa = 1,  ///< host memory on a NUMA node, mapped for the GPU (EGM-style)
};

/// Settings of the cuMem virtual-memory source.
struct VmmSourceOptions {
  int device = 0;
  VmmLocation location = VmmLocation::device;
  int numa_node = -1;          ///< with host_numa: the node; -1 = the node closest to the device
  bool allow_fabric = true;    ///< add the fabric handle type where the device supports it
  std::size_t granularity = 0; ///< 0 = the driver's recommended granularity
};

/// @brief cuMem virtual memory (cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess) with
/// the shareable handle types NCCL needs for peer mapping (POSIX FD, plus fabric where supported) and
/// the GPUDirect RDMA flag where supported. Optional properties the driver refuses at the first
/// allocation are dropped; properties().description then says which handle types remain.
/// Can back symmetric windows. @throws Unsupported / InvalidArgument / BackendError.
NCCLPOOL_API std::shared_ptr<SegmentSource> make_vmm_source(const VmmSourceOptions& options);

}  // namespace ncclpool

#pragma once
// A device for the GPU benches (gpu.cpp, gpu_coll_rank.cpp): its primary context, made current on the
// creating thread, and non-blocking streams that are synchronized and destroyed with it.

#include "backends/cuda/driver.hpp"

#include <vector>

namespace ncclpool::tool {

struct DeviceStreams {
  cuda::PrimaryContext context;
  std::vector<CUstream> streams;

  DeviceStreams(int device, int count) : context(device) {
    const cuda::Driver& d = cuda::driver();
    cuda::check(d.cuCtxSetCurrent(context.get()), "cuCtxSetCurrent");
    try {
      for (int i = 0; i < count; ++i) {
        CUstream s = nullptr;
        cuda::check(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
        streams.push_back(s);
      }
    } catch (...) {
      destroy();  // a throwing constructor runs no destructor: release what was created
      throw;
    }
  }
  ~DeviceStreams() { destroy(); }
  DeviceStreams(const DeviceStreams&) = delete;
  DeviceStreams& operator=(const DeviceStreams&) = delete;

 private:
  void destroy() noexcept {
    const cuda::Driver& d = cuda::driver();
    for (CUstream s : streams) {
      d.cuStreamSynchronize(s);
      d.cuStreamDestroy_v2(s);
    }
    streams.clear();
  }
};

}  // namespace ncclpool::tool

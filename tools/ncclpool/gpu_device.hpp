#pragma once
// A device for the GPU benches (gpu.cpp, gpu_coll_rank.cpp): its primary context, made current on the
// creating thread, and non-blocking streams that are synchronized and destroyed with it.

#include "bench_driver.hpp"

#include <vector>

namespace ncclpool::tool {

struct DeviceStreams {
  cuda::PrimaryContext context;
  std::vector<CUstream> streams;

  DeviceStreams(int device, int count) : context(device) {
    const tool::BenchDriver& d = tool::bench_driver();
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
    const tool::BenchDriver& d = tool::bench_driver();
    for (CUstream s : streams) {
      d.cuStreamSynchronize(s);
      d.cuStreamDestroy_v2(s);
    }
    streams.clear();
  }
};

}  // namespace ncclpool::tool

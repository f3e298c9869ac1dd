#pragma once
// Stream ordering on real CUDA streams: one event per producer stream, re-recorded at every free
// (as RMM does); a cross-stream reuse is a cuStreamWaitEvent on it. Frees on a capturing stream
// record nothing and make that stream's blocks unavailable to other streams until a later free
// outside capture, because an event captured into a graph cannot be waited on from outside it.

#include "driver.hpp"

#include <ncclpool/segment_source.hpp>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace ncclpool::cuda {

class CudaStreamOrdering final : public StreamOrdering {
 public:
  explicit CudaStreamOrdering(CUcontext context) : context_(context) {}
  ~CudaStreamOrdering() override;
  CudaStreamOrdering(const CudaStreamOrdering&) = delete;
  CudaStreamOrdering& operator=(const CudaStreamOrdering&) = delete;

  void on_free(stream_t stream) override;
  [[nodiscard]] bool wait(stream_t consumer, stream_t producer) override;
  [[nodiscard]] bool is_complete(stream_t producer) override;
  void synchronize(stream_t producer) override;
  void on_new_stream(stream_t stream) override;
  [[nodiscard]] bool device_capturing() override;

 private:
  struct Producer {
    CUevent event = nullptr;
    bool recorded = false;
    bool captured = false;  // last free happened during graph capture
  };
  static bool capturing(stream_t stream);
  CUcontext context_;
  std::unordered_map<stream_t, Producer> producers_;
  std::mutex known_mutex_;                 // device_capturing() runs without the pool lock
  std::vector<stream_t> known_streams_;
};

}  // namespace ncclpool::cuda

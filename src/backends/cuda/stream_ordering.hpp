#pragma once
// Stream ordering on real CUDA streams: one event per producer stream, re-recorded at every free
// (as RMM does); a cross-stream reuse is a cuStreamWaitEvent on it. Frees on a capturing stream
// record nothing and make that stream's blocks unavailable to other streams until a later free
// outside capture, because an event captured into a graph cannot be waited on from outside it.

#include "driver.hpp"

#include <ncclpool/segment_source.hpp>

#include <unordered_map>

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

 private:
  struct Producer {
    CUevent event = nullptr;
    bool recorded = false;
    bool captured = false;  // last free happened during graph capture
  };
  static bool capturing(stream_t stream);
  CUcontext context_;
  std::unordered_map<stream_t, Producer> producers_;
};

}  // namespace ncclpool::cuda

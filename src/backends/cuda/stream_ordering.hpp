#pragma once
// Stream ordering on real CUDA streams: one event per producer stream, re-recorded at every publish
// (the pool publishes only when another stream may need the free: see StreamOrdering); a
// cross-stream reuse is a cuStreamWaitEvent on it. A capturing stream cannot publish (an event
// captured into a graph cannot be waited on from outside it), and a capturing consumer cannot wait.

#include "driver.hpp"

#include <ncclpool/segment_source.hpp>

#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ncclpool::cuda {

class CudaStreamOrdering final : public StreamOrdering {
 public:
  explicit CudaStreamOrdering(CUcontext context) : context_(context) {}
  ~CudaStreamOrdering() override;
  CudaStreamOrdering(const CudaStreamOrdering&) = delete;
  CudaStreamOrdering& operator=(const CudaStreamOrdering&) = delete;

  [[nodiscard]] bool publish(stream_t stream) override;
  [[nodiscard]] bool wait(stream_t consumer, stream_t producer) override;
  [[nodiscard]] bool is_complete(stream_t producer) override;
  void synchronize(stream_t producer) override;
  void synchronize_device() override;
  void on_new_stream(stream_t stream) override;
  [[nodiscard]] bool device_capturing() override;
  [[nodiscard]] bool thread_capturing() override;

 private:
  struct Producer {
    CUevent event = nullptr;
    bool recorded = false;
  };
  static bool capturing(stream_t stream);
  CUcontext context_;
  std::unordered_map<stream_t, Producer> producers_;
  std::mutex known_mutex_;                 // device_capturing() runs without the pool lock
  std::vector<stream_t> known_streams_;
  std::vector<std::thread::id> first_served_by_;  // by known_streams_ index: the thread that first used it
};

}  // namespace ncclpool::cuda

#pragma once
/// @file sim.hpp
/// @brief The simulator's segment source: page-aligned host memory standing in for a device, with
/// a stream model (streams are ids) and fault injection, so every pool rule runs on a CPU.

#include <ncclpool/export.hpp>
#include <ncclpool/segment_source.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ncclpool {

/// @brief Stream ordering for the simulator: records which waits the pool asked for, so tests can
/// check that cross-stream reuse always happens behind a dependency.
class NCCLPOOL_API SimStreamOrdering final : public StreamOrdering {
 public:
  [[nodiscard]] bool publish(stream_t stream) override;
  [[nodiscard]] bool wait(stream_t consumer, stream_t producer) override;
  [[nodiscard]] bool is_complete(stream_t producer) override;
  void synchronize(stream_t producer) override;
  void synchronize_device() override;
  [[nodiscard]] std::uint64_t synchronize_count() const noexcept { return synchronizes_; }
  [[nodiscard]] std::uint64_t device_synchronize_count() const noexcept { return device_synchronizes_; }

  /// Number of publishes made on a stream so far (its "event epoch").
  [[nodiscard]] std::uint64_t epoch(stream_t stream) const;
  /// Epoch of `producer` that `consumer` waited for last (0 if never).
  [[nodiscard]] std::uint64_t waited_epoch(stream_t consumer, stream_t producer) const;
  [[nodiscard]] std::uint64_t wait_count() const noexcept { return waits_; }
  [[nodiscard]] std::uint64_t poll_count() const noexcept { return polls_; }
  [[nodiscard]] std::uint64_t publish_count() const noexcept { return publishes_; }
  /// Test knobs: what is_complete() answers, and whether wait() / publish() refuse (models graph
  /// capture, as CUDA does: a capturing stream can neither publish nor wait on an outside event).
  void set_complete(bool complete) noexcept { complete_ = complete; }
  void set_refuse_waits(bool refuse) noexcept { refuse_waits_ = refuse; }
  void set_refuse_publishes(bool refuse) noexcept { refuse_publishes_ = refuse; }
  /// The next `count` publish() calls throw BackendError (like an event record on a destroyed stream).
  void fail_next_publishes(int count) noexcept { fail_publishes_ = count; }
  /// Models a CUDA graph capture by the calling thread (begins or ends it): the device captures while
  /// any thread does, the calling thread only while it does itself.
  void set_capturing(bool capturing);
  [[nodiscard]] bool device_capturing() override { return capturing_.load() > 0; }
  [[nodiscard]] bool thread_capturing() override;

 private:
  std::map<stream_t, std::uint64_t> epochs_;
  std::map<std::pair<stream_t, stream_t>, std::uint64_t> waited_;
  std::uint64_t waits_ = 0;
  std::uint64_t polls_ = 0;
  std::uint64_t publishes_ = 0;
  std::uint64_t synchronizes_ = 0;
  std::uint64_t device_synchronizes_ = 0;
  bool complete_ = false;
  bool refuse_waits_ = false;
  bool refuse_publishes_ = false;
  int fail_publishes_ = 0;
  std::atomic<int> capturing_{0};          // threads capturing now
  std::mutex capturers_mutex_;
  std::vector<std::thread::id> capturers_;  // which
};

/// Settings of a simulated device.
struct SimSourceConfig {
  int device = 0;
  std::size_t capacity = 64ull << 30;     ///< "device memory": allocations past it are OOM
  std::size_t granularity = 2ull << 20;   ///< like cuMem's recommended granularity
  bool window_capable = true;             ///< behaves like ncclMemAlloc memory
};

/// @brief Host-memory segments (mmap, reserved lazily) with OOM/error injection.
class NCCLPOOL_API SimSource final : public SegmentSource {
 public:
  explicit SimSource(SimSourceConfig config = {});
  ~SimSource() override;
  SimSource(const SimSource&) = delete;
  SimSource& operator=(const SimSource&) = delete;

  [[nodiscard]] const SourceProperties& properties() const noexcept override { return properties_; }
  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override;
  void deallocate(const SegmentAllocation& segment) noexcept override;
  [[nodiscard]] StreamOrdering& ordering() noexcept override { return ordering_; }
  [[nodiscard]] SimStreamOrdering& sim_ordering() noexcept { return ordering_; }

  /// The next `count` allocate() calls throw OutOfMemory.
  void inject_oom(int count) noexcept { inject_oom_ = count; }
  /// The next `count` allocate() calls throw BackendError.
  void inject_error(int count) noexcept { inject_error_ = count; }

  [[nodiscard]] std::size_t bytes_in_use() const noexcept { return in_use_; }
  [[nodiscard]] std::size_t live_segments() const noexcept { return live_; }
  [[nodiscard]] std::uint64_t allocate_calls() const noexcept { return allocate_calls_; }

 private:
  SourceProperties properties_;
  SimStreamOrdering ordering_;
  std::size_t in_use_ = 0;
  std::size_t live_ = 0;
  std::uint64_t allocate_calls_ = 0;
  int inject_oom_ = 0;
  int inject_error_ = 0;
};

}  // namespace ncclpool

#pragma once
// A compute load for the GPU benches: the compute-bound kernel of compute_load.ptx, launched in
// chunks of a requested duration, calibrated on the device it runs on. It stands in for the matrix
// multiplies a training step overlaps its collectives with, so that `bench coll --compute` can
// measure what a collective costs a step: its own time while compute runs, and how much it slows
// the compute down (the CTAs it holds are SMs the compute does not get).

#include <cuda.h>

#include <string>

namespace ncclpool::tool {

struct BenchDriver;

class ComputeLoad {
 public:
  /// Loads the kernel into the current context (of `device`), allocates its output and calibrates
  /// it on `stream` (a few milliseconds). @throws Unsupported when the driver cannot JIT the PTX,
  /// BackendError.
  ComputeLoad(CUdevice device, CUstream stream);
  ~ComputeLoad();
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;

  /// Enqueues work that takes about `microseconds` on an otherwise idle GPU (at least one wave).
  void launch(double microseconds, CUstream stream) const;
  /// A stream of the device's greatest priority, for the collectives that run beside the load: as
  /// FSDP2's all-gather and reduce-scatter streams are, so that the block scheduler gives a
  /// collective's CTAs the SMs that free up before the load's waiting blocks (at equal priority the
  /// older grid's blocks go first, and the two would mostly run one after the other).
  [[nodiscard]] CUstream priority_stream() const noexcept { return priority_stream_; }
  /// Milliseconds between two recorded, completed events.
  [[nodiscard]] float elapsed_ms(CUevent start, CUevent end) const;
  /// What it is, for the report: "132 SMs, blocks of 256 threads with 96 KiB shared memory, 41.2 blocks/us".
  [[nodiscard]] std::string description() const;

 private:
  const BenchDriver* d_ = nullptr;  // bench_driver()
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUdeviceptr out_ = 0;
  CUstream priority_stream_ = nullptr;
  int sms_ = 0;
  unsigned shared_bytes_ = 0;
  double blocks_per_us_ = 0;
  void enqueue(unsigned blocks, CUstream stream) const;
};

}  // namespace ncclpool::tool

// symmetric_fence (nccl.hpp): before a collective on windows, where the process decided `fence`,
// one fence on the stream (src/backends/cuda/fence.cpp launches it) unless choose_symmetric_fence
// says NCCL orders the collective itself (a capture with graph mixing on, NCCL < 2.29). Built with
// the NCCL backend: only an NCCL communicator's attach decides `fence`. Hot path: one atomic load
// and a counter while the decision is anything else.

#include "fence_state.hpp"

#include "../cuda/fence.hpp"
#include "core/environment.hpp"

namespace ncclpool {

bool symmetric_fence(::CUstream_st* stream) {
  nccl::FenceState& state = nccl::fence_state();
  state.calls.fetch_add(1, std::memory_order_relaxed);
  if (!state.active.load(std::memory_order_acquire)) return false;
  const cuda::Driver& d = cuda::driver();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  cuda::check(d.cuStreamIsCapturing(stream, &capture), "symmetric fence: cuStreamIsCapturing");
  const bool capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
  if (capturing) {
    const SymmetricFenceStep step = choose_symmetric_fence(symmetric_kernels(), true, environment::nccl_graph_mixing_support());
    if (!step.launch) {
      state.skipped_in_capture.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  cuda::launch_fence(stream, static_cast<SymmetricFenceKind>(state.kind.load(std::memory_order_relaxed)), capturing);
  state.launched.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace ncclpool

#pragma once
// The process's symmetric-fence state (symmetric_kernels.cpp owns it): whether the decision is
// `fence`, the fence kind, and the counters. Read by symmetric_fence (fence.cpp, built with NCCL)
// on every call, so the flag is an atomic: no lock and no driver call before the process decided
// `fence`. Internal.

#include <ncclpool/export.hpp>
#include <ncclpool/nccl.hpp>

#include <atomic>
#include <cstdint>

namespace ncclpool::nccl {

struct FenceState {
  std::atomic<bool> active{false};  // the decision is `fence` (set once, by apply_symmetric_kernels)
  std::atomic<int> kind{0};         // SymmetricFenceKind, fixed with the decision
  std::atomic<std::uint64_t> calls{0}, launched{0}, skipped_in_capture{0};
};

NCCLPOOL_INTERNAL FenceState& fence_state() noexcept;

}  // namespace ncclpool::nccl

#pragma once
// The mechanics of the symmetric fence (SymmetricFenceKind in nccl.hpp): per CUDA context, the fence
// kernel's module (fence.ptx, JIT-compiled at its first use there) and a scratch byte for the memset
// kind; launching one on a stream. The policy (when a fence is needed) is symmetric_fence's
// (src/backends/nccl/fence.cpp). Internal: exported (NCCLPOOL_INTERNAL) for the GPU tests, which
// launch each kind directly.

#include "driver.hpp"

#include <ncclpool/export.hpp>
#include <ncclpool/nccl.hpp>

#include <optional>

namespace ncclpool::cuda {

// Enqueues one fence of `kind` on `stream` (nullptr: the legacy default stream), in the stream's
// context, a node of the graph when the stream is capturing. Sets up the context's module or scratch
// byte at its first use there (in relaxed capture mode: another thread's global capture does not
// refuse it). `capturing`: whether the stream is capturing, where the caller has just asked
// (cuStreamIsCapturing once per fenced collective, not twice); asked here when absent.
// @throws BackendError with the CUDA error text; a set-up that fails is undone, so the next call
// tries again.
NCCLPOOL_INTERNAL void launch_fence(CUstream stream, SymmetricFenceKind kind, std::optional<bool> capturing = std::nullopt);

// Sets up what launch_fence needs in `context` for `kind` now (before any capture), so that the first
// fence needs no module load or allocation. @throws BackendError as launch_fence.
NCCLPOOL_INTERNAL void prepare_fence(CUcontext context, SymmetricFenceKind kind);

}  // namespace ncclpool::cuda

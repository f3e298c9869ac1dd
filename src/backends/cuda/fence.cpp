// The symmetric fence's launches (fence.hpp): per CUDA context, the fence kernel's module and a
// scratch byte, made at their first use there and kept for the life of the process. A context reset
// or destroyed and made again at the same address is noticed (a failed launch; the scratch byte's
// buffer id, which the driver never reuses, no longer its own) and set up again once: the memset
// never writes into memory that is not its own.

#include "fence.hpp"

#include "fence_ptx.hpp"

#include <mutex>
#include <vector>

namespace ncclpool::cuda {
namespace {

struct ContextFence {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction function = nullptr;  // ncclpool_symmetric_fence, once the module is loaded
  CUdeviceptr scratch = 0;        // the memset kind's byte (256 bytes: the allocation granule)
  unsigned long long scratch_id = 0;  // its CU_POINTER_ATTRIBUTE_BUFFER_ID (process-wide unique)
};

unsigned long long buffer_id(CUdeviceptr p) {
  unsigned long long id = 0;
  return driver().cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) == CUDA_SUCCESS ? id : 0;
}

std::mutex g_mutex;
std::vector<ContextFence> g_fences;  // guarded by g_mutex; a few entries (one per context used)

ContextFence& entry_of(CUcontext context) {
  for (ContextFence& f : g_fences)
    if (f.context == context) return f;
  g_fences.push_back(ContextFence{context});
  return g_fences.back();
}

// At process exit, gives back what the entries made (the scratch bytes and modules of contexts still
// alive): nothing is left for a leak check (compute-sanitizer's) to report. Made at the first set-up,
// after the driver table (driver() above it), so that it is destroyed before it. Errors are ignored:
// a context reset or destroyed before exit took its memory with it.
struct FenceReaper {
  ~FenceReaper() {
    std::lock_guard lock(g_mutex);
    const Driver* d = try_driver(nullptr);
    for (ContextFence& f : g_fences) {
      if (d == nullptr || f.context == nullptr) break;
      CUcontext previous = nullptr;
      if (d->cuCtxGetCurrent(&previous) != CUDA_SUCCESS || d->cuCtxSetCurrent(f.context) != CUDA_SUCCESS) continue;
      if (f.scratch != 0 && buffer_id(f.scratch) == f.scratch_id) d->cuMemFree_v2(f.scratch);
      if (f.module != nullptr) d->cuModuleUnload(f.module);
      d->cuCtxSetCurrent(previous);
    }
    g_fences.clear();
  }
};

// What `kind` needs in the entry's context, made now if missing. g_mutex held. A failure leaves the
// entry as it was (nothing half-made) and throws.
void set_up(ContextFence& f, SymmetricFenceKind kind) {
  const Driver& d = driver();
  static FenceReaper reaper;  // after the driver's table, so destroyed first (see FenceReaper)
  if (kind != SymmetricFenceKind::memset && f.function != nullptr) return;  // kernel, and node's eager launches
  if (kind == SymmetricFenceKind::memset && f.scratch != 0) return;
  ScopedContext scope(f.context);
  const RelaxedCaptureMode relaxed;  // a module load or an allocation is "unsafe" under another thread's global capture
  if (kind == SymmetricFenceKind::memset) {
    CUdeviceptr scratch = 0;
    check(d.cuMemAlloc_v2(&scratch, 256), "symmetric fence: cuMemAlloc of its scratch byte");
    const unsigned long long id = buffer_id(scratch);
    if (id == 0) {
      d.cuMemFree_v2(scratch);
      throw BackendError("symmetric fence: cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_BUFFER_ID) of its scratch byte failed");
    }
    f.scratch = scratch;
    f.scratch_id = id;
    return;
  }
  CUmodule module = nullptr;
  check(d.cuModuleLoadData(&module, kFencePtx), "symmetric fence: cuModuleLoadData of its kernel");
  CUfunction function = nullptr;
  if (const CUresult r = d.cuModuleGetFunction(&function, module, "ncclpool_symmetric_fence"); r != CUDA_SUCCESS) {
    d.cuModuleUnload(module);
    check(r, "symmetric fence: cuModuleGetFunction");
  }
  f.module = module;
  f.function = function;
}

// The node kind in a capture: an empty node after the capture's current dependencies, made the only
// one, so that the next captured node (the collective's kernel) depends on it by a full edge. NCCL's
// kernel, launched with programmatic stream serialization, gets a programmatic edge only from a
// kernel node: behind an empty node it waits for the end of the work before it. Costs no launch.
// CUDA_ERROR_NOT_SUPPORTED when the driver lacks the calls (older than 12.3): the caller launches
// the kernel instead.
CUresult add_empty_node(CUstream stream) {
#if CUDA_VERSION < 12030
  (void)stream;
  return CUDA_ERROR_NOT_SUPPORTED;  // built with headers older than 12.3: the caller launches the kernel
#else
  const Driver& d = driver();
  if (d.cuStreamGetCaptureInfo_v3 == nullptr || d.cuStreamUpdateCaptureDependencies_v2 == nullptr || d.cuGraphAddEmptyNode == nullptr)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  std::size_t count = 0;
  if (CUresult r = d.cuStreamGetCaptureInfo_v3(stream, &status, nullptr, &graph, &dependencies, &edges, &count); r != CUDA_SUCCESS) return r;
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  // The dependencies' edge data (a programmatic or port edge a capture joined with) is not carried
  // over: every edge into the empty node is a full one, which is the point.
  CUgraphNode node = nullptr;
  if (CUresult r = d.cuGraphAddEmptyNode(&node, graph, dependencies, count); r != CUDA_SUCCESS) return r;
  return d.cuStreamUpdateCaptureDependencies_v2(stream, &node, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
#endif
}

CUresult enqueue(const ContextFence& f, CUstream stream, SymmetricFenceKind kind, std::optional<bool> capturing) {
  const Driver& d = driver();
  if (kind == SymmetricFenceKind::node) {
    if (!capturing) {
      CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
      if (CUresult r = d.cuStreamIsCapturing(stream, &capture); r != CUDA_SUCCESS) return r;
      capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
    }
    if (*capturing) {
      const CUresult r = add_empty_node(stream);
      if (r != CUDA_ERROR_NOT_SUPPORTED) return r;
    }
    kind = SymmetricFenceKind::kernel;  // eagerly (or without the calls): the kernel
  }
  // A plain launch: no launch attribute, so no programmatic stream serialization (not a stream
  // attribute either): the kernel waits for the whole of the work before it on the stream.
  if (kind == SymmetricFenceKind::kernel) return d.cuLaunchKernel(f.function, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
  if (f.scratch_id == 0 || buffer_id(f.scratch) != f.scratch_id) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // not ours any more
  return d.cuMemsetD8Async(f.scratch, 0, 1, stream);
}

// Forgets an entry whose context went away (its handles are gone with it).
void drop(CUcontext context) {
  for (auto it = g_fences.begin(); it != g_fences.end(); ++it)
    if (it->context == context) {
      g_fences.erase(it);
      return;
    }
}

}  // namespace

void prepare_fence(CUcontext context, SymmetricFenceKind kind) {
  std::lock_guard lock(g_mutex);
  set_up(entry_of(context), kind);
}

void launch_fence(CUstream stream, SymmetricFenceKind kind, std::optional<bool> capturing) {
  const Driver& d = driver();
  CUcontext context = nullptr;
  check(d.cuStreamGetCtx(stream, &context), "symmetric fence: cuStreamGetCtx");
  std::lock_guard lock(g_mutex);
  ContextFence* f = &entry_of(context);
  set_up(*f, kind);
  CUresult r = enqueue(*f, stream, kind, capturing);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED) {  // a new context at an old address: once more
    drop(context);
    f = &entry_of(context);
    set_up(*f, kind);
    r = enqueue(*f, stream, kind, capturing);
  }
  check(r, std::string("symmetric fence: ") + (kind == SymmetricFenceKind::kernel ? "cuLaunchKernel" : kind == SymmetricFenceKind::memset ? "cuMemsetD8Async" : "an empty graph node (or cuLaunchKernel)"));
}

}  // namespace ncclpool::cuda

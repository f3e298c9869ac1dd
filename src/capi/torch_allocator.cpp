// PyTorch CUDAPluggableAllocator entry points and the table of live pools they search.
//
// torch calls alloc only when its caching allocator needs a new segment for a MemPool, and free only
// when it releases a whole segment, so neither is a hot path. What matters is attribution: alloc goes
// to the calling thread's innermost scope (the Python context managers open one around
// torch.cuda.use_mem_pool, and graph capture happens in the capturing thread), else to the single pool
// bound to the device. free carries no pool, so the owner is found by address.

#include "handles.hpp"

#include <ncclpool/routes.hpp>

#include <atomic>
#include <cstdio>
#include <shared_mutex>

namespace ncclpool::capi {

namespace {

std::shared_mutex table_mutex;
std::vector<ncclpool_pool_s*>& table() {
  static auto* pools = new std::vector<ncclpool_pool_s*>();  // never destroyed: torch may free at exit
  return *pools;
}
std::atomic<std::uint64_t> failures{0};

ncclpool_pool_s* bound_pool(int device) {
  std::shared_lock lock(table_mutex);
  ncclpool_pool_s* found = nullptr;
  int count = 0;
  for (auto* p : table())
    if (p->torch_bound && p->options.device == device) {
      found = p;
      ++count;
    }
  if (count == 1) return found;
  if (count == 0)
    throw InvalidState("no ncclpool pool is active for this allocation on device " + std::to_string(device) +
                       ": allocate inside an ncclpool scope (ncclpool.torch.nccl_mem / use_mem_pool) or bind one pool with "
                       "ncclpool_torch_bind");
  throw InvalidState(std::to_string(count) + " ncclpool pools are bound to device " + std::to_string(device) +
                     " and no scope is open in this thread: the owner of the allocation is ambiguous; allocate inside an "
                     "ncclpool scope (ncclpool.torch.nccl_mem / use_mem_pool)");
}

ncclpool_pool_s* owner_of(const void* ptr) {
  std::shared_lock lock(table_mutex);
  for (auto* p : table())
    if (p->registered->part_of(ptr) != nullptr) return p;
  return nullptr;
}

}  // namespace

void register_pool(ncclpool_pool_s* pool) {
  std::unique_lock lock(table_mutex);
  table().push_back(pool);
}

void unregister_pool(ncclpool_pool_s* pool) noexcept {
  std::unique_lock lock(table_mutex);
  std::erase(table(), pool);
}

}  // namespace ncclpool::capi

using namespace ncclpool;
using ncclpool::capi::guarded;
using ncclpool::capi::require;

extern "C" {

void* ncclpool_torch_alloc(size_t size, int device, void* stream) {
  void* ptr = nullptr;
  const ncclpool_status_t status = guarded("ncclpool_torch_alloc", [&] {
    ncclpool_pool_s* pool = capi::innermost_pool();
    if (pool != nullptr && pool->options.device != device)
      throw InvalidState("torch asked for " + std::to_string(size) + " bytes on device " + std::to_string(device) +
                         " inside a scope of pool '" + pool->name + "' on device " + std::to_string(pool->options.device));
    if (pool == nullptr) pool = capi::bound_pool(device);
    // torch asks for segments that hold many tensors: an auto pool routes by the tensor sizes they serve.
    std::size_t lo = 0, hi = 0;
    torch_segment_tensors(size, lo, hi);
    const Collective collective = pool == capi::innermost_pool() ? capi::innermost_collective() : Collective::any;
    ptr = pool->registered->allocate_for_messages(size, reinterpret_cast<stream_t>(stream), lo, hi, collective);
  });
  if (status != NCCLPOOL_SUCCESS) {
    capi::failures.fetch_add(1, std::memory_order_relaxed);
    return nullptr;  // torch turns this into torch.OutOfMemoryError; ncclpool_last_error() says why
  }
  return ptr;
}

void ncclpool_torch_free(void* ptr, size_t size, int device, void* stream) {
  const ncclpool_status_t status = guarded("ncclpool_torch_free", [&] {
    if (ptr == nullptr) return;
    ncclpool_pool_s* pool = capi::owner_of(ptr);
    if (pool == nullptr)
      throw ForeignPointer("torch freed " + std::to_string(size) + " bytes on device " + std::to_string(device) +
                           " that no live ncclpool pool owns");
    pool->registered->deallocate(ptr, reinterpret_cast<stream_t>(stream));
    // Published at once (one event record): torch hands a segment back rarely (empty_cache, an OOM
    // retry), often from a stream that never allocates again (a CUDA graph's), whose unpublished
    // memory no other stream could reuse: on the decode trace that held 3% more than PyTorch
    // (docs/benchmarks/growth.md).
    pool->registered->publish_frees(reinterpret_cast<stream_t>(stream));
  });
  if (status != NCCLPOOL_SUCCESS) {
    // torch's free returns nothing: say it where someone will see it.
    capi::failures.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "ncclpool: %s\n", ncclpool_last_error());
  }
}

ncclpool_status_t ncclpool_torch_bind(ncclpool_pool_t pool) {
  return guarded("ncclpool_torch_bind", [&] {
    require(pool, "pool");
    std::unique_lock lock(capi::table_mutex);
    pool->torch_bound = true;
  });
}

ncclpool_status_t ncclpool_torch_unbind(ncclpool_pool_t pool) {
  return guarded("ncclpool_torch_unbind", [&] {
    require(pool, "pool");
    std::unique_lock lock(capi::table_mutex);
    pool->torch_bound = false;
  });
}

uint64_t ncclpool_torch_failures(void) { return capi::failures.load(std::memory_order_relaxed); }

}  // extern "C"

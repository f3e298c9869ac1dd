// C ABI: what a layer above asks the pool so that it keeps no copy of the registry's state
// (docs/registry.md, "Lockstep"): whether the next scope end is an agreement point, and whether a
// pointer sits in a symmetric window of a communicator. Neither is collective; neither waits.

#include "handles.hpp"
#include "stats.hpp"

#include <algorithm>
#include <mutex>

using namespace ncclpool;

ncclpool_status_t ncclpool_scope_end_agrees(ncclpool_pool_t pool, int* agrees) {
  return capi::guarded("ncclpool_scope_end_agrees", [&] {
    capi::require(pool, "pool");
    int* out = capi::require(agrees, "agrees (output)");
    // The schedule is the registry's (the same on every rank that made the same uses); an auto
    // pool's parts count scope ends together, so its first part's registry answers for all.
    const Registry& registry = pool->registered->first_registry();
    const bool scheduled = registry.next_committing_scope_end() == registry.scope_ends();
    bool windows = false;
    if (scheduled) {
      std::lock_guard lock(pool->comms_mutex);
      windows = std::any_of(pool->comms.begin(), pool->comms.end(),
                            [](const auto& c) { return capi::comm_stats(*c).has_windows != 0; });
    }
    *out = scheduled && windows ? 1 : 0;
  });
}

ncclpool_status_t ncclpool_comm_window_of(ncclpool_comm_t comm, const void* ptr, void** window) {
  return capi::guarded("ncclpool_comm_window_of", [&] {
    capi::require(comm, "comm");
    capi::require(comm->pool, "comm->pool");
    void** out = capi::require(window, "window (output)");
    *out = nullptr;
    const PoolPart* part = comm->pool->registered->part_of(ptr);
    if (part == nullptr) return;
    const auto registrations = part->registry->lookup(ptr);
    if (!registrations) return;
    for (const SegmentRegistration& r : registrations->registrations)
      if (r.comm == comm->comm.get() && r.kind == RegistrationKind::symmetric) *out = r.handle;
  });
}

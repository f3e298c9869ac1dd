// C ABI: attaching communicators, commit, scopes.

#include "handles.hpp"
#include "stats.hpp"

#include <ncclpool/nccl.hpp>
#include <ncclpool/profile.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>

namespace ncclpool::capi {
namespace {

/// The C scopes of this thread, innermost last. Each owns the C++ Scope that routes allocations.
struct OpenScope {
  ncclpool_pool_s* pool;
  std::unique_ptr<RegisteredPool::ScopeSet> scopes;
  Collective collective;  // what the scope's torch allocations are for
};
thread_local std::vector<OpenScope> scopes;

void attach(ncclpool_pool_s& pool, std::shared_ptr<Communicator> comm, ncclpool_registration_t kind, ncclpool_comm_t* out) {
  auto handle = std::make_unique<ncclpool_comm_s>();
  handle->pool = &pool;
  handle->comm = std::move(comm);
  // A kind, or none for the pool's own choice (AUTO), which a pool that does not choose refuses.
  registration_request(kind, /*with_default=*/true, "registration kind");
  const std::optional<RegistrationKind> as =
      registration_request(kind == NCCLPOOL_REGISTRATION_DEFAULT ? pool.options.default_registration : kind, false, "registration kind");
  // Reserve the slot first, so that a successful attach cannot fail afterwards.
  std::lock_guard lock(pool.comms_mutex);
  pool.comms.reserve(pool.comms.size() + 1);
  pool.registered->attach(handle->comm, as);  // throws with nothing registered
  *out = handle.get();
  pool.comms.push_back(std::move(handle));
}

/// Removes comm from its pool's list (after the registry let go of it) and frees the handle.
void drop(ncclpool_comm_s* comm) {
  ncclpool_pool_s& pool = *comm->pool;
  auto it = std::find_if(pool.comms.begin(), pool.comms.end(), [&](const auto& c) { return c.get() == comm; });
  if (it != pool.comms.end()) pool.comms.erase(it);
}

void require_attached(ncclpool_comm_s* comm, const char* what) {
  require(comm, what);
  require(comm->pool, "comm->pool");
}

/// Takes the innermost scope off this thread's stack; it must belong to `pool`.
std::unique_ptr<RegisteredPool::ScopeSet> pop_scope(ncclpool_pool_s* pool, const char* what) {
  require(pool, "pool");
  if (scopes.empty()) throw InvalidState(std::string(what) + "('" + pool->name + "'): this thread has no open scope");
  if (scopes.back().pool != pool)
    throw InvalidState(std::string(what) + "('" + pool->name + "'): the innermost open scope of this thread is pool '" +
                       scopes.back().pool->name + "'; scopes must end in reverse order");
  std::unique_ptr<RegisteredPool::ScopeSet> scope = std::move(scopes.back().scopes);
  scopes.pop_back();
  return scope;
}

}  // namespace

ncclpool_pool_s* innermost_pool() noexcept { return scopes.empty() ? nullptr : scopes.back().pool; }
Collective innermost_collective() noexcept { return scopes.empty() ? Collective::any : scopes.back().collective; }

}  // namespace ncclpool::capi

using namespace ncclpool;
using ncclpool::capi::guarded;
using ncclpool::capi::require;

extern "C" {

ncclpool_status_t ncclpool_attach_nccl(ncclpool_pool_t pool, void* nccl_comm, ncclpool_registration_t kind, ncclpool_comm_t* out) {
  return guarded("ncclpool_attach_nccl", [&] {
    require(pool, "pool");
    require(out, "comm (output)");
    *out = nullptr;
    // A simulator pool has no GPU for an NCCL communicator; a null, negative (upper-half) or misaligned
    // value is no ncclComm_t (NCCL allocates it). Anything else cannot be checked: it must be a live
    // ncclComm_t of the process's NCCL (undefined behaviour otherwise, as in NCCL's own calls).
    const auto address = reinterpret_cast<std::uintptr_t>(nccl_comm);
    if (nccl_comm == nullptr || static_cast<std::intptr_t>(address) < 0 || address % alignof(void*) != 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%#jx", static_cast<std::uintmax_t>(address));
      throw InvalidArgument(std::string("nccl_comm ") + text + " is not an ncclComm_t (null, negative or not aligned to " +
                            std::to_string(alignof(void*)) + " bytes)");
    }
    if (pool->options.source == NCCLPOOL_SOURCE_SIM)
      throw InvalidArgument("pool '" + pool->name + "' is a simulator (SIM) pool: an NCCL communicator needs a pool on a GPU source; "
                            "attach a simulated group with ncclpool_attach_sim");
    NcclCommunicatorOptions options;  // the backend reads no profile: the C ABI looks it up for it
    options.profile_lookup = [](const MachineKey& m) { return find_profile(m.gpu, m.nccl_version, m.ranks); };
    capi::attach(*pool, make_nccl_communicator(nccl_comm, options), kind, out);
  });
}

ncclpool_status_t ncclpool_attach_sim(ncclpool_pool_t pool, ncclpool_sim_group_t group, int rank, ncclpool_registration_t kind, ncclpool_comm_t* out) {
  return guarded("ncclpool_attach_sim", [&] {
    require(pool, "pool");
    require(group, "group");
    require(out, "comm (output)");
    *out = nullptr;
    if (rank < 0 || rank >= group->group->size())
      throw InvalidArgument("rank " + std::to_string(rank) + " is outside sim group '" + group->group->name() + "' of size " +
                            std::to_string(group->group->size()));
    capi::attach(*pool, std::make_shared<LoopbackCommunicator>(group->group, rank, pool->options.device), kind, out);
  });
}

ncclpool_status_t ncclpool_detach(ncclpool_comm_t comm) {
  return guarded("ncclpool_detach", [&] {
    capi::require_attached(comm, "comm");
    std::lock_guard lock(comm->pool->comms_mutex);
    try {
      comm->pool->registered->detach(*comm->comm);
    } catch (...) {
      // A failed detach agreement leaves the communicator attached (every rank alike); a refused
      // deregistration detaches it regardless: then the handle goes too, or it could never be
      // detached or forgotten again.
      if (!comm->pool->registered->attached(*comm->comm)) capi::drop(comm);
      throw;
    }
    capi::drop(comm);
  });
}

ncclpool_status_t ncclpool_forget(ncclpool_comm_t comm) {
  return guarded("ncclpool_forget", [&] {
    capi::require_attached(comm, "comm");
    std::lock_guard lock(comm->pool->comms_mutex);
    comm->pool->registered->forget(*comm->comm);
    capi::drop(comm);
  });
}

ncclpool_status_t ncclpool_commit(ncclpool_pool_t pool) {
  return guarded("ncclpool_commit", [&] { require(pool, "pool")->registered->commit(); });
}

ncclpool_status_t ncclpool_commit_after_error(ncclpool_pool_t pool) {
  return guarded("ncclpool_commit_after_error", [&] { require(pool, "pool")->registered->commit_after_error(); });
}

ncclpool_status_t ncclpool_vote_no(ncclpool_pool_t pool, const char* why) {
  return guarded("ncclpool_vote_no", [&] { require(pool, "pool")->registered->vote_no(why ? why : "no reason given"); });
}

ncclpool_status_t ncclpool_poll(ncclpool_pool_t pool) {
  return guarded("ncclpool_poll", [&] { require(pool, "pool")->registered->poll(); });
}

ncclpool_status_t ncclpool_verify_buffers(ncclpool_comm_t comm, const void* const* buffers, size_t count) {
  return guarded("ncclpool_verify_buffers", [&] {
    capi::require_attached(comm, "comm");
    if (count != 0) require(buffers, "buffers");
    verify_symmetric_buffers(*comm->comm, std::vector<const void*>(buffers, buffers + count));
  });
}

ncclpool_status_t ncclpool_pending(ncclpool_pool_t pool, size_t* pending) {
  return guarded("ncclpool_pending", [&] { *require(pending, "pending") = require(pool, "pool")->registered->pending(); });
}

ncclpool_status_t ncclpool_comm_stats(ncclpool_comm_t comm, ncclpool_comm_stats_t* out) {
  return guarded("ncclpool_comm_stats", [&] {
    capi::require_attached(comm, "comm");
    require(out, "stats");
    capi::fill_stats(out, capi::stats_layout(NCCLPOOL_STATS_COMM), [&] { return capi::comm_stats(*comm); });
  });
}

ncclpool_status_t ncclpool_comm_handle_of(ncclpool_comm_t comm, const void* ptr, void** handle) {
  return guarded("ncclpool_comm_handle_of", [&] {
    capi::require_attached(comm, "comm");
    *require(handle, "handle (output)") = comm->pool->registered->handle_of(ptr, *comm->comm);
  });
}

ncclpool_status_t ncclpool_scope_begin(ncclpool_pool_t pool) { return ncclpool_scope_begin_for(pool, NCCLPOOL_COLLECTIVE_ANY); }

ncclpool_status_t ncclpool_scope_begin_for(ncclpool_pool_t pool, ncclpool_collective_t collective) {
  return guarded("ncclpool_scope_begin", [&] {
    require(pool, "pool");
    const Collective c = capi::collective_of(collective);
    capi::scopes.reserve(capi::scopes.size() + 1);  // so the push below cannot throw
    auto scope = std::make_unique<RegisteredPool::ScopeSet>(*pool->registered);
    capi::scopes.push_back(capi::OpenScope{pool, std::move(scope), c});
  });
}

ncclpool_status_t ncclpool_scope_end(ncclpool_pool_t pool) {
  return guarded("ncclpool_scope_end", [&] {
    std::unique_ptr<RegisteredPool::ScopeSet> scope = capi::pop_scope(pool, "scope_end");
    scope->close();  // pops; commits at the registry's scheduled scope ends (nothing under graph capture)
  });
}

ncclpool_status_t ncclpool_scope_end_after_error(ncclpool_pool_t pool) {
  return guarded("ncclpool_scope_end_after_error", [&] { capi::pop_scope(pool, "scope_end_after_error")->close_after_error(); });
}

ncclpool_status_t ncclpool_scope_leave(ncclpool_pool_t pool) {
  return guarded("ncclpool_scope_leave", [&] { capi::pop_scope(pool, "scope_leave")->abandon(); });
}

ncclpool_pool_t ncclpool_current_pool(void) { return capi::innermost_pool(); }

}  // extern "C"

#pragma once
// What the C ABI's opaque handles are, and the one wrapper every entry point runs its body in.

#include <ncclpool/ncclpool.h>
#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/registered_pool.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

// A C handle of an attached communicator: what it is attached with is the pool's to say
// (RegisteredPool::stats(comm)); the handle only keeps the object the caller holds alive.
struct ncclpool_comm_s {
  ncclpool_pool_s* pool = nullptr;
  std::shared_ptr<ncclpool::Communicator> comm;
};

struct ncclpool_pool_s {
  std::string name;
  std::string agreed_settings;        // options.agreed_settings points at it (NULL when empty)
  ncclpool_pool_options_t options{};  // resolved; options.name points at `name`
  std::unique_ptr<ncclpool::RegisteredPool> registered;  // a SinglePool, or an AutoPool
  std::mutex comms_mutex;  // guards comms (the registry has its own lock)
  std::vector<std::unique_ptr<ncclpool_comm_s>> comms;
  bool torch_bound = false;  // guarded by the global pool table's lock (torch_allocator.cpp)
};

struct ncclpool_sim_group_s {
  std::shared_ptr<ncclpool::LoopbackGroup> group;
};

namespace ncclpool::capi {

/// Records a failure for ncclpool_last_error() and returns its status.
ncclpool_status_t fail(ncclpool_status_t status, const std::string& message) noexcept;

/// Runs body (which returns void), translating every exception into a status + last error.
/// `where` names the C function, so messages say which call failed.
template <class Body>
ncclpool_status_t guarded(const char* where, Body&& body) noexcept {
  try {
    body();
    return NCCLPOOL_SUCCESS;
  } catch (const ncclpool::Error& e) {
    return fail(static_cast<ncclpool_status_t>(e.code()), std::string(where) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(NCCLPOOL_ERROR_INTERNAL, std::string(where) + ": out of host memory");
  } catch (const std::exception& e) {
    return fail(NCCLPOOL_ERROR_INTERNAL, std::string(where) + ": unexpected error: " + e.what());
  } catch (...) {
    return fail(NCCLPOOL_ERROR_INTERNAL, std::string(where) + ": unexpected non-standard exception");
  }
}

/// Throws InvalidArgument naming the parameter when p is null.
template <class T>
T* require(T* p, const char* what) {
  if (p == nullptr) throw ncclpool::InvalidArgument(std::string(what) + " is NULL");
  return p;
}

inline constexpr std::size_t kMiB = 1ull << 20;
inline constexpr std::size_t kGiB = 1ull << 30;


/// options->struct_size checked: this header's size, or the first release's (before agreed_settings).
/// @throws InvalidArgument naming `what` for any other.
std::size_t options_size(std::size_t struct_size, const char* what);

/// The C enum as the C++ one. @throws InvalidArgument for a value outside it.
ncclpool::Collective collective_of(ncclpool_collective_t collective);

/// What an ncclpool_registration_t asks for (names.cpp, the one map of those values): a kind, or
/// nullopt for the pool's own choice (AUTO) or its default (DEFAULT, where `with_default`).
/// @throws InvalidArgument "<what> <value> is not DEFAULT (-1), LOCAL (0), ..." for any other value.
std::optional<ncclpool::RegistrationKind> registration_request(int value, bool with_default, const std::string& what);
/// The ncclpool_registration_t a communicator attached with `kind` reports (stats' kind).
int registration_value(ncclpool::RegistrationKind kind) noexcept;
/// "local", "symmetric", "auto", "default"; "unknown" for any other value.
const char* registration_name(int value) noexcept;
/// The name of an ncclpool_source_t ("vmm"), or nullptr for a value outside NCCLPOOL_SOURCES.
const char* source_name(int source) noexcept;

/// Every live pool, so torch's free (which passes only a pointer) can find the owner.
void register_pool(ncclpool_pool_s* pool);
void unregister_pool(ncclpool_pool_s* pool) noexcept;

/// The pool of the calling thread's innermost C scope, or nullptr.
ncclpool_pool_s* innermost_pool() noexcept;
/// The collective the innermost C scope's allocations are for (ncclpool_scope_begin_for), or any.
ncclpool::Collective innermost_collective() noexcept;

}  // namespace ncclpool::capi

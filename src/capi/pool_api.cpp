// C ABI: pool creation, allocation and statistics.

#include "handles.hpp"

#include "core/json.hpp"
#include "stats.hpp"

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/sim.hpp>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace ncclpool::capi {
namespace {

/// Fills in every default (auto source, chunk, alignment, determinism) and checks the ranges.
ncclpool_pool_options_t resolve(const ncclpool_pool_options_t& in) {
  ncclpool_pool_options_t out = in;
  const std::string who = "pool '" + std::string(in.name ? in.name : "ncclpool") + "'";
  if (out.default_registration == NCCLPOOL_REGISTRATION_DEFAULT) out.default_registration = NCCLPOOL_REGISTRATION_LOCAL;
  // A kind (a single pool: its defaults are the kind's), or none: an auto pool, deterministic, whose
  // parts choose their own growth chunks (make_auto_pool).
  const std::optional<RegistrationKind> kind = registration_request(out.default_registration, /*with_default=*/false, who + ": default_registration");
  const bool deterministic = !kind || registration_ops(*kind).needs_deterministic_pool;
  if (source_name(out.source) == nullptr) throw InvalidArgument(who + ": source " + std::to_string(out.source) + " is not a ncclpool_source_t");
  if (out.source == NCCLPOOL_SOURCE_AUTO) out.source = cuda_available() ? NCCLPOOL_SOURCE_VMM : NCCLPOOL_SOURCE_SIM;
  if (out.growth_chunk == 0 && kind) out.growth_chunk = registration_ops(*kind).default_growth_chunk;
  if (out.alignment == 0) out.alignment = 512;
  if (out.deterministic < 0) out.deterministic = deterministic ? 1 : 0;
  if (out.deterministic > 1) throw InvalidArgument(who + ": deterministic must be 0, 1 or -1 (auto)");
  if (deterministic && out.deterministic == 0)
    throw InvalidArgument(who + ": a pool whose default registration is " + registration_name(out.default_registration) +
                          " must be deterministic (set deterministic = 1 or -1)");
  if (out.device < 0) throw InvalidArgument(who + ": device " + std::to_string(out.device) + " is negative");
  if (out.check < -1 || out.check > 2) throw InvalidArgument(who + ": check " + std::to_string(out.check) + " is not -1 (environment), 0, 1 or 2");
  if (out.check == -1) out.check = static_cast<int>(check_level_from_env());
  return out;
}

std::shared_ptr<SegmentSource> make_source(const ncclpool_pool_options_t& o) {
  switch (o.source) {
    case NCCLPOOL_SOURCE_SIM: {
      SimSourceConfig config;
      config.device = o.device;
      if (o.sim_capacity != 0) config.capacity = o.sim_capacity;
      return std::make_shared<SimSource>(config);
    }
    case NCCLPOOL_SOURCE_CUDA: return make_cuda_source(o.device);
    case NCCLPOOL_SOURCE_VMM: {
      VmmSourceOptions vmm;
      vmm.device = o.device;
      return make_vmm_source(vmm);
    }
    case NCCLPOOL_SOURCE_VMM_HOST_NUMA: {
      VmmSourceOptions vmm;
      vmm.device = o.device;
      vmm.location = VmmLocation::host_numa;
      return make_vmm_source(vmm);
    }
    case NCCLPOOL_SOURCE_NCCL: return make_nccl_source(o.device);
    default: throw InvalidArgument(std::string("no segment source for '") + (source_name(o.source) ? source_name(o.source) : "unknown") + "'");
  }
}

PoolConfig pool_config(const ncclpool_pool_options_t& o) {
  PoolConfig config;
  config.name = o.name;
  config.alignment = o.alignment;
  config.growth_chunk = o.growth_chunk;
  config.min_segment = o.min_segment;
  config.max_reserved = o.max_reserved;
  config.deterministic = o.deterministic == 1;
  return config;
}

// Whether windows are possible in this process (auto_routes_windows with this process's NCCL and
// GPU; the simulator's communicators can always register windows): the routes an auto pool shows
// until its first attach decides them with the communicator's answers. `ncclpool info` says the same.
bool windows_possible_here(const ncclpool_pool_options_t& o, std::string* why) {
  if (o.source == NCCLPOOL_SOURCE_SIM) return true;
  const NcclInfo nccl = nccl_info();
  const std::string nccl_why = !nccl.available ? nccl.why_not : "NCCL " + std::to_string(nccl.version) + " has no window API (needs >= 2.27)";
  return auto_routes_windows(/*source: the part's own check*/ true, nccl.available && nccl.windows, nccl_why, symmetric_kernels_on(o.device).enabled, why);
}

std::string full_json(ncclpool_pool_s& p) {
  const RegisteredPool& r = *p.registered;
  const Registry& registry = r.first_registry();
  std::ostringstream out;
  out << "{\"name\":" << json_quote(p.name) << ",\"device\":" << p.options.device
      << ",\"source\":" << json_quote(r.parts().front().pool->source_properties().description)
      << ",\"kind\":\"" << registration_name(p.options.default_registration) << "\""
      << ",\"growth_chunk\":" << p.options.growth_chunk << ",\"min_segment\":" << p.options.min_segment
      << ",\"deterministic\":" << (p.options.deterministic ? "true" : "false")
      << ",\"check\":\"" << to_string(registry.check_level()) << "\""
      << ",\"stats\":" << to_json(r.stats());
  out << ",\"breakdown\":" << to_json(r.memory_breakdown());
  out << ",\"pending_registrations\":" << r.pending() << ",\"scope_ends\":" << registry.scope_ends()
      << ",\"scope_period\":" << registry.scope_period() << ",\"next_committing_scope_end\":" << registry.next_committing_scope_end();
  if (const std::string routes = r.routes_json(); !routes.empty()) out << ",\"routes\":" << routes;  // an auto pool's
  const SymmetricKernels kernels = symmetric_kernels_on(p.options.device);  // process-wide, as the CTAs
  out << ",\"symmetric_kernels\":{\"decided\":" << (kernels.decided ? "true" : "false") << ",\"enabled\":" << (kernels.enabled ? "true" : "false")
      << ",\"hazard\":" << (kernels.hazard ? "true" : "false") << ",\"why\":" << json_quote(kernels.why) << "}";
  const SymmetricCtas ctas = symmetric_ctas();  // process-wide: decided at the first symmetric attach
  out << ",\"symmetric_ctas\":{\"decided\":" << (ctas.decided ? "true" : "false") << ",\"ctas\":" << ctas.ctas
      << ",\"source\":" << json_quote(ctas.source) << "}";
  out << ",\"communicators\":[";
  std::lock_guard lock(p.comms_mutex);
  for (std::size_t i = 0; i < p.comms.size(); ++i) {
    const auto& c = *p.comms[i];
    out << (i ? "," : "") << "{\"communicator\":" << json_quote(c.comm->describe());
    write_json_fields(out, comm_stats(c));
    out << "}";
  }
  out << "]}";
  return out.str();
}

stream_t as_stream(void* stream) { return reinterpret_cast<stream_t>(stream); }

}  // namespace

// The pool options' sizes this library accepts: this header's, and the first release's (up to
// min_segment, before agreed_settings).
std::size_t options_size(std::size_t struct_size, const char* what) {
  constexpr std::size_t first_release = offsetof(ncclpool_pool_options_t, agreed_settings);
  if (struct_size == sizeof(ncclpool_pool_options_t) || struct_size == first_release) return struct_size;
  throw InvalidArgument(std::string(what) + " is " + std::to_string(struct_size) + ", expected " + std::to_string(sizeof(ncclpool_pool_options_t)) +
                        " (or " + std::to_string(first_release) + " from a caller built before agreed_settings): call ncclpool_pool_options_init first");
}

Collective collective_of(ncclpool_collective_t collective) {
  if (collective < NCCLPOOL_COLLECTIVE_ANY || collective >= kCollectives)
    throw InvalidArgument("collective " + std::to_string(collective) + " is not ANY (0), ALL_GATHER (1), REDUCE_SCATTER (2) or ALL_REDUCE (3)");
  return static_cast<Collective>(collective);
}

}  // namespace ncclpool::capi

using namespace ncclpool;
using ncclpool::capi::guarded;
using ncclpool::capi::require;

extern "C" {

void ncclpool_pool_options_init(ncclpool_pool_options_t* options) {
  if (options == nullptr) return;
  *options = ncclpool_pool_options_t{};
  options->struct_size = sizeof(ncclpool_pool_options_t);
  options->source = NCCLPOOL_SOURCE_AUTO;
  options->default_registration = NCCLPOOL_REGISTRATION_LOCAL;
  options->deterministic = -1;
  options->check = -1;
}

ncclpool_status_t ncclpool_pool_create(const ncclpool_pool_options_t* options, ncclpool_pool_t* out) {
  return guarded("ncclpool_pool_create", [&] {
    require(options, "options");
    require(out, "pool (output)");
    *out = nullptr;
    ncclpool_pool_options_t given{};  // a caller built before agreed_settings passes the smaller struct
    std::memcpy(&given, options, capi::options_size(options->struct_size, "options->struct_size"));
    given.struct_size = sizeof(ncclpool_pool_options_t);
    auto handle = std::make_unique<ncclpool_pool_s>();
    handle->name = given.name ? given.name : "ncclpool";
    handle->agreed_settings = given.agreed_settings ? given.agreed_settings : "";
    handle->options = capi::resolve(given);
    handle->options.name = handle->name.c_str();
    handle->options.agreed_settings = handle->agreed_settings.empty() ? nullptr : handle->agreed_settings.c_str();
    RegistryOptions registry_options{static_cast<CheckLevel>(handle->options.check)};
    registry_options.agreed_settings = handle->agreed_settings;
    if (handle->options.default_registration == NCCLPOOL_REGISTRATION_AUTO) {
      const ncclpool_pool_options_t& o = handle->options;
      AutoPoolConfig config;
      config.name = handle->name;
      config.make_source = [o](RegistrationKind) { return capi::make_source(o); };
      config.alignment = o.alignment;
      config.growth_chunk = o.growth_chunk;
      config.min_segment = o.min_segment;
      config.max_reserved = o.max_reserved;
      config.registry = registry_options;
      config.windows_possible = capi::windows_possible_here(o, &config.why_no_windows);
      handle->registered = make_auto_pool(config);
    } else {
      auto pool = std::make_shared<Pool>(capi::make_source(handle->options), capi::pool_config(handle->options));
      handle->registered = std::make_unique<SinglePool>(std::move(pool), registry_options);
    }
    capi::register_pool(handle.get());
    *out = handle.release();
  });
}

ncclpool_status_t ncclpool_pool_destroy(ncclpool_pool_t pool) {
  return guarded("ncclpool_pool_destroy", [&] {
    require(pool, "pool");
    if (const int open = pool->registered->open_scopes(); open != 0)
      throw InvalidState("pool '" + pool->name + "': " + std::to_string(open) +
                         " scope(s) of this pool are still open (ncclpool_scope_begin, Pool.scope, ncclpool.torch contexts): end them first");
    const PoolStats stats = pool->registered->stats();
    if (stats.active_allocations != 0)
      throw InvalidState("pool '" + pool->name + "': " + std::to_string(stats.active_allocations) + " allocations (" +
                         std::to_string(stats.allocated_bytes) +
                         " bytes) are still live; free them first (PyTorch: drop the tensors and the MemPool, then "
                         "torch.cuda.empty_cache())");
    {
      std::lock_guard lock(pool->comms_mutex);
      for (const auto& c : pool->comms)
        if (pool->registered->stats(*c->comm).has_windows)
          throw InvalidState("pool '" + pool->name + "': " + c->comm->describe() +
                             " is attached with symmetric windows; detach it (collective) or forget it first");
    }
    capi::unregister_pool(pool);
    pool->registered.reset();  // deregisters local registrations, releases the segments
    delete pool;
  });
}

ncclpool_status_t ncclpool_pool_get_options(ncclpool_pool_t pool, ncclpool_pool_options_t* options) {
  return guarded("ncclpool_pool_get_options", [&] {
    require(pool, "pool");
    require(options, "options");
    // The fields the caller's struct has: all of this header's when struct_size says so, else the
    // first release's (whose callers may leave struct_size unset: it never mattered here), never more.
    const std::size_t size = options->struct_size == sizeof(ncclpool_pool_options_t) ? sizeof(ncclpool_pool_options_t)
                                                                                      : offsetof(ncclpool_pool_options_t, agreed_settings);
    std::memcpy(options, &pool->options, size);
    options->struct_size = size;
  });
}

const char* ncclpool_pool_source_description(ncclpool_pool_t pool) {
  return pool ? pool->registered->parts().front().pool->source_properties().description.c_str() : "";
}

ncclpool_status_t ncclpool_alloc(ncclpool_pool_t pool, size_t size, void* stream, void** ptr) {
  return guarded("ncclpool_alloc", [&] {
    require(pool, "pool");
    require(ptr, "ptr (output)");
    *ptr = pool->registered->allocate(size, capi::as_stream(stream));
  });
}

ncclpool_status_t ncclpool_alloc_for(ncclpool_pool_t pool, size_t size, void* stream, ncclpool_collective_t collective, void** ptr) {
  return guarded("ncclpool_alloc_for", [&] {
    require(pool, "pool");
    require(ptr, "ptr (output)");
    *ptr = pool->registered->allocate(size, capi::as_stream(stream), capi::collective_of(collective));
  });
}

ncclpool_status_t ncclpool_free(ncclpool_pool_t pool, void* ptr, void* stream) {
  return guarded("ncclpool_free", [&] { require(pool, "pool")->registered->deallocate(ptr, capi::as_stream(stream)); });
}

ncclpool_status_t ncclpool_free_on_alloc_stream(ncclpool_pool_t pool, void* ptr) {
  return guarded("ncclpool_free_on_alloc_stream", [&] { require(pool, "pool")->registered->deallocate(ptr); });
}

ncclpool_status_t ncclpool_publish_frees(ncclpool_pool_t pool, void* stream) {
  return guarded("ncclpool_publish_frees", [&] { require(pool, "pool")->registered->publish_frees(capi::as_stream(stream)); });
}

ncclpool_status_t ncclpool_reserve(ncclpool_pool_t pool, size_t bytes) {
  return guarded("ncclpool_reserve", [&] { require(pool, "pool")->registered->reserve(bytes); });
}

ncclpool_status_t ncclpool_trim(ncclpool_pool_t pool, size_t* released_bytes) {
  return guarded("ncclpool_trim", [&] {
    const std::size_t released = require(pool, "pool")->registered->trim();
    if (released_bytes) *released_bytes = released;
  });
}

ncclpool_status_t ncclpool_check(ncclpool_pool_t pool) {
  return guarded("ncclpool_check", [&] {
    require(pool, "pool")->registered->check_invariants();
  });
}

ncclpool_status_t ncclpool_pool_stats(ncclpool_pool_t pool, ncclpool_pool_stats_t* out) {
  return guarded("ncclpool_pool_stats", [&] {
    require(pool, "pool");
    require(out, "stats");
    capi::fill_stats(out, capi::stats_layout(NCCLPOOL_STATS_POOL), [&] { return capi::pool_stats(*pool); });
  });
}

ncclpool_status_t ncclpool_pool_stats_json(ncclpool_pool_t pool, char* buffer, size_t capacity, size_t* needed) {
  return guarded("ncclpool_pool_stats_json", [&] {
    const std::string json = capi::full_json(*require(pool, "pool"));
    if (needed) *needed = json.size() + 1;
    if (buffer == nullptr && capacity == 0 && needed) return;  // size query
    require(buffer, "buffer");
    if (capacity < json.size() + 1)
      throw InvalidArgument("buffer holds " + std::to_string(capacity) + " bytes, the JSON needs " + std::to_string(json.size() + 1));
    std::memcpy(buffer, json.c_str(), json.size() + 1);
  });
}

}  // extern "C"

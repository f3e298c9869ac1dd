// C ABI: the simulator's groups and fault knobs, so C and Python tests run the registry on a CPU.

#include "handles.hpp"

#include <ncclpool/limit_source.hpp>
#include <ncclpool/sim.hpp>

#include <chrono>

using namespace ncclpool;
using ncclpool::capi::guarded;
using ncclpool::capi::require;

namespace {

// The simulator sources of a SIM pool (an auto pool has one per part).
std::vector<SimSource*> sim_sources_of(ncclpool_pool_s& pool, const char* what) {
  std::vector<SimSource*> out;
  for (const auto& part : pool.registered->parts()) {
    SegmentSource* source = &part.pool->source();
    if (auto* limited = dynamic_cast<LimitSource*>(source)) source = &limited->inner();
    auto* sim = dynamic_cast<SimSource*>(source);
    if (sim == nullptr)
      throw InvalidArgument(std::string(what) + ": pool '" + pool.name + "' is not a SIM pool (its source is " +
                            part.pool->source_properties().description + ")");
    out.push_back(sim);
  }
  return out;
}

}  // namespace

extern "C" {

ncclpool_status_t ncclpool_sim_group_create_matching(const char* name, int size, int timeout_ms, int matching, ncclpool_sim_group_t* out) {
  return guarded("ncclpool_sim_group_create", [&] {
    require(out, "group (output)");
    *out = nullptr;
    if (size < 1) throw InvalidArgument("sim group size " + std::to_string(size) + " must be at least 1");
    if (timeout_ms < 1) throw InvalidArgument("sim group timeout " + std::to_string(timeout_ms) + " ms must be positive");
    if (matching != 0 && matching != 1) throw InvalidArgument("sim group matching " + std::to_string(matching) + " is not 0 (strict) or 1 (nccl)");
    auto handle = std::make_unique<ncclpool_sim_group_s>();
    handle->group = std::make_shared<LoopbackGroup>(name ? name : "sim", size, std::chrono::milliseconds(timeout_ms),
                                                    static_cast<LoopbackMatching>(matching));
    *out = handle.release();
  });
}

ncclpool_status_t ncclpool_sim_group_create(const char* name, int size, int timeout_ms, ncclpool_sim_group_t* out) {
  return ncclpool_sim_group_create_matching(name, size, timeout_ms, 0, out);
}

ncclpool_status_t ncclpool_sim_user_collective(ncclpool_comm_t comm, uint64_t argument) {
  return guarded("ncclpool_sim_user_collective", [&] {
    require(comm, "comm");
    auto* loopback = dynamic_cast<LoopbackCommunicator*>(comm->comm.get());
    if (loopback == nullptr) throw InvalidArgument("ncclpool_sim_user_collective: " + comm->comm->describe() + " is not a sim communicator");
    loopback->user_collective(argument);
  });
}

ncclpool_status_t ncclpool_sim_group_destroy(ncclpool_sim_group_t group) {
  return guarded("ncclpool_sim_group_destroy", [&] { delete require(group, "group"); });
}

ncclpool_status_t ncclpool_sim_group_live_registrations(ncclpool_sim_group_t group, uint64_t* count) {
  return guarded("ncclpool_sim_group_live_registrations", [&] {
    *require(count, "count") = static_cast<uint64_t>(require(group, "group")->group->live_registrations());
  });
}

ncclpool_status_t ncclpool_sim_group_inject_failure(ncclpool_sim_group_t group, int op, int rank, int nth) {
  return guarded("ncclpool_sim_group_inject_failure", [&] {
    require(group, "group");
    if (op < 0 || op > 3) throw InvalidArgument("op " + std::to_string(op) + " is not 0..3");
    group->group->inject_failure(static_cast<LoopbackOp>(op), rank, nth);
  });
}

ncclpool_status_t ncclpool_sim_group_set_symmetric_kernels(ncclpool_sim_group_t group, int rank, int setting) {
  return guarded("ncclpool_sim_group_set_symmetric_kernels", [&] {
    constexpr int flags = NCCLPOOL_SIM_SYMMETRIC_KERNELS_OFF | NCCLPOOL_SIM_SYMMETRIC_KERNELS_FENCED;
    static_assert(NCCLPOOL_SIM_SYMMETRIC_KERNELS_OFF == kSymmetricKernelsOff && NCCLPOOL_SIM_SYMMETRIC_KERNELS_FENCED == kSymmetricKernelsFenced);
    const int ctas = setting & ~flags;
    if (setting != -1 && (setting < 0 || ctas > 64 || (setting & flags) == flags))
      throw InvalidArgument("setting " + std::to_string(setting) + " is not -1..64, or a CTA count 0..64 plus NCCLPOOL_SIM_SYMMETRIC_KERNELS_OFF "
                            "or NCCLPOOL_SIM_SYMMETRIC_KERNELS_FENCED");
    require(group, "group")->group->set_symmetric_kernels(rank, setting);
  });
}

ncclpool_status_t ncclpool_sim_set_capturing(ncclpool_pool_t pool, int capturing) {
  return guarded("ncclpool_sim_set_capturing", [&] {
    for (SimSource* sim : sim_sources_of(*require(pool, "pool"), "ncclpool_sim_set_capturing")) sim->sim_ordering().set_capturing(capturing != 0);
  });
}

ncclpool_status_t ncclpool_sim_inject_oom(ncclpool_pool_t pool, int count) {
  return guarded("ncclpool_sim_inject_oom", [&] {
    if (count < 0) throw InvalidArgument("ncclpool_sim_inject_oom: count " + std::to_string(count) + " is negative");
    for (SimSource* sim : sim_sources_of(*require(pool, "pool"), "ncclpool_sim_inject_oom")) sim->inject_oom(count);
  });
}

}  // extern "C"

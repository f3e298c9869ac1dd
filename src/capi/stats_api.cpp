// C ABI: statistics. The C structs made from the C++ ones, the check of a caller's struct_size,
// ncclpool_stats_fields' tables and the communicators' JSON, all from the field lists
// (stats_fields.h); ncclpool_pool_stats and ncclpool_comm_stats call them.

#include "stats.hpp"

#include "handles.hpp"

#include <cstddef>
#include <iterator>

namespace ncclpool::capi {
namespace {

// A C++ value as the C struct holds it: a registration kind as the C enum (which has no NONE: no
// communicator is attached as none), anything else as it is.
template <class T>
T c_value(T value) noexcept {
  return value;
}
int c_value(RegistrationKind kind) noexcept { return registration_value(kind); }

constexpr const char* kStructSizeDoc =
    "set by the caller to sizeof the struct it passes; the library sets it to the bytes it wrote";

// ncclpool_stats_fields' tables: struct_size, then a row per field of the list, in the struct
// NCCLPOOL_ROW_STRUCT names.
#define NCCLPOOL_STRUCT_SIZE_ROW {"struct_size", NCCLPOOL_FIELD_SIZE, offsetof(NCCLPOOL_ROW_STRUCT, struct_size), kStructSizeDoc},
#define NCCLPOOL_ROW(type, name, merge, scope, doc) \
  {#name, NCCLPOOL_STATS_FIELD_TYPE_##type, offsetof(NCCLPOOL_ROW_STRUCT, name), doc},
#define NCCLPOOL_ROW_STRUCT ncclpool_pool_stats_t
constexpr ncclpool_stats_field_t kPoolFields[] = {NCCLPOOL_STRUCT_SIZE_ROW NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_ROW)};
#undef NCCLPOOL_ROW_STRUCT
#define NCCLPOOL_ROW_STRUCT ncclpool_comm_stats_t
constexpr ncclpool_stats_field_t kCommFields[] = {NCCLPOOL_STRUCT_SIZE_ROW NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_ROW)};
#undef NCCLPOOL_ROW_STRUCT
#undef NCCLPOOL_ROW
#undef NCCLPOOL_STRUCT_SIZE_ROW
static_assert(std::size(kPoolFields) >= 1 + NCCLPOOL_POOL_STATS_FIELDS_0_1, "the first release's fields are in the list");
static_assert(std::size(kCommFields) >= 1 + NCCLPOOL_COMM_STATS_FIELDS_0_1, "the first release's fields are in the list");

const StatsLayout kPoolLayout{kPoolFields, std::size(kPoolFields), NCCLPOOL_POOL_STATS_FIELDS_0_1,
                              sizeof(ncclpool_pool_stats_t), alignof(ncclpool_pool_stats_t), "ncclpool_pool_stats_t"};
const StatsLayout kCommLayout{kCommFields, std::size(kCommFields), NCCLPOOL_COMM_STATS_FIELDS_0_1,
                              sizeof(ncclpool_comm_stats_t), alignof(ncclpool_comm_stats_t), "ncclpool_comm_stats_t"};

// One field of the C struct from the C++ one (those C++ has).
#define NCCLPOOL_TO_C(type, name, merge, scope, doc) \
  NCCLPOOL_STATS_IF_CXX_##scope(out.name = static_cast<NCCLPOOL_STATS_C_TYPE_##type>(c_value(s.name));)

// A JSON value of each field type.
void put(std::ostream& out, std::uint64_t value) { out << value; }
void put(std::ostream& out, int value) { out << value; }
void put(std::ostream& out, double value) { out << value; }
void put_registration(std::ostream& out, int kind) { out << '"' << registration_name(kind) << '"'; }
#define NCCLPOOL_JSON_PUT_size_t put
#define NCCLPOOL_JSON_PUT_uint64 put
#define NCCLPOOL_JSON_PUT_double put
#define NCCLPOOL_JSON_PUT_int put
#define NCCLPOOL_JSON_PUT_registration put_registration

}  // namespace

const StatsLayout& stats_layout(int kind) {
  switch (kind) {
    case NCCLPOOL_STATS_POOL: return kPoolLayout;
    case NCCLPOOL_STATS_COMM: return kCommLayout;
  }
  throw InvalidArgument("stats kind " + std::to_string(static_cast<int>(kind)) + " is not NCCLPOOL_STATS_POOL (0) or NCCLPOOL_STATS_COMM (1)");
}

ncclpool_pool_stats_t pool_stats(const ncclpool_pool_s& pool) {
  const PoolStats s = pool.registered->stats();
  ncclpool_pool_stats_t out{};
  out.struct_size = sizeof out;
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_TO_C)
  // The C ABI's own fields (scope c_only): the pool's attachments.
  out.attached_communicators = pool.registered->attached_count();
  out.pending_registrations = pool.registered->pending();
  return out;
}

ncclpool_comm_stats_t comm_stats(const ncclpool_comm_s& comm) {
  const CommunicatorStats s = comm.pool->registered->stats(*comm.comm);
  ncclpool_comm_stats_t out{};
  out.struct_size = sizeof out;
  NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_TO_C)
  // The kind it was attached with: AUTO for an attach with no kind, where C++ says local or symmetric.
  if (s.routed) out.kind = NCCLPOOL_REGISTRATION_AUTO;
  // The C ABI's own fields (scope c_only): the communicator's.
  out.rank = comm.comm->rank();
  out.size = comm.comm->size();
  out.device = comm.comm->device();
  return out;
}

void write_json_fields(std::ostream& out, const ncclpool_comm_stats_t& stats) {
#define NCCLPOOL_JSON_FIELD(type, name, merge, scope, doc) \
  out << ",\"" #name "\":";                                \
  NCCLPOOL_JSON_PUT_##type(out, stats.name);
  NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_JSON_FIELD)
#undef NCCLPOOL_JSON_FIELD
}

}  // namespace ncclpool::capi

using namespace ncclpool;

extern "C" {

ncclpool_status_t ncclpool_stats_fields(int kind, const ncclpool_stats_field_t** fields, size_t* count) {
  return capi::guarded("ncclpool_stats_fields", [&] {
    capi::require(fields, "fields (output)");
    capi::require(count, "count (output)");
    const capi::StatsLayout& layout = capi::stats_layout(kind);
    *fields = layout.fields;
    *count = layout.count;
  });
}

}  // extern "C"

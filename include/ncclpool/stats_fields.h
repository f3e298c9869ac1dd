/* stats_fields.h: the one list of fields of each statistics struct (plain C99 and C++).
 *
 * Each list is an X-macro (as src/backends/cuda/driver.hpp lists the CUDA entry points): one
 * X(type, name, merge, scope, doc) per field, in the order of the C struct. Everything else is made
 * from it: the C++ structs (ncclpool::PoolStats in stats.hpp, ncclpool::CommunicatorStats in
 * registry.hpp) and their operator+=, PoolStats' JSON (to_json), the C structs
 * (ncclpool_pool_stats_t, ncclpool_comm_stats_t in ncclpool.h), their conversion from the C++ ones
 * and the table of ncclpool_stats_fields(), from which the Python package builds its ctypes
 * structures. A new field is one line here (appended: see below), plus, for a field of the C ABI's
 * alone, the line of src/capi/stats_api.cpp that fills it.
 *
 *   type   size_t (std::size_t in C++), uint64 (std::uint64_t), double, int, registration
 *          (ncclpool::RegistrationKind in C++, an int holding an ncclpool_registration_t in C:
 *          LOCAL, SYMMETRIC, or AUTO for an attach with no kind).
 *          In C every size_t and uint64 field is a uint64_t.
 *   merge  how the counters of an auto pool's parts add up (operator+=): sum; max (the largest
 *          blocks: a request is served by one part); costliest (the registration kind: kinds are
 *          in increasing order of cost, so symmetric where any part has windows);
 *          any (a flag set where any part sets it);
 *          none (fields C++ does not have).
 *   scope  both: a member of the C++ struct, copied into the C one; c_only: the C ABI's alone,
 *          filled from its handles (src/capi/stats_api.cpp).
 *   doc    what the field says (ncclpool_stats_fields() returns it too).
 *
 * The C structs start with struct_size. Fields are only ever appended: a caller built against an
 * older header passes its smaller struct_size and gets the fields it knows. The first release (0.1)
 * had the first NCCLPOOL_*_STATS_FIELDS_0_1 fields of each list; no caller passes fewer.
 */
#ifndef NCCLPOOL_STATS_FIELDS_H
#define NCCLPOOL_STATS_FIELDS_H

/* ---- A pool's counters: ncclpool::PoolStats (a consistent snapshot, taken under the pool's lock)
 * and ncclpool_pool_stats_t. An auto pool's are its parts' combined. ---- */
#define NCCLPOOL_POOL_STATS_FIELDS(X)                                                                   \
  X(size_t, allocated_bytes, sum, both, "bytes in live blocks (rounded to the pool alignment)")        \
  X(size_t, peak_allocated_bytes, sum, both,                                                            \
    "highest allocated_bytes so far (an auto pool: the sum of its parts' peaks, an upper bound)")       \
  X(size_t, requested_bytes, sum, both, "bytes callers asked for in live blocks (before rounding)")    \
  X(size_t, reserved_bytes, sum, both, "bytes in segments taken from the source")                      \
  X(size_t, peak_reserved_bytes, sum, both,                                                             \
    "highest reserved_bytes so far (an auto pool: the sum of its parts' peaks, an upper bound)")        \
  X(size_t, segment_count, sum, both, "segments held now")                                             \
  X(size_t, largest_free_block, max, both, "largest block a request could get without growing")        \
  X(size_t, active_allocations, sum, both, "live blocks")                                              \
  X(uint64, allocation_count, sum, both, "successful allocate() calls, ever")                          \
  X(uint64, deallocation_count, sum, both, "frees, ever")                                              \
  X(uint64, segments_created, sum, both, "segments taken from the source, ever")                       \
  X(uint64, segments_released, sum, both, "segments handed back to the source, ever")                  \
  X(uint64, oom_count, sum, both,                                                                       \
    "allocate() calls refused for lack of memory (OutOfMemory or SizeTooLarge)")                       \
  X(uint64, oom_recoveries, sum, both, "source OOMs recovered by releasing cached segments")            \
  X(uint64, cross_stream_reuses, sum, both, "blocks handed to another stream behind a wait")           \
  X(uint64, hook_errors, sum, both, "exceptions swallowed from release observers")                     \
  X(uint64, attached_communicators, none, c_only, "communicators attached to the pool now")            \
  X(uint64, pending_registrations, none, c_only,                                                        \
    "registrations waiting for an agreement point, over every communicator (ncclpool_pending)")        \
  X(uint64, stream_publishes, sum, both, "events recorded so that other streams may reuse freed blocks") \
  X(uint64, unpublished_skips, sum, both,                                                               \
    "searches that passed over another stream's unpublished free block")                               \
  X(size_t, largest_fresh_block, max, both,                                                             \
    "largest free block that no stream owns (never used, or handed back after a device sync): any "    \
    "stream takes it without a wait, a capturing one included; what a CUDA graph capture can use "      \
    "without growing (ncclpool.torch.graph's reserve= checks it)")
#define NCCLPOOL_POOL_STATS_FIELDS_0_1 21

/* ---- One attached communicator's counters: ncclpool::CommunicatorStats (an auto pool's: summed
 * over the parts it is attached to) and ncclpool_comm_stats_t. ---- */
#define NCCLPOOL_COMM_STATS_FIELDS(X)                                                                   \
  X(registration, kind, costliest, both,                                                               \
    "how it is registered: symmetric where any part has windows with it, else local; in C the "        \
    "ncclpool_registration_t it was attached with (AUTO for an auto pool)")                            \
  X(int, rank, none, c_only, "its rank")                                                               \
  X(int, size, none, c_only, "its number of ranks")                                                    \
  X(int, device, none, c_only, "its CUDA device")                                                      \
  X(uint64, registrations, sum, both, "successful register calls, ever")                               \
  X(uint64, deregistrations, sum, both, "successful deregister calls, ever")                           \
  X(size_t, registered_segments, sum, both, "segments registered now")                                 \
  X(size_t, bytes_registered, sum, both, "bytes registered now")                                       \
  X(double, registration_seconds, sum, both, "time spent in register/deregister calls and agreements") \
  X(size_t, pending, sum, both, "segments waiting for commit()")                                       \
  X(uint64, agreements, sum, both, "all-gathers started for this communicator")                        \
  X(uint64, agreements_waited, sum, both, "of which this rank waited for (it had something to do)")    \
  X(size_t, agreements_in_flight, sum, both, "started, result not checked yet (nothing pending then)")  \
  X(uint64, errors, sum, both, "failed register/deregister calls")                                     \
  X(uint64, segments_created_in_capture, sum, both,                                                     \
    "segments that appeared while a CUDA graph was being captured, so their registration waited for "  \
    "the capture's end: the collectives captured on them do not use it (for a symmetric "              \
    "communicator: NCCL's non-symmetric kernels for the graph's lifetime); reserve and commit before " \
    "capturing to avoid it (docs/registry.md, \"Graph capture\")")                                  \
  X(int, has_windows, any, both,                                                                        \
    "1 where some part registers symmetric windows with it: its detach is collective (what the torch " \
    "layer asks to know whether a group has windows)")                                                  \
  X(int, routed, any, both,                                                                             \
    "1 where it was attached with no kind: each part registered as the auto pool's routes say")
#define NCCLPOOL_COMM_STATS_FIELDS_0_1 17

/* ---- What the lists make (used by ncclpool.h and the files named above) ---- */

/* A C struct member. */
#define NCCLPOOL_STATS_C_TYPE_size_t uint64_t
#define NCCLPOOL_STATS_C_TYPE_uint64 uint64_t
#define NCCLPOOL_STATS_C_TYPE_double double
#define NCCLPOOL_STATS_C_TYPE_int int
#define NCCLPOOL_STATS_C_TYPE_registration int
#define NCCLPOOL_STATS_C_MEMBER(type, name, merge, scope, doc) NCCLPOOL_STATS_C_TYPE_##type name;

/* A row of ncclpool_stats_fields()'s table: the type of the C member. */
#define NCCLPOOL_STATS_FIELD_TYPE_size_t NCCLPOOL_FIELD_UINT64
#define NCCLPOOL_STATS_FIELD_TYPE_uint64 NCCLPOOL_FIELD_UINT64
#define NCCLPOOL_STATS_FIELD_TYPE_double NCCLPOOL_FIELD_DOUBLE
#define NCCLPOOL_STATS_FIELD_TYPE_int NCCLPOOL_FIELD_INT
#define NCCLPOOL_STATS_FIELD_TYPE_registration NCCLPOOL_FIELD_REGISTRATION

#ifdef __cplusplus
/* Its arguments for the fields C++ has (scope both), nothing for the C ABI's own. */
#define NCCLPOOL_STATS_IF_CXX_both(...) __VA_ARGS__
#define NCCLPOOL_STATS_IF_CXX_c_only(...)

/* A C++ struct member (value-initialized: 0, RegistrationKind::none). */
#define NCCLPOOL_STATS_CXX_TYPE_size_t std::size_t
#define NCCLPOOL_STATS_CXX_TYPE_uint64 std::uint64_t
#define NCCLPOOL_STATS_CXX_TYPE_double double
#define NCCLPOOL_STATS_CXX_TYPE_int int
#define NCCLPOOL_STATS_CXX_TYPE_registration ::ncclpool::RegistrationKind
#define NCCLPOOL_STATS_CXX_MEMBER(type, name, merge, scope, doc) \
  NCCLPOOL_STATS_IF_CXX_##scope(NCCLPOOL_STATS_CXX_TYPE_##type name{};)

/* One field of operator+=(const T& other). */
#define NCCLPOOL_STATS_MERGE_sum(name) name += other.name;
#define NCCLPOOL_STATS_MERGE_max(name) \
  if (name < other.name) name = other.name;
#define NCCLPOOL_STATS_MERGE_costliest(name) \
  if (other.name > name) name = other.name;
#define NCCLPOOL_STATS_MERGE_any(name) \
  if (other.name != 0) name = other.name;
#define NCCLPOOL_STATS_MERGE_none(name)
#define NCCLPOOL_STATS_CXX_MERGE(type, name, merge, scope, doc) \
  NCCLPOOL_STATS_IF_CXX_##scope(NCCLPOOL_STATS_MERGE_##merge(name))
#endif

#endif /* NCCLPOOL_STATS_FIELDS_H */

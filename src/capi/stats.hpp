#pragma once
// The C ABI's statistics (stats_api.cpp): the C structs made from the C++ ones, the check of a
// caller's struct_size, and the communicators' JSON; all made from the field lists (stats_fields.h).

#include <ncclpool/errors.hpp>
#include <ncclpool/ncclpool.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

namespace ncclpool::capi {

/// One stats struct as this library has it (ncclpool_stats_fields' table, struct_size its first row).
struct StatsLayout {
  const ncclpool_stats_field_t* fields;
  std::size_t count;             ///< rows, struct_size included
  std::size_t first_release;     ///< fields the first release had, struct_size excluded (..._FIELDS_0_1)
  std::size_t struct_size;       ///< sizeof the struct in this library
  std::size_t alignment;         ///< alignof the struct (every version's: each starts with a size_t)
  const char* type_name;         ///< "ncclpool_pool_stats_t", for messages
};

/// @throws InvalidArgument for a kind that is not NCCLPOOL_STATS_POOL or NCCLPOOL_STATS_COMM.
const StatsLayout& stats_layout(int kind);  // an ncclpool_stats_kind_t; any other value: InvalidArgument

inline std::size_t field_bytes(ncclpool_field_type_t type) noexcept {
  switch (type) {
    case NCCLPOOL_FIELD_SIZE: return sizeof(std::size_t);
    case NCCLPOOL_FIELD_UINT64: return sizeof(std::uint64_t);
    case NCCLPOOL_FIELD_INT:
    case NCCLPOOL_FIELD_REGISTRATION: return sizeof(int);
    case NCCLPOOL_FIELD_DOUBLE: return sizeof(double);
  }
  return 0;
}

/// How many bytes of the caller's struct to write, from the struct_size it passed: the size of a
/// version of the struct (its first `first_release + k` fields, padded to the alignment) writes that
/// version's fields only; a larger multiple of the alignment (a caller built against a newer header)
/// gets this library's struct.
/// @throws InvalidArgument naming `what` for a size below the first release's or no version's size.
inline std::size_t caller_struct_bytes(const StatsLayout& layout, std::size_t given, const char* what) {
  const auto version_size = [&](std::size_t rows) {  // struct_size and the next rows - 1 fields
    const ncclpool_stats_field_t& last = layout.fields[rows - 1];
    const std::size_t end = last.offset + field_bytes(last.type);
    return (end + layout.alignment - 1) / layout.alignment * layout.alignment;
  };
  const std::string type = layout.type_name;
  const std::string fix = ": set it to sizeof(" + type + ")";
  const std::size_t first = version_size(1 + layout.first_release);
  if (given < first)
    throw InvalidArgument(std::string(what) + "->struct_size is " + std::to_string(given) + ", smaller than any version of " +
                          type + " (the first release's is " + std::to_string(first) + ")" + fix);
  if (given >= layout.struct_size) {
    if (given % layout.alignment == 0) return layout.struct_size;
  } else {
    for (std::size_t rows = 1 + layout.first_release; rows <= layout.count; ++rows)
      if (version_size(rows) == given) return given;
  }
  throw InvalidArgument(std::string(what) + "->struct_size is " + std::to_string(given) + ", not the size of any version of " +
                        type + " (" + std::to_string(layout.struct_size) + " in this library)" + fix);
}

/// Fills the caller's stats struct: checks its struct_size before `make` runs, then writes as much
/// of this library's struct (what `make` returns) as the caller's holds, struct_size set to that.
template <class Struct, class Make>
void fill_stats(Struct* out, const StatsLayout& layout, Make&& make) {
  const std::size_t bytes = caller_struct_bytes(layout, out->struct_size, "stats");
  Struct full = make();
  full.struct_size = bytes;
  std::memcpy(static_cast<void*>(out), &full, bytes);
}

/// The pool's counters: the C++ ones (an auto pool's parts combined) and its attachments'.
ncclpool_pool_stats_t pool_stats(const ncclpool_pool_s& pool);
/// The communicator's counters (an auto pool's: summed over its parts) and what it is.
ncclpool_comm_stats_t comm_stats(const ncclpool_comm_s& comm);
/// Every field of `stats` but struct_size as JSON members, each preceded by a comma
/// (`,"kind":"auto","rank":0,...`; the kind by name).
void write_json_fields(std::ostream& out, const ncclpool_comm_stats_t& stats);

}  // namespace ncclpool::capi

#pragma once
/// @file stats.hpp
/// @brief Pool statistics, readable as a struct and as JSON.

#include <ncclpool/export.hpp>
#include <ncclpool/stats_fields.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclpool {

/// A consistent snapshot of a pool's counters (taken under the pool's lock). The fields and what
/// each says: NCCLPOOL_POOL_STATS_FIELDS in stats_fields.h (those of scope `both`).
struct PoolStats {
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_STATS_CXX_MEMBER)

  /// Adds another pool's counters (an auto pool's stats are its parts' combined): sums, and the
  /// larger of the largest-block fields (each field's `merge` in stats_fields.h).
  NCCLPOOL_API PoolStats& operator+=(const PoolStats& other) noexcept;
};

/// @brief The snapshot as one JSON object (stable key names = the field names, in the list's order).
NCCLPOOL_API std::string to_json(const PoolStats& stats);

}  // namespace ncclpool

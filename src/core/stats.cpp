// PoolStats' and MemoryBreakdown's sums and JSON, made from their field lists
// (NCCLPOOL_POOL_STATS_FIELDS in stats_fields.h, NCCLPOOL_MEMORY_BREAKDOWN_FIELDS in pool.hpp).

#include <ncclpool/pool.hpp>
#include <ncclpool/stats.hpp>

#include <sstream>

namespace ncclpool {

PoolStats& PoolStats::operator+=(const PoolStats& other) noexcept {
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_STATS_CXX_MERGE)
  return *this;
}

std::string to_json(const PoolStats& stats) {
  std::ostringstream out;
  char separator = '{';
#define NCCLPOOL_JSON_MEMBER(type, name, merge, scope, doc) \
  NCCLPOOL_STATS_IF_CXX_##scope(out << separator << "\"" #name "\":" << stats.name; separator = ',';)
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_JSON_MEMBER)
#undef NCCLPOOL_JSON_MEMBER
  out << '}';
  return out.str();
}

MemoryBreakdown& MemoryBreakdown::operator+=(const MemoryBreakdown& other) noexcept {
#define NCCLPOOL_BREAKDOWN_SUM(name, doc) name += other.name;
  NCCLPOOL_MEMORY_BREAKDOWN_FIELDS(NCCLPOOL_BREAKDOWN_SUM)
#undef NCCLPOOL_BREAKDOWN_SUM
  return *this;
}

std::string to_json(const MemoryBreakdown& breakdown) {
  std::ostringstream out;
  char separator = '{';
#define NCCLPOOL_JSON_MEMBER(name, doc) \
  out << separator << "\"" #name "\":" << breakdown.name; \
  separator = ',';
  NCCLPOOL_MEMORY_BREAKDOWN_FIELDS(NCCLPOOL_JSON_MEMBER)
#undef NCCLPOOL_JSON_MEMBER
  out << '}';
  return out.str();
}

}  // namespace ncclpool

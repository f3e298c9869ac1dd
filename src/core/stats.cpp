// PoolStats' sum and JSON, made from the field list (NCCLPOOL_POOL_STATS_FIELDS in stats_fields.h).

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

}  // namespace ncclpool

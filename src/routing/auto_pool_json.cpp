// AutoPool::routes_json: an auto pool's routes and parts as JSON, for ncclpool_pool_stats_json (the C
// ABI asks the pool, through RegisteredPool::routes_json, instead of knowing what an auto pool is).

#include <ncclpool/auto_pool.hpp>

#include "core/json.hpp"

#include <sstream>

namespace ncclpool {

// Which sizes go where, why, and what each part holds.
std::string AutoPool::routes_json() const {
  std::ostringstream out;
  const SizeRoutes any = routes();
  out << "{\"fixed\":" << (routes_fixed() ? "true" : "false") << ",\"description\":" << json_quote(any.describe())
      << ",\"source\":" << json_quote(routes_source()) << ",\"classes\":[";
  for (std::size_t i = 0; i < any.classes().size(); ++i)
    out << (i ? "," : "") << "{\"min_bytes\":" << any.classes()[i].min_bytes << ",\"placement\":\"" << to_string(any.classes()[i].placement) << "\"}";
  out << "],\"by_collective\":{";  // the routes of buffers named for a collective, where they differ
  bool first = true;
  for (int c = 1; c < kCollectives; ++c) {
    const auto collective = static_cast<Collective>(c);
    const SizeRoutes own = routes(collective);
    if (own == any) continue;
    out << (first ? "" : ",") << "\"" << to_string(collective) << "\":" << json_quote(own.describe());
    first = false;
  }
  out << "},\"parts\":[";
  for (std::size_t i = 0; i < parts().size(); ++i) {
    const PoolPart& part = parts()[i];
    out << (i ? "," : "") << "{\"placement\":\"" << to_string(part.kind) << "\",\"growth_chunk\":" << part.pool->config().growth_chunk
        << ",\"min_segment\":" << part.pool->config().min_segment
        << ",\"stats\":" << part.pool->stats_json() << ",\"pending_registrations\":" << part.registry->pending() << "}";
  }
  out << "]}";
  return out.str();
}

}  // namespace ncclpool

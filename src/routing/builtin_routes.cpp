// The built-in routes of auto pools (routes.hpp, builtin_routes_for): measured profiles compiled in
// from src/routing/builtin/*.json (generated/builtin_routes_data.hpp), keyed by compute capability
// and rank count. Read once per process, on first use.

#include <ncclpool/errors.hpp>
#include <ncclpool/routes.hpp>

#include "builtin_routes_data.hpp"
#include "core/json.hpp"

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace ncclpool {
namespace {

struct BuiltinEntry {
  int compute_capability = 0;
  int ranks = 0;
  std::string source;  // the raw data it was made from (docs/benchmarks/data/...)
  Profile profile;
};

// A built-in file that does not parse is a build defect (scripts/builtin-routes.py --check runs in
// CI): fail loudly at first use rather than route by a half-read table.
std::vector<BuiltinEntry> parse_entries() {
  std::vector<BuiltinEntry> out;
  for (const detail::BuiltinRoutesFile* f = detail::kBuiltinRoutesFiles; f->name != nullptr; ++f) {
    const std::string where = std::string("built-in routes ") + f->name;
    BuiltinEntry e;
    e.profile = parse_profile(f->text, where);
    const Json doc = parse_json(f->text);
    const Json* key = doc.find("builtin");
    const Json* cc = key != nullptr ? key->find("compute_capability") : nullptr;
    const Json* source = key != nullptr ? key->find("source") : nullptr;
    if (cc == nullptr || !cc->is_integer || source == nullptr || source->type != Json::Type::string)
      throw InvariantViolation(where + ": no \"builtin\": {\"compute_capability\", \"source\"}");
    e.compute_capability = static_cast<int>(cc->integer);
    e.ranks = e.profile.ranks;
    e.source = source->string;
    out.push_back(std::move(e));
  }
  return out;
}

const std::vector<BuiltinEntry>& entries() {
  static const std::vector<BuiltinEntry> parsed = parse_entries();
  return parsed;
}

std::string cc_text(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

}  // namespace

BuiltinRoutes builtin_routes_for(int compute_capability, int ranks) {
  BuiltinRoutes out;
  const BuiltinEntry* best = nullptr;
  for (const BuiltinEntry& e : entries()) {
    if (e.compute_capability != compute_capability) continue;
    // The nearest measured rank count; a tie goes to the larger (the routes of more ranks lean
    // less on windows, the cheaper mistake).
    const int d = std::abs(e.ranks - ranks), best_d = best ? std::abs(best->ranks - ranks) : 0;
    if (best == nullptr || d < best_d || (d == best_d && e.ranks > best->ranks)) best = &e;
  }
  if (best == nullptr) {
    out.source = "built-in routes: none measured for compute capability " + (compute_capability ? cc_text(compute_capability) : std::string("unknown")) +
                 ": windows at every size";
    return out;
  }
  out.profile = best->profile;
  out.source = "built-in routes for compute capability " + cc_text(compute_capability) + " at " + std::to_string(best->ranks) + " ranks (measured on " +
               std::to_string(best->ranks) + "x " + best->profile.gpu + " with NCCL " + std::to_string(best->profile.nccl_version) + ": " + best->source + ")";
  if (best->ranks != ranks) out.source += "; this communicator has " + std::to_string(ranks) + " ranks: the nearest count measured";
  return out;
}

SizeRoutes builtin_routes_for(const MachineKey& key, bool windows_possible, Collective collective) {
  const BuiltinRoutes b = builtin_routes_for(key.compute_capability, key.ranks);
  return b.profile ? routes_from_profile(*b.profile, windows_possible, collective) : builtin_routes(windows_possible);
}

}  // namespace ncclpool

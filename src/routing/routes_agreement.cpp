// The routes agreement of an auto pool (auto_pool.hpp): every attach compares the routes of every
// rank and the kind each attaches with (they decide which parts' attaches are collective), with each
// rank's vote on the attach so far, so that all fail together when one differs. It also carries what
// may differ between ranks and is decided from every rank's value: the node each rank runs on
// (Communicator::node), and whether its routes were still open at this attach. Every rank learns the
// same node count and the same "all open" from it.

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>

#include "core/fnv1a.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace ncclpool {
namespace {

// The routes agreement: one all-gathered record per rank (it fits 11 classes; more are compared by
// digest only), with this rank's vote on the attach so far and the digest of the pool's agreed
// settings (last word). Its magic differs from the registry's, so a rank that runs a registry
// agreement in its place fails both sides.
constexpr std::uint64_t kRoutesMagic = 0x6e63636c726f7574ull;  // "nccl" "rout"
enum : std::size_t { w_magic = 0, w_digest = 1, w_count = 2, w_from_profile = 3, w_voted_no = 4, w_node = 5, w_classes = 6,
                     w_settings = AgreementRecord::kWords - 1 };
constexpr std::size_t kRecordClasses = w_settings - w_classes;
// w_voted_no's other bits, not compared: this rank's node() failed (w_node is then 0), and this
// rank's routes were still open (not fixed before this attach).
constexpr std::uint64_t kVotedNo = 1, kNodeUnknown = 2, kRoutesOpen = 4;

// What must be equal on every rank: the record without its node and the bits that may differ.
AgreementRecord without_node(AgreementRecord r) {
  r.words[w_node] = 0;
  r.words[w_voted_no] &= kVotedNo;
  return r;
}

// Distinct nodes among the records; each rank whose node is unknown counts as a node of its own
// (unknown nodes cannot be told apart, so they are never taken for one node).
std::size_t count_nodes(const std::vector<AgreementRecord>& all) {
  std::vector<std::uint64_t> known;
  std::size_t unknown = 0;
  for (const AgreementRecord& r : all) {
    if (r.words[w_voted_no] & kNodeUnknown)
      ++unknown;
    else
      known.push_back(r.words[w_node]);
  }
  std::sort(known.begin(), known.end());
  return static_cast<std::size_t>(std::unique(known.begin(), known.end()) - known.begin()) + unknown;
}

// w_from_profile: bit 0, the routes came from a profile; bit 1, some collective routes otherwise;
// bits 2-3, the kind the attach asked for (0: none asked, each part its own; else 1 + the kind).
AgreementRecord routes_record(const SizeRoutes& routes, std::uint64_t digest, bool from_profile, bool per_collective,
                              std::optional<RegistrationKind> kind, bool voted_no) {
  AgreementRecord r;
  r.words[w_magic] = kRoutesMagic;
  r.words[w_digest] = digest;
  r.words[w_count] = routes.classes().size();
  const std::uint64_t asked = kind ? 1 + static_cast<std::uint64_t>(*kind) : 0;
  r.words[w_from_profile] = (from_profile ? 1 : 0) | (per_collective ? 2 : 0) | (asked << 2);
  r.words[w_voted_no] = voted_no ? kVotedNo : 0;
  for (std::size_t i = 0; i < routes.classes().size() && i < kRecordClasses; ++i) {
    const SizeRoute& c = routes.classes()[i];
    r.words[w_classes + i] = (static_cast<std::uint64_t>(c.placement) << 62) | (c.min_bytes & ((1ull << 62) - 1));
  }
  return r;
}

std::string describe_routes_record(const AgreementRecord& r) {
  if (r.words[w_magic] != kRoutesMagic)
    return "no routes: this rank ran another collective here (its pool is not an auto pool, or it attached pools in another order)";
  if (r.words[w_voted_no] & kVotedNo) return "could not attach (the error raised on that rank says why)";
  const std::string settings = r.words[w_settings] != 0 ? ", agreed settings digest " + std::to_string(r.words[w_settings]) : "";
  const std::uint64_t asked = (r.words[w_from_profile] >> 2) & 3;
  const std::string from = std::string((r.words[w_from_profile] & 1) ? " (from its profile)" : " (built in)") + ", attached " +
                           (asked == 0 ? "with no kind (each part its own)" : std::string("as ") + to_string(static_cast<RegistrationKind>(asked - 1)));
  if (r.words[w_count] > kRecordClasses) return std::to_string(r.words[w_count]) + " size classes" + from + settings;
  std::vector<SizeRoute> classes;
  for (std::size_t i = 0; i < r.words[w_count]; ++i) {
    const std::uint64_t v = r.words[w_classes + i];
    classes.push_back(SizeRoute{static_cast<std::size_t>(v & ((1ull << 62) - 1)), static_cast<RegistrationKind>(v >> 62)});
  }
  try {
    const SizeRoutes routes(std::move(classes));
    const std::string per_collective = (r.words[w_from_profile] & 2) ? " and other routes for some collectives (digest " + std::to_string(r.words[w_digest]) + ")" : "";
    return routes.describe() + per_collective + from + settings;
  } catch (const Error&) {
    return "unreadable routes";
  }
}

// FNV-1a of the agreed settings, 0 for none (as the registry's records carry them).
std::uint64_t settings_digest(const std::string& settings) noexcept {
  if (settings.empty()) return 0;
  detail::Fnv1a d;
  for (unsigned char c : settings) d.mix(c);
  return d.value() == 0 ? 1 : d.value();
}

std::uint64_t routes_digest(const std::array<SizeRoutes, kCollectives>& routes) noexcept {
  detail::Fnv1a d;
  for (const SizeRoutes& r : routes) d.mix(r.digest());
  return d.value();
}

}  // namespace

AutoPool::RoutesAgreed AutoPool::agree_on_routes(Communicator& comm, std::optional<RegistrationKind> kind, bool voted_no, bool routes_open) const {
  const bool per_collective = std::any_of(routes_.begin() + 1, routes_.end(), [&](const SizeRoutes& r) { return !(r == routes_[0]); });
  AgreementRecord mine = routes_record(routes_[0], routes_digest(routes_), routes_source_.rfind("the profile", 0) == 0, per_collective, kind, voted_no);
  if (routes_open) mine.words[w_voted_no] |= kRoutesOpen;
  mine.words[w_settings] = settings_digest(agreed_settings_);
  try {
    mine.words[w_node] = comm.node();
  } catch (...) {
    mine.words[w_voted_no] |= kNodeUnknown;  // never skip the all-gather: an unknown node counts as one of its own
  }
  const std::vector<AgreementRecord> all = comm.all_gather(mine);
  const AgreementRecord compared = without_node(mine);
  if (std::all_of(all.begin(), all.end(), [&](const AgreementRecord& r) { return without_node(r) == compared; })) {
    const bool all_open = std::all_of(all.begin(), all.end(), [](const AgreementRecord& r) { return (r.words[w_voted_no] & kRoutesOpen) != 0; });
    return RoutesAgreed{count_nodes(all), all_open};
  }
  std::map<std::vector<std::uint64_t>, std::vector<int>> groups;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    const AgreementRecord r = without_node(all[rank]);
    groups[{r.words.begin(), r.words.end()}].push_back(static_cast<int>(rank));
  }
  const bool settings_differ = std::any_of(all.begin(), all.end(), [&](const AgreementRecord& r) { return r.words[w_magic] == kRoutesMagic && r.words[w_settings] != mine.words[w_settings]; });
  const bool someone_voted_no = std::any_of(all.begin(), all.end(), [](const AgreementRecord& r) { return r.words[w_magic] == kRoutesMagic && (r.words[w_voted_no] & kVotedNo) != 0; });
  std::ostringstream msg;
  if (someone_voted_no)
    msg << comm.describe() << ": a rank could not attach the auto pool '" << name() << "', so no rank does; nothing was attached:";
  else
    msg << comm.describe() << ": ranks route the auto pool '" << name()
        << "' differently (or attach it with another kind), so its parts would get other requests, or other registrations, on each rank; nothing was attached:";
  for (const auto& [words, ranks] : groups) {
    AgreementRecord r;
    std::copy(words.begin(), words.end(), r.words.begin());
    msg << (ranks.size() > 1 ? " ranks " : " rank ");
    for (std::size_t i = 0; i < ranks.size(); ++i) msg << (i ? "," : "") << ranks[i];
    msg << ": " << describe_routes_record(r) << ';';
  }
  if (settings_differ)
    msg << " (the ranks' agreed settings differ: this rank attaches " << (kind ? std::string("as ") + to_string(*kind) : std::string("with no kind"))
        << " with agreed settings '" << agreed_settings_ << "'; give every rank the same settings)";
  else if (someone_voted_no)
    msg << " (that rank's own error says why, e.g. a local registration refused)";
  else
    msg << " (give every rank the same profile, NCCLPOOL_PROFILE, attach before the first allocation, and with the same kind)";
  throw AgreementError(msg.str());
}

}  // namespace ncclpool

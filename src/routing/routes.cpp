// Size routes of auto pools (routes.hpp): validation, lookup, and where they come from.

#include <ncclpool/errors.hpp>
#include <ncclpool/routes.hpp>

#include "core/fnv1a.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>

namespace ncclpool {
namespace {

constexpr std::size_t kMiB = 1ull << 20;

// "64 KiB", "20 MiB", "1000 B": exact, short (the classes are usually powers of two).
std::string short_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

// A profile class's pick for `collective`: its own; for Collective::any the class's measured "any"
// (the smallest worst case over the collectives); else (an older profile, or a class without the
// collective) the kind most collectives picked, a tie going to all_reduce's pick, else to the
// costlier kind.
RegistrationKind pick_of(const ProfileClass& c, Collective collective) {
  if (collective != Collective::any) {
    if (const auto own = c.kind.find(to_string(collective)); own != c.kind.end()) return own->second;
  } else if (c.any) {
    return *c.any;
  }
  std::array<int, 3> votes{};
  for (const auto& [op, kind] : c.kind) ++votes[static_cast<int>(kind)];
  const auto all_reduce = c.kind.find("all_reduce");
  RegistrationKind pick = RegistrationKind::symmetric;
  int most = -1;
  for (int p = 2; p >= 0; --p) {  // costlier kinds first, so they win a tie without an all_reduce pick
    const bool preferred = all_reduce != c.kind.end() && all_reduce->second == static_cast<RegistrationKind>(p);
    if (votes[p] > most || (votes[p] == most && preferred)) {
      most = votes[p];
      pick = static_cast<RegistrationKind>(p);
    }
  }
  return pick;
}

}  // namespace

SizeRoutes::SizeRoutes(RegistrationKind placement) : classes_{SizeRoute{0, placement}} {}

SizeRoutes::SizeRoutes(std::vector<SizeRoute> classes) {
  if (classes.empty()) throw InvalidArgument("size routes: no class");
  if (classes.front().min_bytes != 0) throw InvalidArgument("size routes: the first class starts at " + std::to_string(classes.front().min_bytes) + " bytes, not 0");
  for (std::size_t i = 0; i < classes.size(); ++i) {
    const SizeRoute& c = classes[i];
    if (static_cast<int>(c.placement) < 0 || static_cast<int>(c.placement) >= kRegistrationKinds)
      throw InvalidArgument("size routes: class " + std::to_string(i) + " has placement " + std::to_string(static_cast<int>(c.placement)));
    if (i > 0 && c.min_bytes <= classes[i - 1].min_bytes) throw InvalidArgument("size routes: classes are not in ascending order of size");
    if (classes_.empty() || classes_.back().placement != c.placement) classes_.push_back(c);
  }
}

RegistrationKind SizeRoutes::for_request(std::size_t bytes) const noexcept {
  // The last class whose minimum is <= bytes; classes_ is short (a few entries).
  auto it = std::upper_bound(classes_.begin(), classes_.end(), bytes, [](std::size_t b, const SizeRoute& c) { return b < c.min_bytes; });
  return std::prev(it)->placement;
}

RegistrationKind SizeRoutes::for_range(std::size_t lo, std::size_t hi) const noexcept {
  if (hi < lo) std::swap(lo, hi);
  std::array<int, 3> spanned{};
  for (std::size_t i = 0; i < classes_.size(); ++i) {
    const std::size_t end = i + 1 < classes_.size() ? classes_[i + 1].min_bytes : SIZE_MAX;  // exclusive
    if (classes_[i].min_bytes <= hi && end > lo) ++spanned[static_cast<int>(classes_[i].placement)];
  }
  RegistrationKind best = for_request(hi);  // ties go to the larger sizes
  for (int p = 0; p < 3; ++p)
    if (spanned[p] > spanned[static_cast<int>(best)]) best = static_cast<RegistrationKind>(p);
  return best;
}

bool SizeRoutes::uses(RegistrationKind placement) const noexcept {
  return std::any_of(classes_.begin(), classes_.end(), [&](const SizeRoute& c) { return c.placement == placement; });
}

SizeRoutes SizeRoutes::without_windows() const {
  std::vector<SizeRoute> classes = classes_;
  for (SizeRoute& c : classes)
    if (c.placement == RegistrationKind::symmetric) c.placement = RegistrationKind::local;
  return SizeRoutes(std::move(classes));  // merges what became adjacent local classes
}

std::string SizeRoutes::describe() const {
  if (classes_.size() == 1) return std::string(to_string(classes_.front().placement)) + " at every size";
  std::string out;
  for (std::size_t i = 0; i < classes_.size(); ++i) {
    if (i) out += ", ";
    out += to_string(classes_[i].placement);
    if (i + 1 < classes_.size()) {
      out += (i == 0 ? " below " : " from " + short_bytes(classes_[i].min_bytes) + " to below ") + short_bytes(classes_[i + 1].min_bytes);
    } else {
      out += " from " + short_bytes(classes_[i].min_bytes);
    }
  }
  return out;
}

std::uint64_t SizeRoutes::digest() const noexcept {
  detail::Fnv1a h;
  for (const SizeRoute& c : classes_) {
    h.mix(c.min_bytes);
    h.mix(static_cast<std::uint64_t>(c.placement));
  }
  return h.value();
}

SizeRoutes routes_from_profile(const Profile& profile, bool windows_possible, Collective collective) {
  if (profile.classes.empty()) return builtin_routes(windows_possible);
  std::vector<SizeRoute> out;
  // A class that lacks a collective keeps that collective's kind from the classes before it: at rank
  // counts that are no power of two all-gather's and reduce-scatter's sizes (multiples of 4 x ranks)
  // fall between all-reduce's, and `ncclpool tune` before 0.1.0 wrote a class per size with only the
  // collectives measured there.
  ProfileClass carried;
  for (std::size_t i = 0; i < profile.classes.size(); ++i) {
    const ProfileClass& c = profile.classes[i];
    for (const auto& [op, kind] : c.kind) carried.kind.insert_or_assign(op, kind);
    carried.any = c.any;
    out.push_back(SizeRoute{i == 0 ? 0 : c.min_bytes, pick_of(carried, collective)});  // the first class covers everything below it too
  }
  const SizeRoutes routes(std::move(out));
  return windows_possible ? routes : routes.without_windows();
}

SizeRoutes builtin_routes(bool windows_possible) { return SizeRoutes(windows_possible ? RegistrationKind::symmetric : RegistrationKind::local); }

bool auto_routes_windows(bool source_window_capable, bool communicator_windows, const std::string& communicator_windows_why,
                         bool symmetric_kernels_on, std::string* why) {
  std::string reason;
  if (!source_window_capable) reason = "the pool's source cannot back windows";
  else if (!communicator_windows) reason = communicator_windows_why.empty() ? "the communicator cannot register windows" : communicator_windows_why;
  else if (!symmetric_kernels_on) reason = "NCCL's symmetric kernels are off in this process (NCCLPOOL_SYMMETRIC_KERNELS; `ncclpool info` says why)";
  if (why != nullptr) *why = reason;
  return reason.empty();
}

void torch_segment_tensors(std::size_t segment_bytes, std::size_t& lo, std::size_t& hi) noexcept {
  // c10/cuda/CUDACachingAllocator.cpp: kSmallSize 1 MiB -> kSmallBuffer 2 MiB segments; below
  // kMinLargeAlloc 10 MiB -> kLargeBuffer 20 MiB segments; else the size rounded to kRoundLarge 2 MiB.
  if (segment_bytes == 2 * kMiB) {
    lo = 1;
    hi = kMiB;
  } else if (segment_bytes == 20 * kMiB) {
    lo = kMiB + 1;
    hi = 20 * kMiB;  // tensors of 10-20 MiB get a 20 MiB segment of their own
  } else {
    lo = segment_bytes > 2 * kMiB ? segment_bytes - 2 * kMiB + 1 : 1;
    hi = segment_bytes;
  }
}

}  // namespace ncclpool

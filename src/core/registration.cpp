// The registration vocabulary (registration.hpp): the one table of what each kind does
// (RegistrationKindOps, which the registry calls) and the one place a kind or a collective is spelled,
// for routes, profiles, statistics, the C ABI and Python.

#include <ncclpool/communicator.hpp>
#include <ncclpool/registration.hpp>

#include <array>

namespace ncclpool {
namespace {

constexpr std::size_t kMiB = 1ull << 20;
constexpr std::size_t kGiB = 1ull << 30;

void* register_local(Communicator& comm, void* base, std::size_t size) { return comm.register_local(base, size); }
void deregister_local(Communicator& comm, void* handle) { comm.deregister_local(handle); }
void* register_window(Communicator& comm, void* base, std::size_t size) { return comm.register_window(base, size); }
void deregister_window(Communicator& comm, void* window) { comm.deregister_window(window); }

// Indexed by RegistrationKind; kinds in increasing order of cost.
//   kind, name, what, attachable, collective, windows, needs_deterministic_pool, default_growth_chunk, register, deregister
constexpr std::array<RegistrationKindOps, kRegistrationKinds> kKinds = {{
    {RegistrationKind::none, "none", "no", false, false, false, false, 2 * kMiB, nullptr, nullptr},
    {RegistrationKind::local, "local", "local", true, false, false, false, 2 * kMiB, register_local, deregister_local},
    {RegistrationKind::symmetric, "symmetric", "window", true, true, true, true, kGiB, register_window, deregister_window},
}};
static_assert([] {
  for (std::size_t i = 0; i < kKinds.size(); ++i)
    if (static_cast<std::size_t>(kKinds[i].kind) != i) return false;
  return true;
}(), "kKinds is indexed by RegistrationKind");

constexpr std::array<const char*, kRegistrationKinds> kKindNames = [] {
  std::array<const char*, kRegistrationKinds> names{};
  for (std::size_t i = 0; i < kKinds.size(); ++i) names[i] = kKinds[i].name;
  return names;
}();
constexpr std::array<const char*, kCollectives> kCollectiveNames = {"any", "all_gather", "reduce_scatter", "all_reduce"};

template <class Enum, std::size_t N>
std::optional<Enum> find_name(const std::array<const char*, N>& names, std::string_view name) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<Enum>(i);
  return std::nullopt;
}

}  // namespace

const RegistrationKindOps& registration_ops(RegistrationKind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return kKinds[i < kKinds.size() ? i : 0];
}

const char* to_string(RegistrationKind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return i < kKindNames.size() ? kKindNames[i] : "unknown";
}

std::optional<RegistrationKind> registration_kind_from_string(std::string_view name) noexcept {
  return find_name<RegistrationKind>(kKindNames, name);
}

const char* to_string(Collective collective) noexcept {
  const auto i = static_cast<std::size_t>(collective);
  return i < kCollectiveNames.size() ? kCollectiveNames[i] : "unknown";
}

std::optional<Collective> collective_from_string(std::string_view name) noexcept { return find_name<Collective>(kCollectiveNames, name); }

}  // namespace ncclpool

// Names of the registration vocabulary (registration.hpp): the one place a kind or a collective is
// spelled, for routes, profiles, statistics, the C ABI and Python.

#include <ncclpool/registration.hpp>

#include <array>

namespace ncclpool {
namespace {

constexpr std::array<const char*, kRegistrationKinds> kKindNames = {"none", "local", "symmetric"};
constexpr std::array<const char*, kCollectives> kCollectiveNames = {"any", "all_gather", "reduce_scatter", "all_reduce"};

template <class Enum, std::size_t N>
std::optional<Enum> find_name(const std::array<const char*, N>& names, std::string_view name) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<Enum>(i);
  return std::nullopt;
}

}  // namespace

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

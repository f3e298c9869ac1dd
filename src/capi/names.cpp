// C ABI: the C enums' values and names in one place each. The registration requests
// (ncclpool_registration_t) map to C++ kinds here and nowhere else; the sources' names come from their
// list (NCCLPOOL_SOURCES in ncclpool.h); ncclpool_value_name gives both (and the collectives) to
// bindings, which build or check their tables from it (the Python package checks its own at load).

#include "handles.hpp"

#include <iterator>

namespace ncclpool::capi {
namespace {

// Every request value of ncclpool_registration_t: a kind of RegistrationKind (named as it is), or the
// pool's choice (AUTO) or its default (DEFAULT), named here.
struct RegistrationValue {
  ncclpool_registration_t value;
  std::optional<RegistrationKind> kind;
  const char* own_name;  // for the values that are no kind
};
constexpr RegistrationValue kRegistrationValues[] = {
    {NCCLPOOL_REGISTRATION_DEFAULT, std::nullopt, "default"},
    {NCCLPOOL_REGISTRATION_LOCAL, RegistrationKind::local, nullptr},
    {NCCLPOOL_REGISTRATION_SYMMETRIC, RegistrationKind::symmetric, nullptr},
    {NCCLPOOL_REGISTRATION_AUTO, std::nullopt, "auto"},
};

const RegistrationValue* find_registration(int value) noexcept {
  for (const RegistrationValue& r : kRegistrationValues)
    if (r.value == value) return &r;
  return nullptr;
}

const char* name_of(const RegistrationValue& r) noexcept { return r.kind ? to_string(*r.kind) : r.own_name; }

#define NCCLPOOL_SOURCE_NAME_ROW(upper, value, name, doc) {NCCLPOOL_SOURCE_##upper, #name},
constexpr struct {
  ncclpool_source_t value;
  const char* name;
} kSources[] = {NCCLPOOL_SOURCES(NCCLPOOL_SOURCE_NAME_ROW)};
#undef NCCLPOOL_SOURCE_NAME_ROW

}  // namespace

std::optional<RegistrationKind> registration_request(int value, bool with_default, const std::string& what) {
  const RegistrationValue* r = find_registration(value);
  if (r == nullptr || (!with_default && r->value == NCCLPOOL_REGISTRATION_DEFAULT)) {
    std::string known;
    for (const RegistrationValue& v : kRegistrationValues) {
      if (!with_default && v.value == NCCLPOOL_REGISTRATION_DEFAULT) continue;
      if (!known.empty()) known += v.value == NCCLPOOL_REGISTRATION_AUTO ? " or " : ", ";
      std::string upper = name_of(v);
      for (char& c : upper) c = static_cast<char>(c - 'a' + 'A');
      known += upper + " (" + std::to_string(v.value) + ")";
    }
    throw InvalidArgument(what + " " + std::to_string(value) + " is not " + known);
  }
  return r->kind;
}

int registration_value(RegistrationKind kind) noexcept {
  for (const RegistrationValue& r : kRegistrationValues)
    if (r.kind == kind) return r.value;
  return NCCLPOOL_REGISTRATION_LOCAL;  // none: no communicator is attached as none
}

const char* registration_name(int value) noexcept {
  const RegistrationValue* r = find_registration(value);
  return r ? name_of(*r) : "unknown";
}

const char* source_name(int source) noexcept {
  for (const auto& s : kSources)
    if (s.value == source) return s.name;
  return nullptr;
}

}  // namespace ncclpool::capi

extern "C" const char* ncclpool_value_name(int names, int value) {
  using namespace ncclpool;
  switch (names) {
    case NCCLPOOL_NAMES_SOURCE: return capi::source_name(value);
    case NCCLPOOL_NAMES_REGISTRATION: {
      const char* name = capi::registration_name(value);
      return std::string_view(name) == "unknown" ? nullptr : name;
    }
    case NCCLPOOL_NAMES_COLLECTIVE:
      return value >= 0 && value < kCollectives ? to_string(static_cast<Collective>(value)) : nullptr;
  }
  return nullptr;
}

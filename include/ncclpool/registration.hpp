#pragma once
/// @file registration.hpp
/// @brief The one vocabulary of registration: how a buffer's memory is registered with a
/// communicator (RegistrationKind), and which collective a buffer is for (Collective). Routes,
/// profiles, the registry, the C ABI and Python all use these (the C ABI and Python through their
/// names: to_string / registration_kind_from_string).

#include <ncclpool/export.hpp>

#include <optional>
#include <string_view>

namespace ncclpool {

/// How memory is registered with a communicator, in increasing order of cost (and of benefit).
/// An auto pool routes each size class to one of these; a communicator is attached to a pool's
/// memory as `local` or `symmetric` ("auto" is not a kind: it is the choice of an auto pool, which
/// registers each of its parts as its routes say).
enum class RegistrationKind : int {
  none = 0,       ///< not registered: NCCL copies through its own buffers
  local = 1,      ///< ncclCommRegister: zero-copy for ordinary collectives
  symmetric = 2,  ///< ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC): symmetric kernels; collective, deterministic
};
inline constexpr int kRegistrationKinds = 3;
/// "none", "local", "symmetric".
NCCLPOOL_API const char* to_string(RegistrationKind kind) noexcept;
/// The kind named `name` ("none", "local", "symmetric"), or nullopt for any other string.
NCCLPOOL_API std::optional<RegistrationKind> registration_kind_from_string(std::string_view name) noexcept;

/// The collective a buffer is for, where its caller knows it (FSDP's all-gather and reduce-scatter
/// buffers do): an auto pool then routes it by that collective's measurements.
enum class Collective : int { any = 0, all_gather = 1, reduce_scatter = 2, all_reduce = 3 };
inline constexpr int kCollectives = 4;
/// "any", "all_gather", "reduce_scatter", "all_reduce" (the profile's names).
NCCLPOOL_API const char* to_string(Collective collective) noexcept;
/// The collective named `name` (as to_string writes it), or nullopt.
NCCLPOOL_API std::optional<Collective> collective_from_string(std::string_view name) noexcept;

}  // namespace ncclpool

#pragma once
/// @file registration.hpp
/// @brief The one vocabulary of registration: how a buffer's memory is registered with a
/// communicator (RegistrationKind), and which collective a buffer is for (Collective). Routes,
/// profiles, the registry, the C ABI and Python all use these (the C ABI and Python through their
/// names: to_string / registration_kind_from_string). What each kind does is its row of one table,
/// RegistrationKindOps (registration_ops): the registry calls it, as UCX's registration cache calls
/// its transport's mem_reg / mem_dereg, and asks it every question that depends on the kind.

#include <ncclpool/export.hpp>

#include <cstddef>
#include <optional>
#include <string_view>

namespace ncclpool {

class Communicator;

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

/// What a registration kind does: its row of the one table (src/core/registration.cpp) that the
/// registry, the pools, the routing layer and the tools ask. A new kind is an enum value, a row, and
/// the Communicator calls its two functions make (plus its C ABI value in src/capi/registration_values.cpp).
struct RegistrationKindOps {
  RegistrationKind kind;
  const char* name;        ///< to_string(kind): "none", "local", "symmetric"
  const char* what;        ///< what one registration is called in messages: "local", "window"
  /// A communicator can be attached with it ('none' registers nothing: it is only a part's kind).
  bool attachable;
  /// Registration is collective: segments wait, pending, for an agreement point, every rank
  /// registers them in the same order, and attach, detach and trim are agreements; a segment it
  /// registered (or holds pending) is released only by a collective trim.
  bool collective;
  /// Registration makes NCCL windows: the memory must be window-capable, the communicator must
  /// support windows, the process's symmetric kernels are prepared at attach, and the windows are
  /// listed per communicator (WindowDirectory).
  bool windows;
  /// The pool must be deterministic (every rank carves the same layout).
  bool needs_deterministic_pool;
  /// A pool of this kind grows by this much when its growth chunk is not set (one registration per
  /// chunk and communicator: collective ones are costly, so their chunks are large).
  std::size_t default_growth_chunk;
  /// Registers [base, base + size) with comm; returns the handle. nullptr for a kind not attachable.
  void* (*register_segment)(Communicator& comm, void* base, std::size_t size);
  /// Gives back a handle register_segment returned.
  void (*deregister_segment)(Communicator& comm, void* handle);
};
/// The row of `kind`. A value outside the enum gets the row of `none`.
NCCLPOOL_API const RegistrationKindOps& registration_ops(RegistrationKind kind) noexcept;

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

#pragma once
/// @file auto_pool.hpp
/// @brief An auto pool: one part per registration kind (none, local, symmetric), each a Pool with
/// its own Registry, and every request routed to a part by its size (SizeRoutes, routes.hpp), as
/// RMM's binning_memory_resource routes sizes to upstream resources. An attach with no kind
/// registers the local part locally and the symmetric part as windows with the communicator; the
/// none part is never registered. The symmetric part keeps every rule of a symmetric pool
/// (deterministic, agreement points, graph capture), because only its own requests reach it and they
/// depend on sizes only.
///
/// The routes are fixed by the first allocation, reserve or attach: at a first attach, from the
/// profile measured for the communicator's machine (profile.hpp), when one applies; otherwise the
/// built-in routes. Ranks must route alike and attach with the same kind: every attach compares the
/// routes and the kind of every rank (collective) and fails on every rank when they differ.

#include <ncclpool/registered_pool.hpp>
#include <ncclpool/routes.hpp>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ncclpool {

class NCCLPOOL_API AutoPool final : public RegisteredPool {
 public:
  /// Makes the pool of one part. A symmetric part must be deterministic and window-capable.
  using PartFactory = std::function<std::shared_ptr<Pool>(RegistrationKind part)>;

  /// `routes` hold until a profile replaces them at the first attach; `routes_source` says where they
  /// come from. Every part is made here (a part without segments costs no device memory).
  /// @throws InvalidArgument, or what make_part throws.
  AutoPool(std::string name, const PartFactory& make_part, SizeRoutes routes, std::string routes_source, RegistryOptions options);

  /// Hot path: the fixed routes (a few classes) pick the part.
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = 0, Collective collective = Collective::any) override;
  /// From the part SizeRoutes::for_range picks.
  [[nodiscard]] void* allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi,
                                            Collective collective = Collective::any) override;
  void reserve(std::size_t bytes) override;
  /// `kind` empty: each part with its own kind; a kind: every part the routes use with that kind.
  /// Lockstep: the same collective steps on every rank whatever this rank's routes, profile or
  /// failures: local parts (not collective; a failure is this rank's "no"), then the routes agreement
  /// (always), then the symmetric parts' attaches, each its own agreement. All or nothing.
  /// @throws as Registry::attach; AgreementError when ranks route differently or one could not attach.
  void attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) override;
  [[nodiscard]] bool chooses_kinds() const noexcept override { return true; }
  /// The routes (any collective's, and each collective's where they differ), their source, whether
  /// they are fixed, and each part's placement, sizes and counters (auto_pool_json.cpp).
  [[nodiscard]] std::string routes_json() const override;

  /// The part for this kind.
  [[nodiscard]] const PoolPart& part(RegistrationKind kind) const noexcept { return parts_[static_cast<std::size_t>(kind)]; }
  /// The routes now, for buffers of `collective` (reading them does not fix them), and where they
  /// came from ("built-in routes (...)" with why no profile was used, or "the profile PATH (...)").
  [[nodiscard]] SizeRoutes routes(Collective collective = Collective::any) const;
  [[nodiscard]] std::string routes_source() const;
  [[nodiscard]] bool routes_fixed() const noexcept { return routes_fixed_.load(std::memory_order_acquire); }

 private:
  PoolPart& route(std::size_t bytes, Collective collective);
  [[nodiscard]] bool routes_use(RegistrationKind kind) const noexcept;
  void fix_routes() noexcept;
  bool choose_routes_for(Communicator& comm);
  [[nodiscard]] std::vector<std::pair<std::size_t, RegistrationKind>> attach_plan(std::optional<RegistrationKind> kind) const;  // under attach_mutex(); true when it chose them (the attach then fixes them)
  void drop_windows_across_nodes(std::size_t nodes);  // under attach_mutex(), at the attach that chose the routes
  struct RoutesAgreed {
    std::size_t nodes;  // how many nodes the communicator's ranks run on
    bool all_open;      // every rank's routes were still open at this attach (none fixed before it)
  };
  // Collective; throws AgreementError. The same answer on every rank.
  RoutesAgreed agree_on_routes(Communicator& comm, std::optional<RegistrationKind> kind, bool voted_no, bool routes_open) const;

  std::array<SizeRoutes, kCollectives> routes_;  // by Collective; [any] for buffers of no named collective
  std::string routes_source_;
  std::atomic<bool> routes_fixed_{false};
  std::string agreed_settings_;  // RegistryOptions::agreed_settings: compared by the routes agreement
};

/// @brief What make_auto_pool builds an auto pool from.
struct AutoPoolConfig {
  std::string name = "auto";
  /// One segment source per part (each part holds its own segments; the symmetric part's must back
  /// windows: vmm, nccl, the simulator's).
  std::function<std::shared_ptr<SegmentSource>(RegistrationKind part)> make_source;
  std::size_t alignment = 512;
  /// 0: per part, 2 MiB (none, local) and 1 GiB (symmetric: one window per chunk and communicator).
  std::size_t growth_chunk = 0;
  /// The smallest segment of the symmetric part (0: its growth_chunk / 128): fewer windows for more
  /// reserve (docs/benchmarks/growth.md). The other parts register no windows and keep the default.
  std::size_t min_segment = 0;
  /// Bytes the parts may hold together (0 = no limit): a LimitSource over each part's source.
  std::size_t max_reserved = 0;
  RegistryOptions registry;
  /// Whether windows are possible in this process (auto_routes_windows with this process's NCCL and
  /// GPU; the simulator's communicators always can), and why not: the built-in routes shown until the
  /// first attach decides them with the communicator's answers.
  bool windows_possible = true;
  std::string why_no_windows;
};

/// @brief An auto pool with the built-in routes (until its first attach) over the config's sources.
/// @throws InvalidArgument (no source factory), or what the factory throws.
NCCLPOOL_API std::unique_ptr<AutoPool> make_auto_pool(const AutoPoolConfig& config);

}  // namespace ncclpool

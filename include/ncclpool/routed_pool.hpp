#pragma once
/// @file routed_pool.hpp
/// @brief One pool to its user, made of parts that are registered differently.
///
/// A RoutedPool is either
///  * a *single* pool: one Pool and its Registry, every communicator attached with the kind its
///    attach names (what `local` and `symmetric` pools of the C ABI are), or
///  * an *auto* pool: one part per Placement (none, local, symmetric), each a Pool with its own
///    Registry, and every request routed to a part by its size (SizeRoutes), as RMM's
///    binning_memory_resource routes sizes to upstream resources. An auto attach registers the local
///    part locally and the symmetric part as windows with the communicator; the none part is never
///    registered. The symmetric part keeps every rule of a symmetric pool (deterministic, agreement
///    points, graph capture), because only its own requests reach it and they depend on sizes only.
///
/// The routes of an auto pool are fixed by the first allocation, reserve or attach: at a first
/// attach, from the profile measured for the communicator's machine (profile.hpp), when one applies;
/// otherwise the built-in routes. Ranks must route alike: an attach that makes windows first compares
/// the routes of every rank (collective) and fails on every rank when they differ.
///
/// Statistics are the sum of the parts (peaks: the sum of the parts' peaks, an upper bound).
/// Thread safety: as Pool and Registry; attach, detach and forget serialize on the pool's lock.

#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/routes.hpp>

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

class NCCLPOOL_API RoutedPool {
 public:
  struct Part {
    Placement placement = Placement::local;  ///< single pools: local (the attach decides)
    std::shared_ptr<Pool> pool;
    std::unique_ptr<Registry> registry;
  };
  /// Makes the pool of an auto pool's part. A symmetric part must be deterministic and window-capable.
  using PartFactory = std::function<std::shared_ptr<Pool>(Placement)>;

  /// A single pool. @throws InvalidArgument (null pool, bad NCCLPOOL_CHECK).
  RoutedPool(std::shared_ptr<Pool> pool, RegistryOptions options);
  /// An auto pool; `routes` hold until a profile replaces them at the first attach, `routes_source`
  /// says where they come from. Every part is made here (a part without segments costs no device
  /// memory). @throws InvalidArgument, or what make_part throws.
  RoutedPool(std::string name, const PartFactory& make_part, SizeRoutes routes, std::string routes_source, RegistryOptions options);
  ~RoutedPool();
  RoutedPool(const RoutedPool&) = delete;
  RoutedPool& operator=(const RoutedPool&) = delete;

  [[nodiscard]] bool is_auto() const noexcept { return auto_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// @brief A block of at least `bytes`, from the part the routes give `bytes` (those of
  /// `collective`, where the caller knows which collective the buffer is for).
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = 0, Collective collective = Collective::any);
  /// @brief A block that serves messages of `lo`..`hi` bytes (torch's segments hold many tensors):
  /// from the part SizeRoutes::for_range picks.
  [[nodiscard]] void* allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi,
                                            Collective collective = Collective::any);
  /// @brief Frees a block of any part (found by address). @throws ForeignPointer if no part owns it.
  void deallocate(void* ptr, stream_t stream);
  void deallocate(void* ptr);
  void publish_frees(stream_t stream);
  /// @brief Grows the part that requests of `bytes` go to.
  void reserve(std::size_t bytes);

  /// @brief Attaches comm. `kind` empty (auto pools only): each part with its placement's kind; a
  /// kind: every part with that kind. All or nothing, on every rank together: an auto pool's attach
  /// always runs its routes agreement (after the local parts, whose failure is this rank's "no"
  /// there), then the symmetric parts' attaches. On failure nothing stays attached.
  /// @throws as Registry::attach; AgreementError when ranks route differently or one could not attach.
  void attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind);
  void detach(const Communicator& comm);
  void forget(const Communicator& comm);
  /// Registry::commit / poll on every part, on every rank, whatever an earlier part threw (the first
  /// error is raised after the last part).
  void commit();
  void poll();
  /// Registry::commit_after_error on every part. Never throws.
  void commit_after_error() noexcept;
  /// Registry::trim on every part, as commit(); the bytes released in all.
  std::size_t trim();

  /// Whether comm is attached.
  [[nodiscard]] bool attached(const Communicator& comm) const;
  /// comm's counters, summed over the parts it is attached to; kind: the costliest one used.
  [[nodiscard]] CommunicatorStats stats(const Communicator& comm) const;
  [[nodiscard]] void* handle_of(const void* ptr, const Communicator& comm) const;
  [[nodiscard]] std::size_t pending() const;
  [[nodiscard]] std::size_t attached_count() const;

  [[nodiscard]] PoolStats stats() const;
  [[nodiscard]] MemoryBreakdown memory_breakdown() const;
  /// Pool and registry invariants of every part. @throws InvariantViolation.
  void check_invariants() const;
  /// The part whose segments hold ptr, or nullptr.
  [[nodiscard]] const Part* part_of(const void* ptr) const;
  [[nodiscard]] const std::vector<Part>& parts() const noexcept { return parts_; }
  /// The part with this placement (auto pools), or nullptr.
  [[nodiscard]] const Part* part(Placement placement) const noexcept;

  /// The routes now, for buffers of `collective` (reading them does not fix them), and where they
  /// came from ("built-in routes (...)" with why no profile was used, or "the profile PATH (...)").
  [[nodiscard]] SizeRoutes routes(Collective collective = Collective::any) const;
  [[nodiscard]] std::string routes_source() const;
  [[nodiscard]] bool routes_fixed() const noexcept { return routes_fixed_.load(std::memory_order_acquire); }

  /// Scopes: one Registry scope per part, closed together (Scope::close semantics per part).
  class NCCLPOOL_API ScopeSet {
   public:
    explicit ScopeSet(RoutedPool& pool);
    /// close_after_error() if still open.
    ~ScopeSet();
    ScopeSet(const ScopeSet&) = delete;
    ScopeSet& operator=(const ScopeSet&) = delete;
    /// Closes every part's scope (in reverse order of opening); throws the first error after all closed.
    void close();
    /// Scope::close_after_error on every part's scope. Never throws.
    void close_after_error() noexcept;
    /// Scope::abandon on every part's scope (no scope end). Never throws.
    void abandon() noexcept;

   private:
    std::vector<std::unique_ptr<Scope>> scopes_;
  };
  /// Open scopes (all threads, any part: they open and close together).
  [[nodiscard]] int open_scopes() const noexcept;
  /// Registry schedule of the first part (every part sees the same scope ends).
  [[nodiscard]] const Registry& first_registry() const noexcept { return *parts_.front().registry; }

 private:
  template <class Op>
  void on_every_part(Op&& op);  // op on every part, then the first error it threw
  Part& part_for(Placement placement);
  Part& route(std::size_t bytes, Collective collective);
  [[nodiscard]] bool routes_use(Placement placement) const noexcept;
  [[nodiscard]] std::uint64_t routes_digest() const noexcept;
  void fix_routes() noexcept;
  void choose_routes_for(Communicator& comm);  // under mutex_, before the routes are fixed
  void agree_on_routes(Communicator& comm, bool voted_no) const;  // collective; throws AgreementError

  std::string name_;
  bool auto_ = false;
  std::vector<Part> parts_;
  std::array<SizeRoutes, kCollectives> routes_;  // by Collective; [any] for buffers of no named collective
  std::string routes_source_;
  std::atomic<bool> routes_fixed_{false};
  mutable std::mutex mutex_;  // attach / detach / forget and the routes decision
  struct Attachment {
    const Communicator* comm;
    std::vector<std::size_t> parts;  // indices into parts_ attached with comm
  };
  std::vector<Attachment> attachments_;
  [[nodiscard]] std::vector<Attachment>::const_iterator find_attachment(const Communicator& comm) const;
  [[nodiscard]] std::vector<Attachment>::iterator find_attachment(const Communicator& comm);
};

}  // namespace ncclpool

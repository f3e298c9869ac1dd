#pragma once
/// @file registered_pool.hpp
/// @brief One pool to its user, made of parts (a Pool and its Registry each), and its communicators.
///
/// RegisteredPool is what the C ABI and the tools hold. What differs between kinds of pool is small
/// and virtual: which part an allocation goes to, and how a communicator is attached to the parts.
/// Everything else (free, commit, poll, trim, scopes, statistics, invariants, detach) is the same for
/// every kind and runs over the parts here, on every part and every rank (a part's commit is a
/// collective step of its own: a rank that stopped at the first part that threw would leave the later
/// parts' agreements to pair with its next collective).
///
/// Two kinds:
///  * SinglePool (below): one part; every communicator attached with the kind its attach names;
///  * AutoPool (auto_pool.hpp, the routing layer): one part per registration kind, requests routed
///    by size, as RMM's binning_memory_resource routes sizes to upstream resources.
///
/// The pool owns its attachments: which communicators are attached, to which parts, with which kind
/// (the C ABI and Python ask it: stats(comm): kind, has_windows, routed).
/// Thread safety: as Pool and Registry; attach, detach and forget serialize on the pool's lock.

#include <ncclpool/pool.hpp>
#include <ncclpool/registration.hpp>
#include <ncclpool/registry.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

/// One part of a RegisteredPool: a pool and the registry that registers its segments.
struct PoolPart {
  /// The kind this part's memory gets with every communicator of an auto pool; a SinglePool's one
  /// part: local (each attach names its own kind).
  RegistrationKind kind = RegistrationKind::local;
  std::shared_ptr<Pool> pool;
  std::unique_ptr<Registry> registry;
};

class NCCLPOOL_API RegisteredPool {
 public:
  virtual ~RegisteredPool();
  RegisteredPool(const RegisteredPool&) = delete;
  RegisteredPool& operator=(const RegisteredPool&) = delete;

  // ---- What a kind of pool decides ----

  /// @brief A block of at least `bytes` from the part that requests of `bytes` for `collective` go to.
  [[nodiscard]] virtual void* allocate(std::size_t bytes, stream_t stream = 0, Collective collective = Collective::any) = 0;
  /// @brief A block that serves messages of `lo`..`hi` bytes (torch's segments hold many tensors).
  [[nodiscard]] virtual void* allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi,
                                                    Collective collective = Collective::any) = 0;
  /// @brief Grows the part that requests of `bytes` go to.
  virtual void reserve(std::size_t bytes) = 0;
  /// @brief Attaches comm to the parts, all or nothing, on every rank together. `kind` empty: the
  /// pool's own choice (auto pools); a SinglePool needs a kind.
  /// @throws as Registry::attach; AgreementError when one rank could not attach.
  virtual void attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) = 0;
  /// Whether the pool chooses each part's kind itself (attach with no kind).
  [[nodiscard]] virtual bool chooses_kinds() const noexcept = 0;
  /// What the pool routes where, as a JSON object (an auto pool: its routes, where they came from,
  /// each part's counters); "" for a pool that routes nothing. ncclpool_pool_stats_json's "routes".
  [[nodiscard]] virtual std::string routes_json() const { return {}; }

  // ---- The same for every kind, over the parts ----

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// @brief Frees a block of any part (found by address). @throws ForeignPointer if no part owns it.
  void deallocate(void* ptr, stream_t stream);
  void deallocate(void* ptr);
  void publish_frees(stream_t stream);

  /// Detaches comm from every part it is attached to: the parts with windows first, in the same order
  /// on every rank. A part whose detach agreement fails (on every rank) stays attached, with the
  /// attachment; a deregistration refused on this rank alone detaches regardless and is raised after.
  void detach(const Communicator& comm);
  /// Drops comm's handles in every part without calling it.
  void forget(const Communicator& comm);
  /// Registry::commit / poll / trim on every part, on every rank, whatever an earlier part threw (the
  /// first error is raised after the last part). trim returns the bytes released in all.
  void commit();
  void poll();
  std::size_t trim();
  /// Registry::commit_after_error on every part. Never throws.
  void commit_after_error() noexcept;
  /// Registry::vote_no for the pool as a whole: this rank's "no" at the pool's next collective step,
  /// whichever part's agreement (or an auto pool's routes agreement) comes first; taken there once.
  /// Never collective, never waits, never throws.
  void vote_no(const std::string& why) noexcept;
  [[nodiscard]] bool voting_no() const noexcept;

  [[nodiscard]] bool attached(const Communicator& comm) const;
  /// comm's counters summed over its parts; kind: the kind it was attached with, symmetric where a
  /// part has windows with it; has_windows; routed: attached with no kind (the pool's own choice).
  /// @throws InvalidArgument if not attached.
  [[nodiscard]] CommunicatorStats stats(const Communicator& comm) const;
  [[nodiscard]] std::size_t attached_count() const;
  [[nodiscard]] void* handle_of(const void* ptr, const Communicator& comm) const;
  [[nodiscard]] std::size_t pending() const;
  /// Statistics summed over the parts (peaks: the sum of the parts' peaks, an upper bound).
  [[nodiscard]] PoolStats stats() const;
  [[nodiscard]] MemoryBreakdown memory_breakdown() const;
  /// Pool and registry invariants of every part. @throws InvariantViolation.
  void check_invariants() const;
  /// The part whose segments hold ptr, or nullptr.
  [[nodiscard]] const PoolPart* part_of(const void* ptr) const;
  [[nodiscard]] const std::vector<PoolPart>& parts() const noexcept { return parts_; }
  /// Open scopes (all threads; every part's open and close together).
  [[nodiscard]] int open_scopes() const noexcept;
  /// The first part's registry: its schedule (every part sees the same scope ends) and check level.
  [[nodiscard]] const Registry& first_registry() const noexcept { return *parts_.front().registry; }

  /// Scopes: one Registry scope per part, closed together (Scope::close semantics per part).
  class NCCLPOOL_API ScopeSet {
   public:
    explicit ScopeSet(RegisteredPool& pool);
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

 protected:
  explicit RegisteredPool(std::string name) : name_(std::move(name)) {}
  /// Adds a part with its own registry (every part shares the first part's pending "no").
  void add_part(RegistrationKind kind, std::shared_ptr<Pool> pool, const RegistryOptions& options);
  /// Takes the pending "no" (vote_no, a scope's failure) for a collective step of the pool's own
  /// (an auto pool's routes agreement); nullptr when there is none.
  [[nodiscard]] std::exception_ptr take_vote_no() noexcept;
  /// Records that comm is attached to these parts (indices into parts()), as `requested`.
  /// Call under attach_mutex(), after reserve_attachment(). Never throws.
  void record_attachment(std::shared_ptr<Communicator> comm, std::vector<std::size_t> parts, std::optional<RegistrationKind> requested) noexcept;
  /// Makes room for one more attachment (so that record_attachment cannot throw).
  void reserve_attachment();
  [[nodiscard]] bool is_attached_locked(const Communicator& comm) const;
  /// Detaches comm from `parts` (newest first) whatever another part's undo did: the undo of a failed
  /// attach. Never throws.
  void undo_attach(const Communicator& comm, const std::vector<std::size_t>& parts) noexcept;
  [[nodiscard]] std::mutex& attach_mutex() const noexcept { return mutex_; }
  std::vector<PoolPart> parts_;

 private:
  template <class Op>
  void on_every_part(Op&& op);
  struct Attachment {
    std::shared_ptr<Communicator> comm;
    std::vector<std::size_t> parts;  // indices into parts_
    std::optional<RegistrationKind> requested;
  };
  [[nodiscard]] std::vector<Attachment>::const_iterator find(const Communicator& comm) const;
  std::string name_;
  mutable std::mutex mutex_;  // attach / detach / forget (and an auto pool's routes decision)
  std::vector<Attachment> attachments_;
};

/// @brief A pool of one part: every communicator attached with the kind its attach names (what
/// `local` and `symmetric` pools of the C ABI are).
class NCCLPOOL_API SinglePool final : public RegisteredPool {
 public:
  /// @throws InvalidArgument (null pool, bad NCCLPOOL_CHECK).
  SinglePool(std::shared_ptr<Pool> pool, RegistryOptions options);

  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream = 0, Collective collective = Collective::any) override;
  [[nodiscard]] void* allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi,
                                            Collective collective = Collective::any) override;
  void reserve(std::size_t bytes) override;
  /// @throws InvalidArgument without a kind, or for `none`; else as Registry::attach.
  void attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) override;
  [[nodiscard]] bool chooses_kinds() const noexcept override { return false; }
};

}  // namespace ncclpool

#pragma once
/// @file loopback.hpp
/// @brief The simulator's communicator: N ranks that are threads of one process. Local registration
/// is local; window registration, deregistration and all-gather are collective: a rank blocks until
/// every rank of the group made its matching call. Calls that do not match (another operation, other
/// sizes) fail on every rank; a rank that never comes makes the others fail after the group timeout,
/// naming the missing ranks. A group whose collective failed that way is broken for good (as a real
/// communicator would need an abort), and says so. Fault injection: the k-th call of a kind fails.
///
/// LoopbackMatching::nccl makes the group as unforgiving as NCCL: calls pair by position whatever
/// they are, so a skipped or reordered collective silently pairs with the next one (an all-gather
/// that met another call returns garbage; a window registration succeeds whatever the sizes). Only a
/// rank that never comes is noticed, by the timeout. CPU tests use it to see what a GPU would hide.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ncclpool {

namespace detail {
class LoopbackState;
}

/// Operations whose k-th call can be made to fail.
enum class LoopbackOp : int { register_local = 0, deregister_local = 1, register_window = 2, deregister_window = 3 };

/// How a group matches the calls of its ranks (see the file comment).
enum class LoopbackMatching : int {
  strict = 0,  ///< every rank must make the same call; a mismatch fails the call on every rank
  nccl = 1,    ///< calls pair by position, unchecked, as on real NCCL
};

/// Shared state of one simulated communicator (one "group" of ranks).
class NCCLPOOL_API LoopbackGroup {
 public:
  /// @param name   used in messages ("world", "dp", ...)
  /// @param size   number of ranks
  /// @param timeout how long a collective waits for the other ranks before failing
  /// @param matching strict (default) or nccl-like pairing
  LoopbackGroup(std::string name, int size, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                LoopbackMatching matching = LoopbackMatching::strict);
  ~LoopbackGroup();
  LoopbackGroup(const LoopbackGroup&) = delete;
  LoopbackGroup& operator=(const LoopbackGroup&) = delete;

  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] int size() const noexcept;
  /// Makes the `nth` (1-based) call of `op` on `rank` fail (-1 = every rank). For collective
  /// operations the whole collective fails on every rank, as a real collective would.
  void inject_failure(LoopbackOp op, int rank, int nth);
  /// Live registrations (local handles + windows) over all ranks: returns to 0 when all is released.
  [[nodiscard]] std::int64_t live_registrations() const;
  [[nodiscard]] std::uint64_t collective_calls() const;
  /// A collective timed out: every later collective call fails at once.
  [[nodiscard]] bool broken() const;
  /// What `rank`'s communicators report from prepare_symmetric_kernels (default -1: nothing; -1 for
  /// `rank` = every rank): tests of ranks that would launch NCCL's symmetric kernels differently.
  void set_symmetric_kernels(int rank, int setting);
  [[nodiscard]] int symmetric_kernels(int rank) const;
  /// The collective calls `rank` posted so far, in order: "all_gather", "register_window(<bytes>)",
  /// "deregister_window(<window>)", "user_collective(<argument>)". Tests compare these across ranks:
  /// ranks in lockstep have equal logs (a call that failed because the group was broken is not in it).
  [[nodiscard]] std::vector<std::string> call_log(int rank) const;
  /// The GPU name `rank`'s communicators report in machine() (-1 = every rank; default "ncclpool
  /// simulator"): tests of ranks on which a profile applies differently (one node with another GPU).
  /// The GPU name (and compute capability, major * 10 + minor; 0 = unknown) machine() reports.
  void set_machine_gpu(int rank, const std::string& gpu, int compute_capability = 0);
  [[nodiscard]] std::string machine_gpu(int rank) const;
  [[nodiscard]] int machine_compute_capability(int rank) const;
  /// What `rank`'s communicators answer in supports_windows() (-1 = every rank; default true): models
  /// a communicator NCCL gives no symmetric memory (NCCL >= 2.29: ncclCommQueryProperties says so and
  /// window registration returns NULL; ranks not all NVLink/P2P-connected in one node).
  void set_windows_supported(int rank, bool supported);
  /// The node `rank`'s communicators report in node() (-1 = every rank; default: this process's host,
  /// as for NCCL communicators): models ranks on several nodes (NCCL_HOSTID per process).
  void set_node(int rank, std::uint64_t node);
  [[nodiscard]] std::uint64_t node(int rank) const;
  /// While held, a rank that polls an all-gather without waiting (PendingGather::ready) sees it
  /// complete only after a release_completions() call made once every rank had posted it, as on a GPU
  /// where the all-gather may still be running; waiting is not affected. Tests that run ranks in steps
  /// use it so that what a rank that does not wait sees depends on the steps, not on thread timing.
  void hold_completions(bool hold);
  void release_completions();

  detail::LoopbackState& state() noexcept { return *state_; }

 private:
  std::unique_ptr<detail::LoopbackState> state_;
};

/// One rank's view of a LoopbackGroup.
class NCCLPOOL_API LoopbackCommunicator final : public Communicator {
 public:
  LoopbackCommunicator(std::shared_ptr<LoopbackGroup> group, int rank, int device = 0);
  [[nodiscard]] int device() const override { return device_; }
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override;
  [[nodiscard]] std::uintptr_t native_handle() const override;
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] bool supports_windows(std::string* why) const override;
  [[nodiscard]] void* register_local(void* base, std::size_t size) override;
  void deregister_local(void* handle) override;
  [[nodiscard]] void* register_window(void* base, std::size_t size) override;
  void deregister_window(void* window) override;
  [[nodiscard]] std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) override;
  [[nodiscard]] bool broken() const override;
  /// Stands in for an application collective on this communicator (an all_reduce): blocks until every
  /// rank made its call in this position; `argument` is what strict matching compares.
  void user_collective(std::uint64_t argument = 0);
  /// The group's setting for this rank (LoopbackGroup::set_symmetric_kernels).
  [[nodiscard]] int prepare_symmetric_kernels() override { return group_->symmetric_kernels(rank_); }
  /// {"ncclpool simulator", 0, size} (the GPU name as LoopbackGroup::set_machine_gpu set it for this
  /// rank): a profile written for these keys routes simulated auto pools.
  [[nodiscard]] MachineKey machine() const override {
    return MachineKey{group_->machine_gpu(rank_), 0, size(), group_->machine_compute_capability(rank_)};
  }
  /// LoopbackGroup::set_node's value for this rank, else this process's host.
  [[nodiscard]] std::uint64_t node() const override;

 private:
  std::shared_ptr<LoopbackGroup> group_;
  int rank_;
  int device_;
};

}  // namespace ncclpool

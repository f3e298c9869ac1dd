#pragma once
/// @file loopback.hpp
/// @brief The simulator's communicator: N ranks that are threads of one process. Local registration
/// is local; window registration, deregistration and all-gather are collective: a rank blocks until
/// every rank of the group made its matching call. Calls that do not match (another operation, other
/// sizes) fail on every rank; a rank that never comes makes the others fail after the group timeout,
/// naming the missing ranks. A group whose collective failed that way is broken for good (as a real
/// communicator would need an abort), and says so. Fault injection: the k-th call of a kind fails.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace ncclpool {

namespace detail {
class LoopbackState;
}

/// Operations whose k-th call can be made to fail.
enum class LoopbackOp : int { register_local = 0, deregister_local = 1, register_window = 2, deregister_window = 3 };

/// Shared state of one simulated communicator (one "group" of ranks).
class NCCLPOOL_API LoopbackGroup {
 public:
  /// @param name   used in messages ("world", "dp", ...)
  /// @param size   number of ranks
  /// @param timeout how long a collective waits for the other ranks before failing
  LoopbackGroup(std::string name, int size, std::chrono::milliseconds timeout = std::chrono::seconds(5));
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
  [[nodiscard]] std::vector<AgreementRecord> all_gather(const AgreementRecord& mine) override;

 private:
  std::shared_ptr<LoopbackGroup> group_;
  int rank_;
  int device_;
};

}  // namespace ncclpool

#pragma once
// Vote: this rank's say in the collective step under way (docs/registry.md, "Lockstep").
//
// The one rule: whether a rank takes part in a collective step depends only on what every rank
// already agreed (the program, configuration and records exchanged earlier), never on its own
// state. So whatever goes wrong on this rank alone during a step (an exception, a check that
// failed, a registration refused, an earlier agreement found late to have differed) is kept here,
// not thrown: the rank still joins the step's agreement and says "no" in its record, every rank
// sees the records differ, and nobody registers or releases anything there. The kept error is
// thrown once the step is over, on this rank; the other ranks throw the agreement's mismatch.

#include <exception>
#include <mutex>
#include <utility>

namespace ncclpool::detail {

class Vote {
 public:
  /// Keeps the exception being handled (the first one wins: it is the cause, later ones follow from it).
  void fail() noexcept { fail(std::current_exception()); }
  void fail(std::exception_ptr error) noexcept {
    if (!error_) error_ = std::move(error);
  }
  /// Everything this rank did in the step so far succeeded.
  [[nodiscard]] bool yes() const noexcept { return error_ == nullptr; }
  /// Throws the kept error, if any: call after every collective part of the step was joined.
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
};

// A "no" found on this rank outside any collective step (Registry::vote_no, a scope left with an
// error at a scope end that is not an agreement point), kept for the pool's next collective step,
// which takes it as this rank's vote there. The first one is kept until taken: it is the cause.
// Shared by the registries of one pool's parts, so that whichever part agrees first takes it, once.
// Never waits for anything collective (its own lock guards one pointer).
class PendingNo {
 public:
  void record(std::exception_ptr error) noexcept {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  [[nodiscard]] std::exception_ptr take() noexcept {
    std::lock_guard lock(mutex_);
    return std::exchange(error_, nullptr);
  }
  [[nodiscard]] bool holds() const noexcept {
    std::lock_guard lock(mutex_);
    return error_ != nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace ncclpool::detail

// The registration state machine, the operations callers make: attach, scope ends, commit, poll,
// detach, forget, trim (each a collective step through RegistryImpl::step where it has windows).
// Helpers and the pool's hooks are in registry.cpp.

#include "registry_impl.hpp"
#include "window_directory.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ncclpool::detail {

// ------------------------------------------------------------------------------------------------
// Public operations
// ------------------------------------------------------------------------------------------------

void RegistryImpl::attach(std::shared_ptr<Communicator> comm, RegistrationKind kind) {
  if (!comm) throw InvalidArgument("attach: communicator is null");
  const std::string who = comm->describe();
  const std::string pool_name = "pool '" + pool_->config().name + "'";
  const SourceProperties& props = pool_->source_properties();
  const auto wrong_device = [&] {
    return InvalidArgument("attach: " + who + " is on device " + std::to_string(comm->device()) + " but " + pool_name + " is on device " +
                           std::to_string(props.device));
  };
  const auto already_attached = [&] { return InvalidArgument("attach: " + who + " is already attached to " + pool_name); };
  const RegistrationKindOps& ops = registration_ops(kind);
  const bool windows = ops.windows;
  if (!ops.collective && agreed_settings_.empty()) {  // not collective: a refusal is this rank's business alone
    if (comm->device() != props.device) throw wrong_device();
    const auto lock = lock_for_agreement();
    if (find(*comm) != nullptr) throw already_attached();
    auto owned = std::make_unique<CommState>();
    owned->comm = std::move(comm);
    owned->kind = owned->stats.kind = kind;
    std::vector<std::uint64_t> existing;
    for (auto& [sequence, base] : by_sequence_) existing.push_back(sequence);
    if (!existing.empty() && pool_->source().ordering().device_capturing()) {  // not collective: any capture defers it
      owned->pending = existing;
      pending_total_ += existing.size();
    } else {
      register_existing(*owned, existing);
    }
    comms_.push_back(std::move(owned));
    return;
  }

  // Collective (a collective kind, or any kind with agreed settings): every rank attaching this communicator
  // joins the attach agreement, so every check that can fail on one rank alone is that rank's "no"
  // there, never a reason to leave; the record carries the kind and the settings' digest, so ranks
  // that attach differently fail together. Capture is the program's (every rank captures at the same
  // places): refused before anything.
  if (capturing()) throw InvalidState("attach: a CUDA graph is being captured on device " + std::to_string(props.device) + "; attach " +
                                      (ops.collective ? std::string(ops.name) + " communicators" : std::string("pools with agreed settings")) + " outside capture");
  Vote vote;
  take_pending_no(vote);
  try {
    if (comm->device() != props.device) throw wrong_device();
    if (ops.needs_deterministic_pool && !pool_->config().deterministic)
      throw InvalidArgument("attach: " + std::string(ops.name) + " registration needs a deterministic pool (PoolConfig::deterministic = true), so that every rank carves the same layout; " + pool_name + " is not");
    if (windows && !props.window_capable)
      throw InvalidArgument("attach: " + pool_name + " gets its memory from " + props.description +
                            ", which cannot back NCCL windows: use the `nccl` source (ncclMemAlloc) or the `vmm` source (cuMem with POSIX-FD handles)");
    std::string why;
    if (windows && !comm->supports_windows(&why)) throw Unsupported("attach: " + who + " cannot register windows: " + why);
  } catch (...) {
    vote.fail();
  }
  const auto lock = lock_for_agreement();
  if (find(*comm) != nullptr) vote.fail(std::make_exception_ptr(already_attached()));
  auto owned = std::make_unique<CommState>();
  CommState& cs = *owned;
  cs.comm = std::move(comm);
  cs.kind = cs.stats.kind = kind;
  struct OrdinalGuard {  // the attachment's number on this communicator (windows), given back if attach fails
    std::uintptr_t comm = 0;
    bool held = false;
    ~OrdinalGuard() {
      if (held) WindowDirectory::instance().detach_comm(comm);
    }
  } ordinal{cs.comm->native_handle(), windows};
  if (windows) {
    cs.ordinal = WindowDirectory::instance().attach_comm(ordinal.comm);
    try {
      cs.symmetric_kernels = cs.comm->prepare_symmetric_kernels();  // compared across ranks by the agreement
    } catch (...) {
      vote.fail();
    }
  }
  std::vector<std::uint64_t> existing;
  for (auto& [sequence, base] : by_sequence_) existing.push_back(sequence);
  // A local attachment's segments are this rank's own (its pool need not be deterministic): its
  // record names none, and they are registered after the agreement.
  if (!step(cs, AgreementPhase::attach, ops.collective ? existing : std::vector<std::uint64_t>{}, vote, /*wait=*/true)) vote.rethrow();
  register_existing(cs, existing);
  comms_.push_back(std::move(owned));
  if (ops.collective) ++collective_count_;
  ordinal.held = false;
}

// Creation order; a failure undoes the ones made (newest first) and throws: nothing stays registered.
void RegistryImpl::register_existing(CommState& cs, const std::vector<std::uint64_t>& sequences) {
  std::size_t done = 0;
  try {
    for (std::uint64_t s : sequences) {
      register_one(cs, entry_of(s));
      ++done;
    }
  } catch (...) {
    for (std::size_t i = done; i-- > 0;) deregister_or_report(cs, entry_of(sequences[i]), "attach rollback");
    throw;
  }
}

// A scope end is an agreement point on a schedule that depends only on how many scope ends the
// registry saw, so every rank that makes the same uses agrees at the same ones: the first
// scope_period_ (a pool grows in its first uses: their windows come at once), then every
// scope_period_-th. In between, a scope end costs an atomic increment (and registers local
// registrations a capture left pending, if any): the steady path's agreement all-gather, NCCL host
// time per symmetric communicator (docs/benchmarks/scope.md), is paid once per period. A pending window waits for
// the next scheduled one; its memory works meanwhile, without the window.
// A scope that ends with an error on this rank counts like any other (the schedule must stay the
// same on every rank) and votes no at a scheduled one; elsewhere its "no" waits for the next
// collective step (vote_no), so that one rank's error always ends in an error on every rank.
// Under graph capture a scope end registers nothing and agrees on nothing (skipped on every rank,
// since ranks capture at the same places); what is pending waits.
void RegistryImpl::end_scope(bool failed) {
  const std::uint64_t n = scope_ends_.fetch_add(1, std::memory_order_relaxed);
  const bool agree = scope_end_commits(n, scope_period_);
  std::exception_ptr failure;
  if (failed) failure = std::make_exception_ptr(InvalidState("a scope of pool '" + pool_->config().name + "' ended with an error on this rank"));
  // Not an agreement point here (unscheduled, no symmetric communicator, or skipped under capture):
  // the failure waits for the next one, where this rank votes no (as Registry::vote_no).
  const auto keep_failure = [&] {
    if (failure) vote_no(std::move(failure));
  };
  // The steady path: nothing to do, or only windows, which wait for a scheduled scope end.
  if (!agree && (pending_total_.load() == 0 || !local_pending())) return keep_failure();
  if ((collective_count_.load() > 0 || pending_total_.load() > 0) && capturing()) return keep_failure();
  if (!agree || collective_count_.load() == 0) {
    keep_failure();
    return commit(agree, Vote{});  // local registrations a capture left pending: nothing collective
  }
  Vote vote;
  if (failure) vote.fail(std::move(failure));
  commit(/*agree=*/true, std::move(vote));
}

void RegistryImpl::commit_after_error() noexcept {
  try {
    Vote vote;
    vote.fail(std::make_exception_ptr(InvalidState("commit of pool '" + pool_->config().name + "' after an error on this rank")));
    commit(/*agree=*/true, std::move(vote));
  } catch (...) {  // the caller has an error of its own on its way out
  }
}

bool RegistryImpl::local_pending() const {
  std::lock_guard lock(mutex_);
  return std::any_of(comms_.begin(), comms_.end(), [](const auto& cs) { return !cs->ops().collective && !cs->pending.empty(); });
}

// Every symmetric communicator joins the agreement, whether or not this rank has pending windows:
// a rank that skipped it would leave the others' all-gather to pair with its next collective. A rank
// with nothing to register (and no check mode) does not wait; it checks the result later.
// Communicators go in attach order, each decided on its own records (identical on its ranks), and
// the vote carries on from one to the next: a rank that failed on an earlier one says no on the later
// ones, so that no rank registers windows that another rank of the same communicator will not.
void RegistryImpl::commit(bool agree, Vote vote) {
  if (collective_count_.load() == 0 && pending_total_.load() == 0) return vote.rethrow();  // no symmetric communicator: O(1)
  if (capturing()) {
    if (pending_total_.load() == 0) return vote.rethrow();  // agreement points under capture are skipped on every rank
    throw InvalidState("commit: a CUDA graph is being captured on device " + std::to_string(pool_->source_properties().device) +
                       "; registration during capture is not allowed: commit after the capture ends");
  }
  const auto lock = lock_for_agreement();
  if (agree && collective_count_.load() > 0) take_pending_no(vote);  // a collective step: this rank's kept "no" goes here
  for (auto& owned : comms_) {
    CommState& cs = *owned;
    if (cs.ops().collective) {
      if (!agree) continue;  // windows wait for the next scheduled agreement point
      const bool wait = !cs.pending.empty() || check_ >= CheckLevel::layout;
      if (!step(cs, AgreementPhase::commit, cs.pending, vote, wait)) continue;
    } else if (cs.pending.empty() || !vote.yes()) {
      continue;
    }
    // Creation order; a failure leaves the rest pending (and the failed one unregistered).
    try {
      while (!cs.pending.empty()) {
        register_one(cs, entry_of(cs.pending.front()));
        cs.pending.erase(cs.pending.begin());
        --pending_total_;
      }
    } catch (...) {
      vote.fail();
    }
  }
  vote.rethrow();
}

void RegistryImpl::poll(bool report) {
  if (collective_count_.load() == 0) return;
  std::lock_guard lock(mutex_);
  std::exception_ptr first;
  for (auto& cs : comms_) {  // every scope opening comes here: no allocation
    if (!cs->ops().collective) continue;
    check_outstanding(*cs, /*wait_all=*/false);
    if (report && !first && cs->found_late) first = std::exchange(cs->found_late, nullptr);
  }
  if (first) std::rethrow_exception(first);
}

void RegistryImpl::detach(const Communicator& comm) {
  const auto lock = lock_for_agreement();
  CommState& cs = require(comm, "detach");
  std::vector<std::uint64_t> registered;
  for (auto& [sequence, base] : by_sequence_)
    if (segments_.at(base).registered_with(&cs)) registered.push_back(sequence);
  if (cs.ops().collective) {
    if (capturing()) throw InvalidState("detach: a CUDA graph is being captured; detach symmetric communicators outside capture");
    // Where any rank says no, every rank keeps the communicator and its windows: detach again, or forget.
    Vote vote;
    take_pending_no(vote);
    if (!step(cs, AgreementPhase::detach, registered, vote, /*wait=*/true)) vote.rethrow();
  }
  std::string first_error;
  for (std::uint64_t s : registered) {
    try {
      deregister_one(cs, entry_of(s));
    } catch (const Error& err) {
      if (first_error.empty()) first_error = err.what();
    }
  }
  remove_comm(&cs);
  if (!first_error.empty()) throw RegistrationError("detach: " + first_error + " (the communicator is detached regardless)");
}

void RegistryImpl::forget(const Communicator& comm) {
  std::lock_guard lock(mutex_);
  remove_comm(&require(comm, "forget"));
}

// The empty segments are withheld from allocation before the ranks compare them, so the set they
// agree on is the set they release: no thread can reuse one in between. Two rounds per symmetric
// communicator: the candidates, then each rank's verdict on all of its communicators (its vote
// carried from the first round), so that a rank releases only when every rank it shares a
// communicator with will (a world communicator reaches all).
std::size_t RegistryImpl::trim() {
  if (collective_count_.load() > 0 && capturing()) throw InvalidState("trim: a CUDA graph is being captured; trim outside capture");
  const std::vector<SegmentInfo> withheld = pool_->withhold_empty_segments();  // before mutex_: lock order
  Vote vote;
  try {
    const auto lock = lock_for_agreement();
    std::vector<std::uint64_t> candidates;
    for (const auto& s : withheld)
      if (by_sequence_.count(s.sequence)) candidates.push_back(s.sequence);
    const std::vector<CommState*> symmetric = collective_comms();
    if (!symmetric.empty()) take_pending_no(vote);
    for (CommState* cs : symmetric) step(*cs, AgreementPhase::trim, candidates, vote, /*wait=*/true);
    for (CommState* cs : symmetric) step(*cs, AgreementPhase::trim_verdict, {}, vote, /*wait=*/true);  // records differ where a rank says no
  } catch (...) {  // only host-side failures get here (steps keep their own): nothing was released
    pool_->release_withheld(false);
    throw;
  }
  const std::size_t released = pool_->release_withheld(vote.yes());
  vote.rethrow();
  return released;
}

}  // namespace ncclpool::detail

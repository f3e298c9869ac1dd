#pragma once
// FuzzRun's steps and its oracle (fuzz_run.hpp declares them).

#include "unit/lockstep_fuzz/fuzz_run.hpp"

namespace ncclpool {
namespace {

FuzzResult FuzzRun::run() {
  const int profile_ranks = static_cast<int>(p_.groups[0].size());  // the layouts' groups are all this size
  const ScopedProfile profile(p_.profile_has_windows ? sim_profile(profile_ranks, {{0, "local"}, {MiB, "symmetric"}})
                                                     : sim_profile(profile_ranks, {{0, "none"}, {64 * KiB, "local"}}));
  for (int g = 0; g < g_; ++g) {
    groups_.push_back(std::make_shared<LoopbackGroup>(p_.group_name(g), static_cast<int>(members(g).size()), p_.timeout, LoopbackMatching::nccl));
    for (int m = 0; m < static_cast<int>(members(g).size()); ++m) {
      const int r = members(g)[static_cast<std::size_t>(m)];
      if (p_.fault == Fault::profile && r == p_.fault_rank) group(g).set_machine_gpu(m, "another GPU");  // the profile misses this node
      if (!p_.nodes.empty()) group(g).set_node(m, p_.nodes[static_cast<std::size_t>(r)]);
    }
    group(g).hold_completions(true);  // what a rank that does not wait sees depends on the steps only
  }
  ranks_.resize(static_cast<std::size_t>(n_));
  for (int r = 0; r < n_; ++r) {
    FuzzRank& fr = rank(r);
    for (int g = 0; g < g_; ++g) fr.comms.push_back(p_.member(r, g) ? std::make_shared<CountingComm>(groups_[static_cast<std::size_t>(g)], p_.group_rank(r, g)) : nullptr);
    fr.sources.resize(p_.pools.size());
    for (std::size_t i = 0; i < p_.pools.size(); ++i) fr.pools.push_back(make_fuzz_pool(p_, static_cast<int>(i), fr.sources[i]));
  }
  errors_.assign(p_.ops.size(), std::vector<std::string>(static_cast<std::size_t>(n_)));
  collective_.assign(p_.ops.size(), std::vector<bool>(static_cast<std::size_t>(g_), false));
  log_sizes_.clear();
  for (int g = 0; g < g_; ++g) log_sizes_.emplace_back(members(g).size(), 0);
  reported_broken_.assign(static_cast<std::size_t>(g_), false);
  if (p_.fault_step == 0) inject(0);

  std::barrier sync(n_, [this]() noexcept { after_step(); });
  (void)on_ranks(n_, [&](int r) {
    for (std::size_t k = 0; k < p_.ops.size(); ++k) {
      if (!program_over_ || p_.ops[k].kind == OpKind::teardown) {
        try {
          execute(r, k);
        } catch (const std::exception& e) {
          errors_[k][static_cast<std::size_t>(r)] = describe_error(e);
        }
      }
      sync.arrive_and_wait();
    }
  });
  final_checks();
  FuzzResult result{violations_, p_.describe(), fault_fired(), false};
  for (const auto& step : errors_)
    for (const auto& e : step) result.any_error = result.any_error || !e.empty();
  return result;
}

void FuzzRun::execute(int r, std::size_t k) {
  FuzzRank& fr = rank(r);
  const Op& op = p_.ops[k];
  if (p_.fault == Fault::stop && r == p_.fault_rank && k >= p_.fault_step) fr.stopped = true;
  if (op.kind == OpKind::teardown) return teardown(fr);
  if (fr.stopped) return;  // a rank that stops calling (died, hung, took another branch)
  RegisteredPool& rp = *fr.pools[static_cast<std::size_t>(op.pool)];
  const auto& comm = fr.comms[static_cast<std::size_t>(op.group)];
  switch (op.kind) {
    case OpKind::attach:
      // A member takes the step it believes it must: attach what its own calls left unattached.
      if (comm && !rp.attached(*comm)) rp.attach(comm, attach_kind(p_.pools[static_cast<std::size_t>(op.pool)]));
      break;
    case OpKind::detach:
      if (comm && rp.attached(*comm)) rp.detach(*comm);
      break;
    case OpKind::alloc:
      fr.live[op.alloc.id] = {op.pool, rp.allocate(op.alloc.bytes, op.alloc.stream)};
      break;
    case OpKind::free: {
      auto it = fr.live.find(op.alloc.id);
      if (it == fr.live.end()) break;  // its allocation failed on this rank
      fr.pools[static_cast<std::size_t>(it->second.first)]->deallocate(it->second.second, op.alloc.stream);
      fr.live.erase(it);
      break;
    }
    case OpKind::scope_use: {
      RegisteredPool::ScopeSet scope(rp);
      for (const Alloc& a : op.inside) fr.live[a.id] = {op.pool, rp.allocate(a.bytes, a.stream)};
      // The fault: an exception inside the scope, which is destroyed without close().
      if (p_.fault == Fault::scope_throw && r == p_.fault_rank && k == p_.fault_step) {
        fr.threw_in_scope = true;
        throw std::runtime_error("injected exception inside a scope");
      }
      scope.close();
      break;
    }
    case OpKind::commit:
      rp.commit();
      break;
    case OpKind::trim:
      if (p_.fault == Fault::trim_race && r == p_.fault_rank && k == p_.fault_step) return trim_with_racer(fr, rp);
      (void)rp.trim();
      break;
    case OpKind::user_collective:
      if (comm && r != p_.skip_collective_rank) comm->user_collective(k);
      break;
    case OpKind::final_commit: {
      std::string first;
      for (auto& pool : fr.pools) {  // every pool, whatever fails: all are agreement points
        try {
          pool->commit();
        } catch (const std::exception& e) {
          if (first.empty()) first = describe_error(e);
        }
      }
      if (!first.empty()) throw std::runtime_error(first);
      break;
    }
    case OpKind::teardown: break;
  }
}

// Another thread of this rank allocates and frees while the trim runs. Trim withholds the empty
// segments first, so the racer cannot land in one; it may grow the pool, and its requests make this
// rank's program differ from the others' (which later agreements must report). The trim starts once
// the racer runs, so that the fault always races.
void FuzzRun::trim_with_racer(FuzzRank& fr, RegisteredPool& rp) {
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::atomic<int> requests{0};
  std::thread racer([&] {
    while (!stop.load()) {
      started = true;
      try {
        rp.deallocate(rp.allocate(4 * KiB, 7), 7);
      } catch (const Error&) {
      }
      ++requests;
      std::this_thread::yield();
    }
  });
  while (!started.load()) std::this_thread::yield();
  std::exception_ptr error;
  try {
    (void)rp.trim();
  } catch (...) {
    error = std::current_exception();
  }
  stop = true;
  racer.join();
  // Whether or not it grew the pool, the racer's blocks (freed on its own stream) change where this
  // rank places later requests: the program differs from here on, only agreements can tell.
  fr.racer_ran = true;
  fr.racer_requests = requests.load();
  if (error) std::rethrow_exception(error);
}

// Detach what is attached (collective); forget what cannot be detached (as after an abort).
void FuzzRun::teardown(FuzzRank& fr) {
  std::string first;
  for (auto& pool : fr.pools) {
    for (int g = 0; g < g_; ++g) {
      const auto& comm = fr.comms[static_cast<std::size_t>(g)];
      if (!comm || !pool->attached(*comm)) continue;
      if (!fr.stopped && !group(g).broken()) {
        try {
          pool->detach(*comm);
        } catch (const std::exception& e) {
          if (first.empty()) first = describe_error(e);
        }
      }
      if (pool->attached(*comm)) forget_every_part(fr, *pool, *comm);
    }
  }
  if (!first.empty()) throw std::runtime_error(first);
}

// Forgets comm part by part, counting the registrations each part drops (a part not attached to
// comm says so, and is passed over).
void FuzzRun::forget_every_part(FuzzRank& fr, RegisteredPool& pool, const Communicator& comm) {
  for (const PoolPart& part : pool.parts()) {
    try {
      fr.forgotten_registrations += part.registry->stats(comm).registered_segments;
      part.registry->forget(comm);
    } catch (const InvalidArgument&) {
      // this part is not attached to comm
    }
  }
}

// The faults that are set up between steps (while no rank runs).
void FuzzRun::inject(std::size_t k) {
  if (k != p_.fault_step) return;
  FuzzRank& fr = rank(p_.fault_rank);
  const auto fail_next = [&](LoopbackOp op) {
    group(p_.fault_group).inject_failure(op, p_.group_rank(p_.fault_rank, p_.fault_group), 1);
    fr.comms[static_cast<std::size_t>(p_.fault_group)]->expect_failure(op);
  };
  switch (p_.fault) {
    case Fault::oom: {
      auto& sources = fr.sources[static_cast<std::size_t>(p_.oom_pool)];
      RegistrationKind part = p_.oom_part;
      const auto* automatic = dynamic_cast<const AutoPool*>(fr.pools[static_cast<std::size_t>(p_.oom_pool)].get());
      if (p_.growth_at_fault && automatic) part = automatic->routes().for_request(kGrowthBytes);  // the part the step's growth goes to
      (sources.size() == 1 ? sources[0] : sources[static_cast<std::size_t>(part)])->inject_oom();
      break;
    }
    case Fault::register_local: fail_next(LoopbackOp::register_local); break;
    case Fault::register_window: fail_next(LoopbackOp::register_window); break;
    default: break;
  }
}

// Runs on one thread once every rank finished step current_: compares the ranks, then prepares the next step.
void FuzzRun::after_step() noexcept {
  const std::size_t k = current_++;
  try {
    for (int g = 0; g < g_; ++g) {
      for (std::size_t m = 0; m < members(g).size(); ++m) {
        const std::size_t size = group(g).call_log(static_cast<int>(m)).size();
        if (size != log_sizes_[static_cast<std::size_t>(g)][m]) collective_[k][static_cast<std::size_t>(g)] = true;
        log_sizes_[static_cast<std::size_t>(g)][m] = size;
      }
      // (a) every collective call made by every member, in the same order. A rank that stopped may
      // lag; where groups overlap, its partners time out late in their other groups too (a waiting
      // rank comes late to the next), so under that fault a broken group's logs may differ by the
      // calls that timed out.
      std::vector<bool> lagging;
      for (int r : members(g)) lagging.push_back(rank(r).stopped);
      const bool stop_cascade = p_.fault == Fault::stop && group(g).broken();
      if (!logs_differed_ && !stop_cascade) {
        const std::string diff = call_log_difference(group(g), lagging);
        if (!diff.empty()) {
          logs_differed_ = true;  // reported once: later steps only repeat it
          violation(k, (p_.layout == Layout::world ? "" : "group " + p_.group_name(g) + ": ") + diff + errors_after(k));
        }
      }
      // (d) nothing hangs: a collective call that no partner made times out and breaks the group
      // (every later call fails at once, so no step waits for more than one timeout). Only a rank
      // that stops calling may leave calls unmatched (in its groups, and by the cascade above in
      // groups that overlap them).
      const bool stop_explains = p_.fault == Fault::stop && rank(p_.fault_rank).stopped;
      if (group(g).broken() && !stop_explains && !reported_broken_[static_cast<std::size_t>(g)]) {
        reported_broken_[static_cast<std::size_t>(g)] = true;
        violation(k, "a collective call on " + p_.group_name(g) + " timed out (a rank never made its partner call): the group is broken" + errors_after(k));
      }
    }
    note_divergence(k);
    note_profile_fired();
    if (p_.ops[k].kind != OpKind::teardown) {
      check_places(k);
      check_invariants(k);
    }
    for (int g = 0; g < g_; ++g)
      if (group(g).broken()) program_over_ = true;  // a timed-out communicator is aborted: teardown only
    for (int g = 0; g < g_; ++g) group(g).release_completions();
    inject(k + 1);
  } catch (const std::exception& e) {
    violations_.push_back("harness error after step " + std::to_string(k) + ": " + e.what());
  }
}

std::string FuzzRun::errors_after(std::size_t k) const {
  std::string out;
  for (int r = 0; r < n_; ++r)
    if (!errors_[k][static_cast<std::size_t>(r)].empty()) out += " rank " + std::to_string(r) + " got " + shorten(errors_[k][static_cast<std::size_t>(r)]) + ";";
  return out.empty() ? " (no rank got an error in this step)" : " errors:" + out;
}

// Whether a member's error is about group g: it names g's communicator, or none of the layout's (an
// out-of-memory, an exception: about every group of that rank). With one group, every error is.
bool FuzzRun::concerns(const std::string& error, int g) const {
  if (g_ == 1) return true;
  bool names_any = false;
  for (int other = 0; other < g_; ++other) {
    if (has(error, "loopback comm '" + p_.group_name(other) + "'")) {
      if (other == g) return true;
      names_any = true;
    }
  }
  return !names_any;
}

// Ranks whose requests differ (an allocation that failed on some ranks only, a racing thread's
// requests) legitimately place later blocks elsewhere: their agreements must fail, but the places of
// blocks are not comparable any more.
void FuzzRun::note_divergence(std::size_t k) {
  const OpKind kind = p_.ops[k].kind;
  if (kind == OpKind::alloc || kind == OpKind::scope_use || kind == OpKind::free) {
    int failed = 0;
    for (int r = 0; r < n_; ++r) failed += errors_[k][static_cast<std::size_t>(r)].empty() ? 0 : 1;
    if (failed != 0 && failed != n_) diverged_ = true;
    // Every rank may have an error in a step (one's allocation failed, the others' scope end heard
    // its "no") and still hold other buffers from then on.
    for (int r = 1; r < n_; ++r) {
      const auto& a = rank(0).live;
      const auto& b = rank(r).live;
      const bool same_ids = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) { return x.first == y.first; });
      if (!same_ids) diverged_ = true;
    }
  }
  for (int r = 0; r < n_; ++r) diverged_ = diverged_ || rank(r).racer_ran || rank(r).stopped;
  if (p_.fault == Fault::profile) diverged_ = true;  // requests route to other parts on one rank
}

// The profile fault took effect once an auto pool's routes on the fault rank differ from another
// rank's (its node missed the profile and took the built-in routes; where both say the same, the
// fault changed nothing).
void FuzzRun::note_profile_fired() {
  if (p_.fault != Fault::profile || profile_fired_) return;
  const int other = p_.fault_rank == 0 ? 1 : 0;
  for (std::size_t i = 0; i < p_.pools.size(); ++i) {
    const auto* mine = dynamic_cast<const AutoPool*>(rank(p_.fault_rank).pools[i].get());
    const auto* theirs = dynamic_cast<const AutoPool*>(rank(other).pools[i].get());
    if (mine && theirs && mine->routes().describe() != theirs->routes().describe()) profile_fired_ = true;
  }
}

// (b) a block in a window on every member sits in the same window at the same offset everywhere.
void FuzzRun::check_places(std::size_t k) {
  if (diverged_) return;
  bool all_failed = true;
  for (int r = 0; r < n_; ++r) all_failed = all_failed && !errors_[k][static_cast<std::size_t>(r)].empty();
  if (all_failed) return;
  for (int g = 0; g < g_; ++g) {
    for (const auto& [id, where] : rank(members(g)[0]).live) {
      std::vector<std::string> places;
      for (int r : members(g)) {
        FuzzRank& fr = rank(r);
        auto it = fr.live.find(id);
        if (it == fr.live.end()) break;
        const auto place = window_place(*fr.pools[static_cast<std::size_t>(it->second.first)], it->second.second, *fr.comms[static_cast<std::size_t>(g)]);
        if (!place) break;
        places.push_back(rank_in(r, g) + ": " + *place);
      }
      if (places.size() != members(g).size()) continue;
      bool same = true;
      for (std::size_t m = 1; m < places.size(); ++m) same = same && places[m].substr(places[m].find(':')) == places[0].substr(places[0].find(':'));
      if (!same) {
        violation(k, "block #" + std::to_string(id) + " sits in windows at other places (a symmetric kernel reads wrong data): " + join(places, "; ") + errors_after(k));
        diverged_ = true;  // reported once
        return;
      }
    }
  }
}

void FuzzRun::check_invariants(std::size_t k) {
  for (int r = 0; r < n_; ++r) {
    for (auto& pool : rank(r).pools) {
      try {
        pool->check_invariants();
      } catch (const std::exception& e) {
        violation(k, "rank " + std::to_string(r) + ": " + e.what());
        return;
      }
    }
  }
}

void FuzzRun::final_checks() {
  // (c) an error about group g in a step where g's members made collective calls ends in an error on
  // every member of g (at that step, or at a later agreement point of that rank: a rank with nothing
  // to do learns after the fact).
  for (std::size_t k = 0; k < p_.ops.size(); ++k) {
    for (int g = 0; g < g_; ++g) {
      if (!collective_[k][static_cast<std::size_t>(g)]) continue;
      int failed = -1;
      for (int r : members(g))
        if (failed < 0 && !errors_[k][static_cast<std::size_t>(r)].empty() && concerns(errors_[k][static_cast<std::size_t>(r)], g)) failed = r;
      if (failed < 0) continue;
      for (int r : members(g)) {
        if (rank(r).stopped) continue;
        bool heard = false;
        for (std::size_t later = k; later < p_.ops.size() && !heard; ++later) heard = !errors_[later][static_cast<std::size_t>(r)].empty();
        if (!heard) {
          violation(k, rank_in(failed, g) + " got " + shorten(errors_[k][static_cast<std::size_t>(failed)]) + ", but " + rank_in(r, g) +
                           " never got an error, to the end of the program");
          break;
        }
      }
    }
  }
  // A rank that stops calling: every member of its groups that made a collective call afterwards
  // ends in an AgreementError (the timeout), not in a hang.
  if (p_.fault == Fault::stop) {
    for (int g = 0; g < g_; ++g) {
      const int stopped = p_.group_rank(p_.fault_rank, g);
      if (stopped < 0) continue;
      for (int r : members(g)) {
        if (r == p_.fault_rank) continue;
        bool agreement_error = false;
        for (std::size_t k = p_.fault_step; k < p_.ops.size(); ++k) agreement_error = agreement_error || has(errors_[k][static_cast<std::size_t>(r)], "AgreementError");
        const bool called_after = group(g).call_log(p_.group_rank(r, g)).size() > group(g).call_log(stopped).size();
        if (called_after && !agreement_error)
          violation(p_.fault_step, rank_in(r, g) + " made collective calls after rank " + std::to_string(p_.fault_rank) + " stopped, and never got an AgreementError");
      }
    }
  }
  // Registrations count back to zero once the pools are gone, except those forget dropped (an
  // aborted communicator releases them).
  std::size_t forgotten = 0;
  for (auto& fr : ranks_) {
    forgotten += fr.forgotten_registrations;
    fr.pools.clear();
  }
  std::int64_t live = 0;
  for (int g = 0; g < g_; ++g) live += group(g).live_registrations();
  if (live != static_cast<std::int64_t>(forgotten))
    violations_.push_back("after teardown: " + std::to_string(live) + " registrations live in the loopback, " + std::to_string(forgotten) + " dropped by forget");
}

// Whether the fault took effect (49.8: a fault fires on the next call of its kind, so a program
// without such a call after the fault step tests nothing).
bool FuzzRun::fault_fired() {
  FuzzRank& fr = rank(p_.fault_rank);
  switch (p_.fault) {
    case Fault::none: return false;
    case Fault::oom: {
      int fired = 0;
      for (const auto& s : fr.sources[static_cast<std::size_t>(p_.oom_pool)]) fired += s->fired();
      return fired > 0;
    }
    case Fault::register_local: return fr.comms[static_cast<std::size_t>(p_.fault_group)]->failure_fired(LoopbackOp::register_local);
    case Fault::register_window: return fr.comms[static_cast<std::size_t>(p_.fault_group)]->failure_fired(LoopbackOp::register_window);
    case Fault::scope_throw: return fr.threw_in_scope;
    case Fault::profile: return profile_fired_;
    case Fault::trim_race: return fr.racer_requests > 0;
    case Fault::stop:  // it mattered where another member called on without it
      for (int g = 0; g < g_; ++g) {
        const int stopped = p_.group_rank(p_.fault_rank, g);
        if (stopped < 0) continue;
        for (std::size_t m = 0; m < members(g).size(); ++m)
          if (group(g).call_log(static_cast<int>(m)).size() > group(g).call_log(stopped).size()) return true;
      }
      return false;
  }
  return false;
}

}  // namespace
}  // namespace ncclpool

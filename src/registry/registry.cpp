// The registration state machine, its inner half: construction and teardown, the helpers every
// operation uses (register / deregister one segment, the agreement step with its vote), and the
// pool's hooks (growth, release). The operations callers make are in registry_operations.cpp.

#include "registry_impl.hpp"
#include "window_directory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace ncclpool::detail {

RegistryImpl::RegistryImpl(std::shared_ptr<Pool> pool, RegistryOptions options) : pool_(std::move(pool)) {
  if (!pool_) throw InvalidArgument("registry: pool is null");
  check_ = options.check ? *options.check : check_level_from_env();
  if (options.scope_period == 0) throw InvalidArgument("registry: scope_period must be >= 1 (1 = every scope end commits)");
  // Check mode proves the layout at every agreement point: make every scope end one.
  scope_period_ = check_ >= CheckLevel::layout ? 1 : options.scope_period;
  agreed_settings_ = std::move(options.agreed_settings);
  settings_digest_ = settings_digest(agreed_settings_);
  pool_->add_observer(*this, /*replay_existing=*/true);
}

RegistryImpl::~RegistryImpl() {
  if (const int open = open_scopes_.load(); open != 0) {
    // A Scope keeps a pointer to this registry and the torch allocator may still route to it: going on
    // would be a use after free somewhere later. Fail here, loudly.
    std::fprintf(stderr, "ncclpool: registry of pool '%s' destroyed with %d scope(s) still open: close them first\n",
                 pool_->config().name.c_str(), open);
    std::abort();
  }
  {
    std::lock_guard lock(mutex_);
    while (!comms_.empty()) {
      CommState* cs = comms_.back().get();
      if (!cs->ops().collective) {
        for (auto& [base, entry] : segments_) deregister_or_report(*cs, entry, "registry teardown");
      } else if (cs->stats.registered_segments > 0) {
        std::fprintf(stderr,
                     "ncclpool: registry destroyed with %s still attached (%zu windows): forgetting them; "
                     "detach symmetric communicators collectively before destroying the registry\n",
                     cs->comm->describe().c_str(), cs->stats.registered_segments);
      }
      remove_comm(cs);
    }
  }
  pool_->remove_observer(*this);
}

// ------------------------------------------------------------------------------------------------
// Helpers (mutex_ held)
// ------------------------------------------------------------------------------------------------

CommState* RegistryImpl::find(const Communicator& comm) const {
  for (const auto& cs : comms_)
    if (cs->comm->native_handle() == comm.native_handle()) return cs.get();
  return nullptr;
}

CommState& RegistryImpl::require(const Communicator& comm, const char* operation) const {
  CommState* cs = find(comm);
  if (cs == nullptr) throw InvalidArgument(std::string(operation) + ": " + comm.describe() + " is not attached to pool '" + pool_->config().name + "'");
  return *cs;
}

// Whether this agreement point is under a capture the program makes (the calling thread's), the same
// on every rank; another thread's capture on one rank must not make that rank alone skip (issue 44
// item 9). The NCCL backend joins agreements in relaxed capture mode, so that another thread's
// global-mode capture neither refuses nor is broken by them.
bool RegistryImpl::capturing() const { return pool_->source().ordering().thread_capturing(); }

SegmentEntry& RegistryImpl::entry_of(std::uint64_t sequence) { return segments_.at(by_sequence_.at(sequence)); }

void RegistryImpl::register_one(CommState& cs, SegmentEntry& entry) {
  const RegistrationKindOps& ops = cs.ops();
  void* handle = nullptr;
  {
    RegistrationTimer timer(cs.stats);
    try {
      handle = ops.register_segment(*cs.comm, entry.info.base, entry.info.size);
    } catch (const Error& e) {
      ++cs.stats.errors;
      throw RegistrationError(std::string(ops.what) +
                              " registration of segment " + std::to_string(entry.info.sequence) + " (" +
                              std::to_string(entry.info.size) + " bytes at " + std::to_string(reinterpret_cast<std::uintptr_t>(entry.info.base)) +
                              ") of pool '" + pool_->config().name + "' with " + cs.comm->describe() + " failed: " + e.what());
    }
  }
  if (ops.windows) WindowDirectory::instance().add_window(cs.comm->native_handle(), entry.info.base, entry.info.size);
  entry.handles.emplace_back(&cs, handle);
  ++cs.stats.registrations;
  ++cs.stats.registered_segments;
  cs.stats.bytes_registered += entry.info.size;
}

void RegistryImpl::deregister_one(CommState& cs, SegmentEntry& entry) {
  const auto it = entry.handle_of(&cs);
  if (it == entry.handles.end()) return;
  void* const handle = it->second;
  // The handle is dropped whatever NCCL answers: a registration NCCL refused to remove is not ours.
  entry.handles.erase(it);
  const RegistrationKindOps& ops = cs.ops();
  if (ops.windows) WindowDirectory::instance().remove_window(cs.comm->native_handle(), entry.info.base);
  --cs.stats.registered_segments;
  cs.stats.bytes_registered -= entry.info.size;
  ++cs.stats.deregistrations;
  RegistrationTimer timer(cs.stats);
  try {
    ops.deregister_segment(*cs.comm, handle);
  } catch (const Error& e) {
    ++cs.stats.errors;
    throw RegistrationError("deregistration of segment " + std::to_string(entry.info.sequence) + " of pool '" +
                            pool_->config().name + "' from " + cs.comm->describe() + " failed: " + e.what());
  }
}

void RegistryImpl::deregister_or_report(CommState& cs, SegmentEntry& entry, const char* context) noexcept {
  try {
    deregister_one(cs, entry);
  } catch (const Error& e) {
    std::fprintf(stderr, "ncclpool: %s: %s\n", context, e.what());
  }
}

void RegistryImpl::drop_pending(std::uint64_t sequence) {
  for (auto& cs : comms_) {
    auto it = std::find(cs->pending.begin(), cs->pending.end(), sequence);
    if (it != cs->pending.end()) {
      cs->pending.erase(it);
      --pending_total_;
    }
  }
}

std::vector<std::pair<std::uint64_t, std::size_t>> RegistryImpl::describe_segments(const std::vector<std::uint64_t>& sequences) const {
  std::vector<std::pair<std::uint64_t, std::size_t>> out;
  out.reserve(sequences.size());
  for (std::uint64_t s : sequences) out.emplace_back(s, segments_.at(by_sequence_.at(s)).info.size);
  return out;
}

std::unique_lock<std::mutex> RegistryImpl::lock_for_agreement() {
  std::vector<BlockLocation> layout;
  if (check_ >= CheckLevel::layout) layout = pool_->live_blocks();
  const std::uint64_t recoveries = pool_->placement_recoveries();
  std::unique_lock lock(mutex_);
  last_layout_ = std::move(layout);
  last_placement_recoveries_ = recoveries;
  return lock;
}

std::vector<CommState*> RegistryImpl::collective_comms() const {
  std::vector<CommState*> out;
  for (const auto& cs : comms_)
    if (cs->ops().collective) out.push_back(cs.get());
  return out;
}

void RegistryImpl::start_agreement(CommState& cs, AgreementPhase phase, const std::vector<std::uint64_t>& sequences, bool voted_no) {
  AgreementInput in;
  in.phase = phase;
  in.epoch = cs.epoch;
  in.ordinal = cs.ordinal;
  in.pool_name = &pool_->config().name;
  in.segments = describe_segments(sequences);
  in.check = check_;
  in.voted_no = voted_no;
  in.symmetric_kernels = cs.symmetric_kernels;
  in.scope_period = scope_period_;
  in.settings_digest = settings_digest_;
  in.kind = cs.kind;
  // A local attachment agrees only at its attach (agreed settings): on the kind and the settings, not
  // on where its blocks are (a local pool need not be deterministic).
  const bool layout = cs.ops().needs_deterministic_pool;
  in.placement_recoveries = layout ? last_placement_recoveries_ : 0;
  if (layout && check_ >= CheckLevel::layout) {  // last_layout_ was taken by the caller before mutex_ (lock order)
    in.layout_digest = layout_digest(last_layout_);
    in.live_blocks = last_layout_.size();
  }
  const AgreementRecord mine = make_agreement(in);
  RegistrationTimer timer(cs.stats);
  std::unique_ptr<PendingGather> gather = cs.comm->start_all_gather(mine);  // throws if broken: nothing started
  ++cs.epoch;
  ++cs.stats.agreements;
  cs.outstanding.push_back(Outstanding{std::move(gather), mine});
}

// Oldest first, so that the error kept names the first agreement point that differed. Each
// outstanding agreement is removed before it is checked: each is reported once.
void RegistryImpl::check_outstanding(CommState& cs, bool wait_all) noexcept {
  // A rank that never waits would pile agreements up behind a peer that is gone: past a few, wait.
  constexpr std::size_t kMaxInFlight = 16;
  while (!cs.outstanding.empty()) {
    if (!wait_all && cs.outstanding.size() <= kMaxInFlight && !cs.outstanding.front().gather->ready()) return;
    Outstanding o = std::move(cs.outstanding.front());
    cs.outstanding.pop_front();
    try {
      std::vector<AgreementRecord> records;
      {
        RegistrationTimer timer(cs.stats);
        records = o.gather->wait();
      }
      // Layout details need every rank in a further exchange, which only ranks that waited make.
      check_agreement(records, o.mine, *cs.comm, /*late=*/true, agreed_settings_);
    } catch (...) {
      if (!cs.found_late) cs.found_late = std::current_exception();
    }
  }
}

// A step that acts (wait) first waits for every earlier agreement, so that a mismatch among them is in
// its vote before the record leaves (deciding after would let this rank act where the others do not,
// or the reverse). A step that only joins checks the ones already complete: its steady-path cost
// stays an enqueue, and whatever it has not seen yet is found at a later point, as a "no" there.
bool RegistryImpl::step(CommState& cs, AgreementPhase phase, const std::vector<std::uint64_t>& sequences, Vote& vote, bool wait) {
  check_outstanding(cs, /*wait_all=*/wait);
  if (cs.found_late) vote.fail(std::exchange(cs.found_late, nullptr));
  try {
    start_agreement(cs, phase, sequences, !vote.yes());
  } catch (...) {  // a broken communicator: nothing was started, on any rank that can still tell
    vote.fail();
    return false;
  }
  if (!wait) return false;  // nothing to act on here; the result is checked at a later point
  Outstanding o = std::move(cs.outstanding.back());
  cs.outstanding.pop_back();
  try {
    std::vector<AgreementRecord> records;
    {
      RegistrationTimer timer(cs.stats);
      records = o.gather->wait();
    }
    ++cs.stats.agreements_waited;
    if (only_layouts_differ(records)) explain_layout_difference(*cs.comm, records, last_layout_, pool_->config().name);
    check_agreement(records, o.mine, *cs.comm, /*late=*/false, agreed_settings_);
  } catch (...) {
    vote.fail();
  }
  return vote.yes();
}

void RegistryImpl::remove_comm(CommState* cs) {
  for (auto& [base, entry] : segments_) {
    if (cs->ops().windows && entry.registered_with(cs)) WindowDirectory::instance().remove_window(cs->comm->native_handle(), entry.info.base);
    std::erase_if(entry.handles, [&](auto& h) { return h.first == cs; });
  }
  pending_total_ -= cs->pending.size();
  if (cs->ops().collective) --collective_count_;
  if (cs->ops().windows) WindowDirectory::instance().detach_comm(cs->comm->native_handle());
  std::erase_if(comms_, [&](auto& p) { return p.get() == cs; });
}

// ------------------------------------------------------------------------------------------------
// Pool hooks (pool lock held)
// ------------------------------------------------------------------------------------------------

// Communicators of a kind that is not collective (local) register the new segment now (unless a graph
// is being captured: then later, at commit); collective ones (symmetric) mark it pending. A failed local registration undoes the ones made for this
// segment and throws, so the pool rolls the segment back: never half registered.
void RegistryImpl::on_segment_created(const SegmentInfo& segment) {
  std::lock_guard lock(mutex_);
  SegmentEntry entry{segment, {}};
  // Local registration during any capture on the device waits (not collective: this rank's own matter).
  const bool in_capture = !comms_.empty() && pool_->source().ordering().device_capturing();  // growth path only: a few driver queries
  std::vector<CommState*> pend;
  for (auto& cs : comms_) {
    if (in_capture) ++cs->stats.segments_created_in_capture;
    if (cs->ops().collective || in_capture) {
      pend.push_back(cs.get());
      continue;
    }
    try {
      register_one(*cs, entry);
    } catch (...) {
      while (!entry.handles.empty()) deregister_or_report(*entry.handles.back().first, entry, "segment creation rollback");
      throw;
    }
  }
  for (CommState* cs : pend) {
    cs->pending.push_back(segment.sequence);
    ++pending_total_;
  }
  by_sequence_.emplace(segment.sequence, reinterpret_cast<std::uintptr_t>(segment.base));
  segments_.emplace(reinterpret_cast<std::uintptr_t>(segment.base), std::move(entry));
}

// Collective registrations (windows), registered or pending: only a collective trim may release them.
bool RegistryImpl::may_release(const SegmentInfo& segment) {
  std::lock_guard lock(mutex_);
  for (auto& cs : comms_) {
    if (!cs->ops().collective) continue;
    if (std::find(cs->pending.begin(), cs->pending.end(), segment.sequence) != cs->pending.end()) return false;
  }
  auto it = segments_.find(reinterpret_cast<std::uintptr_t>(segment.base));
  if (it == segments_.end()) return true;
  return std::none_of(it->second.handles.begin(), it->second.handles.end(), [](auto& h) { return h.first->ops().collective; });
}

void RegistryImpl::on_segment_releasing(const SegmentInfo& segment) noexcept {
  std::lock_guard lock(mutex_);
  auto it = segments_.find(reinterpret_cast<std::uintptr_t>(segment.base));
  if (it == segments_.end()) return;
  SegmentEntry& entry = it->second;
  // Communicators in attach order: the same on every rank, so windows go in the same order.
  for (auto& cs : comms_) deregister_or_report(*cs, entry, "segment release");
  drop_pending(segment.sequence);
  by_sequence_.erase(segment.sequence);
  segments_.erase(it);
}

}  // namespace ncclpool::detail

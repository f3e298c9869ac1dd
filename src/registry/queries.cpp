// Registry lookups, statistics, invariant checks, the public facade and Scope.

#include "registry_impl.hpp"

#include <algorithm>

namespace ncclpool {


CommunicatorStats& CommunicatorStats::operator+=(const CommunicatorStats& other) noexcept {
  NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_STATS_CXX_MERGE)
  return *this;
}

namespace detail {

std::optional<SegmentRegistrations> RegistryImpl::lookup(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = segments_.upper_bound(address);
  if (it == segments_.begin()) return std::nullopt;
  --it;
  if (address >= it->first + it->second.info.size) return std::nullopt;
  SegmentRegistrations out{it->second.info, {}};
  for (auto& [cs, handle] : it->second.handles) out.registrations.push_back({cs->comm.get(), cs->kind, handle});
  return out;
}

void* RegistryImpl::handle_of(const void* ptr, const Communicator& comm) const {
  auto found = lookup(ptr);
  if (!found) return nullptr;
  for (auto& r : found->registrations)
    if (r.comm->native_handle() == comm.native_handle()) return r.handle;
  return nullptr;
}

CommunicatorStats RegistryImpl::stats(const Communicator& comm) const {
  std::lock_guard lock(mutex_);
  const CommState& cs = require(comm, "stats");
  CommunicatorStats s = cs.stats;
  s.has_windows = cs.ops().windows ? 1 : 0;  // as RegisteredPool::stats says it
  s.pending = cs.pending.size();
  s.agreements_in_flight = cs.outstanding.size();
  return s;
}

std::size_t RegistryImpl::attached() const {
  std::lock_guard lock(mutex_);
  return comms_.size();
}

void RegistryImpl::check_invariants() const {
  const std::vector<SegmentInfo> pool_segments = pool_->segments();  // before mutex_: lock order
  std::lock_guard lock(mutex_);
  const std::string who = "registry of pool '" + pool_->config().name + "': invariant broken: ";
  auto fail = [&](const std::string& what) { throw InvariantViolation(who + what); };
  if (pool_segments.size() != segments_.size()) fail("the registry tracks " + std::to_string(segments_.size()) + " segments, the pool has " + std::to_string(pool_segments.size()));
  for (const auto& s : pool_segments)
    if (!by_sequence_.count(s.sequence)) fail("pool segment " + std::to_string(s.sequence) + " is unknown to the registry");
  std::size_t pending = 0;
  for (const auto& cs : comms_) {
    std::size_t registered = 0, bytes = 0;
    for (const auto& [base, entry] : segments_) {
      const auto n = std::count_if(entry.handles.begin(), entry.handles.end(), [&](auto& h) { return h.first == cs.get(); });
      const auto p = std::count(cs->pending.begin(), cs->pending.end(), entry.info.sequence);
      if (n + p != 1)
        fail("segment " + std::to_string(entry.info.sequence) + " is registered " + std::to_string(n) + " and pending " +
             std::to_string(p) + " times with " + cs->comm->describe() + " (must be exactly once)");
      registered += static_cast<std::size_t>(n);
      bytes += static_cast<std::size_t>(n) * entry.info.size;
    }
    if (registered != cs->stats.registered_segments || bytes != cs->stats.bytes_registered)
      fail("registration counters of " + cs->comm->describe() + " disagree with a recount");
    if (!cs->ops().collective && cs->stats.registrations - cs->stats.deregistrations != registered)
      fail("registrations minus deregistrations of " + cs->comm->describe() + " do not count back to what is registered");
    pending += cs->pending.size();
  }
  for (const auto& [base, entry] : segments_)
    for (auto& [cs, handle] : entry.handles)
      if (std::none_of(comms_.begin(), comms_.end(), [&](auto& c) { return c.get() == cs; })) fail("a handle outlived its communicator");
  if (pending != pending_total_.load()) fail("pending counter disagrees with a recount");
}

}  // namespace detail

Registry::Registry(std::shared_ptr<Pool> pool, RegistryOptions options)
    : impl_(std::make_unique<detail::RegistryImpl>(std::move(pool), options)) {}
Registry::~Registry() = default;
// The kind decides whether the attach is collective, so a kind that is not attachable ('none', or a
// value outside the enum) is refused before any step.
void Registry::attach(std::shared_ptr<Communicator> comm, RegistrationKind kind) {
  if (!registration_ops(kind).attachable || registration_ops(kind).kind != kind)
    throw InvalidArgument("attach: pool '" + impl_->pool_->config().name + "' as '" + to_string(kind) +
                          "': a communicator is attached as local or symmetric ('none' registers nothing: do not attach it)");
  impl_->attach(std::move(comm), kind);
}
void Registry::detach(const Communicator& comm) { impl_->detach(comm); }
void Registry::forget(const Communicator& comm) { impl_->forget(comm); }
void Registry::commit() { impl_->commit(); }
void Registry::commit_after_error() noexcept { impl_->commit_after_error(); }
void Registry::poll() { impl_->poll(/*report=*/true); }
void Registry::vote_no(std::exception_ptr error) noexcept {
  if (!error) return vote_no(std::string("no reason given"));
  impl_->vote_no(std::move(error));
}
void Registry::vote_no(const std::string& why) noexcept {
  try {
    vote_no(std::make_exception_ptr(InvalidState("pool '" + impl_->pool_->config().name + "': this rank voted no after a failure on this rank: " + why)));
  } catch (...) {  // out of host memory building the message: still a "no"
    impl_->vote_no(std::current_exception());
  }
}
bool Registry::voting_no() const noexcept { return impl_->voting_no(); }
CheckLevel Registry::check_level() const noexcept { return impl_->check_level(); }
std::uint64_t Registry::scope_ends() const noexcept { return impl_->scope_ends(); }
unsigned Registry::scope_period() const noexcept { return impl_->scope_period(); }
std::uint64_t Registry::next_committing_scope_end() const noexcept {
  const std::uint64_t n = impl_->scope_ends();
  const unsigned p = impl_->scope_period();
  return detail::RegistryImpl::scope_end_commits(n, p) ? n : n + (p - n % p);
}
int Registry::open_scopes() const noexcept { return impl_->open_scopes_.load(); }
std::size_t Registry::trim() { return impl_->trim(); }
std::optional<SegmentRegistrations> Registry::lookup(const void* ptr) const { return impl_->lookup(ptr); }
void* Registry::handle_of(const void* ptr, const Communicator& comm) const { return impl_->handle_of(ptr, comm); }
CommunicatorStats Registry::stats(const Communicator& comm) const { return impl_->stats(comm); }
std::size_t Registry::pending() const { return impl_->pending(); }
std::size_t Registry::attached() const { return impl_->attached(); }
void Registry::check_invariants() const { impl_->check_invariants(); }
Pool& Registry::pool() noexcept { return *impl_->pool_; }
std::atomic<int>& Registry::impl_open_scopes() noexcept { return impl_->open_scopes_; }
void Registry::end_scope(bool failed) { impl_->end_scope(failed); }
void Registry::poll_quietly() noexcept {
  try {
    impl_->poll(/*report=*/false);
  } catch (...) {  // a lock that failed: nothing to keep
  }
}
const std::shared_ptr<Pool>& Registry::shared_pool() const noexcept { return impl_->pool_; }

// ---- Scope: a thread-local stack of open scopes ----

namespace {
thread_local Scope* innermost = nullptr;
}

// Opening a scope checks agreements of earlier agreement points whose results arrived (no wait). It
// never throws: whether a result has arrived is timing, and a rank whose scope did not open would
// count one scope end fewer than the others from then on. A mismatch found is kept for this rank's
// next agreement point, where it votes no and every rank fails together.
Scope::Scope(Registry& registry) : registry_(&registry), previous_(innermost) {
  registry.poll_quietly();
  innermost = this;
  ++registry.impl_open_scopes();
}

Scope::~Scope() {
  if (open_) close_after_error();  // an exception on its way: the scope end still counts
}

void Scope::close_after_error() noexcept {
  if (!open_) return;
  leave();
  try {
    registry_->end_scope(/*failed=*/true);
  } catch (...) {  // the caller has an error of its own on its way out
  }
}

void Scope::abandon() noexcept {
  if (open_) leave();
}

void Scope::leave() noexcept {
  open_ = false;
  innermost = previous_;
  --registry_->impl_open_scopes();
}

void Scope::close() {
  if (!open_) throw InvalidState("scope: close() called twice");
  leave();
  registry_->end_scope(/*failed=*/false);
}

Scope* current_scope() noexcept { return innermost; }

}  // namespace ncclpool

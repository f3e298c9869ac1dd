// RegisteredPool (registered_pool.hpp): what every kind of pool does over its parts, and SinglePool.

#include <ncclpool/errors.hpp>
#include <ncclpool/registered_pool.hpp>

#include "registry_impl.hpp"
#include "vote.hpp"

#include <algorithm>
#include <exception>

namespace ncclpool {
RegisteredPool::~RegisteredPool() = default;

void RegisteredPool::add_part(RegistrationKind kind, std::shared_ptr<Pool> pool, const RegistryOptions& options) {
  if (!pool) throw InvalidArgument("pool '" + name_ + "': no pool for its " + to_string(kind) + " part");
  PoolPart part;
  part.kind = kind;
  part.pool = std::move(pool);
  part.registry = std::make_unique<Registry>(part.pool, options);
  if (!parts_.empty()) part.registry->impl_->share_pending_no(parts_.front().registry->impl_->pending_no());
  parts_.push_back(std::move(part));
}

void RegisteredPool::vote_no(const std::string& why) noexcept {
  try {
    parts_.front().registry->vote_no(std::make_exception_ptr(InvalidState("pool '" + name_ + "': this rank voted no after a failure on this rank: " + why)));
  } catch (...) {  // out of host memory building the message: still a "no"
    parts_.front().registry->vote_no(std::current_exception());
  }
}

bool RegisteredPool::voting_no() const noexcept { return parts_.front().registry->voting_no(); }

std::exception_ptr RegisteredPool::take_vote_no() noexcept { return parts_.front().registry->impl_->pending_no()->take(); }

// ---------------------------------------------------------------- allocation

const PoolPart* RegisteredPool::part_of(const void* ptr) const {
  for (const PoolPart& p : parts_)
    if (p.pool->segment_of(ptr)) return &p;
  return nullptr;
}

void RegisteredPool::deallocate(void* ptr, stream_t stream) {
  if (ptr == nullptr) return;
  if (parts_.size() == 1) return parts_.front().pool->deallocate(ptr, stream);  // the pool tells a foreign pointer itself
  const PoolPart* p = part_of(ptr);
  (p ? p->pool : parts_.front().pool)->deallocate(ptr, stream);  // a foreign pointer: the first pool's ForeignPointer message
}

void RegisteredPool::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  if (parts_.size() == 1) return parts_.front().pool->deallocate(ptr);
  const PoolPart* p = part_of(ptr);
  (p ? p->pool : parts_.front().pool)->deallocate(ptr);
}

void RegisteredPool::publish_frees(stream_t stream) {
  for (PoolPart& p : parts_) p.pool->publish_frees(stream);
}

// ---------------------------------------------------------------- attachments

std::vector<RegisteredPool::Attachment>::const_iterator RegisteredPool::find(const Communicator& comm) const {
  return std::find_if(attachments_.begin(), attachments_.end(), [&](const Attachment& a) { return a.comm.get() == &comm; });
}

bool RegisteredPool::is_attached_locked(const Communicator& comm) const { return find(comm) != attachments_.end(); }

void RegisteredPool::reserve_attachment() { attachments_.reserve(attachments_.size() + 1); }

void RegisteredPool::record_attachment(std::shared_ptr<Communicator> comm, std::vector<std::size_t> parts, std::optional<RegistrationKind> requested) noexcept {
  attachments_.push_back(Attachment{std::move(comm), std::move(parts), requested});
}

// Newest first, every part whatever another part's undo did: a deregistration refused on this rank
// alone (RegistrationError) has detached the part regardless; a part whose detach agreement failed
// (on every rank) is forgotten, so that nothing stays attached here.
void RegisteredPool::undo_attach(const Communicator& comm, const std::vector<std::size_t>& parts) noexcept {
  for (std::size_t i = parts.size(); i-- > 0;) {
    Registry& registry = *parts_[parts[i]].registry;
    try {
      registry.detach(comm);
    } catch (const RegistrationError&) {
    } catch (...) {
      try {
        registry.forget(comm);
      } catch (...) {  // not attached any more
      }
    }
  }
}

void RegisteredPool::detach(const Communicator& comm) {
  std::lock_guard lock(mutex_);
  auto it = attachments_.begin() + (find(comm) - attachments_.cbegin());
  if (it == attachments_.end()) throw InvalidArgument("detach: " + comm.describe() + " is not attached to pool '" + name_ + "'");
  // Collective parts first, in the same order on every rank. A part whose detach agreement fails (on
  // every rank together) stays attached, and so does the attachment; the ones before it are gone. A
  // deregistration that failed on this rank alone (RegistrationError: detached regardless) must not
  // stop it before the later parts' collective detaches, which the other ranks make.
  std::vector<std::size_t> order = it->parts;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return registration_ops(parts_[a].kind).collective && !registration_ops(parts_[b].kind).collective;
  });
  detail::Vote local_failure;
  for (std::size_t index : order) {
    try {
      parts_[index].registry->detach(comm);
    } catch (const RegistrationError&) {
      local_failure.fail();
    }
    std::erase(it->parts, index);
  }
  attachments_.erase(it);
  local_failure.rethrow();
}

void RegisteredPool::forget(const Communicator& comm) {
  std::lock_guard lock(mutex_);
  auto it = attachments_.begin() + (find(comm) - attachments_.cbegin());
  if (it == attachments_.end()) throw InvalidArgument("forget: " + comm.describe() + " is not attached to pool '" + name_ + "'");
  for (std::size_t index : it->parts) parts_[index].registry->forget(comm);
  attachments_.erase(it);
}

bool RegisteredPool::attached(const Communicator& comm) const {
  std::lock_guard lock(mutex_);
  return is_attached_locked(comm);
}

std::size_t RegisteredPool::attached_count() const {
  std::lock_guard lock(mutex_);
  return attachments_.size();
}

CommunicatorStats RegisteredPool::stats(const Communicator& comm) const {
  std::vector<std::size_t> indices;
  CommunicatorStats out;
  {
    std::lock_guard lock(mutex_);
    auto it = find(comm);
    if (it == attachments_.end()) throw InvalidArgument("stats: " + comm.describe() + " is not attached to pool '" + name_ + "'");
    indices = it->parts;
    out.kind = it->requested.value_or(RegistrationKind::local);  // symmetric below where a part has windows
    out.routed = it->requested.has_value() ? 0 : 1;
  }
  for (std::size_t index : indices) out += parts_[index].registry->stats(comm);
  out.has_windows = registration_ops(out.kind).windows ? 1 : 0;
  return out;
}

void* RegisteredPool::handle_of(const void* ptr, const Communicator& comm) const {
  const PoolPart* p = part_of(ptr);
  return p == nullptr ? nullptr : p->registry->handle_of(ptr, comm);
}

// ---------------------------------------------------------------- collective steps over the parts

// Every part, on every rank, whatever an earlier part did here: a part's commit and trim are
// collective steps of their own, and a rank that stopped at the first part that threw would leave
// the later parts' agreements to pair with its next collective. The first error is raised after.
template <class Op>
void RegisteredPool::on_every_part(Op&& op) {
  detail::Vote first;
  for (PoolPart& p : parts_) {
    try {
      op(p);
    } catch (...) {
      first.fail();
    }
  }
  first.rethrow();
}

void RegisteredPool::commit() {
  on_every_part([](PoolPart& p) { p.registry->commit(); });
}

void RegisteredPool::commit_after_error() noexcept {
  for (PoolPart& p : parts_) p.registry->commit_after_error();
}

void RegisteredPool::poll() {
  on_every_part([](PoolPart& p) { p.registry->poll(); });
}

std::size_t RegisteredPool::trim() {
  std::size_t released = 0;
  on_every_part([&](PoolPart& p) { released += p.registry->trim(); });
  return released;
}

// ---------------------------------------------------------------- queries

std::size_t RegisteredPool::pending() const {
  std::size_t n = 0;
  for (const PoolPart& p : parts_) n += p.registry->pending();
  return n;
}

PoolStats RegisteredPool::stats() const {
  PoolStats out = parts_.front().pool->stats();
  for (std::size_t i = 1; i < parts_.size(); ++i) out += parts_[i].pool->stats();
  return out;
}

MemoryBreakdown RegisteredPool::memory_breakdown() const {
  MemoryBreakdown out;
  for (const PoolPart& p : parts_) out += p.pool->memory_breakdown();
  return out;
}

void RegisteredPool::check_invariants() const {
  for (const PoolPart& p : parts_) {
    p.pool->check_invariants();
    p.registry->check_invariants();
  }
}

int RegisteredPool::open_scopes() const noexcept { return parts_.front().registry->open_scopes(); }

// ---------------------------------------------------------------- scopes

RegisteredPool::ScopeSet::ScopeSet(RegisteredPool& pool) {
  scopes_.reserve(pool.parts_.size());
  try {
    for (PoolPart& p : pool.parts_) scopes_.push_back(std::make_unique<Scope>(*p.registry));
  } catch (...) {
    abandon();  // never opened as a whole: no scope end
    throw;
  }
}

RegisteredPool::ScopeSet::~ScopeSet() { close_after_error(); }

void RegisteredPool::ScopeSet::close_after_error() noexcept {
  while (!scopes_.empty()) {  // innermost first
    scopes_.back()->close_after_error();
    scopes_.pop_back();
  }
}

void RegisteredPool::ScopeSet::abandon() noexcept {
  while (!scopes_.empty()) {
    scopes_.back()->abandon();
    scopes_.pop_back();
  }
}

void RegisteredPool::ScopeSet::close() {
  std::exception_ptr first;
  while (!scopes_.empty()) {
    try {
      scopes_.back()->close();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    scopes_.pop_back();
  }
  if (first) std::rethrow_exception(first);
}

// ---------------------------------------------------------------- SinglePool

SinglePool::SinglePool(std::shared_ptr<Pool> pool, RegistryOptions options) : RegisteredPool(pool ? pool->config().name : std::string()) {
  if (!pool) throw InvalidArgument("SinglePool: pool is null");
  add_part(RegistrationKind::local, std::move(pool), options);
}

// Hot path: straight to the one part.
void* SinglePool::allocate(std::size_t bytes, stream_t stream, Collective) { return parts_.front().pool->allocate(bytes, stream); }

void* SinglePool::allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t, std::size_t, Collective) {
  return parts_.front().pool->allocate(bytes, stream);
}

void SinglePool::reserve(std::size_t bytes) { parts_.front().pool->reserve(bytes); }

void SinglePool::attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) {
  if (!comm) throw InvalidArgument("attach: communicator is null");
  if (!kind) throw InvalidArgument("attach: pool '" + name() + "' is not an auto pool: name the kind (local or symmetric)");
  if (!registration_ops(*kind).attachable)
    throw InvalidArgument("attach: '" + std::string(to_string(*kind)) + "' registers nothing: a communicator is attached as local or symmetric (pool '" + name() + "')");
  std::lock_guard lock(attach_mutex());
  reserve_attachment();  // so that recording a successful attach cannot throw
  parts_.front().registry->attach(comm, *kind);  // refuses a second attach itself (for windows, as its vote)
  record_attachment(std::move(comm), {0}, kind);
}

}  // namespace ncclpool

// RoutedPool (routed_pool.hpp): parts, routing, attach over the parts, and the routes agreement.

#include <ncclpool/errors.hpp>
#include <ncclpool/routed_pool.hpp>

#include "core/fnv1a.hpp"
#include "vote.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <sstream>

namespace ncclpool {
namespace {

// The routes agreement: one all-gathered record per rank (it fits 11 classes; more are compared by
// digest only), with this rank's vote on the attach so far. Its magic differs from the registry's,
// so a rank that runs a registry agreement in its place fails both sides.
constexpr std::uint64_t kRoutesMagic = 0x6e63636c726f7574ull;  // "nccl" "rout"
constexpr std::size_t kRecordClasses = AgreementRecord::kWords - 5;
enum : std::size_t { w_magic = 0, w_digest = 1, w_count = 2, w_from_profile = 3, w_voted_no = 4, w_classes = 5 };

// w_from_profile: bit 0, the routes came from a profile; bit 1, some collective routes otherwise.
AgreementRecord routes_record(const SizeRoutes& routes, std::uint64_t digest, bool from_profile, bool per_collective, bool voted_no) {
  AgreementRecord r;
  r.words[w_magic] = kRoutesMagic;
  r.words[w_digest] = digest;
  r.words[w_count] = routes.classes().size();
  r.words[w_from_profile] = (from_profile ? 1 : 0) | (per_collective ? 2 : 0);
  r.words[w_voted_no] = voted_no ? 1 : 0;
  for (std::size_t i = 0; i < routes.classes().size() && i < kRecordClasses; ++i) {
    const SizeRoute& c = routes.classes()[i];
    r.words[w_classes + i] = (static_cast<std::uint64_t>(c.placement) << 62) | (c.min_bytes & ((1ull << 62) - 1));
  }
  return r;
}

std::string describe_routes_record(const AgreementRecord& r) {
  if (r.words[w_magic] != kRoutesMagic)
    return "no routes: this rank ran another collective here (its pool is not an auto pool, or it attached pools in another order)";
  if (r.words[w_voted_no] != 0) return "could not attach (the error raised on that rank says why)";
  const std::string from = (r.words[w_from_profile] & 1) ? " (from its profile)" : " (built in)";
  if (r.words[w_count] > kRecordClasses) return std::to_string(r.words[w_count]) + " size classes" + from;
  std::vector<SizeRoute> classes;
  for (std::size_t i = 0; i < r.words[w_count]; ++i) {
    const std::uint64_t v = r.words[w_classes + i];
    classes.push_back(SizeRoute{static_cast<std::size_t>(v & ((1ull << 62) - 1)), static_cast<Placement>(v >> 62)});
  }
  try {
    const SizeRoutes routes(std::move(classes));
    const std::string per_collective = (r.words[w_from_profile] & 2) ? " and other routes for some collectives (digest " + std::to_string(r.words[w_digest]) + ")" : "";
    return routes.describe() + per_collective + from;
  } catch (const Error&) {
    return "unreadable routes";
  }
}

}  // namespace

RoutedPool::RoutedPool(std::shared_ptr<Pool> pool, RegistryOptions options) {
  if (!pool) throw InvalidArgument("RoutedPool: pool is null");
  name_ = pool->config().name;
  Part part;
  part.pool = std::move(pool);
  part.registry = std::make_unique<Registry>(part.pool, options);
  parts_.push_back(std::move(part));
  routes_source_ = "one part: each communicator is registered with the kind it was attached with";
  routes_fixed_.store(true, std::memory_order_release);
}

RoutedPool::RoutedPool(std::string name, const PartFactory& make_part, SizeRoutes routes, std::string routes_source, RegistryOptions options)
    : name_(std::move(name)), auto_(true), routes_source_(std::move(routes_source)) {
  routes_.fill(routes);
  if (!make_part) throw InvalidArgument("RoutedPool '" + name_ + "': no part factory");
  for (Placement p : {Placement::none, Placement::local, Placement::symmetric}) {
    Part part;
    part.placement = p;
    part.pool = make_part(p);
    if (!part.pool) throw InvalidArgument("RoutedPool '" + name_ + "': the factory made no pool for the " + to_string(p) + " part");
    part.registry = std::make_unique<Registry>(part.pool, options);
    parts_.push_back(std::move(part));
  }
  if (!parts_.back().pool->source_properties().window_capable && routes_use(Placement::symmetric)) {
    for (SizeRoutes& r : routes_) r = r.without_windows();
    routes_source_ += "; symmetric sizes go to the local part: " + parts_.back().pool->source_properties().description + " cannot back windows";
  }
}

RoutedPool::~RoutedPool() = default;

RoutedPool::Part& RoutedPool::part_for(Placement placement) { return auto_ ? parts_[static_cast<std::size_t>(placement)] : parts_.front(); }

const RoutedPool::Part* RoutedPool::part(Placement placement) const noexcept {
  return auto_ ? &parts_[static_cast<std::size_t>(placement)] : nullptr;
}

void RoutedPool::fix_routes() noexcept {
  std::lock_guard lock(mutex_);
  routes_fixed_.store(true, std::memory_order_release);
}

bool RoutedPool::routes_use(Placement placement) const noexcept {
  return std::any_of(routes_.begin(), routes_.end(), [&](const SizeRoutes& r) { return r.uses(placement); });
}

std::uint64_t RoutedPool::routes_digest() const noexcept {
  detail::Fnv1a d;
  for (const SizeRoutes& r : routes_) d.mix(r.digest());
  return d.value();
}

// Hot path: single pools go straight to their part; auto pools read the fixed routes (a few classes).
RoutedPool::Part& RoutedPool::route(std::size_t bytes, Collective collective) {
  if (!auto_) return parts_.front();
  if (!routes_fixed_.load(std::memory_order_acquire)) fix_routes();
  return part_for(routes_[static_cast<std::size_t>(collective)].for_request(bytes));
}

void* RoutedPool::allocate(std::size_t bytes, stream_t stream, Collective collective) {
  return route(bytes, collective).pool->allocate(bytes, stream);
}

void* RoutedPool::allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi, Collective collective) {
  if (!auto_) return parts_.front().pool->allocate(bytes, stream);
  if (!routes_fixed_.load(std::memory_order_acquire)) fix_routes();
  return part_for(routes_[static_cast<std::size_t>(collective)].for_range(lo, hi)).pool->allocate(bytes, stream);
}

const RoutedPool::Part* RoutedPool::part_of(const void* ptr) const {
  for (const Part& p : parts_)
    if (p.pool->segment_of(ptr)) return &p;
  return nullptr;
}

void RoutedPool::deallocate(void* ptr, stream_t stream) {
  if (ptr == nullptr) return;
  if (!auto_) return parts_.front().pool->deallocate(ptr, stream);  // the pool tells a foreign pointer itself
  const Part* p = part_of(ptr);
  if (p == nullptr) {
    parts_.front().pool->deallocate(ptr, stream);  // throws the pool's ForeignPointer message
    return;
  }
  p->pool->deallocate(ptr, stream);
}

void RoutedPool::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  if (!auto_) return parts_.front().pool->deallocate(ptr);
  const Part* p = part_of(ptr);
  (p ? p->pool : parts_.front().pool)->deallocate(ptr);
}

void RoutedPool::publish_frees(stream_t stream) {
  for (Part& p : parts_) p.pool->publish_frees(stream);
}

void RoutedPool::reserve(std::size_t bytes) { route(bytes, Collective::any).pool->reserve(bytes); }

SizeRoutes RoutedPool::routes(Collective collective) const {
  std::lock_guard lock(mutex_);
  return routes_[static_cast<std::size_t>(collective)];
}

std::string RoutedPool::routes_source() const {
  std::lock_guard lock(mutex_);
  return routes_source_;
}

// The first attach of an auto pool that made nothing yet takes the profile measured for comm's
// machine; the routes are fixed from then on.
void RoutedPool::choose_routes_for(Communicator& comm) {
  if (routes_fixed_.load(std::memory_order_acquire)) return;
  // The rule is auto_routes_windows (routes.hpp); the kernels are asked about (and decided, once per
  // process) only where windows are otherwise possible.
  const Part& sym = parts_[static_cast<std::size_t>(Placement::symmetric)];
  const bool capable = sym.pool->source_properties().window_capable;
  std::string comm_why;
  const bool comm_windows = capable && comm.supports_windows(&comm_why);
  const int kernels = comm_windows ? comm.prepare_symmetric_kernels() : -1;
  std::string why;
  const bool windows = auto_routes_windows(capable, !capable || comm_windows, comm_why, kernels < 0 || (kernels & kSymmetricKernelsOff) == 0, &why);
  const MachineKey key = comm.machine();
  const ProfileLookup lookup = find_profile(key.gpu, key.nccl_version, key.ranks);
  if (lookup.profile) {
    for (int c = 0; c < kCollectives; ++c)
      routes_[static_cast<std::size_t>(c)] = routes_from_profile(*lookup.profile, windows, static_cast<Collective>(c));
    routes_source_ = "the profile " + lookup.path + " (measured " + lookup.profile->measured + " on " + lookup.profile->gpu + ", NCCL " +
                     std::to_string(lookup.profile->nccl_version) + ", " + std::to_string(lookup.profile->ranks) + " ranks)" +
                     (windows ? "" : ", without windows: " + why);
  } else {
    routes_.fill(builtin_routes(windows));
    routes_source_ = "built-in routes (measured on H200)" + std::string(windows ? "" : ", without windows: " + why) + "; " + lookup.why_not;
  }
  routes_fixed_.store(true, std::memory_order_release);
}

void RoutedPool::agree_on_routes(Communicator& comm, bool voted_no) const {
  const bool per_collective = std::any_of(routes_.begin() + 1, routes_.end(), [&](const SizeRoutes& r) { return !(r == routes_[0]); });
  const AgreementRecord mine = routes_record(routes_[0], routes_digest(), routes_source_.rfind("the profile", 0) == 0, per_collective, voted_no);
  const std::vector<AgreementRecord> all = comm.all_gather(mine);
  if (std::all_of(all.begin(), all.end(), [&](const AgreementRecord& r) { return r == mine; })) return;
  std::map<std::vector<std::uint64_t>, std::vector<int>> groups;
  for (std::size_t rank = 0; rank < all.size(); ++rank) groups[{all[rank].words.begin(), all[rank].words.end()}].push_back(static_cast<int>(rank));
  const bool someone_voted_no = std::any_of(all.begin(), all.end(), [](const AgreementRecord& r) { return r.words[w_magic] == kRoutesMagic && r.words[w_voted_no] != 0; });
  std::ostringstream msg;
  if (someone_voted_no)
    msg << comm.describe() << ": a rank could not attach the auto pool '" << name_ << "', so no rank does; nothing was attached:";
  else
    msg << comm.describe() << ": ranks route the auto pool '" << name_ << "' differently, so its symmetric part would get other requests on each rank; nothing was attached:";
  for (const auto& [words, ranks] : groups) {
    AgreementRecord r;
    std::copy(words.begin(), words.end(), r.words.begin());
    msg << (ranks.size() > 1 ? " ranks " : " rank ");
    for (std::size_t i = 0; i < ranks.size(); ++i) msg << (i ? "," : "") << ranks[i];
    msg << ": " << describe_routes_record(r) << ';';
  }
  if (someone_voted_no)
    msg << " (that rank's own error says why, e.g. a local registration refused)";
  else
    msg << " (give every rank the same profile, NCCLPOOL_PROFILE, and attach before the first allocation)";
  throw AgreementError(msg.str());
}

// Lockstep: an auto pool's attach makes the same collective steps on every rank, whatever this
// rank's routes, profile or failures: local parts (not collective; a failure is this rank's "no"),
// then the routes agreement (always: no rank can tell locally whether another rank's routes make
// windows), then the symmetric parts' attaches, each its own agreement. All or nothing.
void RoutedPool::attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) {
  if (!comm) throw InvalidArgument("attach: communicator is null");
  if (!auto_ && !kind) throw InvalidArgument("attach: pool '" + name_ + "' is not an auto pool: name the kind (local or symmetric)");
  std::lock_guard lock(mutex_);
  attachments_.reserve(attachments_.size() + 1);  // so the pushes below cannot throw
  Attachment done{comm.get(), {}};
  if (!auto_) {  // the registry refuses a second attach itself (for windows, as its vote)
    parts_.front().registry->attach(comm, *kind);
    done.parts.push_back(0);
    attachments_.push_back(std::move(done));
    return;
  }
  detail::Vote vote;
  if (find_attachment(*comm) != attachments_.end())
    vote.fail(std::make_exception_ptr(InvalidArgument("attach: " + comm->describe() + " is already attached to pool '" + name_ + "'")));
  try {
    choose_routes_for(*comm);
  } catch (...) {
    vote.fail();
  }
  std::vector<std::pair<std::size_t, RegistrationKind>> plan;  // parts the routes use, with their kinds
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const Placement p = parts_[i].placement;
    if (!routes_use(p)) continue;
    if (kind) {
      plan.emplace_back(i, *kind);
    } else if (p != Placement::none) {
      plan.emplace_back(i, p == Placement::symmetric ? RegistrationKind::symmetric : RegistrationKind::local);
    }
  }
  // Newest first, every part whatever another part's undo did: a deregistration refused on this rank
  // alone (RegistrationError) has detached the part regardless; a part whose detach agreement failed
  // (on every rank) is forgotten, so that nothing stays attached here. The cause of the attach's
  // failure stays the error raised.
  auto undo = [&]() noexcept {
    for (std::size_t i = done.parts.size(); i-- > 0;) {
      Registry& registry = *parts_[done.parts[i]].registry;
      try {
        registry.detach(*comm);
      } catch (const RegistrationError&) {
      } catch (...) {
        try {
          registry.forget(*comm);
        } catch (...) {  // not attached any more
        }
      }
    }
    done.parts.clear();
  };
  for (const auto& [index, k] : plan) {
    if (k != RegistrationKind::local || !vote.yes()) continue;
    try {
      parts_[index].registry->attach(comm, k);
      done.parts.push_back(index);
    } catch (...) {
      vote.fail();
    }
  }
  try {
    agree_on_routes(*comm, !vote.yes());
  } catch (...) {
    vote.fail();
  }
  if (!vote.yes()) {
    undo();  // local parts only: not collective
    vote.rethrow();
  }
  // Every rank gets here or none does. A symmetric part's attach fails on every rank together (its
  // agreement carries each rank's vote), so every rank undoes the same parts, collectively.
  try {
    for (const auto& [index, k] : plan) {
      if (k != RegistrationKind::symmetric) continue;
      parts_[index].registry->attach(comm, k);
      done.parts.push_back(index);
    }
  } catch (...) {
    undo();
    throw;
  }
  attachments_.push_back(std::move(done));
}

void RoutedPool::detach(const Communicator& comm) {
  std::lock_guard lock(mutex_);
  auto it = find_attachment(comm);
  if (it == attachments_.end()) throw InvalidArgument("detach: " + comm.describe() + " is not attached to pool '" + name_ + "'");
  // Collective parts first, in the same order on every rank. A part whose detach agreement fails (on
  // every rank together) stays attached, and so does the attachment; the ones before it are gone. A
  // deregistration that failed on this rank alone (RegistrationError: detached regardless) must not
  // stop it before the later parts' collective detaches, which the other ranks make.
  std::vector<std::size_t> order = it->parts;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return parts_[a].placement == Placement::symmetric && parts_[b].placement != Placement::symmetric;
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

void RoutedPool::forget(const Communicator& comm) {
  std::lock_guard lock(mutex_);
  auto it = find_attachment(comm);
  if (it == attachments_.end()) throw InvalidArgument("forget: " + comm.describe() + " is not attached to pool '" + name_ + "'");
  for (std::size_t index : it->parts) parts_[index].registry->forget(comm);
  attachments_.erase(it);
}

// Under mutex_.
std::vector<RoutedPool::Attachment>::const_iterator RoutedPool::find_attachment(const Communicator& comm) const {
  return std::find_if(attachments_.begin(), attachments_.end(), [&](const Attachment& a) { return a.comm == &comm; });
}

std::vector<RoutedPool::Attachment>::iterator RoutedPool::find_attachment(const Communicator& comm) {
  return std::find_if(attachments_.begin(), attachments_.end(), [&](const Attachment& a) { return a.comm == &comm; });
}

// Every part, on every rank, whatever an earlier part did here: a part's commit and trim are
// collective steps of their own, and a rank that stopped at the first part that threw would leave
// the later parts' agreements to pair with its next collective. The first error is raised after.
template <class Op>
void RoutedPool::on_every_part(Op&& op) {
  detail::Vote first;
  for (Part& p : parts_) {
    try {
      op(p);
    } catch (...) {
      first.fail();
    }
  }
  first.rethrow();
}

void RoutedPool::commit() {
  on_every_part([](Part& p) { p.registry->commit(); });
}

void RoutedPool::commit_after_error() noexcept {
  for (Part& p : parts_) p.registry->commit_after_error();
}

void RoutedPool::poll() {
  on_every_part([](Part& p) { p.registry->poll(); });
}

std::size_t RoutedPool::trim() {
  std::size_t released = 0;
  on_every_part([&](Part& p) { released += p.registry->trim(); });
  return released;
}

bool RoutedPool::attached(const Communicator& comm) const {
  std::lock_guard lock(mutex_);
  return find_attachment(comm) != attachments_.end();
}

CommunicatorStats RoutedPool::stats(const Communicator& comm) const {
  std::vector<std::size_t> indices;
  {
    std::lock_guard lock(mutex_);
    auto it = find_attachment(comm);
    if (it == attachments_.end()) throw InvalidArgument("stats: " + comm.describe() + " is not attached to pool '" + name_ + "'");
    indices = it->parts;
  }
  CommunicatorStats out;
  for (std::size_t index : indices) out += parts_[index].registry->stats(comm);
  return out;
}

void* RoutedPool::handle_of(const void* ptr, const Communicator& comm) const {
  const Part* p = part_of(ptr);
  return p == nullptr ? nullptr : p->registry->handle_of(ptr, comm);
}

std::size_t RoutedPool::pending() const {
  std::size_t n = 0;
  for (const Part& p : parts_) n += p.registry->pending();
  return n;
}

std::size_t RoutedPool::attached_count() const {
  std::lock_guard lock(mutex_);
  return attachments_.size();
}

PoolStats RoutedPool::stats() const {
  PoolStats out = parts_.front().pool->stats();
  for (std::size_t i = 1; i < parts_.size(); ++i) out += parts_[i].pool->stats();
  return out;
}

MemoryBreakdown RoutedPool::memory_breakdown() const {
  MemoryBreakdown out;
  for (const Part& p : parts_) {
    const MemoryBreakdown m = p.pool->memory_breakdown();
    out.reserved += m.reserved;
    out.requested += m.requested;
    out.rounding += m.rounding;
    out.free_in_used_segments += m.free_in_used_segments;
    out.never_used += m.never_used;
    out.other_streams_only += m.other_streams_only;
    out.empty_segments += m.empty_segments;
  }
  return out;
}

void RoutedPool::check_invariants() const {
  for (const Part& p : parts_) {
    p.pool->check_invariants();
    p.registry->check_invariants();
  }
}

int RoutedPool::open_scopes() const noexcept { return parts_.front().registry->open_scopes(); }

RoutedPool::ScopeSet::ScopeSet(RoutedPool& pool) {
  scopes_.reserve(pool.parts_.size());
  try {
    for (Part& p : pool.parts_) scopes_.push_back(std::make_unique<Scope>(*p.registry));
  } catch (...) {
    abandon();  // never opened as a whole: no scope end
    throw;
  }
}

RoutedPool::ScopeSet::~ScopeSet() { close_after_error(); }

void RoutedPool::ScopeSet::close_after_error() noexcept {
  while (!scopes_.empty()) {  // innermost first
    scopes_.back()->close_after_error();
    scopes_.pop_back();
  }
}

void RoutedPool::ScopeSet::abandon() noexcept {
  while (!scopes_.empty()) {
    scopes_.back()->abandon();
    scopes_.pop_back();
  }
}

void RoutedPool::ScopeSet::close() {
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

}  // namespace ncclpool

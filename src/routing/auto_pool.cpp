// AutoPool (auto_pool.hpp): its parts, routing by size, the routes decision at the first attach, the
// attach over the parts, and make_auto_pool. The routes agreement is in routes_agreement.cpp.

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/limit_source.hpp>

#include "registry/vote.hpp"

#include <algorithm>
#include <exception>

namespace ncclpool {

AutoPool::AutoPool(std::string name, const PartFactory& make_part, SizeRoutes routes, std::string routes_source, RegistryOptions options)
    : RegisteredPool(std::move(name)), routes_source_(std::move(routes_source)), agreed_settings_(std::move(options.agreed_settings)) {
  routes_.fill(routes);
  if (!make_part) throw InvalidArgument("auto pool '" + this->name() + "': no part factory");
  // The routes agreement, which every attach runs first, compares the agreed settings: the parts'
  // own attaches need not (a part's local attach stays local, before that agreement).
  options.agreed_settings.clear();
  for (int k = 0; k < kRegistrationKinds; ++k) {  // one part per kind: parts_ order = enum order (part(kind))
    const auto kind = static_cast<RegistrationKind>(k);
    add_part(kind, make_part(kind), options);
  }
  const PoolPart& symmetric = part(RegistrationKind::symmetric);
  if (!symmetric.pool->source_properties().window_capable && routes_use(RegistrationKind::symmetric)) {
    for (SizeRoutes& r : routes_) r = r.without_windows();
    routes_source_ += "; symmetric sizes go to the local part: " + symmetric.pool->source_properties().description + " cannot back windows";
  }
}

void AutoPool::fix_routes() noexcept {
  std::lock_guard lock(attach_mutex());
  routes_fixed_.store(true, std::memory_order_release);
}

bool AutoPool::routes_use(RegistrationKind kind) const noexcept {
  return std::any_of(routes_.begin(), routes_.end(), [&](const SizeRoutes& r) { return r.uses(kind); });
}

// Hot path: after the first request the routes are fixed (one acquire load), then a lookup in a few
// size classes.
PoolPart& AutoPool::route(std::size_t bytes, Collective collective) {
  if (!routes_fixed_.load(std::memory_order_acquire)) fix_routes();
  return parts_[static_cast<std::size_t>(routes_[static_cast<std::size_t>(collective)].for_request(bytes))];
}

void* AutoPool::allocate(std::size_t bytes, stream_t stream, Collective collective) { return route(bytes, collective).pool->allocate(bytes, stream); }

void* AutoPool::allocate_for_messages(std::size_t bytes, stream_t stream, std::size_t lo, std::size_t hi, Collective collective) {
  if (!routes_fixed_.load(std::memory_order_acquire)) fix_routes();
  const RegistrationKind kind = routes_[static_cast<std::size_t>(collective)].for_range(lo, hi);
  return parts_[static_cast<std::size_t>(kind)].pool->allocate(bytes, stream);
}

void AutoPool::reserve(std::size_t bytes) { route(bytes, Collective::any).pool->reserve(bytes); }

SizeRoutes AutoPool::routes(Collective collective) const {
  std::lock_guard lock(attach_mutex());
  return routes_[static_cast<std::size_t>(collective)];
}

std::string AutoPool::routes_source() const {
  std::lock_guard lock(attach_mutex());
  return routes_source_;
}

// The first attach of an auto pool that made nothing yet takes the profile measured for comm's
// machine; that attach fixes them once it knows how many nodes the ranks span (drop_windows_across_nodes)
// and has succeeded.
bool AutoPool::choose_routes_for(Communicator& comm) {
  if (routes_fixed_.load(std::memory_order_acquire)) return false;
  // The rule is auto_routes_windows (routes.hpp); the kernels are asked about (and decided, once per
  // process) only where windows are otherwise possible.
  const bool capable = part(RegistrationKind::symmetric).pool->source_properties().window_capable;
  std::string comm_why;
  const bool comm_windows = capable && comm.supports_windows(&comm_why);
  const int kernels = comm_windows ? comm.prepare_symmetric_kernels() : -1;
  std::string why;
  const bool windows = auto_routes_windows(capable, !capable || comm_windows, comm_why, kernels < 0 || (kernels & kSymmetricKernelsOff) == 0, &why);
  const MachineKey key = comm.machine();
  const ProfileLookup lookup = find_profile(key.gpu, key.nccl_version, key.ranks);
  // The machine's profile, else the built-in routes measured for its GPU and rank count (looked up
  // only without a profile), else the generic ones.
  const BuiltinRoutes builtin = lookup.profile ? BuiltinRoutes{} : builtin_routes_for(key.compute_capability, key.ranks);
  const std::optional<Profile>& measured = lookup.profile ? lookup.profile : builtin.profile;
  for (int c = 0; c < kCollectives; ++c)
    routes_[static_cast<std::size_t>(c)] = measured ? routes_from_profile(*measured, windows, static_cast<Collective>(c)) : builtin_routes(windows);
  const std::string without = windows ? "" : ", without windows: " + why;
  routes_source_ = lookup.profile ? "the profile " + lookup.path + " (measured " + lookup.profile->measured + " on " + lookup.profile->gpu + ", NCCL " +
                                        std::to_string(lookup.profile->nccl_version) + ", " + std::to_string(lookup.profile->ranks) + " ranks)" + without
                                  : builtin.source + without + "; " + lookup.why_not;
  return true;
}

// NCCL runs symmetric kernels and copy engines within one node only: across nodes a window costs a
// collective registration and buys nothing, so routes chosen at this attach send no size to windows
// when the ranks span more than one node (every rank learnt the same count in the routes agreement).
void AutoPool::drop_windows_across_nodes(std::size_t nodes) {
  if (nodes <= 1 || !routes_use(RegistrationKind::symmetric)) return;
  for (SizeRoutes& r : routes_) r = r.without_windows();
  routes_source_ += ", without windows: the ranks span " + std::to_string(nodes) +
                    " nodes (NCCL's symmetric kernels and copy engines work within one node)";
}

// Lockstep: an auto pool's attach makes the same collective steps on every rank, whatever this
// rank's routes, profile or failures: local parts (not collective; a failure is this rank's "no"),
// then the routes agreement (always: no rank can tell locally whether another rank's routes make
// windows), then the symmetric parts' attaches, each its own agreement. All or nothing.
// The parts the routes use, each with the kind it is attached with (`kind`, or its own).
std::vector<std::pair<std::size_t, RegistrationKind>> AutoPool::attach_plan(std::optional<RegistrationKind> kind) const {
  std::vector<std::pair<std::size_t, RegistrationKind>> plan;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const RegistrationKind own = parts_[i].kind;
    if (!routes_use(own)) continue;
    if (kind) {
      plan.emplace_back(i, *kind);
    } else if (registration_ops(own).attachable) {
      plan.emplace_back(i, own);
    }
  }
  return plan;
}

// Lockstep: an auto pool's attach makes the same collective steps on every rank, whatever this
// rank's routes, profile or failures: local parts (not collective; a failure is this rank's "no"),
// then the routes agreement (always: no rank can tell locally whether another rank's routes make
// windows), then the symmetric parts' attaches, each its own agreement. All or nothing.
void AutoPool::attach(std::shared_ptr<Communicator> comm, std::optional<RegistrationKind> kind) {
  if (!comm) throw InvalidArgument("attach: communicator is null");
  std::lock_guard lock(attach_mutex());
  reserve_attachment();  // so that recording a successful attach cannot throw
  std::vector<std::size_t> done;  // parts attached so far
  done.reserve(parts_.size());
  detail::Vote vote;
  if (std::exception_ptr no = take_vote_no()) vote.fail(std::move(no));  // this rank's kept "no": the routes agreement is collective
  if (is_attached_locked(*comm))
    vote.fail(std::make_exception_ptr(InvalidArgument("attach: " + comm->describe() + " is already attached to pool '" + name() + "'")));
  if (kind && !registration_ops(*kind).attachable)
    vote.fail(std::make_exception_ptr(InvalidArgument("attach: '" + std::string(to_string(*kind)) + "' registers nothing: name local or symmetric, or no kind (pool '" + name() + "')")));
  // This attach chose the routes: it fixes them if it succeeds. Until then an allocation on another
  // thread waits for it (attach_mutex); a failed attach (on every rank alike) leaves them open, so
  // that the retry chooses them again and learns the node count, as if it came first.
  bool choosing = false;
  try {
    choosing = choose_routes_for(*comm);
  } catch (...) {
    vote.fail();
  }
  // Local attaches come before the routes agreement (a refusal is this rank's "no" there). Where this
  // attach may drop the windows (its routes are open and use them; the node count comes from the
  // agreement), every size may go to the local part then: attach it too, and let it go after the
  // agreement if the windows stay (it has no segment: nothing was allocated while the routes were open).
  std::vector<std::pair<std::size_t, RegistrationKind>> local_first;
  for (const auto& entry : attach_plan(kind))
    if (!registration_ops(entry.second).collective) local_first.push_back(entry);
  const std::size_t local_part = static_cast<std::size_t>(RegistrationKind::local);
  const bool local_listed = std::any_of(local_first.begin(), local_first.end(), [&](const auto& e) { return e.first == local_part; });
  if (choosing && routes_use(RegistrationKind::symmetric) && kind.value_or(RegistrationKind::local) == RegistrationKind::local && !local_listed)
    local_first.emplace_back(local_part, RegistrationKind::local);
  for (const auto& [index, k] : local_first) {
    if (!vote.yes()) break;
    try {
      parts_[index].registry->attach(comm, k);
      done.push_back(index);
    } catch (...) {
      vote.fail();
    }
  }
  RoutesAgreed agreed{1, false};
  try {
    agreed = agree_on_routes(*comm, kind, !vote.yes(), choosing);  // the kind too: it decides which parts' attaches are collective
  } catch (...) {
    vote.fail();
  }
  if (!vote.yes()) {
    undo_attach(*comm, done);  // local parts only: not collective; the cause stays the error raised
    vote.rethrow();
  }
  // Every rank gets here or none does, with the same node count and "all open". A symmetric part's
  // attach fails on every rank together (its agreement carries each rank's vote), so every rank
  // undoes the same parts, collectively. Windows are dropped only where every rank's routes are still
  // open (all_open implies choosing here): a rank whose routes an allocation fixed before this attach
  // keeps them, and a rank that dropped alone would skip the window attaches the others make.
  if (agreed.all_open) drop_windows_across_nodes(agreed.nodes);
  std::vector<std::size_t> unused;  // a local part attached in case the windows went, which they did not
  for (std::size_t index : done)
    if (!routes_use(parts_[index].kind)) unused.push_back(index);
  undo_attach(*comm, unused);  // local, with no segment: nothing collective, nothing to deregister
  for (std::size_t index : unused) std::erase(done, index);
  try {
    for (const auto& [index, k] : attach_plan(kind)) {  // the routes as they are now, windows dropped or not
      if (!registration_ops(k).collective) continue;
      parts_[index].registry->attach(comm, k);
      done.push_back(index);
    }
  } catch (...) {
    undo_attach(*comm, done);
    throw;
  }
  record_attachment(std::move(comm), std::move(done), kind);
  if (choosing) routes_fixed_.store(true, std::memory_order_release);
}

std::unique_ptr<AutoPool> make_auto_pool(const AutoPoolConfig& config) {
  if (!config.make_source) throw InvalidArgument("auto pool '" + config.name + "': no segment source factory (AutoPoolConfig::make_source)");
  // Each part is a pool of its own (its own source: a window-capable one backs the symmetric part);
  // max_reserved holds for the parts together.
  std::shared_ptr<SharedLimit> limit;
  if (config.max_reserved != 0) limit = std::make_shared<SharedLimit>(config.max_reserved, "pool '" + config.name + "'");
  auto make_part = [&](RegistrationKind kind) {
    PoolConfig pool;
    pool.name = config.name + "/" + to_string(kind);
    pool.alignment = config.alignment;
    const RegistrationKindOps& ops = registration_ops(kind);
    pool.growth_chunk = config.growth_chunk != 0 ? config.growth_chunk : ops.default_growth_chunk;
    pool.min_segment = ops.windows ? config.min_segment : 0;  // it trades reserve for windows: only that part has them
    pool.max_reserved = config.max_reserved;
    pool.deterministic = true;  // the symmetric part must be; the others route by size alike
    std::shared_ptr<SegmentSource> source = config.make_source(kind);
    if (limit) source = std::make_shared<LimitSource>(std::move(source), limit);
    return std::make_shared<Pool>(std::move(source), pool);
  };
  // Until the first attach (which decides with the communicator's answers), the routes are what that
  // attach would choose here without a profile.
  std::string source = "generic built-in routes" + (config.windows_possible ? std::string() : ", without windows: " + config.why_no_windows) +
                       "; the first attached communicator decides them again: a profile of its machine, else the built-in routes measured "
                       "for its GPU and rank count";
  return std::make_unique<AutoPool>(config.name, make_part, builtin_routes(config.windows_possible), std::move(source), config.registry);
}

}  // namespace ncclpool

// `ncclpool bench coll`: one rank's side (RankRunner): its pool and registrations, the launches of one
// op over its buffers, the result check, and the timings (eager, CUDA graph, beside a compute load).
// Every method that launches is collective: each rank's thread calls it in the same order.

#include "gpu_coll.hpp"

#include <cstring>
#include <exception>
#include <iterator>

namespace ncclpool::tool::coll {

// The three timing events of time_beside_compute.
struct RankRunner::Events {
  CUevent start = nullptr, coll_end = nullptr, compute_end = nullptr;
  Events() {
    try {
      for (CUevent* e : {&start, &coll_end, &compute_end}) cuda::check(tool::bench_driver().cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate");
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~Events() { destroy(); }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  void destroy() noexcept {
    for (CUevent e : {start, coll_end, compute_end})
      if (e != nullptr) tool::bench_driver().cuEventDestroy_v2(e);
    start = coll_end = compute_end = nullptr;
  }
};

RankRunner::RankRunner(Team& team, int rank, const CollOptions& o)
    : d_(tool::bench_driver()), lib_(tool::bench_nccl()), team_(team), rank_(rank), n_(team.ranks()), o_(o), device_(rank, o.compute ? 2 : 1), stream_(device_.streams[0]) {
  if (o.compute) {
    compute_ = std::make_unique<ComputeLoad>(device_.context.device(), device_.streams[1]);
    events_ = std::make_unique<Events>();
  }
  PoolConfig c;
  c.name = "bench-coll";
  c.deterministic = true;  // windows: the same offsets on every rank
  pool_ = std::make_shared<Pool>(team.source(rank), c);
  send_ = pool_->allocate(o.max_bytes, reinterpret_cast<stream_t>(stream_));
  recv_ = pool_->allocate(o.max_bytes, reinterpret_cast<stream_t>(stream_));
  registry_ = std::make_unique<Registry>(pool_);
  if (o.auto_pool) {
    // The library's auto pool: parts over sources of their own, routes as the library decides
    // them at the attach (this machine's profile, else built in).
    auto make_part = [&team, rank](RegistrationKind p) {
      PoolConfig pc;
      pc.name = std::string("bench-coll-auto/") + to_string(p);
      pc.deterministic = true;
      return std::make_shared<Pool>(team.source(rank), pc);
    };
    auto_pool_ = std::make_unique<AutoPool>("bench-coll-auto", make_part, builtin_routes(true), "generic built-in routes (until the first attach)", RegistryOptions{});
  }
}

RankRunner::~RankRunner() {
  d_.cuStreamSynchronize(stream_);
  if (auto_pool_ && auto_attached_) {
    try {
      auto_pool_->detach(*team_.comm(rank_, kAutoPoolGroup));
    } catch (const std::exception&) {
      auto_pool_->forget(*team_.comm(rank_, kAutoPoolGroup));
    }
  }
  auto_pool_.reset();
  if (registry_) {
    for (int g : attached_) {
      try {
        registry_->detach(*team_.comm(rank_, g));
      } catch (const std::exception&) {
        registry_->forget(*team_.comm(rank_, g));
      }
    }
  }
  registry_.reset();
  pool_->deallocate(send_);
  pool_->deallocate(recv_);
  pool_.reset();
}

// Collective over the ranks: registers the pool's segments with the kind's communicator.
void RankRunner::attach(int kind) {
  if (kind == kNone) return;
  registry_->attach(team_.comm(rank_, kind), kind == kLocal ? RegistrationKind::local : RegistrationKind::symmetric);
  attached_.push_back(kind);
}

// Collective: attaches the auto pool (auto registration) to its own communicator.
void RankRunner::attach_auto_pool() {
  auto_pool_->attach(team_.comm(rank_, kAutoPoolGroup), std::nullopt);
  auto_attached_ = true;
}

// One op on `kind`'s communicator over the shared pool's buffers.
void RankRunner::measure(const std::string& op, std::size_t count, int kind, bool in_place, Measurement& out, RankBarrier& sync) {
  measure_on(op, count, kind, kKindNames[kind], send_, recv_, in_place, out, sync);
}

std::string RankRunner::auto_routes() const {
  std::string out;
  const SizeRoutes any = auto_pool_->routes(Collective::any);
  for (const Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
    const SizeRoutes own = auto_pool_->routes(c);
    if (own == any) continue;
    out += std::string(out.empty() ? "" : "; ") + to_string(c) + ": " + own.describe();
  }
  out += std::string(out.empty() ? "" : "; ") + (out.empty() ? "" : "any other buffer: ") + any.describe();
  return out + " (" + auto_pool_->routes_source() + ")";
}

// Both placements of one op on buffers the auto pool serves for `op`'s messages of `size` bytes (the
// library's routing for that collective, as ncclpool_alloc_for asks it, or with --pool-for any for no
// collective, as ncclpool_alloc; nothing chosen here); returns the part they came from. Collective
// (the pool commits its windows before the first launch).
std::string RankRunner::measure_auto_pool(const std::string& op, std::size_t count, std::size_t size, Measurement& out_of_place, Measurement& in_place, RankBarrier& sync) {
  const Collective collective = o_.pool_for_any ? Collective::any : collective_from_string(op).value_or(Collective::any);
  void* send = auto_pool_->allocate_for_messages(size, reinterpret_cast<stream_t>(stream_), size, size, collective);
  void* recv = nullptr;
  try {
    recv = auto_pool_->allocate_for_messages(size, reinterpret_cast<stream_t>(stream_), size, size, collective);
    auto_pool_->commit();
    measure_on(op, count, kAutoPoolGroup, "auto pool", send, recv, false, out_of_place, sync);
    measure_on(op, count, kAutoPoolGroup, "auto pool", send, recv, true, in_place, sync);
  } catch (...) {
    d_.cuStreamSynchronize(stream_);
    auto_pool_->deallocate(send);
    if (recv) auto_pool_->deallocate(recv);
    throw;
  }
  const std::string placement = to_string(auto_pool_->part_of(send)->kind);
  auto_pool_->deallocate(send);
  auto_pool_->deallocate(recv);
  return placement;
}

// One op on `group`'s communicator over send/recv; fills the check result (wrong samples) and seconds/op.
void RankRunner::measure_on(const std::string& op, std::size_t count, int group, const std::string& label, void* send_buffer, void* recv_buffer, bool in_place,
                Measurement& out, RankBarrier& sync) {
  auto* comm = reinterpret_cast<ncclComm_t>(team_.comm(rank_, group)->native_handle());
  char* send = static_cast<char*>(send_buffer);
  char* recv = static_cast<char*>(recv_buffer);
  const std::size_t chunk = count * sizeof(float);
  // nccl-tests' in-place layouts: all-gather input = this rank's slice of the output;
  // reduce-scatter output = this rank's slice of the input; all-reduce in the same buffer.
  void* in = send;
  void* res = recv;
  std::size_t in_count = count;
  if (op == "reduce_scatter") in_count = count * static_cast<std::size_t>(n_);
  if (in_place) {
    if (op == "all_gather") in = recv + static_cast<std::size_t>(rank_) * chunk, res = recv;
    else if (op == "reduce_scatter") in = send, res = send + static_cast<std::size_t>(rank_) * chunk;
    else in = res = recv;
  }
  // The fence before each collective on windows (a no-op unless the process decided `fence`). It
  // never decides whether this rank launches the collective: a fence that fails on one rank is
  // reported after the collective, which the other ranks launch too.
  const bool windows = group == kSymmetric || group == kCopyEngine || group == kAutoPoolGroup;
  auto launch_on = [&](CUstream stream) {
    std::exception_ptr fence_failed;
    if (windows) {
      try {
        (void)symmetric_fence(stream);
      } catch (...) {
        fence_failed = std::current_exception();
      }
    }
    ncclResult_t r;
    if (op == "all_gather") r = lib_.ncclAllGather(in, res, count, ncclFloat, comm, stream);
    else if (op == "reduce_scatter") r = lib_.ncclReduceScatter(in, res, count, ncclFloat, ncclSum, comm, stream);
    else r = lib_.ncclAllReduce(in, res, count, ncclFloat, ncclSum, comm, stream);
    if (r != ncclSuccess) throw BackendError(op + " on " + label + ": " + nccl::error_text(r));
    if (fence_failed) std::rethrow_exception(fence_failed);
  };
  auto launch = [&] { launch_on(stream_); };
  int wrong = 0;
  if (o_.check) {
    const float value = static_cast<float>(rank_ + 1);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    cuda::check(d_.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(in), bits, in_count, stream_), "cuMemsetD32Async");
    cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    sync.wait();
    launch();
    cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    wrong = check_result(op, res, count);
    sync.wait();  // nobody overwrites a peer's input before every rank checked
  }
  for (int i = 0; i < o_.warmup; ++i) launch();
  cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  out.wrong[static_cast<std::size_t>(rank_)] = wrong;
  const auto me = static_cast<std::size_t>(rank_);
  if (o_.graph) {
    out.seconds[me] = time_graph(launch, sync);
  } else {
    sync.wait();
    const auto t = BenchClock::now();
    for (int i = 0; i < o_.iters; ++i) launch();
    cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    out.seconds[me] = seconds_since(t) / o_.iters;
  }
  if (compute_) time_beside_compute(op, count, launch_on, out, sync);
}

// The collective with the compute load beside it, the way a training step overlaps them: each of
// `iters` collectives is launched (eagerly, also under --graph) on a stream of the greatest
// priority (as FSDP2's collective streams) and then a chunk of compute on a stream of its own, the
// two streams joined only at the start and the end. The chunk takes ~1.2x the collective's time at 300 GB/s of bus bandwidth alone, a function
// of op and size only, so that every kind and CTA count (a process each under `tune`) faces the
// same compute. Records the collective's time per op beside it and the step's time (until both
// streams are done) relative to the compute alone.
template <class LaunchOn>
void RankRunner::time_beside_compute(const std::string& op, std::size_t count, const LaunchOn& launch_on, Measurement& out, RankBarrier& sync) {
  CUstream side = device_.streams[1];
  CUstream collectives = compute_->priority_stream();
  const std::size_t size = count * sizeof(float) * static_cast<std::size_t>(op == "all_reduce" ? 1 : n_);
  const double chunk_us = 10 + static_cast<double>(size) * busbw_factor(op, n_) / 300e9 * 1e6;
  // The compute load alone.
  cuda::check(d_.cuEventRecord(events_->start, side), "cuEventRecord");
  for (int i = 0; i < o_.iters; ++i) compute_->launch(chunk_us, side);
  cuda::check(d_.cuEventRecord(events_->compute_end, side), "cuEventRecord");
  cuda::check(d_.cuEventSynchronize(events_->compute_end), "cuEventSynchronize");
  const double alone_ms = compute_->elapsed_ms(events_->start, events_->compute_end);
  // Both, started together on every rank.
  sync.wait();
  cuda::check(d_.cuEventRecord(events_->start, collectives), "cuEventRecord");
  cuda::check(d_.cuStreamWaitEvent(side, events_->start, 0), "cuStreamWaitEvent");
  for (int i = 0; i < o_.iters; ++i) {
    launch_on(collectives);
    compute_->launch(chunk_us, side);
  }
  cuda::check(d_.cuEventRecord(events_->coll_end, collectives), "cuEventRecord");
  cuda::check(d_.cuEventRecord(events_->compute_end, side), "cuEventRecord");
  cuda::check(d_.cuEventSynchronize(events_->coll_end), "cuEventSynchronize");
  cuda::check(d_.cuEventSynchronize(events_->compute_end), "cuEventSynchronize");
  const double coll_ms = compute_->elapsed_ms(events_->start, events_->coll_end);
  const double step_ms = std::max(coll_ms, static_cast<double>(compute_->elapsed_ms(events_->start, events_->compute_end)));
  const auto me = static_cast<std::size_t>(rank_);
  out.beside[me] = coll_ms / 1e3 / o_.iters;
  out.step[me] = alone_ms > 0 ? step_ms / alone_ms : 0;
}

// `iters` launches captured once (this thread's capture: the other ranks' threads keep calling
// CUDA), then `replays` replays timed after a first one: seconds per launch without the host's
// launch cost. The graph goes before the communicators (NCCL >= 2.26 waits for live graphs that
// captured a communicator's collectives when destroying it).
template <class Launch>
double RankRunner::time_graph(const Launch& launch, RankBarrier& sync) {
  cuda::check(d_.cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
  CUgraph graph = nullptr;
  try {
    for (int i = 0; i < o_.iters; ++i) launch();
  } catch (...) {
    d_.cuStreamEndCapture(stream_, &graph);  // end the capture before reporting the launch's error
    if (graph != nullptr) d_.cuGraphDestroy(graph);
    throw;
  }
  cuda::check(d_.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  const CUresult instantiated = d_.cuGraphInstantiateWithFlags(&exec, graph, 0);
  d_.cuGraphDestroy(graph);
  cuda::check(instantiated, "cuGraphInstantiate");
  struct ExecGuard {
    const tool::BenchDriver& d;
    CUgraphExec exec;
    ~ExecGuard() { d.cuGraphExecDestroy(exec); }
  } guard{d_, exec};
  cuda::check(d_.cuGraphLaunch(exec, stream_), "cuGraphLaunch");  // the first replay, untimed
  cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  sync.wait();
  const auto t = BenchClock::now();
  for (int r = 0; r < o_.replays; ++r) cuda::check(d_.cuGraphLaunch(exec, stream_), "cuGraphLaunch");
  cuda::check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  return seconds_since(t) / (static_cast<double>(o_.iters) * o_.replays);
}

// Samples the first and last element of each rank's slice (all-gather) or of the result.
int RankRunner::check_result(const std::string& op, void* res, std::size_t count) {
  const float sum = static_cast<float>(n_) * static_cast<float>(n_ + 1) / 2;
  std::vector<std::pair<std::size_t, float>> samples;  // element index, expected
  if (op == "all_gather") {
    for (int r = 0; r < n_; ++r) {
      const std::size_t base = static_cast<std::size_t>(r) * count;
      samples.push_back({base, static_cast<float>(r + 1)});
      samples.push_back({base + count - 1, static_cast<float>(r + 1)});
    }
  } else {
    samples = {{0, sum}, {count / 2, sum}, {count - 1, sum}};
  }
  int wrong = 0;
  for (const auto& [index, expected] : samples) {
    float got = 0;
    cuda::check(d_.cuMemcpyDtoH_v2(&got, reinterpret_cast<CUdeviceptr>(res) + index * sizeof(float), sizeof got), "cuMemcpyDtoH");
    if (got != expected) ++wrong;
  }
  return wrong;
}

int kind_index(const std::string& name) {
  for (int k = 0; k < static_cast<int>(std::size(kKindNames)); ++k)
    if (name == kKindNames[k]) return k;
  throw InvalidArgument("unknown registration kind '" + name + "'");
}

}  // namespace ncclpool::tool::coll

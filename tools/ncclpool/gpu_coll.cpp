// `ncclpool bench coll` on GPUs: all-gather, reduce-scatter and all-reduce on ncclpool memory with
// no registration, local registration (ncclCommRegister) and symmetric windows, measured the way
// nccl-tests measures (doc/PERFORMANCE.md of NVIDIA/nccl-tests):
//   * one thread per GPU, float data, sum; sizes from min to max by a factor;
//   * size = total bytes of the gathered output (all-gather), of the scattered input
//     (reduce-scatter), of the buffer (all-reduce); the per-rank count is rounded down to fit;
//   * warm-up launches, then `iters` launches back to back, one stream synchronize, host time / iters,
//     averaged over the ranks; out-of-place and in-place (nccl-tests' buffer offsets);
//   * algbw = size / time, busbw = algbw * (n-1)/n (all-gather, reduce-scatter) or 2(n-1)/n (all-reduce);
//   * a check run before the timing (known inputs, sampled outputs): the `wrong` column.
// The three kinds share one pool per GPU (its segments registered with a second communicator locally
// and as windows with a third): exactly the situation ncclpool is for.

#include "bench.hpp"
#include "compute_load.hpp"
#include "gpu_device.hpp"

#include "backends/cuda/driver.hpp"
#include "backends/nccl/library.hpp"

#include <ncclpool/nccl.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/auto_pool.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace ncclpool::tool {
namespace {

constexpr int kNone = 0, kLocal = 1, kSymmetric = 2, kAutoPoolGroup = 3;  // group 3: the auto pool's communicator
const char* const kKindNames[] = {"none", "local", "symmetric"};
constexpr double kAutoMargin = 0.02;  // --auto takes a costlier kind only when it is >= 2% faster

double mean_of(const std::vector<double>& values) {
  double s = 0;
  for (double v : values) s += v;
  return values.empty() ? 0 : s / static_cast<double>(values.size());
}

// One round's measurement of one op, size, kind and placement; each field per rank.
struct Measurement {
  std::vector<double> seconds;  // per operation, alone
  std::vector<double> beside;   // per operation, with the compute load beside it (--compute)
  std::vector<double> step;     // (collectives + compute load) time / compute load alone (--compute)
  std::vector<int> wrong;
};

// A value of the measurements over the rounds: per round the mean over ranks, then the median
// over rounds and the spread ((max - min) / median) that says how far one round can be trusted.
struct OverRounds {
  double median = 0, spread = 0;
};
OverRounds over_rounds(const std::vector<Measurement>& rounds, std::vector<double> Measurement::*field) {
  std::vector<double> values;
  for (const Measurement& m : rounds) values.push_back(mean_of(m.*field));
  if (values.empty()) return {};
  const double mid = median(values);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {mid, mid > 0 ? (*hi - *lo) / mid : 0};
}

// What all rank threads write into; read by every rank after a barrier (so all make the same choices).
struct Shared {
  std::mutex mutex;
  std::map<std::string, std::vector<Measurement>> results;  // key: op/bytes/kind/placement; one entry per round
  Measurement& at(const std::string& key, int ranks, int round) {
    std::lock_guard lock(mutex);
    std::vector<Measurement>& rounds = results[key];
    if (rounds.size() <= static_cast<std::size_t>(round)) rounds.resize(static_cast<std::size_t>(round) + 1);
    Measurement& m = rounds[static_cast<std::size_t>(round)];
    for (auto* field : {&m.seconds, &m.beside, &m.step}) field->resize(static_cast<std::size_t>(ranks));
    m.wrong.resize(static_cast<std::size_t>(ranks));
    return m;
  }
  // Median and spread over the rounds so far (after a barrier: every rank's values are in).
  OverRounds get(const std::string& key, std::vector<double> Measurement::*field = &Measurement::seconds) {
    std::lock_guard lock(mutex);
    return over_rounds(results[key], field);
  }
  int wrong(const std::string& key) {
    std::lock_guard lock(mutex);
    int w = 0;
    for (const Measurement& m : results[key])
      for (int v : m.wrong) w += v;
    return w;
  }
};

std::string key_of(const std::string& op, std::size_t bytes, const std::string& kind, bool in_place) {
  return op + "/" + std::to_string(bytes) + "/" + kind + "/" + (in_place ? "in" : "out");
}

// One measured point of an op: the per-rank element count and nccl-tests' size for it.
struct Point {
  std::size_t count = 0, size = 0;
};

// The sweep's sizes for `op` with n ranks, nccl-tests' convention: size = gathered output
// (all-gather), scattered input (reduce-scatter), buffer (all-reduce); the per-rank count is
// rounded down to fit, and sizes too small for one element per rank are skipped.
std::vector<Point> points_for(const std::string& op, const std::vector<std::size_t>& sizes, int n) {
  std::vector<Point> out;
  const std::size_t per_count = op == "all_reduce" ? sizeof(float) : sizeof(float) * static_cast<std::size_t>(n);
  for (std::size_t bytes : sizes)
    if (const std::size_t count = bytes / per_count; count > 0) out.push_back({count, count * per_count});
  return out;
}

double busbw_gbs(const std::string& op, std::size_t size, double seconds, int n) {
  return seconds > 0 ? static_cast<double>(size) / seconds / 1e9 * busbw_factor(op, n) : 0;
}

class RankRunner {
 public:
  RankRunner(Team& team, int rank, const CollOptions& o)
      : d_(cuda::driver()), lib_(nccl::library()), team_(team), rank_(rank), n_(team.ranks()), o_(o), device_(rank, o.compute ? 2 : 1), stream_(device_.streams[0]) {
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
      auto_pool_ = std::make_unique<AutoPool>("bench-coll-auto", make_part, builtin_routes(true), "built-in routes (measured on H200)", RegistryOptions{});
    }
  }
  ~RankRunner() {
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
  [[nodiscard]] std::string compute_description() const { return compute_ ? compute_->description() : ""; }

  // Collective over the ranks: registers the pool's segments with the kind's communicator.
  void attach(int kind) {
    if (kind == kNone) return;
    registry_->attach(team_.comm(rank_, kind), kind == kLocal ? RegistrationKind::local : RegistrationKind::symmetric);
    attached_.push_back(kind);
  }

  // Collective: attaches the auto pool (auto registration) to its own communicator.
  void attach_auto_pool() {
    auto_pool_->attach(team_.comm(rank_, kAutoPoolGroup), std::nullopt);
    auto_attached_ = true;
  }
  [[nodiscard]] std::string auto_routes() const { return auto_pool_->routes().describe() + " (" + auto_pool_->routes_source() + ")"; }

  // One op on `kind`'s communicator over the shared pool's buffers.
  void measure(const std::string& op, std::size_t count, int kind, bool in_place, Measurement& out, RankBarrier& sync) {
    measure_on(op, count, kind, kKindNames[kind], send_, recv_, in_place, out, sync);
  }

  // Both placements of one op on buffers the auto pool serves for messages of `size` bytes (the
  // library's routing, nothing chosen here); returns the part they came from. Collective (the pool
  // commits its windows before the first launch).
  std::string measure_auto_pool(const std::string& op, std::size_t count, std::size_t size, Measurement& out_of_place, Measurement& in_place, RankBarrier& sync) {
    void* send = auto_pool_->allocate_for_messages(size, reinterpret_cast<stream_t>(stream_), size, size);
    void* recv = nullptr;
    try {
      recv = auto_pool_->allocate_for_messages(size, reinterpret_cast<stream_t>(stream_), size, size);
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

 private:
  // One op on `group`'s communicator over send/recv; fills the check result (wrong samples) and seconds/op.
  void measure_on(const std::string& op, std::size_t count, int group, const std::string& label, void* send_buffer, void* recv_buffer, bool in_place,
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
    auto launch_on = [&](CUstream stream) {
      ncclResult_t r;
      if (op == "all_gather") r = lib_.ncclAllGather(in, res, count, ncclFloat, comm, stream);
      else if (op == "reduce_scatter") r = lib_.ncclReduceScatter(in, res, count, ncclFloat, ncclSum, comm, stream);
      else r = lib_.ncclAllReduce(in, res, count, ncclFloat, ncclSum, comm, stream);
      if (r != ncclSuccess) throw BackendError(op + " on " + label + ": " + nccl::error_text(r));
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
  void time_beside_compute(const std::string& op, std::size_t count, const LaunchOn& launch_on, Measurement& out, RankBarrier& sync) {
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
  double time_graph(const Launch& launch, RankBarrier& sync) {
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
      const cuda::Driver& d;
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
  int check_result(const std::string& op, void* res, std::size_t count) {
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

  const cuda::Driver& d_;
  const nccl::Library& lib_;
  Team& team_;
  int rank_, n_;
  const CollOptions& o_;
  DeviceStreams device_;  // context and streams: synchronized and destroyed after the pool is gone
  CUstream stream_;
  std::unique_ptr<ComputeLoad> compute_;  // --compute: on device_.streams[1]
  // The three timing events of time_beside_compute.
  struct Events {
    CUevent start = nullptr, coll_end = nullptr, compute_end = nullptr;
    Events() {
      try {
        for (CUevent* e : {&start, &coll_end, &compute_end}) cuda::check(cuda::driver().cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate");
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
        if (e != nullptr) cuda::driver().cuEventDestroy_v2(e);
      start = coll_end = compute_end = nullptr;
    }
  };
  std::unique_ptr<Events> events_;  // --compute
  std::shared_ptr<Pool> pool_;
  std::unique_ptr<Registry> registry_;
  std::vector<int> attached_;
  std::unique_ptr<AutoPool> auto_pool_;  // --auto-pool
  bool auto_attached_ = false;
  void* send_ = nullptr;
  void* recv_ = nullptr;
};

int kind_index(const std::string& name) {
  for (int k = 0; k < 3; ++k)
    if (name == kKindNames[k]) return k;
  throw InvalidArgument("unknown registration kind '" + name + "'");
}

std::vector<std::size_t> size_sweep(const CollOptions& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= static_cast<std::size_t>(o.factor)) {
    sizes.push_back(b);
    if (o.factor < 2) break;
  }
  return sizes;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

void run_coll(const CollOptions& o, Report& report) {
  std::string why;
  const int gpus = gpu_count(&why);
  if (gpus == 0) throw Unsupported("bench coll needs GPUs: " + why);
  const int ranks = o.ranks == 0 ? gpus : o.ranks;
  if (ranks > gpus) throw InvalidArgument("--ranks " + std::to_string(ranks) + ": there are " + std::to_string(gpus) + " GPU(s)");
  auto team = make_nccl_team(ranks, o.auto_pool ? 4 : 3);  // group k carries kind k: none, local, symmetric; 3: the auto pool
  std::vector<int> kinds;
  for (const auto& k : o.kinds) kinds.push_back(kind_index(k));
  std::string why_no_windows;
  if (std::find(kinds.begin(), kinds.end(), kSymmetric) != kinds.end() && !team->windows(&why_no_windows)) {
    kinds.erase(std::remove(kinds.begin(), kinds.end(), kSymmetric), kinds.end());
    report.notes.push_back("symmetric skipped: " + why_no_windows);
  }
  if (kinds.empty()) throw Unsupported("no registration kind left to measure");
  const std::vector<std::size_t> sizes = size_sweep(o);

  report.facts.push_back({"ranks", team->description()});
  report.facts.push_back({"method", "nccl-tests conventions: float sum, warm-up " + std::to_string(o.warmup) + ", iters " + std::to_string(o.iters) +
                                        (o.graph ? " captured in a CUDA graph, " + std::to_string(o.replays) + " replays timed" : std::string()) +
                                        ", host time per op averaged over ranks, busbw = algbw x (n-1)/n (AG, RS) or 2(n-1)/n (AR)"});
  report.facts.push_back({"memory", "one ncclpool pool per GPU (cuMem, deterministic); none = communicator without registration, local = "
                                    "ncclCommRegister, symmetric = ncclCommWindowRegister"});
  report.facts.push_back({"environment", "NCCL_NVLS_ENABLE=" + env_or("NCCL_NVLS_ENABLE", "(unset)")});
  // What `ncclpool tune` needs to tell a profile's machine (GPU model, NCCL version, rank count).
  {
    std::vector<GpuDescription> gpu_list;
    std::vector<PeerLink> links;
    describe_gpus(gpu_list, links);
    report.facts.push_back({"gpu", gpu_list.empty() ? "" : gpu_list.front().name});
    report.facts.push_back({"nccl_version", std::to_string(nccl_info().version)});
    report.facts.push_back({"rank_count", std::to_string(ranks)});
  }

  Shared shared;
  // What a round measures at each point; round r starts r places further along this list, so that
  // no kind is always measured first (right after the previous size) or last. The benchmark's own
  // --auto choice depends on the kinds' times and comes after them.
  std::vector<std::string> columns;
  for (int k : kinds) columns.push_back(kKindNames[k]);
  if (o.auto_pool) columns.push_back("pool");
  Progress progress("bench coll", static_cast<std::size_t>(o.rounds) * o.ops.size() * sizes.size() * (columns.size() + (o.auto_kind ? 1 : 0)));
  std::map<std::string, int> auto_choice;  // op/bytes -> kind
  std::map<std::string, std::string> pool_part;  // op/bytes -> the auto pool's part
  std::string pool_routes, compute_description;
  std::mutex choice_mutex;
  run_on_ranks(ranks, [&](int rank, RankBarrier& sync) {
    RankRunner runner(*team, rank, o);
    if (rank == 0) compute_description = runner.compute_description();
    for (int k : kinds) runner.attach(k);  // collective per communicator, same order everywhere
    if (o.auto_pool) {
      runner.attach_auto_pool();
      if (rank == 0) pool_routes = runner.auto_routes();
    }
    sync.wait();
    for (int round = 0; round < o.rounds; ++round) {
      const std::string round_label = o.rounds > 1 ? "round " + std::to_string(round + 1) + "/" + std::to_string(o.rounds) + ": " : "";
      for (const auto& op : o.ops) {
        for (const auto [count, size] : points_for(op, sizes, ranks)) {
          for (std::size_t i = 0; i < columns.size(); ++i) {
            const std::string& column = columns[(i + static_cast<std::size_t>(round)) % columns.size()];
            if (rank == 0) progress.step(round_label + op + " " + format_bytes(size) + " " + (column == "pool" ? "auto pool" : column));
            if (column == "pool") {
              const std::string part = runner.measure_auto_pool(op, count, size, shared.at(key_of(op, size, "pool", false), ranks, round),
                                                                shared.at(key_of(op, size, "pool", true), ranks, round), sync);
              if (rank == 0) {
                std::lock_guard lock(choice_mutex);
                pool_part[op + "/" + std::to_string(size)] = part;
              }
              continue;
            }
            for (bool in_place : {false, true})
              runner.measure(op, count, kind_index(column), in_place, shared.at(key_of(op, size, column, in_place), ranks, round), sync);
          }
          if (o.auto_kind) {
            sync.wait();  // every rank's times are in: all ranks pick the same kind
            // Kinds are tried from the cheapest to hold (none, local, symmetric: a window costs a
            // collective registration and whole chunks); a costlier kind wins only where it is
            // measurably faster (medians of the rounds so far), so noise does not flip the choice
            // between equal kinds.
            std::vector<int> by_cost = kinds;
            std::sort(by_cost.begin(), by_cost.end());
            int best = by_cost[0];
            double best_time = 0;
            for (int k : by_cost) {
              const double t = shared.get(key_of(op, size, kKindNames[k], false)).median + shared.get(key_of(op, size, kKindNames[k], true)).median;
              if (k == by_cost[0] || t < best_time * (1 - kAutoMargin)) best = k, best_time = t;
            }
            if (rank == 0) {
              std::lock_guard lock(choice_mutex);
              auto_choice[op + "/" + std::to_string(size)] = best;
              progress.step(round_label + op + " " + format_bytes(size) + " auto (" + kKindNames[best] + ")");
            }
            for (bool in_place : {false, true}) runner.measure(op, count, best, in_place, shared.at(key_of(op, size, "auto", in_place), ranks, round), sync);
          }
        }
      }
    }
    sync.wait();
  });
  progress.finish();

  // Tables: one per op, rows per size and placement, nccl-tests' columns per kind; every time is
  // the median over the rounds.
  std::vector<std::string> measured;  // the columns' keys, as the table shows them
  for (int k : kinds) measured.push_back(kKindNames[k]);
  if (o.auto_kind) measured.push_back("auto");
  if (o.auto_pool) measured.push_back("pool");
  double worst_auto = 0;
  std::string worst_auto_at;
  double worst_pool = 0, worst_pool_vs_none = 0;  // from 64 KiB (the targets' range), and below it
  double worst_pool_small = 0;
  std::string worst_pool_at, worst_pool_vs_none_at, worst_pool_small_at;
  std::vector<double> spread_small, spread_large;  // per row, the largest spread of its columns
  int wrong_total = 0;
  for (const auto& op : o.ops) {
    Table t;
    t.title = op + " (" + std::to_string(ranks) + " ranks): time us, busbw GB/s" + (o.rounds > 1 ? ", medians of " + std::to_string(o.rounds) + " rounds" : "");
    t.headers = {"size", "count", "place"};
    t.keys = {"bytes", "count", "placement"};
    auto add_kind_columns = [&](const std::string& header, const std::string& key) {
      for (const auto& [h, k] : std::vector<std::pair<std::string, std::string>>{{" us", "_us"}, {" busbw", "_busbw"}}) {
        t.headers.push_back(header + h);
        t.keys.push_back(key + k);
      }
      if (o.compute) {
        t.headers.push_back(header + " beside us");
        t.keys.push_back(key + "_beside_us");
        t.headers.push_back(header + " step");
        t.keys.push_back(key + "_step");
      }
    };
    for (int k : kinds) add_kind_columns(kKindNames[k], kKindNames[k]);
    if (o.auto_kind) {
      t.headers.push_back("auto kind");
      t.keys.push_back("auto_kind");
      add_kind_columns("auto", "auto");
      t.headers.push_back("auto/best");
      t.keys.push_back("auto_vs_best");
    }
    if (o.auto_pool) {
      t.headers.push_back("pool part");
      t.keys.push_back("pool_part");
      add_kind_columns("pool", "pool");
      for (const char* h : {"pool/best", "pool/none"}) t.headers.push_back(h);
      for (const char* k : {"pool_vs_best", "pool_vs_none"}) t.keys.push_back(k);
    }
    if (o.rounds > 1) {
      t.headers.push_back("spread %");
      t.keys.push_back("spread_pct");
    }
    t.headers.push_back("wrong");
    t.keys.push_back("wrong");
    for (const auto [count, size] : points_for(op, sizes, ranks)) {
      // auto/best is judged as auto was chosen: per size class, out-of-place + in-place time,
      // against the single kind with the lowest such sum.
      auto class_time = [&](const std::string& kind) {
        return shared.get(key_of(op, size, kind, false)).median + shared.get(key_of(op, size, kind, true)).median;
      };
      double best_class = 0;
      for (int k : kinds) best_class = best_class == 0 ? class_time(kKindNames[k]) : std::min(best_class, class_time(kKindNames[k]));
      const double auto_ratio = o.auto_kind && best_class > 0 ? class_time("auto") / best_class : 0;
      if (auto_ratio > worst_auto) {
        worst_auto = auto_ratio;
        worst_auto_at = op + " " + format_bytes(size);
      }
      const double pool_ratio = o.auto_pool && best_class > 0 ? class_time("pool") / best_class : 0;
      const bool none_measured = std::find(kinds.begin(), kinds.end(), kNone) != kinds.end();
      const double pool_vs_none = o.auto_pool && none_measured ? class_time("pool") / class_time("none") : 0;
      const std::string at = op + " " + format_bytes(size);
      if (size >= 64 * 1024) {
        if (pool_ratio > worst_pool) worst_pool = pool_ratio, worst_pool_at = at;
        if (pool_vs_none > worst_pool_vs_none) worst_pool_vs_none = pool_vs_none, worst_pool_vs_none_at = at;
      } else if (pool_ratio > worst_pool_small) {
        worst_pool_small = pool_ratio, worst_pool_small_at = at;
      }
      for (bool in_place : {false, true}) {
        std::vector<Cell> row{bytes_cell(size), integer_cell(static_cast<long long>(count)), text_cell(in_place ? "in" : "out")};
        double row_spread = 0;
        auto add = [&](const std::string& name) {
          const std::string key = key_of(op, size, name, in_place);
          const OverRounds time = shared.get(key);
          row.push_back(number_cell(time.median * 1e6, 2));
          row.push_back(number_cell(busbw_gbs(op, size, time.median, ranks), 2));
          if (o.compute) {
            row.push_back(number_cell(shared.get(key, &Measurement::beside).median * 1e6, 2));
            row.push_back(number_cell(shared.get(key, &Measurement::step).median, 3));
          }
          row_spread = std::max(row_spread, time.spread);
          wrong_total += shared.wrong(key);
        };
        for (int k : kinds) add(kKindNames[k]);
        if (o.auto_kind) {
          row.push_back(text_cell(kKindNames[auto_choice[op + "/" + std::to_string(size)]]));
          add("auto");
          row.push_back(number_cell(auto_ratio, 3));
        }
        if (o.auto_pool) {
          row.push_back(text_cell(pool_part[op + "/" + std::to_string(size)]));
          add("pool");
          row.push_back(number_cell(pool_ratio, 3));
          row.push_back(number_cell(pool_vs_none, 3));
        }
        if (o.rounds > 1) {
          row.push_back(number_cell(row_spread * 100, 1));
          (size >= 64 * 1024 ? spread_large : spread_small).push_back(row_spread);
        }
        int wrong = 0;
        for (const auto& name : measured) wrong += shared.wrong(key_of(op, size, name, in_place));
        row.push_back(integer_cell(wrong));
        t.add(std::move(row));
      }
    }
    report.tables.push_back(std::move(t));
  }

  // Summary: per op and kind, nccl-tests' "Avg bus bandwidth" (over sizes and both placements) and the peak.
  Table summary;
  summary.title = "summary: bus bandwidth GB/s";
  summary.headers = {"op", "kind", "avg busbw", "peak busbw", "at size"};
  summary.keys = {"op", "kind", "avg_busbw", "peak_busbw", "peak_bytes"};
  for (const auto& op : o.ops) {
    for (const auto& name : measured) {
      double sum = 0, peak = 0;
      std::size_t peak_size = 0;
      int samples = 0;
      for (const Point& point : points_for(op, sizes, ranks)) {
        const std::size_t size = point.size;
        for (bool in_place : {false, true}) {
          const double busbw = busbw_gbs(op, size, shared.get(key_of(op, size, name, in_place)).median, ranks);
          sum += busbw;
          ++samples;
          if (busbw > peak) peak = busbw, peak_size = size;
        }
      }
      summary.add({text_cell(op), text_cell(name), number_cell(samples ? sum / samples : 0, 2), number_cell(peak, 2), bytes_cell(peak_size)});
    }
  }
  report.tables.push_back(std::move(summary));

  if (o.auto_kind) {
    for (const auto& op : o.ops) {  // "all_gather: symmetric 1 KiB..64 MiB, local 128 MiB..1 GiB"
      std::string line = "auto chose for " + op + ":";
      int current = -1;
      std::size_t from = 0, last = 0;
      auto flush = [&] {
        if (current >= 0) line += std::string(" ") + kKindNames[current] + " " + format_bytes(from) + (from == last ? "" : ".." + format_bytes(last)) + ";";
      };
      for (const Point& point : points_for(op, sizes, ranks)) {
        const std::size_t size = point.size;
        const int k = auto_choice[op + "/" + std::to_string(size)];
        if (k != current) {
          flush();
          current = k;
          from = size;
        }
        last = size;
      }
      flush();
      report.notes.push_back(line);
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "auto vs the best single kind per size class (out-of-place + in-place time): worst ratio %.3f (%s); > 1 = auto slower",
                  worst_auto, worst_auto_at.c_str());
    report.notes.push_back(buf);
    report.notes.push_back("auto = per size class, the cheapest kind to hold (none < local < symmetric) unless a costlier one was >= 2% "
                           "faster (out-of-place + in-place time), measured again");
  }
  if (o.auto_pool) {
    report.facts.push_back({"auto_pool_routes", pool_routes});
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "auto pool (buffers from the library's auto pool, routed by message size) vs the best single kind per size class "
                  "(out-of-place + in-place time): worst %.3f (%s) from 64 KiB, %.3f (%s) below; vs none: worst %.3f (%s) from 64 KiB; "
                  "> 1 = the pool slower",
                  worst_pool, worst_pool_at.c_str(), worst_pool_small, worst_pool_small_at.c_str(), worst_pool_vs_none, worst_pool_vs_none_at.c_str());
    report.notes.push_back(buf);
  }
  report.facts.push_back({"rounds", std::to_string(o.rounds)});
  if (o.rounds > 1) {
    auto summary_of = [](std::vector<double> v) {
      if (v.empty()) return std::string("-");
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f%% (max %.1f%%)", median(v) * 100, *std::max_element(v.begin(), v.end()) * 100);
      return std::string(buf);
    };
    report.notes.push_back(std::to_string(o.rounds) + " rounds, each measuring the kinds in an order rotated by one: times are medians over the rounds; "
                           "spread % = the largest (max - min) / median over rounds of a row's columns, median over rows " + summary_of(spread_small) +
                           " below 64 KiB, " + summary_of(spread_large) + " from 64 KiB: ratios closer to 1 than that are noise");
  }
  if (o.compute) {
    report.facts.push_back({"compute_load", compute_description});
    report.notes.push_back("compute beside: each collective launched (eagerly, on a stream of the greatest priority, as FSDP2's) next to a chunk of the "
                           "compute load on another stream, the streams joined "
                           "at start and end; the chunk takes 10 us + size x busbw factor / 300 GB/s alone (about 1.2x the collective at "
                           "H200's NVLink speed). beside us = the collective's time per op meanwhile; step = the time until both are done / "
                           "the compute load alone (1.000: the collective cost the step nothing)");
  }
  const SymmetricCtas ctas = symmetric_ctas();  // decided at this run's first symmetric attach
  report.facts.push_back({"symmetric_ctas", ctas.decided ? std::to_string(ctas.ctas) : "-"});
  report.facts.push_back({"symmetric_ctas_source", ctas.source});
  if (ranks == 1) report.notes.push_back("1 rank: bus bandwidth is 0 by definition (factor (n-1)/n); times are still meaningful");
  report.notes.push_back(wrong_total == 0 ? "check: every sampled result was right" : "check: " + std::to_string(wrong_total) + " sampled results were WRONG");
  if (wrong_total != 0) throw BackendError("bench coll: " + std::to_string(wrong_total) + " wrong results\n" + report.text());
}

}  // namespace ncclpool::tool

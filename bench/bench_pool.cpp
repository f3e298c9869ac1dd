// Hot-path benchmarks of the pool (Google Benchmark).
//   NCCLPOOL_BENCH_SOURCE=sim (default) | cuda | vmm   picks the segment source.
// Stream ids 0, 1 and 2 are valid CUstream values on CUDA sources too: the default stream,
// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD.
// Each benchmark warms the pool first, so no iteration grows it unless the benchmark is about growth.

#include <ncclpool/cuda.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

std::shared_ptr<ncclpool::SegmentSource> make_source() {
  const char* env = std::getenv("NCCLPOOL_BENCH_SOURCE");
  const std::string name = env ? env : "sim";
  if (name == "cuda") return ncclpool::make_cuda_source(0);
  if (name == "vmm") return ncclpool::make_vmm_source({});
  return std::make_shared<ncclpool::SimSource>();
}

// alloc+free of one size on one stream, warm pool.
void BM_AllocFreeSameStream(benchmark::State& state) {
  ncclpool::Pool pool(make_source());
  const auto size = static_cast<std::size_t>(state.range(0));
  pool.deallocate(pool.allocate(size, 1));  // warm
  for (auto _ : state) {
    void* p = pool.allocate(size, 1);
    benchmark::DoNotOptimize(p);
    pool.deallocate(p);
  }
  state.SetLabel(ncclpool::to_string(pool.source_properties().kind));
}
BENCHMARK(BM_AllocFreeSameStream)->RangeMultiplier(16)->Range(1 << 10, 16 << 20);

// The same pair while the pool holds N live blocks of mixed sizes: the cost should stay flat.
void BM_AllocFreeWithLiveBlocks(benchmark::State& state) {
  ncclpool::PoolConfig config;
  config.growth_chunk = 64u << 20;
  ncclpool::Pool pool(make_source(), config);
  std::mt19937_64 rng(1);
  std::vector<void*> live;
  for (long i = 0; i < state.range(0); ++i) live.push_back(pool.allocate(256 + rng() % (64u << 10), 1));
  // Punch holes so the free index holds many blocks of many sizes.
  for (std::size_t i = 0; i < live.size(); i += 2) pool.deallocate(live[i]);
  pool.deallocate(pool.allocate(4096, 1));
  for (auto _ : state) {
    void* p = pool.allocate(4096, 1);
    benchmark::DoNotOptimize(p);
    pool.deallocate(p);
  }
  for (std::size_t i = 1; i < live.size(); i += 2) pool.deallocate(live[i]);
  state.counters["live_blocks"] = static_cast<double>(state.range(0)) / 2;
}
BENCHMARK(BM_AllocFreeWithLiveBlocks)->Arg(0)->Arg(200)->Arg(2000)->Arg(20000);

// A block freed on stream 1, published (one event), taken by stream 2 behind a wait, and back: every
// allocation crosses streams. The cost of a producer/consumer hand-over (an eager stream).
void BM_CrossStreamReuse(benchmark::State& state) {
  ncclpool::PoolConfig config;
  config.deterministic = true;  // always the wait path, never an event poll
  config.growth_chunk = 2u << 20;
  ncclpool::Pool pool(make_source(), config);
  void* p = pool.allocate(2u << 20, 1);
  ncclpool::stream_t stream = 1;
  for (auto _ : state) {
    pool.deallocate(p);
    pool.publish_frees(stream);  // what an eager stream's free does: the block may cross now
    stream = 3 - stream;
    p = pool.allocate(2u << 20, stream);
    benchmark::DoNotOptimize(p);
  }
  pool.deallocate(p);
  state.counters["cross_stream_reuses"] = static_cast<double>(pool.stats().cross_stream_reuses);
}
BENCHMARK(BM_CrossStreamReuse);

// Growth: a new segment from the source, then trim it away (source cost included).
void BM_GrowAndTrim(benchmark::State& state) {
  ncclpool::PoolConfig config;
  config.growth_chunk = static_cast<std::size_t>(state.range(0));
  ncclpool::Pool pool(make_source(), config);
  for (auto _ : state) {
    void* p = pool.allocate(4096);
    pool.deallocate(p);
    pool.trim();
  }
}
BENCHMARK(BM_GrowAndTrim)->Arg(2 << 20)->Arg(64 << 20);

// Contended: several threads on one pool, each on its own stream.
ncclpool::Pool* shared_pool = nullptr;
void BM_AllocFreeThreads(benchmark::State& state) {
  if (state.thread_index() == 0) shared_pool = new ncclpool::Pool(make_source());
  // Google Benchmark syncs threads at the start of the loop.
  for (auto _ : state) {
    void* p = shared_pool->allocate(4096, static_cast<ncclpool::stream_t>(state.thread_index()));
    benchmark::DoNotOptimize(p);
    shared_pool->deallocate(p);
  }
  if (state.thread_index() == 0) {
    delete shared_pool;
    shared_pool = nullptr;
  }
}
BENCHMARK(BM_AllocFreeThreads)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();

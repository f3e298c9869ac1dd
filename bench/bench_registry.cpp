// Registry costs on the simulator (loopback communicators), Google Benchmark.
//  * a scope use (enter + close) with nothing new to register, S segments x G groups: must be O(1);
//  * the same use done the Megatron way (deregister the whole pool, register it again) for scale;
//  * allocate+free with G = 0 and G = 4 attached communicators: no registry work without growth.

#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include <benchmark/benchmark.h>

#include <vector>

namespace {

struct Setup {
  std::shared_ptr<ncclpool::Pool> pool;
  std::unique_ptr<ncclpool::Registry> registry;
  std::vector<std::shared_ptr<ncclpool::LoopbackCommunicator>> comms;
  std::vector<void*> blocks;

  Setup(int segments, int groups, ncclpool::RegistrationKind kind) {
    ncclpool::PoolConfig config;
    config.deterministic = true;
    config.growth_chunk = 2u << 20;
    pool = std::make_shared<ncclpool::Pool>(std::make_shared<ncclpool::SimSource>(), config);
    registry = std::make_unique<ncclpool::Registry>(pool);
    for (int g = 0; g < groups; ++g) {
      std::string name = "group";
      name += std::to_string(g);  // (not "g" + to_string: GCC 12 -O3 -Wrestrict false positive)
      comms.push_back(std::make_shared<ncclpool::LoopbackCommunicator>(std::make_shared<ncclpool::LoopbackGroup>(name, 1), 0));
      registry->attach(comms.back(), kind);
    }
    for (int s = 0; s < segments; ++s) blocks.push_back(pool->allocate(2u << 20));  // one segment each
    registry->commit();
  }
  ~Setup() {
    for (void* b : blocks) pool->deallocate(b);
    for (auto& c : comms) registry->detach(*c);
  }
};

void BM_ScopeUseNothingNew(benchmark::State& state) {
  Setup setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), ncclpool::RegistrationKind::symmetric);
  for (auto _ : state) {
    ncclpool::Scope scope(*setup.registry);
    scope.close();
  }
  state.counters["segments"] = static_cast<double>(state.range(0));
  state.counters["groups"] = static_cast<double>(state.range(1));
}
BENCHMARK(BM_ScopeUseNothingNew)->Args({64, 3})->Args({64, 2})->Args({1024, 3});

// What Megatron's nccl_mem does per use: detach (deregister all) and attach (register all) each group.
// On the loopback communicator registration is nearly free; on NCCL each window costs ~15 ms.
void BM_ScopeUseReregisterAll(benchmark::State& state) {
  Setup setup(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), ncclpool::RegistrationKind::symmetric);
  for (auto _ : state) {
    for (auto& c : setup.comms) setup.registry->detach(*c);
    for (auto& c : setup.comms) setup.registry->attach(c, ncclpool::RegistrationKind::symmetric);
  }
  state.counters["windows_per_use"] = static_cast<double>(state.range(0) * state.range(1));
}
BENCHMARK(BM_ScopeUseReregisterAll)->Args({64, 2})->Args({64, 3});

void BM_AllocFreeWithGroups(benchmark::State& state) {
  Setup setup(4, static_cast<int>(state.range(0)), ncclpool::RegistrationKind::local);
  void* warm = setup.pool->allocate(4096);
  setup.pool->deallocate(warm);
  for (auto _ : state) {
    void* p = setup.pool->allocate(4096);
    benchmark::DoNotOptimize(p);
    setup.pool->deallocate(p);
  }
  state.counters["groups"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_AllocFreeWithGroups)->Arg(0)->Arg(4);

}  // namespace

BENCHMARK_MAIN();

// Registration cost with real NCCL, one thread per GPU (a plain program: timings of collective
// registration calls, not a hot loop). For S segments of CHUNK bytes in a pool shared by G groups:
//   attach (local and symmetric) = registering S existing segments with one group,
//   scope use with nothing new (ncclpool) vs the Megatron pattern (deregister + register all).
//   nccl_registration_bench [--gpus N] [--segments S[,S...]] [--chunk-mib M]

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ncclpool;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
  int gpus = std::min(4, cuda_device_count());
  std::vector<int> segment_counts{1, 8, 32};
  std::size_t chunk = 64u << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gpus")) gpus = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--chunk-mib")) chunk = static_cast<std::size_t>(std::atoi(argv[i + 1])) << 20;
    if (!std::strcmp(argv[i], "--segments")) {
      segment_counts.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string t; std::getline(ss, t, ',');) segment_counts.push_back(std::atoi(t.c_str()));
    }
  }
  if (gpus < 2) {
    std::fprintf(stderr, "nccl_registration_bench: needs 2+ GPUs\n");
    return 1;
  }
  try {
    const auto& lib = tool::bench_nccl();
    std::vector<ncclComm_t> world(static_cast<std::size_t>(gpus)), sub(static_cast<std::size_t>(gpus));
    std::vector<int> devs(static_cast<std::size_t>(gpus));
    for (int i = 0; i < gpus; ++i) devs[static_cast<std::size_t>(i)] = i;
    if (lib.ncclCommInitAll(world.data(), gpus, devs.data()) != ncclSuccess) throw std::runtime_error("ncclCommInitAll");
    lib.ncclGroupStart();
    for (int r = 0; r < gpus; ++r) lib.ncclCommSplit(world[static_cast<std::size_t>(r)], 0, r, &sub[static_cast<std::size_t>(r)], nullptr);
    lib.ncclGroupEnd();
    std::printf("NCCL %d (%s), %d GPUs, segments of %zu MiB (ncclMemAlloc)\n", nccl_info().version, nccl_info().library_path.c_str(), gpus, chunk >> 20);
    std::printf("%-9s %-10s %14s %14s %16s %18s\n", "segments", "kind", "attach ms", "per segment", "use, ncclpool", "use, re-register");
    for (int segments : segment_counts) {
      std::vector<std::array<double, 8>> results(static_cast<std::size_t>(gpus));
      std::vector<std::thread> threads;
      for (int rank = 0; rank < gpus; ++rank) {
        threads.emplace_back([&, rank] {
          cuda::PrimaryContext ctx(rank);
          tool::bench_driver().cuCtxSetCurrent(ctx.get());
          PoolConfig config;
          config.deterministic = true;
          config.growth_chunk = chunk;
          auto pool = std::make_shared<Pool>(make_nccl_source(rank), config);
          Registry registry(pool);
          std::vector<void*> blocks;
          for (int s = 0; s < segments; ++s) blocks.push_back(pool->allocate(chunk));
          auto a = make_nccl_communicator(world[static_cast<std::size_t>(rank)]);
          auto b = make_nccl_communicator(sub[static_cast<std::size_t>(rank)]);
          auto& out = results[static_cast<std::size_t>(rank)];
          auto t = Clock::now();
          registry.attach(a, RegistrationKind::local);
          out[0] = ms_since(t);
          registry.detach(*a);
          t = Clock::now();
          registry.attach(a, RegistrationKind::symmetric);
          out[1] = ms_since(t);
          registry.attach(b, RegistrationKind::symmetric);
          // A use with nothing new: enter + close a scope (no collective at all).
          constexpr int kUses = 1000;
          t = Clock::now();
          for (int u = 0; u < kUses; ++u) {
            Scope scope(registry);
            scope.close();
          }
          out[2] = ms_since(t) / kUses;
          // The Megatron pattern: deregister the pool from both groups, register it again.
          t = Clock::now();
          registry.detach(*a);
          registry.detach(*b);
          registry.attach(a, RegistrationKind::symmetric);
          registry.attach(b, RegistrationKind::symmetric);
          out[3] = ms_since(t);
          registry.detach(*a);
          registry.detach(*b);
          for (void* p : blocks) pool->deallocate(p);
        });
      }
      for (auto& th : threads) th.join();
      double local = 0, symm = 0, use = 0, rereg = 0;
      for (auto& r : results) {
        local = std::max(local, r[0]);
        symm = std::max(symm, r[1]);
        use = std::max(use, r[2]);
        rereg = std::max(rereg, r[3]);
      }
      std::printf("%-9d %-10s %14.2f %14.3f %16s %18s\n", segments, "local", local, local / segments, "", "");
      std::printf("%-9d %-10s %14.2f %14.3f %13.4f us %15.1f ms\n", segments, "symmetric", symm, symm / segments, use * 1e3, rereg);
    }
    for (auto* v : {&sub, &world})
      for (ncclComm_t c : *v) lib.ncclCommDestroy(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_registration_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

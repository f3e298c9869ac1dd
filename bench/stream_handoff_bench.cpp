// The cost of deferred publication (docs/pool.md, "Deferred publication"): stream B takes a 64 MiB
// block that stream A freed. Three cases, 30 runs each, B's latency (host: allocate on B, a 4 KiB
// memset on B, synchronize B):
//   eager     A publishes right at the free, then queues W (a 1 GiB memset): B does not wait for W
//   deferred  A queues W, then publishes (what a later free does): B's dependency covers W too
//   no work   A publishes at the free and queues nothing: the floor
// Usage: ncclpool_stream_handoff_bench [--runs N]   (GPU 0; prints one line per case)

#include "bench_driver.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/pool.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace ncclpool;

int main(int argc, char** argv) try {
  int runs = 30;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
  const tool::BenchDriver& d = tool::bench_driver();
  cuda::PrimaryContext context(0);
  cuda::check(d.cuCtxSetCurrent(context.get()), "cuCtxSetCurrent");
  CUstream a = nullptr, b = nullptr;
  cuda::check(d.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  cuda::check(d.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::size_t work_bytes = 1ull << 30, block = 64ull << 20;
  CUdeviceptr work = 0;
  cuda::check(d.cuMemAlloc_v2(&work, work_bytes), "cuMemAlloc (work buffer)");
  PoolConfig config;
  config.deterministic = true;  // always the wait path
  const auto A = reinterpret_cast<stream_t>(a), B = reinterpret_cast<stream_t>(b);
  const char* names[] = {"eager (published at the free)", "deferred (published after W)", "no work queued after the free"};
  std::printf("stream hand-over, B's latency in us (median, min-max of %d runs); W = 1 GiB memset on A after the free\n", runs);
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<double> latency;
    for (int run = 0; run < runs; ++run) {
      Pool pool(make_vmm_source(VmmSourceOptions{}), config);
      void* x = pool.allocate(block, A);
      cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(x), 1, block, a), "memset A");
      pool.deallocate(x, A);
      if (mode != 1) pool.publish_frees(A);
      if (mode != 2) cuda::check(d.cuMemsetD8Async(work, 2, work_bytes, a), "memset W");
      if (mode == 1) pool.publish_frees(A);
      const auto t0 = std::chrono::steady_clock::now();
      void* z = pool.allocate(block, B);
      if (z != x) throw InvariantViolation("B did not get A's block");
      cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(z), 3, 4096, b), "memset B");
      cuda::check(d.cuStreamSynchronize(b), "sync B");
      latency.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6);
      cuda::check(d.cuCtxSynchronize(), "sync");
      pool.deallocate(z, B);
    }
    std::sort(latency.begin(), latency.end());
    std::printf("  %-32s %8.1f  (%.1f-%.1f)\n", names[mode], latency[latency.size() / 2], latency.front(), latency.back());
  }
  d.cuMemFree_v2(work);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ncclpool_stream_handoff_bench: %s\n", e.what());
  return 1;
}

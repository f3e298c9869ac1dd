#pragma once
// What the real-NCCL GPU suites share (test_nccl_registry.cpp, test_nccl_lockstep.cpp): the fixture
// that makes the communicators (world + two split sub-groups shaped like FSDP+EP: dp = {0,1},{2,3},
// ep = {0,2},{1,3}) and runs a body on one thread per GPU, and small device helpers.
// NCCLPOOL_TEST_GPUS picks how many GPUs (default: up to 4).

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool {

inline constexpr std::size_t MiB = 1u << 20;

inline int gpus_wanted() {
  const char* env = std::getenv("NCCLPOOL_TEST_GPUS");
  const int have = cuda_device_count();
  const int want = env ? std::atoi(env) : 4;
  return std::min(have, want);
}

struct Comms {
  int n = 0;
  std::vector<ncclComm_t> world, dp, ep;
};

class NcclRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    n_ = gpus_wanted();
    if (n_ < 2) GTEST_SKIP() << "needs 2+ GPUs (have " << cuda_device_count() << ")";
    const NcclInfo info = nccl_info();
    if (!info.available) GTEST_SKIP() << info.why_not;
    const auto& lib = tool::bench_nccl();
    comms_.n = n_;
    comms_.world.resize(static_cast<std::size_t>(n_));
    comms_.dp.resize(static_cast<std::size_t>(n_));
    comms_.ep.resize(static_cast<std::size_t>(n_));
    std::vector<int> devs(static_cast<std::size_t>(n_));
    for (int i = 0; i < n_; ++i) devs[static_cast<std::size_t>(i)] = i;
    ASSERT_EQ(lib.ncclCommInitAll(comms_.world.data(), n_, devs.data()), ncclSuccess);
    ASSERT_EQ(lib.ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n_; ++r) lib.ncclCommSplit(comms_.world[static_cast<std::size_t>(r)], r / 2, r, &comms_.dp[static_cast<std::size_t>(r)], nullptr);
    ASSERT_EQ(lib.ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(lib.ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n_; ++r) lib.ncclCommSplit(comms_.world[static_cast<std::size_t>(r)], r % 2, r, &comms_.ep[static_cast<std::size_t>(r)], nullptr);
    ASSERT_EQ(lib.ncclGroupEnd(), ncclSuccess);
  }
  // Abort, not destroy: a failed test may leave a collective in flight, and destroy would wait for it.
  void TearDown() override {
    if (comms_.n == 0) return;
    const auto& lib = tool::bench_nccl();
    for (auto* v : {&comms_.dp, &comms_.ep, &comms_.world})
      for (ncclComm_t c : *v)
        if (c != nullptr) lib.ncclCommAbort(c);
  }

  // Runs body(rank) on one thread per GPU with that GPU's primary context current; each rank's
  // exception text, "" where it returned.
  std::vector<std::string> on_ranks(const std::function<void(int)>& body) {
    std::vector<std::string> errors(static_cast<std::size_t>(n_));
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r)
      threads.emplace_back([&, r] {
        try {
          cuda::PrimaryContext ctx(r);
          cuda::check(tool::bench_driver().cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
          body(r);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
          std::fprintf(stderr, "rank %d failed: %s\n", r, e.what());  // at once: another rank may hang after it
        }
      });
    for (auto& t : threads) t.join();
    return errors;
  }

  std::shared_ptr<SegmentSource> source(const std::string& kind, int device) {
    if (kind == "nccl") return make_nccl_source(device);
    return make_vmm_source(VmmSourceOptions{.device = device});
  }

  int n_ = 0;
  Comms comms_;
};

inline void upload(void* dst, const std::vector<float>& src) {
  cuda::check(tool::bench_driver().cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(dst), src.data(), src.size() * sizeof(float)), "upload");
}
inline std::vector<float> download(const void* src, std::size_t count) {
  std::vector<float> out(count);
  cuda::check(tool::bench_driver().cuMemcpyDtoH_v2(out.data(), reinterpret_cast<CUdeviceptr>(src), count * sizeof(float)), "download");
  return out;
}

// All-reduce of `value` (one float per rank) on comm; returns the sum every rank got.
inline float all_reduce_one(ncclComm_t comm, float value) {
  const auto& lib = tool::bench_nccl();
  const tool::BenchDriver& d = tool::bench_driver();
  CUdeviceptr buf = 0;
  cuda::check(d.cuMemAlloc_v2(&buf, sizeof(float)), "alloc");
  cuda::check(d.cuMemcpyHtoD_v2(buf, &value, sizeof value), "upload");
  CUstream stream = nullptr;
  cuda::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
  if (lib.ncclAllReduce(reinterpret_cast<void*>(buf), reinterpret_cast<void*>(buf), 1, ncclFloat, ncclSum, comm,
                        reinterpret_cast<cudaStream_t>(stream)) != ncclSuccess)
    throw std::runtime_error("all-reduce launch failed");
  cuda::check(d.cuStreamSynchronize(stream), "sync");
  float out = 0;
  cuda::check(d.cuMemcpyDtoH_v2(&out, buf, sizeof out), "download");
  d.cuStreamDestroy_v2(stream);
  d.cuMemFree_v2(buf);
  return out;
}

}  // namespace ncclpool

// GPU suite for the segment sources: the typed pool suite over `cuda`, `vmm` (device memory) and
// `vmm` host-NUMA, the pool-kind suite over `cuda` and `vmm`, writing and reading device memory through the driver; then stream ordering on
// real CUDA streams and pool behaviour under graph capture. Run by scripts/gpu-check.sh.

#include "common/pool_kind_suite.hpp"
#include "common/pool_suite.hpp"

#include "bench_driver.hpp"

#include <ncclpool/cuda.hpp>

#include <gtest/gtest.h>

namespace ncclpool::testing {

namespace {

// Makes device 0's primary context current on the calling thread (what the CUDA runtime does).
void use_device0() {
  const auto& d = tool::bench_driver();
  static cuda::PrimaryContext* context = new cuda::PrimaryContext(0);  // kept for the process
  cuda::check(d.cuCtxSetCurrent(context->get()), "cuCtxSetCurrent");
}

struct DeviceMemory {
  static bool available(std::string* why) { return cuda_available(why); }
  // Real streams, created once for the process; 0 is the legacy default stream.
  static stream_t stream(int i) {
    static const std::vector<CUstream> streams = [] {
      use_device0();
      std::vector<CUstream> out(4, nullptr);
      for (int k = 1; k < 4; ++k) cuda::check(tool::bench_driver().cuStreamCreate(&out[k], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      return out;
    }();
    return reinterpret_cast<stream_t>(streams.at(static_cast<std::size_t>(i)));
  }
  static void fill(void* ptr, std::size_t n, std::uint8_t value) {
    use_device0();
    cuda::check(tool::bench_driver().cuMemsetD8_v2(reinterpret_cast<CUdeviceptr>(ptr), value, n), "cuMemsetD8");
  }
  static std::vector<std::uint8_t> read(const void* ptr, std::size_t n) {
    use_device0();
    std::vector<std::uint8_t> out(n);
    cuda::check(tool::bench_driver().cuMemcpyDtoH_v2(out.data(), reinterpret_cast<CUdeviceptr>(ptr), n), "cuMemcpyDtoH");
    return out;
  }
};

struct CudaFixture : DeviceMemory {
  static constexpr const char* kName = "cuda";
  static std::shared_ptr<SegmentSource> make() { return make_cuda_source(0); }
};

struct VmmFixture : DeviceMemory {
  static constexpr const char* kName = "vmm";
  static std::shared_ptr<SegmentSource> make() { return make_vmm_source(VmmSourceOptions{}); }
};

struct VmmHostFixture : DeviceMemory {
  static constexpr const char* kName = "vmm-host-numa";
  static bool available(std::string* why) {
    if (!cuda_available(why)) return false;
    try {
      (void)make();
      return true;
    } catch (const Unsupported& e) {
      *why = e.what();
      return false;
    }
  }
  static std::shared_ptr<SegmentSource> make() {
    VmmSourceOptions o;
    o.location = VmmLocation::host_numa;
    return make_vmm_source(o);
  }
};

}  // namespace

using GpuFixtures = ::testing::Types<CudaFixture, VmmFixture, VmmHostFixture>;
INSTANTIATE_TYPED_TEST_SUITE_P(Gpu, PoolSuite, GpuFixtures);
// Both pool kinds (single, auto: pool_kind_suite.hpp) over `cuda` and `vmm` device memory.
using GpuPoolKinds = ::testing::Types<SingleKind<CudaFixture>, AutoKind<CudaFixture>, SingleKind<VmmFixture>, AutoKind<VmmFixture>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Gpu, PoolKindSuite, GpuPoolKinds, PoolKindName);

namespace {

class RealStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << why;
    use_device0();
    const auto& d = tool::bench_driver();
    cuda::check(d.cuStreamCreate(&a_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cuda::check(d.cuStreamCreate(&b_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  void TearDown() override {
    if (a_ == nullptr) return;
    const auto& d = tool::bench_driver();
    d.cuStreamDestroy_v2(a_);
    d.cuStreamDestroy_v2(b_);
  }
  static stream_t id(CUstream s) { return reinterpret_cast<stream_t>(s); }
  CUstream a_ = nullptr;
  CUstream b_ = nullptr;
};

// Publishing at A's next free elsewhere (not at p's own free) and publishing explicitly: either way
// B's work on the block starts after A's.
TEST_F(RealStreams, CrossStreamReuseWaitsForTheProducerAndKeepsData) {
  const auto& d = tool::bench_driver();
  for (auto make : {+[] { return make_cuda_source(0); }, +[] { return make_vmm_source(VmmSourceOptions{}); }})
  for (bool explicit_publish : {true, false}) {
    PoolConfig config;
    config.deterministic = true;  // always take the wait path
    Pool pool(make(), config);
    const std::size_t n = 64u << 20;
    void* p = pool.allocate(n, id(a_));  // a segment of its own
    void* small = pool.allocate(4096, id(a_));  // in another segment
    // Queue a lot of work on A, free on A, then reuse on B and overwrite there.
    for (int i = 0; i < 20; ++i) cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(p), 0x11, n, a_), "memset A");
    pool.deallocate(p);
    EXPECT_EQ(pool.stats().stream_publishes, 0u) << "a free records no event";
    if (explicit_publish) {
      pool.publish_frees(id(a_));
    } else {
      pool.deallocate(small);  // not next to p: A publishes
    }
    EXPECT_EQ(pool.stats().stream_publishes, 1u);
    void* q = pool.allocate(n, id(b_));
    ASSERT_EQ(p, q);
    EXPECT_EQ(pool.stats().cross_stream_reuses, 1u);
    cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(q), 0x22, n, b_), "memset B");
    cuda::check(d.cuStreamSynchronize(b_), "sync B");
    cuda::check(d.cuStreamSynchronize(a_), "sync A");
    const auto bytes = DeviceMemory::read(q, n);
    // Without the wait, A's memsets could land after B's.
    EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t v) { return v == 0x22; }));
    pool.deallocate(q);
    if (explicit_publish) pool.deallocate(small);
    pool.check_invariants();
  }
}

TEST_F(RealStreams, SameStreamReuseRecordsNoEventAndAnUnpublishedBlockStaysHome) {
  {
    Pool loop(make_vmm_source(VmmSourceOptions{}));
    for (int i = 0; i < 1000; ++i) loop.deallocate(loop.allocate(std::size_t{4096} << (i % 3), id(a_)));
    EXPECT_EQ(loop.stats().stream_publishes, 0u);
    loop.check_invariants();
  }
  Pool pool(make_vmm_source(VmmSourceOptions{}));
  void* p = pool.allocate(8u << 20, id(a_));
  pool.deallocate(p);
  void* q = pool.allocate(8u << 20, id(b_));
  EXPECT_NE(p, q) << "A's unpublished block stays with A (A may be destroyed before it frees again)";
  EXPECT_GE(pool.stats().unpublished_skips, 1u);
  pool.deallocate(q);
  pool.deallocate(pool.allocate(4096, id(a_)));  // A is eager now: this free publishes
  EXPECT_EQ(pool.stats().stream_publishes, 1u);
  pool.check_invariants();
}

TEST_F(RealStreams, AStreamCapturingAGraphPublishesNothingAndTheCaptureSurvives) {
  const auto& d = tool::bench_driver();
  PoolConfig config;
  config.deterministic = true;
  Pool pool(make_vmm_source(VmmSourceOptions{}), config);
  void* p = pool.allocate(8u << 20, id(a_));
  cuda::check(d.cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_RELAXED), "begin capture");
  cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(p), 3, 8u << 20, a_), "captured memset");
  pool.deallocate(p);
  pool.publish_frees(id(a_));  // refused: an event recorded now would be part of the graph
  EXPECT_EQ(pool.stats().stream_publishes, 0u);
  CUgraph graph = nullptr;
  cuda::check(d.cuStreamEndCapture(a_, &graph), "end capture (fails if the capture was invalidated)");
  d.cuGraphDestroy(graph);
  void* q = pool.allocate(8u << 20, id(b_));
  EXPECT_NE(p, q) << "nothing published A's free: B may not take it";
  pool.publish_frees(id(a_));  // outside the capture
  EXPECT_EQ(pool.stats().stream_publishes, 1u);
  void* r = pool.allocate(8u << 20, id(b_));
  EXPECT_EQ(p, r);
  for (void* x : {q, r}) pool.deallocate(x);
  pool.check_invariants();
}

TEST_F(RealStreams, CaptureNeverWaitsOnAnOutsideEvent) {
  const auto& d = tool::bench_driver();
  PoolConfig config;
  config.deterministic = true;  // no event polling: A's block could only come behind a wait
  Pool pool(make_cuda_source(0), config);
  void* p = pool.allocate(8u << 20, id(a_));
  pool.deallocate(p);  // free on A, outside capture
  pool.publish_frees(id(a_));
  cuda::check(d.cuStreamBeginCapture_v2(b_, CU_STREAM_CAPTURE_MODE_RELAXED), "begin capture");
  void* q = pool.allocate(8u << 20, id(b_));  // must not wait on A's event inside the capture
  cuda::check(d.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(q), 1, 8u << 20, b_), "captured memset");
  CUgraph graph = nullptr;
  cuda::check(d.cuStreamEndCapture(b_, &graph), "end capture (fails if the capture was invalidated)");
  d.cuGraphDestroy(graph);
  EXPECT_NE(p, q) << "the pool grew instead of making a captured stream wait";
  EXPECT_EQ(pool.stats().cross_stream_reuses, 0u);
  pool.deallocate(q);
  pool.check_invariants();
}

TEST_F(RealStreams, OutOfDeviceMemoryIsAClearErrorAndRecoverable) {
  auto source = make_cuda_source(0);
  PoolConfig config;
  config.name = "oom-probe";
  Pool pool(source, config);
  const std::size_t capacity = source->properties().capacity;
  void* most = pool.allocate(capacity / 2);
  try {
    (void)pool.allocate(capacity / 2 + (capacity / 4));
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("pool 'oom-probe' (device 0, cuda)"), std::string::npos) << e.what();
  }
  pool.deallocate(most);
  pool.check_invariants();
  void* again = pool.allocate(capacity / 2);
  pool.deallocate(again);
}

}  // namespace
}  // namespace ncclpool::testing

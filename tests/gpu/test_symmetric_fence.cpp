// GPU tests of the symmetric fence (issue 46; SymmetricKernels and symmetric_fence in nccl.hpp): every
// kind (kernel, memset, node) launches on a stream and becomes one node of a captured graph; a
// process decided `fence` (here for NCCL 2.28.9 on this GPU, whatever NCCL is loaded: the decision
// is made once, by this test) launches one eagerly, skips it in a capture that NCCL orders itself
// (graph mixing on) and adds the node where it does not (NCCL_GRAPH_MIXING_SUPPORT=0). No NCCL
// communicator needed. Run by scripts/gpu-check.sh (section cuda) with the rest of ncclpool_gpu_tests.

#include "backends/cuda/fence.hpp"
#include "bench_driver.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace ncclpool::testing {
namespace {

// A variable set (or unset: nullopt) for one scope.
class EnvFor {
 public:
  EnvFor(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~EnvFor() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  EnvFor(const EnvFor&) = delete;
  EnvFor& operator=(const EnvFor&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Device 0's primary context on this thread, and a stream of it.
struct Device0 {
  cuda::PrimaryContext context{0};
  CUstream stream = nullptr;
  Device0() {
    const auto& d = tool::bench_driver();
    cuda::check(d.cuCtxSetCurrent(context.get()), "cuCtxSetCurrent");
    cuda::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~Device0() { tool::bench_driver().cuStreamDestroy_v2(stream); }
};

// The types of the nodes of what `enqueue` captures on `stream`; the graph is instantiated and
// replayed once (it must run).
template <class Enqueue>
std::vector<CUgraphNodeType> captured_nodes(CUstream stream, Enqueue&& enqueue) {
  const auto& d = tool::bench_driver();
  using GetNodes = decltype(&::cuGraphGetNodes);
  using NodeType = decltype(&::cuGraphNodeGetType);
  const auto get_nodes = reinterpret_cast<GetNodes>(::dlsym(d.handle, "cuGraphGetNodes"));
  const auto node_type = reinterpret_cast<NodeType>(::dlsym(d.handle, "cuGraphNodeGetType"));
  if (get_nodes == nullptr || node_type == nullptr) throw Unsupported("the driver lacks cuGraphGetNodes / cuGraphNodeGetType");
  CUgraph graph = nullptr;
  cuda::check(d.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  try {
    enqueue();
  } catch (...) {
    d.cuStreamEndCapture(stream, &graph);
    if (graph) d.cuGraphDestroy(graph);
    throw;
  }
  cuda::check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  std::size_t n = 0;
  cuda::check(get_nodes(graph, nullptr, &n), "cuGraphGetNodes");
  std::vector<CUgraphNode> nodes(n);
  if (n) cuda::check(get_nodes(graph, nodes.data(), &n), "cuGraphGetNodes");
  std::vector<CUgraphNodeType> types;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    cuda::check(node_type(node, &t), "cuGraphNodeGetType");
    types.push_back(t);
  }
  if (n) {
    CUgraphExec exec = nullptr;
    cuda::check(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
    cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
    cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    d.cuGraphExecDestroy(exec);
  }
  d.cuGraphDestroy(graph);
  return types;
}

bool skip_without_gpu() {
  std::string why;
  if (cuda_available(&why)) return false;
  std::printf("skipped: %s\n", why.c_str());
  return true;
}

// node: an empty node in a capture (the driver here is CUDA 12.3+), the kernel eagerly.
TEST(SymmetricFenceGpu, EveryKindLaunchesEagerlyAndAsOneGraphNode) {
  if (skip_without_gpu()) GTEST_SKIP() << "no GPU";
  Device0 dev;
  const auto& d = tool::bench_driver();
  for (const SymmetricFenceKind kind : {SymmetricFenceKind::kernel, SymmetricFenceKind::memset, SymmetricFenceKind::node}) {
    for (int i = 0; i < 3; ++i) cuda::launch_fence(dev.stream, kind);  // the first sets up the context's module / byte
    cuda::launch_fence(nullptr, kind);                                  // the legacy default stream of the current context
    cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    const std::vector<CUgraphNodeType> nodes = captured_nodes(dev.stream, [&] { cuda::launch_fence(dev.stream, kind); });
    ASSERT_EQ(nodes.size(), 1u) << to_string(kind);
    const CUgraphNodeType expected = kind == SymmetricFenceKind::kernel ? CU_GRAPH_NODE_TYPE_KERNEL
                                     : kind == SymmetricFenceKind::memset ? CU_GRAPH_NODE_TYPE_MEMSET
                                     : CUDA_VERSION >= 12030              ? CU_GRAPH_NODE_TYPE_EMPTY
                                                                          : CU_GRAPH_NODE_TYPE_KERNEL;  // older headers: the kernel
    EXPECT_EQ(nodes[0], expected) << to_string(kind);
    // The caller's answer to "capturing?" (symmetric_fence asks once and passes it on) is used as given.
    cuda::launch_fence(dev.stream, kind, false);
    cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    const std::vector<CUgraphNodeType> told = captured_nodes(dev.stream, [&] { cuda::launch_fence(dev.stream, kind, true); });
    ASSERT_EQ(told.size(), 1u) << to_string(kind);
    EXPECT_EQ(told[0], expected) << to_string(kind) << ", capturing told";
  }
#if CUDA_VERSION >= 12030
  // Told the opposite of the truth, the node kind believes it (so the answer is not asked again): in a
  // capture told "not capturing" it launches the kernel, a kernel node; eagerly told "capturing" it
  // looks for the capture to add its node to and fails with the driver's error.
  const std::vector<CUgraphNodeType> believed = captured_nodes(dev.stream, [&] { cuda::launch_fence(dev.stream, SymmetricFenceKind::node, false); });
  ASSERT_EQ(believed.size(), 1u);
  EXPECT_EQ(believed[0], CU_GRAPH_NODE_TYPE_KERNEL);
  EXPECT_THROW(cuda::launch_fence(dev.stream, SymmetricFenceKind::node, true), BackendError);
  cuda::check(d.cuCtxSynchronize(), "cuCtxSynchronize");
#endif
#if CUDA_VERSION >= 12030
  // Between two kernels (the second a stand-in for the collective's): the empty node joins them, and
  // the graph runs.
  const std::vector<CUgraphNodeType> chain = captured_nodes(dev.stream, [&] {
    cuda::launch_fence(dev.stream, SymmetricFenceKind::kernel);
    cuda::launch_fence(dev.stream, SymmetricFenceKind::node);
    cuda::launch_fence(dev.stream, SymmetricFenceKind::kernel);
  });
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), CU_GRAPH_NODE_TYPE_EMPTY), 1);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), CU_GRAPH_NODE_TYPE_KERNEL), 2);
#endif
}

// The process decides once: this test makes the decision (`fence`, as NCCL 2.28.9 on a Hopper-class
// GPU with the fence declared) and is the only one in the program that does.
TEST(SymmetricFenceGpu, ADecidedFenceLaunchesEagerlyAndInCapturesNcclDoesNotOrder) {
  if (skip_without_gpu()) GTEST_SKIP() << "no GPU";
  Device0 dev;
  const EnvFor kernels("NCCLPOOL_SYMMETRIC_KERNELS", std::nullopt);
  const EnvFor kind("NCCLPOOL_SYMMETRIC_FENCE", std::string("kernel"));
  ASSERT_FALSE(symmetric_kernels().decided) << "another test decided first";
  EXPECT_FALSE(symmetric_fence(dev.stream)) << "nothing before the decision";
  prefer_symmetric_fence();
  const SymmetricKernels decided = apply_symmetric_kernels(22809, 9, 12030);
  ASSERT_EQ(decided.decision, "fence") << decided.why;
  EXPECT_NO_THROW(prefer_symmetric_fence());  // the same decision: accepted
  const SymmetricFenceStats before = symmetric_fence_stats();
  EXPECT_TRUE(symmetric_fence(dev.stream));
  EXPECT_TRUE(symmetric_fence(nullptr));
  cuda::check(tool::bench_driver().cuCtxSynchronize(), "cuCtxSynchronize");
  {
    const EnvFor mixing("NCCL_GRAPH_MIXING_SUPPORT", std::nullopt);  // NCCL's default: its event-wait node orders the collective
    bool launched = true;
    const auto nodes = captured_nodes(dev.stream, [&] { launched = symmetric_fence(dev.stream); });
    EXPECT_FALSE(launched);
    EXPECT_TRUE(nodes.empty());
  }
  {
    const EnvFor mixing("NCCL_GRAPH_MIXING_SUPPORT", std::string("0"));  // SGLang's setting with decode context parallelism
    bool launched = false;
    const auto nodes = captured_nodes(dev.stream, [&] { launched = symmetric_fence(dev.stream); });
    EXPECT_TRUE(launched);
    ASSERT_EQ(nodes.size(), 1u);
    EXPECT_EQ(nodes[0], CU_GRAPH_NODE_TYPE_KERNEL);
  }
  const SymmetricFenceStats after = symmetric_fence_stats();
  EXPECT_EQ(after.calls - before.calls, 4u);
  EXPECT_EQ(after.launched - before.launched, 3u);
  EXPECT_EQ(after.skipped_in_capture - before.skipped_in_capture, 1u);
}

}  // namespace
}  // namespace ncclpool::testing

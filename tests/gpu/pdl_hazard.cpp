// GPU check of the PDL hazard (docs/python.md, "NCCL versions"): NCCL 2.28.0-2.30.6 launch their
// symmetric kernels with programmatic stream serialization allowed but without the grid-dependency
// sync, so after a kernel that triggers its dependents early they can read their input before it is
// written. Each rank (one thread per GPU, communicators from ncclCommInitAll) repeats, on one stream:
//   memset(send, 0); producer(send <- rank + 1, after delay-us); ncclAllReduce(send, recv, sum)
// and checks every element of recv against n(n+1)/2, `launches` times, for each buffer kind:
//   plain    cuMemAlloc memory (NCCL's ring kernels: never affected)
//   window   an ncclpool pool attached symmetrically (its windows carry NCCL_WIN_COLL_SYMMETRIC only
//            where the guard lets them: NCCLPOOL_SYMMETRIC_KERNELS, SymmetricKernels in nccl.hpp)
// and for each way of launching:
//   eager         enqueued as above, as NCCL launches it (NCCL puts a cross-stream event wait
//                 between the producer and its kernel: enqueue.cc, ncclLaunchPrepare)
//   graph         replays of one captured CUDA graph, as captured; the JSON tells the NCCL kernel
//                 node's dependencies (a "programmatic" edge from the producer is what lets it start
//                 early; NCCL_GRAPH_MIXING_SUPPORT=1, NCCL's default, adds an event-wait node)
//   graph-forced  (window only) the same graph with the NCCL kernel node's dependencies replaced by
//                 one programmatic edge from the producer: the positive control of the kernel itself
//                 (wrong on 2.28.0-2.30.6 with the symmetric flag, right on 2.30.7+; NCCL's ring
//                 kernels don't wait either, so it promises nothing for windows without the flag)
// and, for windows, for each fence (--fence, issue 46) put between the producer and the collective:
//   none          nothing (the collective as an unwrapped caller enqueues it)
//   kernel        ncclpool's symmetric fence, an empty kernel launched without PDL
//   memset        ncclpool's symmetric fence, a 1-byte memset
//   node          ncclpool's symmetric fence, an empty graph node in a capture (eagerly the kernel)
// as ncclpool_symmetric_fence puts it: the same policy (nothing unless the process decided `fence`;
// in a capture nothing where NCCL < 2.29 with graph mixing on orders the collective itself) and the
// same launch, of the row's kind (the process's own kind is fixed at its decision). With a fence in
// the list the program declares the fence before its first attach (ncclpool_prefer_symmetric_fence,
// as ncclpool.torch does), so that `auto` decides `fence` where the hazard exists: the window rows
// with fence none are then the unfenced positive control beside the fenced ones.
// The producer runs on few CTAs (--producer-ctas, 4) with the maximum shared-memory carveout, so
// NCCL's CTAs (512 threads, 82,240 B of dynamic shared memory, up to 128 registers) find idle SMs:
// a CTA of the dependent starts early only where it fits beside the producer's.
//   canary   no NCCL: the check's own dependent (pdl_producer.ptx, ncclpool_pdl_canary) launched
//            with PDL right after the producer reads buf[0] at once; "early" counts launches where
//            it read 0. It shows whether PDL overlap happens at all on this GPU with each producer
//            grid, consumer footprint and launch path (eager, eager behind a cross-stream event wait
//            as NCCL does, graph).
// With one GPU NCCL runs no symmetric kernel: the check then proves that the program runs. The exit
// code is 1 when plain memory, windows with the symmetric kernels off, or fenced windows of a process
// that decided `fence` got a wrong result eagerly or in the graph as captured (the guard's and the
// fence's promise); a wrong result on unfenced windows with the kernels on is the hazard itself
// (reported).
//
//   ncclpool_pdl_hazard [--gpus N] [--launches 200] [--delay-us 300] [--kib 1024]
//                       [--modes canary,plain,window] [--fence none,kernel,memset,node] [--producer-ctas 4]
//                       [--producer-carveout 100] [--no-forced] [--json]

#include "backends/cuda/fence.hpp"
#include "bench_driver.hpp"
#include "bench_nccl.hpp"
#include "pdl_producer_ptx.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include "core/json.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ncclpool {
namespace {

struct Options {
  int gpus = 0;  // 0: every visible GPU
  int launches = 200;
  int delay_us = 300;
  std::size_t count = 256 * 1024;  // floats (1 MiB)
  std::vector<std::string> modes = {"canary", "plain", "window"};
  std::vector<std::string> fences = {"none"};  // per window row: none, kernel, memset, node
  int producer_ctas = 4;        // few CTAs: the other SMs stay idle for the dependent's CTAs
  int producer_carveout = 100;  // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT; -1: the driver's default
  bool forced = true;           // the graph-forced rows (window)
  bool json = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--gpus") o.gpus = std::stoi(next());
    else if (a == "--launches") o.launches = std::stoi(next());
    else if (a == "--delay-us") o.delay_us = std::stoi(next());
    else if (a == "--kib") o.count = std::stoul(next()) * 1024 / sizeof(float);
    else if (a == "--producer-ctas") o.producer_ctas = std::stoi(next());
    else if (a == "--producer-carveout") o.producer_carveout = std::stoi(next());
    else if (a == "--no-forced") o.forced = false;
    else if (a == "--json") o.json = true;
    else if (a == "--modes") {
      o.modes.clear();
      std::stringstream in(next());
      for (std::string m; std::getline(in, m, ',');) o.modes.push_back(m);
    } else if (a == "--fence") {
      o.fences.clear();
      std::stringstream in(next());
      for (std::string f; std::getline(in, f, ',');) o.fences.push_back(f);
    } else {
      throw InvalidArgument("unknown argument " + a);
    }
  }
  if (o.launches < 1 || o.delay_us < 0 || o.count == 0) throw InvalidArgument("--launches >= 1, --delay-us >= 0, --kib >= 1");
  if (o.producer_ctas < 1 || o.producer_carveout < -1 || o.producer_carveout > 100)
    throw InvalidArgument("--producer-ctas >= 1, --producer-carveout -1..100");
  for (const auto& m : o.modes)
    if (m != "plain" && m != "window" && m != "canary") throw InvalidArgument("--modes: canary, plain, window (not " + m + ")");
  for (const auto& f : o.fences)
    if (f != "none" && f != "kernel" && f != "memset" && f != "node") throw InvalidArgument("--fence: none, kernel, memset, node (not " + f + ")");
  if (o.fences.empty()) throw InvalidArgument("--fence needs at least one of none, kernel, memset, node");
  return o;
}

enum class Launch { eager, graph, forced };
const char* launch_name(Launch l) { return l == Launch::eager ? "eager" : l == Launch::graph ? "graph" : "graph-forced"; }

struct Result {
  std::string mode;
  std::string fence = "none";  // what was put between producer and collective (windows)
  int fences = 0;              // fences enqueued on rank 0 (eager: per launch; graph: in the capture)
  Launch launch = Launch::eager;
  int wrong = 0;            // launches with at least one wrong element, summed over ranks
  float first_wrong = 0;    // a wrong value seen (the sum without some rank's contribution)
  bool symmetric_flag = false;  // windows carried NCCL_WIN_COLL_SYMMETRIC
  std::string nccl_deps;    // graph: the NCCL kernel node's dependencies as captured (rank 0's)
};

// The driver entry points only this check calls (PDL launches, graph edges), resolved from the
// library's libcuda handle; CUDA >= 12.3 headers and driver.
struct PdlDriver {
#if CUDA_VERSION >= 12030
  decltype(&::cuLaunchKernelEx) launch_ex = nullptr;
  decltype(&::cuGraphGetNodes) get_nodes = nullptr;
  decltype(&::cuGraphNodeGetType) node_type = nullptr;
  decltype(&::cuGraphKernelNodeGetParams_v2) kernel_params = nullptr;
  decltype(&::cuGraphNodeGetDependencies_v2) dependencies = nullptr;
  decltype(&::cuGraphAddDependencies_v2) add_dependencies = nullptr;
  decltype(&::cuGraphRemoveDependencies_v2) remove_dependencies = nullptr;
#endif
};

const PdlDriver& pdl_driver() {
#if CUDA_VERSION >= 12030
  static const PdlDriver table = [] {
    PdlDriver t;
    void* handle = tool::bench_driver().handle;
    auto get = [handle](auto& slot, const char* name) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(handle, name));
      if (slot == nullptr) throw Unsupported(std::string("the CUDA driver lacks ") + name + " (PDL and graph edges need 12.3+)");
    };
    get(t.launch_ex, "cuLaunchKernelEx");
    get(t.get_nodes, "cuGraphGetNodes");
    get(t.node_type, "cuGraphNodeGetType");
    get(t.kernel_params, "cuGraphKernelNodeGetParams_v2");
    get(t.dependencies, "cuGraphNodeGetDependencies_v2");
    get(t.add_dependencies, "cuGraphAddDependencies_v2");
    get(t.remove_dependencies, "cuGraphRemoveDependencies_v2");
    return t;
  }();
  return table;
#else
  throw Unsupported("built with CUDA headers older than 12.3: no PDL launches or graph edge data");
#endif
}

#if CUDA_VERSION >= 12030
// The captured graph's producer node (the kernel node running `producer`) and NCCL's kernel node (the
// other kernel node; nullptr unless there is exactly one).
struct CapturedNodes {
  CUgraphNode producer = nullptr, nccl = nullptr, fence = nullptr;
};

// Whether a kernel node runs ncclpool's symmetric fence (by name where the driver says it, else by
// its shape: one thread, no parameters).
bool is_fence(const CUDA_KERNEL_NODE_PARAMS& params) {
  using FuncGetName = CUresult (*)(const char**, CUfunction);
  static const auto get_name = reinterpret_cast<FuncGetName>(::dlsym(tool::bench_driver().handle, "cuFuncGetName"));
  const char* name = nullptr;
  if (get_name != nullptr && get_name(&name, params.func) == CUDA_SUCCESS && name != nullptr)
    return std::string(name) == "ncclpool_symmetric_fence";
  return params.gridDimX * params.gridDimY * params.gridDimZ == 1 && params.blockDimX * params.blockDimY * params.blockDimZ == 1 &&
         params.kernelParams == nullptr;
}

CapturedNodes find_nodes(CUgraph graph, CUfunction producer) {
  const PdlDriver& p = pdl_driver();
  std::size_t n = 0;
  cuda::check(p.get_nodes(graph, nullptr, &n), "cuGraphGetNodes");
  std::vector<CUgraphNode> nodes(n);
  cuda::check(p.get_nodes(graph, nodes.data(), &n), "cuGraphGetNodes");
  CapturedNodes found;
  int others = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    cuda::check(p.node_type(node, &type), "cuGraphNodeGetType");
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS params{};
    cuda::check(p.kernel_params(node, &params), "cuGraphKernelNodeGetParams");
    if (params.func == producer) {
      found.producer = node;
    } else if (is_fence(params)) {
      found.fence = node;
    } else {
      found.nccl = node;
      ++others;
    }
  }
  if (others != 1) found.nccl = nullptr;
  return found;
}

const char* node_type_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
    case CU_GRAPH_NODE_TYPE_HOST: return "host";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "wait_event";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event_record";
    default: return "other";
  }
}

// "producer:programmatic + wait_event:full": each dependency of NCCL's kernel node and its edge.
std::string describe_dependencies(const CapturedNodes& c) {
  if (c.nccl == nullptr) return "no single NCCL kernel node";
  const PdlDriver& p = pdl_driver();
  std::size_t n = 0;
  cuda::check(p.dependencies(c.nccl, nullptr, nullptr, &n), "cuGraphNodeGetDependencies");
  std::vector<CUgraphNode> deps(n);
  std::vector<CUgraphEdgeData> edges(n);
  cuda::check(p.dependencies(c.nccl, deps.data(), edges.data(), &n), "cuGraphNodeGetDependencies");
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    CUgraphNodeType type{};
    cuda::check(p.node_type(deps[i], &type), "cuGraphNodeGetType");
    const CUgraphEdgeData& e = edges[i];
    const char* edge = e.type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC          ? "full"
                       : e.from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC ? "programmatic"
                                                                                : "launch-order";
    out += (i ? " + " : "") + std::string(deps[i] == c.producer ? "producer" : deps[i] == c.fence ? "fence" : node_type_name(type)) + ":" + edge;
  }
  return n ? out : "none";
}

// The positive control: NCCL's kernel node depends on the producer by one programmatic edge only
// (the dependent may start once every producer CTA ran griddepcontrol.launch_dependents).
void force_programmatic_edge(CUgraph graph, const CapturedNodes& c) {
  if (c.nccl == nullptr || c.producer == nullptr) throw BackendError("graph-forced: no producer node or no single NCCL kernel node");
  const PdlDriver& p = pdl_driver();
  std::size_t n = 0;
  cuda::check(p.dependencies(c.nccl, nullptr, nullptr, &n), "cuGraphNodeGetDependencies");
  std::vector<CUgraphNode> deps(n), to(n, c.nccl);
  std::vector<CUgraphEdgeData> edges(n);
  cuda::check(p.dependencies(c.nccl, deps.data(), edges.data(), &n), "cuGraphNodeGetDependencies");
  if (n) cuda::check(p.remove_dependencies(graph, deps.data(), to.data(), edges.data(), n), "cuGraphRemoveDependencies");
  CUgraphEdgeData e{};
  e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  cuda::check(p.add_dependencies(graph, &c.producer, &c.nccl, &e, 1), "cuGraphAddDependencies (programmatic)");
}
#endif

// The producer's launch: `ctas` CTAs of 256 threads.
void set_carveout(CUfunction f, int carveout) {
  cuda::check(tool::bench_driver().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout),
              "cuFuncSetAttribute (carveout)");
}

// NCCL's symmetric kernels' footprint on sm_90 (2.28.9): 512 threads, ncclShmemDynamicSize(900) =
// 20 warps x 4,112 B of dynamic shared memory, up to 128 registers (sym kernels: -maxrregcount=128).
constexpr unsigned kNcclLikeThreads = 512, kNcclLikeSmem = 82240, kNcclLikeCtas = 32;

struct CanaryCase {
  std::string name;
  int producer_ctas;
  int carveout;     // the producer's; -1: the driver's default
  bool nccl_like;   // 32 CTAs x 512 threads, 82,240 B dynamic shared memory, remote sync domain; else 1 x 32
  int path;         // 0 eager, 1 eager behind a cross-stream event wait (NCCL's ncclLaunchPrepare), 2 graph
};

struct CanaryResult {
  std::string name;
  int early = 0;     // launches where a canary CTA read 0 (it ran before the producer wrote), all ranks
  int on_time = 0;   // launches where every CTA read the value
  int other = 0;     // neither (did not run?)
  std::string error;
};

// One rank's buffers for a mode: plain memory, or blocks of an ncclpool pool with windows.
struct Buffers {
  CUdeviceptr send = 0, recv = 0;
  std::shared_ptr<Pool> pool;
  std::unique_ptr<Registry> registry;
  std::shared_ptr<Communicator> comm;
  void* send_block = nullptr;
  void* recv_block = nullptr;

  Buffers(const std::string& mode, int device, ncclComm_t nccl_comm, std::size_t bytes) {
    const tool::BenchDriver& d = tool::bench_driver();
    if (mode == "plain") {
      cuda::check(d.cuMemAlloc_v2(&send, bytes), "cuMemAlloc");
      cuda::check(d.cuMemAlloc_v2(&recv, bytes), "cuMemAlloc");
      return;
    }
    PoolConfig config;
    config.name = "pdl-check";
    config.deterministic = true;
    config.growth_chunk = 64ull << 20;
    pool = std::make_shared<Pool>(make_nccl_source(device), config);
    registry = std::make_unique<Registry>(pool, RegistryOptions{CheckLevel::off});
    comm = make_nccl_communicator(nccl_comm);
    registry->attach(comm, RegistrationKind::symmetric);  // collective: every rank attaches here
    pool->reserve(2 * bytes);
    send_block = pool->allocate(bytes);
    recv_block = pool->allocate(bytes);
    registry->commit();  // the window, before the first collective
    send = reinterpret_cast<CUdeviceptr>(send_block);
    recv = reinterpret_cast<CUdeviceptr>(recv_block);
  }
  ~Buffers() {
    const tool::BenchDriver& d = tool::bench_driver();
    if (!pool) {
      d.cuMemFree_v2(send);
      d.cuMemFree_v2(recv);
      return;
    }
    pool->deallocate(send_block);
    pool->deallocate(recv_block);
    try {
      registry->detach(*comm);  // collective: every rank detaches here
    } catch (const std::exception& e) {
      std::fprintf(stderr, "detach: %s\n", e.what());
      registry->forget(*comm);
    }
  }
};

// The canary rows on one rank (no NCCL): see the file comment.
std::vector<CanaryResult> run_canary(const Options& o, int device, CUfunction producer, CUfunction canary, CUstream stream) {
  const tool::BenchDriver& d = tool::bench_driver();
  std::vector<CanaryResult> out;
#if CUDA_VERSION >= 12030
  const PdlDriver& p = pdl_driver();
  int sms = 0;
  CUdevice dev = 0;
  cuda::check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  cuda::check(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  const std::string pn = "producer " + std::to_string(o.producer_ctas) + "x256 carveout " + std::to_string(o.producer_carveout);
  const std::string pall = "producer " + std::to_string(sms) + "x256 (every SM)";
  const std::vector<CanaryCase> cases = {
      {pall + " carveout default, consumer nccl-like, eager", sms, -1, true, 0},  // the old check's producer
      {pall + " carveout 100, consumer nccl-like, eager", sms, 100, true, 0},
      {pn + ", consumer 1x32, eager", o.producer_ctas, o.producer_carveout, false, 0},
      {pn + ", consumer nccl-like, eager", o.producer_ctas, o.producer_carveout, true, 0},
      {pn + ", consumer nccl-like, eager behind a cross-stream event wait", o.producer_ctas, o.producer_carveout, true, 1},
      {pn + ", consumer nccl-like, graph", o.producer_ctas, o.producer_carveout, true, 2},
  };
  cuda::check(d.cuFuncSetAttribute(canary, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(kNcclLikeSmem)),
              "cuFuncSetAttribute (canary shared memory)");
  CUdeviceptr buf = 0, seen = 0;
  cuda::check(d.cuMemAlloc_v2(&buf, 1024 * sizeof(float)), "cuMemAlloc");
  cuda::check(d.cuMemAlloc_v2(&seen, kNcclLikeCtas * sizeof(float)), "cuMemAlloc");
  CUstream side = nullptr;
  CUevent ev = nullptr;
  cuda::check(d.cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  cuda::check(d.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  const float value = 1.0f;
  for (const CanaryCase& c : cases) {
    CanaryResult r;
    r.name = c.name;
    try {
      set_carveout(producer, c.carveout);
      std::uint64_t count = 1024, delay = static_cast<std::uint64_t>(o.delay_us) * 1000;
      float v = value;
      void* pargs[] = {&buf, &count, &v, &delay};
      void* cargs[] = {&buf, &seen};
      const unsigned ctas = c.nccl_like ? kNcclLikeCtas : 1;
      CUlaunchAttribute attrs[2] = {};
      attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[0].value.programmaticStreamSerializationAllowed = 1;
      attrs[1].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;  // as NCCL launches (NCCL_MEM_SYNC_DOMAIN, remote)
      attrs[1].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
      CUlaunchConfig cfg{};
      cfg.gridDimX = ctas;
      cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = c.nccl_like ? kNcclLikeThreads : 32;
      cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.sharedMemBytes = c.nccl_like ? kNcclLikeSmem : 0;
      cfg.hStream = stream;
      cfg.attrs = attrs;
      cfg.numAttrs = c.nccl_like ? 2 : 1;
      auto enqueue = [&] {
        cuda::check(d.cuMemsetD32Async(buf, 0, 1024, stream), "cuMemsetD32Async");
        cuda::check(d.cuMemsetD32Async(seen, 0x7fc00000u, kNcclLikeCtas, stream), "cuMemsetD32Async");  // NaN: not run
        cuda::check(d.cuLaunchKernel(producer, static_cast<unsigned>(c.producer_ctas), 1, 1, 256, 1, 1, 0, stream, pargs, nullptr),
                    "cuLaunchKernel (producer)");
        if (c.path == 1) {  // what NCCL puts between: record on an idle stream of its own, wait on it
          cuda::check(d.cuEventRecord(ev, side), "cuEventRecord");
          cuda::check(d.cuStreamWaitEvent(stream, ev, 0), "cuStreamWaitEvent");
        }
        cuda::check(p.launch_ex(&cfg, canary, cargs, nullptr), "cuLaunchKernelEx (canary, PDL)");
      };
      CUgraphExec exec = nullptr;
      if (c.path == 2) {
        CUgraph g = nullptr;
        cuda::check(d.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
        enqueue();
        cuda::check(d.cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
        cuda::check(d.cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
        d.cuGraphDestroy(g);
      }
      std::vector<float> host(ctas);
      for (int i = 0; i < o.launches; ++i) {
        if (exec) cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
        else enqueue();
        cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
        cuda::check(d.cuMemcpyDtoH_v2(host.data(), seen, ctas * sizeof(float)), "cuMemcpyDtoH");
        bool early = false, all_on_time = true;
        for (float x : host) {
          early = early || x == 0.0f;
          all_on_time = all_on_time && x == value;
        }
        if (early) ++r.early;
        else if (all_on_time) ++r.on_time;
        else ++r.other;
      }
      if (exec) d.cuGraphExecDestroy(exec);
    } catch (const std::exception& e) {
      r.error = e.what();
      d.cuStreamSynchronize(stream);
    }
    out.push_back(r);
  }
  set_carveout(producer, o.producer_carveout);
  d.cuEventDestroy_v2(ev);
  d.cuStreamDestroy_v2(side);
  d.cuMemFree_v2(buf);
  d.cuMemFree_v2(seen);
#else
  (void)o, (void)device, (void)producer, (void)canary, (void)stream, (void)d;
  out.push_back({"canary", 0, 0, 0, "built with CUDA headers older than 12.3"});
#endif
  return out;
}

int run(const Options& o) {
  const tool::BenchDriver& d = tool::bench_driver();
  const tool::BenchNccl& lib = tool::bench_nccl();
  const int n = o.gpus > 0 ? std::min(o.gpus, cuda_device_count()) : cuda_device_count();
  if (n < 1) throw Unsupported("no GPU");
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
  std::vector<int> devs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) devs[static_cast<std::size_t>(i)] = i;
  if (lib.ncclCommInitAll(comms.data(), n, devs.data()) != ncclSuccess) throw BackendError("ncclCommInitAll failed");

  const std::size_t bytes = o.count * sizeof(float);
  const float expected = static_cast<float>(n * (n + 1) / 2);
  std::vector<Result> results;
  std::vector<CanaryResult> canary_total;
  std::mutex results_mutex;
  std::atomic<int> failures{0};

  // Per rank: the module (producer and canary), its stream.
  auto with_rank = [&](int r, const std::string& what, auto&& body) {
    try {
      cuda::PrimaryContext ctx(r);
      cuda::check(d.cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
      CUmodule module = nullptr;
      CUfunction producer = nullptr, canary = nullptr;
      cuda::check(d.cuModuleLoadData(&module, kPdlProducerPtx), "cuModuleLoadData (the producer; needs sm_90)");
      cuda::check(d.cuModuleGetFunction(&producer, module, "ncclpool_trigger_then_write"), "cuModuleGetFunction");
      cuda::check(d.cuModuleGetFunction(&canary, module, "ncclpool_pdl_canary"), "cuModuleGetFunction");
      set_carveout(producer, o.producer_carveout);
      CUstream stream = nullptr;
      cuda::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      body(producer, canary, stream);
      d.cuStreamDestroy_v2(stream);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d, %s: %s\n", r, what.c_str(), e.what());
      ++failures;
    }
  };

  // A fence in the list: declared before the first attach, so that `auto` decides `fence` where the
  // hazard exists (as in ncclpool.torch); the rows with fence none are the unfenced control beside it.
  if (std::any_of(o.fences.begin(), o.fences.end(), [](const std::string& f) { return f != "none"; })) prefer_symmetric_fence();
  const char* mixing_env = std::getenv("NCCL_GRAPH_MIXING_SUPPORT");

  for (const std::string& mode : o.modes) {
    if (mode == "canary") {
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          with_rank(r, "canary", [&](CUfunction producer, CUfunction canary, CUstream stream) {
            std::vector<CanaryResult> mine = run_canary(o, r, producer, canary, stream);
            std::lock_guard lock(results_mutex);
            if (canary_total.empty()) {
              canary_total = mine;
              return;
            }
            for (std::size_t i = 0; i < mine.size() && i < canary_total.size(); ++i) {
              canary_total[i].early += mine[i].early;
              canary_total[i].on_time += mine[i].on_time;
              canary_total[i].other += mine[i].other;
              if (canary_total[i].error.empty()) canary_total[i].error = mine[i].error;
            }
          });
        });
      for (auto& t : threads) t.join();
      continue;
    }
    // Rows: (fence, launch). Plain memory gets no fence; graph-forced rows replace NCCL's edges with one
    // from the producer, which would bypass a fence: fence none only.
    std::vector<std::pair<std::string, Launch>> rows;
    for (const std::string& fence : mode == "window" ? o.fences : std::vector<std::string>{"none"})
      for (const Launch l : {Launch::eager, Launch::graph, Launch::forced})
        if (l != Launch::forced || (mode == "window" && o.forced && fence == "none")) rows.emplace_back(fence, l);
    for (const auto& [fence, launch] : rows) {
      Result total;
      total.mode = mode;
      total.fence = fence;
      total.launch = launch;
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          with_rank(r, mode + " (" + launch_name(launch) + ", fence " + fence + ")", [&](CUfunction producer, CUfunction, CUstream stream) {
            Buffers buffers(mode, r, comms[static_cast<std::size_t>(r)], bytes);
            const float value = static_cast<float>(r + 1);
            std::uint64_t count = o.count, delay = static_cast<std::uint64_t>(o.delay_us) * 1000;
            CUdeviceptr send = buffers.send;
            float v = value;
            void* args[] = {&send, &count, &v, &delay};
            int fences = 0;
            // ncclpool_symmetric_fence's policy and launch, of this row's kind (fence.hpp).
            auto fence_before_collective = [&] {
              if (fence == "none") return;
              CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
              cuda::check(d.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing");
              if (!choose_symmetric_fence(symmetric_kernels(), capture != CU_STREAM_CAPTURE_STATUS_NONE, mixing_env).launch) return;
              cuda::launch_fence(stream, choose_symmetric_fence_kind(fence.c_str()));
              ++fences;
            };
            auto enqueue = [&] {
              cuda::check(d.cuMemsetD32Async(send, 0, o.count, stream), "cuMemsetD32Async");
              cuda::check(d.cuLaunchKernel(producer, static_cast<unsigned>(o.producer_ctas), 1, 1, 256, 1, 1, 0, stream, args, nullptr),
                          "cuLaunchKernel (producer)");
              fence_before_collective();
              if (lib.ncclAllReduce(reinterpret_cast<void*>(send), reinterpret_cast<void*>(buffers.recv), o.count, ncclFloat, ncclSum,
                                    comms[static_cast<std::size_t>(r)], reinterpret_cast<cudaStream_t>(stream)) != ncclSuccess)
                throw BackendError("ncclAllReduce failed");
            };
            CUgraphExec exec = nullptr;
            std::string deps;
            if (launch != Launch::eager) {
              CUgraph g = nullptr;
              cuda::check(d.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
              enqueue();
              cuda::check(d.cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
#if CUDA_VERSION >= 12030
              try {
                const CapturedNodes nodes = find_nodes(g, producer);
                deps = describe_dependencies(nodes);
                if (launch == Launch::forced) force_programmatic_edge(g, nodes);
              } catch (const Unsupported& e) {
                if (launch == Launch::forced) throw;
                deps = e.what();
              }
#else
              if (launch == Launch::forced) throw Unsupported("graph-forced needs CUDA 12.3+ headers");
              deps = "unknown (CUDA headers older than 12.3)";
#endif
              cuda::check(d.cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
              d.cuGraphDestroy(g);
            }
            std::vector<float> host(o.count);
            int wrong = 0;
            float seen = 0;
            for (int i = 0; i < o.launches; ++i) {
              if (exec) {
                cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch");
              } else {
                enqueue();
              }
              cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
              cuda::check(d.cuMemcpyDtoH_v2(host.data(), buffers.recv, bytes), "cuMemcpyDtoH");
              for (float x : host)
                if (x != expected) {
                  ++wrong;
                  seen = x;
                  break;
                }
            }
            if (exec) d.cuGraphExecDestroy(exec);
            std::lock_guard lock(results_mutex);
            total.wrong += wrong;
            if (wrong) total.first_wrong = seen;
            if (r == 0) {
              total.nccl_deps = deps;
              total.fences = fences;
            }
          });
        });
      }
      for (auto& t : threads) t.join();
      total.symmetric_flag = mode == "window" && symmetric_kernels().enabled;
      results.push_back(total);
    }
  }
  for (ncclComm_t c : comms) lib.ncclCommDestroy(c);

  const SymmetricKernels guard = symmetric_kernels();
  const char* mixing = mixing_env;
  int broken_promise = 0;
  std::ostringstream json;
  json << "{\"gpus\":" << n << ",\"nccl_version\":" << lib.info.version << ",\"launches\":" << o.launches << ",\"delay_us\":" << o.delay_us
       << ",\"bytes\":" << bytes << ",\"producer_ctas\":" << o.producer_ctas << ",\"producer_carveout\":" << o.producer_carveout
       << ",\"graph_mixing_support\":" << (mixing ? json_quote(mixing) : "null") << ",\"symmetric_kernels\":{\"decided\":"
       << (guard.decided ? "true" : "false") << ",\"enabled\":" << (guard.enabled ? "true" : "false")
       << ",\"hazard\":" << (guard.hazard ? "true" : "false") << ",\"decision\":" << json_quote(guard.decided ? guard.decision : "undecided")
       << ",\"fence_declared\":" << (symmetric_fence_declared() ? "true" : "false") << "},\"canary\":[";
  for (std::size_t i = 0; i < canary_total.size(); ++i) {
    const CanaryResult& c = canary_total[i];
    json << (i ? "," : "") << "{\"case\":" << json_quote(c.name) << ",\"early\":" << c.early << ",\"on_time\":" << c.on_time
         << ",\"other\":" << c.other << ",\"launches\":" << o.launches * n;
    if (!c.error.empty()) json << ",\"error\":" << json_quote(c.error);
    json << "}";
    if (!o.json)
      std::printf("canary  %-95s early %4d of %d%s\n", c.name.c_str(), c.early, o.launches * n, c.error.empty() ? "" : (" (" + c.error + ")").c_str());
  }
  json << "],\"results\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& res = results[i];
    // never wrong as NCCL launches it: plain memory, the guard's windows, or fenced windows of a process
    // that decided `fence` (graph-forced promises nothing)
    const bool promised = res.launch != Launch::forced && (res.mode == "plain" || !res.symmetric_flag || (res.fence != "none" && guard.fence));
    if (promised && res.wrong > 0) ++broken_promise;
    json << (i ? "," : "") << "{\"mode\":\"" << res.mode << "\",\"fence\":\"" << res.fence << "\",\"fences\":" << res.fences
         << ",\"graph\":" << (res.launch != Launch::eager ? "true" : "false")
         << ",\"launch\":\"" << launch_name(res.launch) << "\",\"symmetric_flag\":" << (res.symmetric_flag ? "true" : "false")
         << ",\"wrong\":" << res.wrong << ",\"launches\":" << o.launches * n;
    if (res.launch != Launch::eager) json << ",\"nccl_deps\":" << json_quote(res.nccl_deps);
    json << "}";
    if (!o.json)
      std::printf("%-7s %-12s fence %-6s (%4d) symmetric flag %-3s  wrong %4d of %d%s%s\n", res.mode.c_str(), launch_name(res.launch),
                  res.fence.c_str(), res.fences, res.symmetric_flag ? "yes" : "no", res.wrong, o.launches * n,
                  res.wrong ? (" (e.g. " + std::to_string(res.first_wrong) + " instead of " + std::to_string(expected) + ")").c_str() : "",
                  res.launch != Launch::eager ? ("  NCCL node <- " + res.nccl_deps).c_str() : "");
  }
  json << "],\"errors\":" << failures.load() << "}";
  if (o.json) std::puts(json.str().c_str());
  else std::printf("NCCL %d, %d GPU(s); symmetric kernels: %s; NCCL_GRAPH_MIXING_SUPPORT=%s\n", lib.info.version, n, guard.why.c_str(),
                   mixing ? mixing : "(unset: 1)");
  if (failures.load() > 0) return 2;
  return broken_promise > 0 ? 1 : 0;
}

}  // namespace
}  // namespace ncclpool

int main(int argc, char** argv) {
  try {
    return ncclpool::run(ncclpool::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ncclpool_pdl_hazard: %s\n", e.what());
    return 2;
  }
}

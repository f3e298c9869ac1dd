// GPU check of the PDL hazard (docs/python.md, "NCCL versions"): NCCL 2.28.0-2.30.6 launch their
// symmetric kernels with programmatic stream serialization allowed but without the grid-dependency
// sync, so after a kernel that triggers its dependents early they can read their input before it is
// written. Each rank (one thread per GPU, communicators from ncclCommInitAll) repeats, on one stream:
//   memset(send, 0); producer(send <- rank + 1, after delay-us); ncclAllReduce(send, recv, sum)
// and checks every element of recv against n(n+1)/2, `launches` times, eagerly and as replays of one
// captured CUDA graph, for each buffer kind:
//   plain    cuMemAlloc memory (NCCL's ring kernels: never affected)
//   window   an ncclpool pool attached symmetrically (its windows carry NCCL_WIN_COLL_SYMMETRIC only
//            where the guard lets them: NCCLPOOL_SYMMETRIC_KERNELS, SymmetricKernels in nccl.hpp)
// With one GPU NCCL runs no symmetric kernel: the check then proves that the program runs. The exit
// code is 1 when plain memory, or windows with the symmetric kernels off, got a wrong result (the
// guard's promise); a wrong result on windows with the kernels on is the hazard itself (reported).
//
//   ncclpool_pdl_hazard [--gpus N] [--launches 200] [--delay-us 300] [--kib 1024] [--modes plain,window] [--json]

#include "bench_driver.hpp"
#include "bench_nccl.hpp"
#include "pdl_producer_ptx.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool {
namespace {

struct Options {
  int gpus = 0;  // 0: every visible GPU
  int launches = 200;
  int delay_us = 300;
  std::size_t count = 256 * 1024;  // floats (1 MiB)
  std::vector<std::string> modes = {"plain", "window"};
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
    else if (a == "--json") o.json = true;
    else if (a == "--modes") {
      o.modes.clear();
      std::stringstream in(next());
      for (std::string m; std::getline(in, m, ',');) o.modes.push_back(m);
    } else {
      throw InvalidArgument("unknown argument " + a);
    }
  }
  if (o.launches < 1 || o.delay_us < 0 || o.count == 0) throw InvalidArgument("--launches >= 1, --delay-us >= 0, --kib >= 1");
  for (const auto& m : o.modes)
    if (m != "plain" && m != "window") throw InvalidArgument("--modes: plain, window (not " + m + ")");
  return o;
}

struct Result {
  std::string mode;
  bool graph = false;
  int wrong = 0;            // launches with at least one wrong element, summed over ranks
  float first_wrong = 0;    // a wrong value seen (the sum without some rank's contribution)
  bool symmetric_flag = false;  // windows carried NCCL_WIN_COLL_SYMMETRIC
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
  std::mutex results_mutex;
  std::atomic<int> failures{0};
  for (const std::string& mode : o.modes) {
    for (const bool graph : {false, true}) {
      Result total{mode, graph, 0, 0, false};
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          try {
            cuda::PrimaryContext ctx(r);
            cuda::check(d.cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
            CUmodule module = nullptr;
            CUfunction producer = nullptr;
            cuda::check(d.cuModuleLoadData(&module, kPdlProducerPtx), "cuModuleLoadData (the producer; needs sm_90)");
            cuda::check(d.cuModuleGetFunction(&producer, module, "ncclpool_trigger_then_write"), "cuModuleGetFunction");
            CUstream stream = nullptr;
            cuda::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
            Buffers buffers(mode, r, comms[static_cast<std::size_t>(r)], bytes);
            const float value = static_cast<float>(r + 1);
            std::uint64_t count = o.count, delay = static_cast<std::uint64_t>(o.delay_us) * 1000;
            CUdeviceptr send = buffers.send;
            float v = value;
            void* args[] = {&send, &count, &v, &delay};
            auto enqueue = [&] {
              cuda::check(d.cuMemsetD32Async(send, 0, o.count, stream), "cuMemsetD32Async");
              cuda::check(d.cuLaunchKernel(producer, 132, 1, 1, 256, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel (producer)");
              if (lib.ncclAllReduce(reinterpret_cast<void*>(send), reinterpret_cast<void*>(buffers.recv), o.count, ncclFloat, ncclSum,
                                    comms[static_cast<std::size_t>(r)], reinterpret_cast<cudaStream_t>(stream)) != ncclSuccess)
                throw BackendError("ncclAllReduce failed");
            };
            CUgraphExec exec = nullptr;
            if (graph) {
              CUgraph g = nullptr;
              cuda::check(d.cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
              enqueue();
              cuda::check(d.cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
              cuda::check(d.cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
              d.cuGraphDestroy(g);
            }
            std::vector<float> host(o.count);
            int wrong = 0;
            float seen = 0;
            for (int i = 0; i < o.launches; ++i) {
              if (graph) {
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
            d.cuStreamDestroy_v2(stream);
            std::lock_guard lock(results_mutex);
            total.wrong += wrong;
            if (wrong) total.first_wrong = seen;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %d, %s%s: %s\n", r, mode.c_str(), graph ? " (graph)" : "", e.what());
            ++failures;
          }
        });
      }
      for (auto& t : threads) t.join();
      total.symmetric_flag = mode == "window" && symmetric_kernels().enabled;
      results.push_back(total);
    }
  }
  for (ncclComm_t c : comms) lib.ncclCommDestroy(c);

  const SymmetricKernels guard = symmetric_kernels();
  int broken_promise = 0;
  std::ostringstream json;
  json << "{\"gpus\":" << n << ",\"nccl_version\":" << lib.info.version << ",\"launches\":" << o.launches << ",\"delay_us\":" << o.delay_us
       << ",\"bytes\":" << bytes << ",\"symmetric_kernels\":{\"decided\":" << (guard.decided ? "true" : "false") << ",\"enabled\":"
       << (guard.enabled ? "true" : "false") << ",\"hazard\":" << (guard.hazard ? "true" : "false") << "},\"results\":[";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& res = results[i];
    const bool promised = res.mode == "plain" || !res.symmetric_flag;  // never wrong: plain memory, or the guard's windows
    if (promised && res.wrong > 0) ++broken_promise;
    json << (i ? "," : "") << "{\"mode\":\"" << res.mode << "\",\"graph\":" << (res.graph ? "true" : "false") << ",\"symmetric_flag\":"
         << (res.symmetric_flag ? "true" : "false") << ",\"wrong\":" << res.wrong << ",\"launches\":" << o.launches * n << "}";
    if (!o.json)
      std::printf("%-7s %-6s symmetric flag %-3s  wrong %4d of %d%s\n", res.mode.c_str(), res.graph ? "graph" : "eager", res.symmetric_flag ? "yes" : "no",
                  res.wrong, o.launches * n, res.wrong ? (" (e.g. " + std::to_string(res.first_wrong) + " instead of " + std::to_string(expected) + ")").c_str() : "");
  }
  json << "],\"errors\":" << failures.load() << "}";
  if (o.json) std::puts(json.str().c_str());
  else std::printf("NCCL %d, %d GPU(s); symmetric kernels: %s\n", lib.info.version, n, guard.why.c_str());
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

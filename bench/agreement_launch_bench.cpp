// Host cost of the ways an agreement all-gather can be launched (the steady path of a pool use with
// symmetric groups, issue "no silent corruption"), one thread per GPU, on two communicators per GPU
// (the world and a split of it, as a pool registered with two groups has):
//   eager     ncclAllGather of one record + cuEventRecord, per communicator (what ncclpool does)
//   grouped   ncclGroupStart, one all-gather per communicator, ncclGroupEnd, one event
//   graph     a CUDA graph that captured the all-gather, launched + cuEventRecord, per communicator
//   graph-all one graph that captured the all-gathers of every communicator + one event
// and the pieces around them (event query, context switch). Each launch's records are checked, and
// eager all-reduces are mixed between graph launches on the same communicator and checked too.
// Host cost: bursts of 4 launches with the device caught up in between (not timed), median over the
// bursts; back to back: many launches in a row, so the device's pace.
//   ncclpool_agreement_launch_bench [--gpus N] [--bursts B] [--rounds R]

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace ncclpool;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kRecord = 128;  // bytes: an agreement record
constexpr int kBurst = 4;

void cu(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(std::string(what) + ": " + cuda::error_text(r));
}
void nc(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + nccl::error_text(r));
}

struct Buffers {  // pinned host memory mapped into the device: this rank's record, then every rank's
  void* host = nullptr;
  CUdeviceptr device = 0;
};

struct Rank {
  int rank = 0, size = 0;
  std::vector<ncclComm_t> comms;
  std::vector<Buffers> buffers;  // one per communicator
  CUstream stream = nullptr;
  CUevent done = nullptr;
  std::uint64_t stamp = 0;
};

void write_record(Rank& r, std::size_t c) {
  ++r.stamp;
  auto* w = static_cast<std::uint64_t*>(r.buffers[c].host);
  w[0] = r.stamp;
  w[1] = static_cast<std::uint64_t>(r.rank);
}

void check_records(const Rank& r, std::size_t c, std::uint64_t stamp) {
  const auto* all = static_cast<const char*>(r.buffers[c].host) + kRecord;
  for (int peer = 0; peer < r.size; ++peer) {
    const auto* w = reinterpret_cast<const std::uint64_t*>(all + kRecord * static_cast<std::size_t>(peer));
    if (w[0] != stamp || w[1] != static_cast<std::uint64_t>(peer))
      throw std::runtime_error("wrong record from rank " + std::to_string(peer) + " on communicator " + std::to_string(c));
  }
}

void all_gather(const Rank& r, std::size_t c) {
  const auto& lib = tool::bench_nccl();
  nc(lib.ncclAllGather(reinterpret_cast<const void*>(r.buffers[c].device), reinterpret_cast<void*>(r.buffers[c].device + kRecord), kRecord,
                       ncclUint8, r.comms[c], reinterpret_cast<cudaStream_t>(r.stream)),
     "ncclAllGather");
}

CUgraphExec capture(Rank& r, const std::vector<std::size_t>& comms) {
  const auto& d = tool::bench_driver();
  cu(d.cuStreamBeginCapture_v2(r.stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  for (std::size_t c : comms) all_gather(r, c);
  CUgraph graph = nullptr;
  cu(d.cuStreamEndCapture(r.stream, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  cu(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
  d.cuGraphDestroy(graph);
  return exec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = std::min(8, cuda_device_count());
  int bursts = 500, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gpus")) gpus = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--bursts")) bursts = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  }
  if (gpus < 2) {
    std::fprintf(stderr, "agreement_launch_bench: needs 2+ GPUs\n");
    return 1;
  }
  try {
    const auto& lib = tool::bench_nccl();
    const auto n = static_cast<std::size_t>(gpus);
    std::vector<ncclComm_t> world(n), sub(n);
    std::vector<int> devs(n);
    for (int i = 0; i < gpus; ++i) devs[static_cast<std::size_t>(i)] = i;
    nc(lib.ncclCommInitAll(world.data(), gpus, devs.data()), "ncclCommInitAll");
    lib.ncclGroupStart();
    for (int r = 0; r < gpus; ++r) lib.ncclCommSplit(world[static_cast<std::size_t>(r)], 0, r, &sub[static_cast<std::size_t>(r)], nullptr);
    nc(lib.ncclGroupEnd(), "ncclCommSplit");
    std::printf("NCCL %d (%s), %d GPUs, 2 communicators per GPU, records of %zu bytes in mapped host memory\n", nccl_info().version,
                nccl_info().library_path.c_str(), gpus, kRecord);

    // name -> rank 0's samples (us per launch), over all rounds
    std::map<std::string, std::vector<double>> host_us, b2b_us;
    std::vector<std::string> order;
    std::barrier sync(gpus);
    std::vector<std::string> failures(n);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < gpus; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          const auto& d = tool::bench_driver();
          cuda::PrimaryContext ctx(rank);
          cu(d.cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
          Rank r;
          r.rank = rank;
          r.size = gpus;
          r.comms = {world[static_cast<std::size_t>(rank)], sub[static_cast<std::size_t>(rank)]};
          for (std::size_t c = 0; c < r.comms.size(); ++c) {
            Buffers b;
            cu(d.cuMemHostAlloc(&b.host, kRecord * (1 + n), CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
            cu(d.cuMemHostGetDevicePointer_v2(&b.device, b.host, 0), "cuMemHostGetDevicePointer");
            r.buffers.push_back(b);
          }
          cu(d.cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
          cu(d.cuEventCreate(&r.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
          CUdeviceptr reduce = 0;  // for the eager all-reduces mixed with graph launches
          cu(d.cuMemAlloc_v2(&reduce, 4 * sizeof(float)), "cuMemAlloc");
          const CUgraphExec graph0 = capture(r, {0});
          const CUgraphExec graph1 = capture(r, {1});
          const CUgraphExec graph_all = capture(r, {0, 1});
          CUcontext other = nullptr;  // a context switch and back, as ScopedContext does when called from another device's thread
          cu(d.cuDevicePrimaryCtxRetain(&other, (rank + 1) % gpus), "cuDevicePrimaryCtxRetain");

          // Each variant: one "launch" = what a use of a pool with both groups would do.
          struct Variant {
            std::string name;
            std::function<void()> launch;
            bool collective;
          };
          const std::vector<Variant> variants = {
              {"eager, 1 comm", [&] { write_record(r, 0); all_gather(r, 0); cu(d.cuEventRecord(r.done, r.stream), "event"); }, true},
              {"eager, 2 comms", [&] {
                 write_record(r, 0); all_gather(r, 0); cu(d.cuEventRecord(r.done, r.stream), "event");
                 write_record(r, 1); all_gather(r, 1); cu(d.cuEventRecord(r.done, r.stream), "event");
               }, true},
              {"grouped, 2 comms", [&] {
                 write_record(r, 0); write_record(r, 1);
                 nc(lib.ncclGroupStart(), "ncclGroupStart"); all_gather(r, 0); all_gather(r, 1); nc(lib.ncclGroupEnd(), "ncclGroupEnd");
                 cu(d.cuEventRecord(r.done, r.stream), "event");
               }, true},
              {"graph, 1 comm", [&] { write_record(r, 0); cu(d.cuGraphLaunch(graph0, r.stream), "launch"); cu(d.cuEventRecord(r.done, r.stream), "event"); }, true},
              {"graph, 2 comms", [&] {
                 write_record(r, 0); cu(d.cuGraphLaunch(graph0, r.stream), "launch"); cu(d.cuEventRecord(r.done, r.stream), "event");
                 write_record(r, 1); cu(d.cuGraphLaunch(graph1, r.stream), "launch"); cu(d.cuEventRecord(r.done, r.stream), "event");
               }, true},
              {"graph-all, 2 comms", [&] {
                 write_record(r, 0); write_record(r, 1);
                 cu(d.cuGraphLaunch(graph_all, r.stream), "launch"); cu(d.cuEventRecord(r.done, r.stream), "event");
               }, true},
              {"piece: cuEventRecord", [&] { cu(d.cuEventRecord(r.done, r.stream), "event"); }, false},
              {"piece: cuEventQuery (done)", [&] { d.cuEventQuery(r.done); }, false},
              {"piece: context switch + back", [&] { d.cuCtxSetCurrent(other); d.cuCtxSetCurrent(ctx.get()); }, false},
          };
          auto settle = [&] { cu(d.cuStreamSynchronize(r.stream), "cuStreamSynchronize"); };
          // Correctness first: each collective variant's records, then eager all-reduces between graph launches.
          for (const auto& v : variants) {
            if (!v.collective) continue;
            sync.arrive_and_wait();
            v.launch();
            settle();
            for (std::size_t c = 0; c < r.comms.size(); ++c) {
              const auto* w = static_cast<const std::uint64_t*>(r.buffers[c].host);
              if (v.name.find("1 comm") != std::string::npos && c == 1) continue;
              check_records(r, c, w[0]);
            }
          }
          for (int i = 0; i < 8; ++i) {
            write_record(r, 0);
            const std::uint64_t stamp = r.stamp;
            cu(d.cuGraphLaunch(graph0, r.stream), "launch");
            const float one[4] = {1, 1, 1, 1};
            cu(d.cuMemcpyHtoDAsync_v2(reduce, one, sizeof one, r.stream), "upload");
            nc(lib.ncclAllReduce(reinterpret_cast<void*>(reduce), reinterpret_cast<void*>(reduce), 4, ncclFloat32, ncclSum, r.comms[0],
                                 reinterpret_cast<cudaStream_t>(r.stream)),
               "ncclAllReduce");
            float sum[4] = {};
            cu(d.cuMemcpyDtoHAsync_v2(sum, reduce, sizeof sum, r.stream), "download");
            settle();
            check_records(r, 0, stamp);
            if (sum[0] != static_cast<float>(gpus)) throw std::runtime_error("eager all-reduce between graph launches: " + std::to_string(sum[0]));
          }
          for (int round = 0; round < rounds; ++round) {
            for (const auto& v : variants) {
              std::vector<double> samples;
              for (int b = 0; b < bursts; ++b) {
                sync.arrive_and_wait();
                const auto t = Clock::now();
                for (int k = 0; k < kBurst; ++k) v.launch();
                samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count() / kBurst);
                settle();
              }
              sync.arrive_and_wait();
              const int kInRow = 2000;
              const auto t = Clock::now();
              for (int k = 0; k < kInRow; ++k) v.launch();
              settle();
              const double b2b = std::chrono::duration<double, std::micro>(Clock::now() - t).count() / kInRow;
              if (rank == 0) {
                if (round == 0) order.push_back(v.name);
                host_us[v.name].push_back(median(samples));
                b2b_us[v.name].push_back(b2b);
              }
            }
          }
          sync.arrive_and_wait();
          for (CUgraphExec g : {graph0, graph1, graph_all}) d.cuGraphExecDestroy(g);
          d.cuDevicePrimaryCtxRelease_v2((rank + 1) % gpus);
          d.cuMemFree_v2(reduce);
          d.cuEventDestroy_v2(r.done);
          d.cuStreamDestroy_v2(r.stream);
          for (auto& b : r.buffers) d.cuMemFreeHost(b.host);
        } catch (const std::exception& e) {
          failures[static_cast<std::size_t>(rank)] = e.what();
          std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
          std::_Exit(1);  // the other ranks would wait at the barrier forever
        }
      });
    }
    for (auto& t : threads) t.join();
    std::printf("records right for every variant; eager all-reduces between graph launches right\n");
    std::printf("%-30s %28s %28s\n", "variant (rank 0)", "host us/launch [min-max]", "back to back us [min-max]");
    for (const auto& name : order) {
      auto& h = host_us[name];
      auto& b = b2b_us[name];
      std::printf("%-30s %12.2f [%5.2f-%5.2f]     %12.2f [%5.2f-%5.2f]\n", name.c_str(), median(h), *std::min_element(h.begin(), h.end()),
                  *std::max_element(h.begin(), h.end()), median(b), *std::min_element(b.begin(), b.end()), *std::max_element(b.begin(), b.end()));
    }
    for (auto* v : {&sub, &world})
      for (ncclComm_t c : *v) lib.ncclCommDestroy(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agreement_launch_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

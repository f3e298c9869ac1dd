// GPU probe (issue 30): may one NCCL window span several cuMem allocations mapped side by side in
// one reserved address range? ("from NCCL 2.29 a window may span several allocations mapped at
// registration"). ncclpool registers one window per segment (one allocation) today; a window over
// many segments would cut first registration by their count (docs/benchmarks/growth.md). The
// registry is not changed by this probe: its figures decide.
//
// Per rank (--ranks, default 1: ncclCommInitRankConfig with nranks 1, one thread per GPU otherwise),
// for each N in --counts: reserve N x --mib MiB of address space, map N cuMemCreate allocations
// (the properties of ncclpool's vmm source: device memory, POSIX-fd handles, GPUDirect RDMA where
// supported) side by side, then, --repeats times, alternating:
//   span:  ncclCommWindowRegister once over the whole range; if it gives a window, an in-place float
//          all-reduce over the whole range on it and a check of the elements on both sides of every
//          boundary between allocations; ncclCommWindowDeregister;
//   each:  one ncclCommWindowRegister per allocation (what ncclpool does), then their deregistration.
// Reports whether the span registered (or NCCL's error, or a NULL window), the check, and the median
// times (the slowest rank's). A warm-up window registered first, untimed in the rows, takes NCCL's
// one-time set-up of symmetric memory (reported as first_window_ms).
//
//   ncclpool_window_span [--ranks 1] [--counts 1,4,16,64] [--mib 32] [--repeats 3]
//                        [--flag symmetric|default] [--json]
//
// Exit code: 0 when it ran (a refused span is a finding, not a failure), 1 when the per-allocation
// windows failed or a check on a registered window read wrong values, 2 when it could not run.
// NCCL: NCCLPOOL_NCCL_LIBRARY, else the default search path (src/backends/nccl/library.hpp).

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/errors.hpp>

#include "core/json.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t kMiB = 1ull << 20;

struct Options {
  int ranks = 1;
  std::vector<int> counts = {1, 4, 16, 64};
  std::size_t mib = 32;
  int repeats = 3;
  int flag = NCCL_WIN_COLL_SYMMETRIC;
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
    if (a == "--ranks") o.ranks = std::stoi(next());
    else if (a == "--mib") o.mib = std::stoul(next());
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--json") o.json = true;
    else if (a == "--flag") {
      const std::string f = next();
      if (f != "symmetric" && f != "default") throw InvalidArgument("--flag: symmetric or default, not " + f);
      o.flag = f == "symmetric" ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT;
    } else if (a == "--counts") {
      o.counts.clear();
      std::stringstream in(next());
      for (std::string c; std::getline(in, c, ',');) o.counts.push_back(std::stoi(c));
    } else {
      throw InvalidArgument("unknown argument " + a + " (see the comment at the top of tests/gpu/window_span.cpp)");
    }
  }
  if (o.ranks < 1 || o.mib < 1 || o.repeats < 1 || o.counts.empty()) throw InvalidArgument("--ranks, --mib, --repeats >= 1; --counts not empty");
  for (int c : o.counts)
    if (c < 1 || c > 4096) throw InvalidArgument("--counts: each from 1 to 4096");
  return o;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What one rank saw for one N: a register outcome per repeat and the times.
struct RankRow {
  std::string span_outcome = "ok";  // ok | null window | the error text
  int span_wrong = 0;                // boundary elements read wrong after the all-reduce on the span
  std::string each_outcome = "ok";
  std::vector<double> span_register_ms, span_deregister_ms, each_register_ms, each_deregister_ms;
};

// N allocations mapped side by side in one reserved range, unmapped and released at the end.
struct MappedRange {
  CUdeviceptr base = 0;
  std::size_t piece = 0;
  std::vector<CUmemGenericAllocationHandle> handles;
  MappedRange(int device, int count, std::size_t piece_bytes) : piece(piece_bytes) {
    const tool::BenchDriver& d = tool::bench_driver();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    int rdma = 0;
    CUdevice dev = 0;
    cuda::check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    if (d.cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) == CUDA_SUCCESS && rdma)
      prop.allocFlags.gpuDirectRDMACapable = 1;
    std::size_t granularity = 0;
    cuda::check(d.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity");
    if (piece % granularity != 0) throw InvalidArgument("--mib is not a multiple of the granularity " + std::to_string(granularity));
    const std::size_t total = piece * static_cast<std::size_t>(count);
    cuda::check(d.cuMemAddressReserve(&base, total, granularity, 0, 0), "cuMemAddressReserve");
    for (int i = 0; i < count; ++i) {
      CUmemGenericAllocationHandle h = 0;
      cuda::check(d.cuMemCreate(&h, piece, &prop, 0), "cuMemCreate");
      handles.push_back(h);
      cuda::check(d.cuMemMap(base + piece * static_cast<std::size_t>(i), piece, 0, h, 0), "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    cuda::check(d.cuMemSetAccess(base, total, &access, 1), "cuMemSetAccess");
  }
  ~MappedRange() {
    const tool::BenchDriver& d = tool::bench_driver();
    const std::size_t total = piece * handles.size();
    if (base != 0) {
      for (std::size_t i = 0; i < handles.size(); ++i) d.cuMemUnmap(base + piece * i, piece);
      d.cuMemAddressFree(base, total);
    }
    for (auto h : handles) d.cuMemRelease(h);
  }
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;
  [[nodiscard]] std::size_t bytes() const { return piece * handles.size(); }
};

// In place, every rank's elements rank + 1: after the sum each is n(n+1)/2. Reads 4 floats on each
// side of every boundary between allocations (and at both ends); returns how many were wrong.
int all_reduce_and_check(const MappedRange& range, ncclComm_t comm, CUstream stream, int rank, int ranks) {
  const tool::BenchDriver& d = tool::bench_driver();
  const tool::BenchNccl& lib = tool::bench_nccl();
  const std::size_t count = range.bytes() / sizeof(float);
  const float value = static_cast<float>(rank + 1);
  unsigned bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  cuda::check(d.cuMemsetD32Async(range.base, bits, count, stream), "cuMemsetD32Async");
  const ncclResult_t r = lib.ncclAllReduce(reinterpret_cast<void*>(range.base), reinterpret_cast<void*>(range.base), count, ncclFloat,
                                           ncclSum, comm, reinterpret_cast<cudaStream_t>(stream));
  if (r != ncclSuccess) throw BackendError("ncclAllReduce on the span: " + nccl::error_text(r));
  cuda::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  const float expected = static_cast<float>(ranks * (ranks + 1) / 2);
  int wrong = 0;
  float host[4];
  for (std::size_t i = 0; i <= range.handles.size(); ++i) {
    const std::size_t at = range.piece * i;
    for (const std::size_t offset : {at >= sizeof host ? at - sizeof host : std::size_t{0}, std::min(at, range.bytes() - sizeof host)}) {
      cuda::check(d.cuMemcpyDtoH_v2(host, range.base + offset, sizeof host), "cuMemcpyDtoH");
      for (float x : host) wrong += x != expected;
    }
  }
  return wrong;
}

int run(const Options& o) {
  const tool::BenchDriver& d = tool::bench_driver();
  const tool::BenchNccl& lib = tool::bench_nccl();
  if (lib.ncclCommWindowRegister == nullptr || lib.ncclCommWindowDeregister == nullptr)
    throw Unsupported("NCCL " + std::to_string(lib.info.version) + " has no window API (needs >= 2.27)");
  if (lib.ncclGetUniqueId == nullptr || lib.ncclCommInitRankConfig == nullptr) throw Unsupported("NCCL lacks ncclCommInitRankConfig");
  if (o.ranks > cuda_device_count()) throw Unsupported(std::to_string(o.ranks) + " ranks need as many GPUs; " + std::to_string(cuda_device_count()) + " here");
  ncclUniqueId id{};
  if (lib.ncclGetUniqueId(&id) != ncclSuccess) throw BackendError("ncclGetUniqueId failed");

  const std::size_t piece = o.mib * kMiB;
  std::vector<std::vector<RankRow>> rows(static_cast<std::size_t>(o.ranks), std::vector<RankRow>(o.counts.size()));
  std::vector<double> first_window_ms(static_cast<std::size_t>(o.ranks), 0);
  std::vector<std::string> first_window(static_cast<std::size_t>(o.ranks), "ok");  // the warm-up's outcome
  std::vector<int> support(static_cast<std::size_t>(o.ranks), -1);
  std::atomic<int> failures{0};
  std::mutex errors_mutex;
  std::barrier sync(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      const auto rr = static_cast<std::size_t>(r);
      ncclComm_t comm = nullptr;
      std::optional<cuda::PrimaryContext> ctx;  // outlives the communicator
      try {
        ctx.emplace(r);
        cuda::check(d.cuCtxSetCurrent(ctx->get()), "cuCtxSetCurrent");
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        const ncclResult_t init = lib.ncclCommInitRankConfig(&comm, o.ranks, id, r, &config);
        if (init != ncclSuccess) throw BackendError("ncclCommInitRankConfig: " + nccl::error_text(init));
        support[rr] = nccl::symmetric_support(lib, comm);
        CUstream stream = nullptr;
        cuda::check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
        {  // warm-up: NCCL's one-time set-up of symmetric memory goes here, not into the rows
          MappedRange warm(r, 1, piece);
          ncclWindow_t w = nullptr;
          sync.arrive_and_wait();
          const auto t0 = std::chrono::steady_clock::now();
          const ncclResult_t res = lib.ncclCommWindowRegister(comm, reinterpret_cast<void*>(warm.base), warm.bytes(), &w, o.flag);
          first_window_ms[rr] = ms_since(t0);
          // Not fatal: the rows then show what NCCL does with every registration (a finding too).
          if (res != ncclSuccess) first_window[rr] = nccl::error_text(res);
          else if (w == nullptr) first_window[rr] = "null window";
          else (void)lib.ncclCommWindowDeregister(comm, w);
        }
        for (std::size_t c = 0; c < o.counts.size(); ++c) {
          RankRow& row = rows[rr][c];
          MappedRange range(r, o.counts[c], piece);
          for (int rep = 0; rep < o.repeats; ++rep) {
            for (const bool span : {rep % 2 == 0, rep % 2 != 0}) {  // alternate which goes first
              sync.arrive_and_wait();
              if (span) {
                ncclWindow_t w = nullptr;
                auto t0 = std::chrono::steady_clock::now();
                const ncclResult_t res = lib.ncclCommWindowRegister(comm, reinterpret_cast<void*>(range.base), range.bytes(), &w, o.flag);
                const double reg = ms_since(t0);
                if (res != ncclSuccess) {
                  row.span_outcome = nccl::error_text(res);
                  continue;
                }
                if (w == nullptr) {
                  row.span_outcome = "null window";
                  continue;
                }
                row.span_register_ms.push_back(reg);
                try {
                  row.span_wrong += all_reduce_and_check(range, comm, stream, r, o.ranks);
                } catch (const BackendError& e) {  // a span NCCL accepts but cannot run on: a finding, reported
                  row.span_outcome = std::string("registered, but ") + e.what();
                }
                t0 = std::chrono::steady_clock::now();
                const ncclResult_t dr = lib.ncclCommWindowDeregister(comm, w);
                row.span_deregister_ms.push_back(ms_since(t0));
                if (dr != ncclSuccess) row.span_outcome = "deregister: " + nccl::error_text(dr);
              } else {
                std::vector<ncclWindow_t> windows;
                auto t0 = std::chrono::steady_clock::now();
                for (std::size_t i = 0; i < range.handles.size(); ++i) {
                  ncclWindow_t w = nullptr;
                  const ncclResult_t res = lib.ncclCommWindowRegister(comm, reinterpret_cast<void*>(range.base + piece * i), piece, &w, o.flag);
                  if (res != ncclSuccess || w == nullptr) {
                    row.each_outcome = res != ncclSuccess ? nccl::error_text(res) : "null window";
                    break;
                  }
                  windows.push_back(w);
                }
                row.each_register_ms.push_back(ms_since(t0));
                t0 = std::chrono::steady_clock::now();
                for (ncclWindow_t w : windows) (void)lib.ncclCommWindowDeregister(comm, w);
                row.each_deregister_ms.push_back(ms_since(t0));
              }
            }
          }
        }
        d.cuStreamDestroy_v2(stream);
      } catch (const std::exception& e) {
        std::lock_guard lock(errors_mutex);
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        ++failures;
        sync.arrive_and_drop();  // the other ranks' barriers stop counting this one
      }
      if (comm != nullptr) lib.ncclCommDestroy(comm);
      ctx.reset();
    });
  }
  for (auto& t : threads) t.join();
  if (failures.load() > 0) return 2;

  // The slowest rank's median per figure; outcomes from rank 0 (all ranks got the same or it says so).
  auto slowest = [&](std::size_t c, std::vector<double> RankRow::*field) {
    double worst = 0;
    for (const auto& per_rank : rows) worst = std::max(worst, median(per_rank[c].*field));
    return worst;
  };
  int broken = 0;
  std::ostringstream json;
  json << "{\"nccl_version\":" << lib.info.version << ",\"nccl_library\":" << json_quote(lib.info.library_path) << ",\"ranks\":" << o.ranks
       << ",\"allocation_mib\":" << o.mib << ",\"repeats\":" << o.repeats << ",\"flag\":\""
       << (o.flag == NCCL_WIN_COLL_SYMMETRIC ? "NCCL_WIN_COLL_SYMMETRIC" : "NCCL_WIN_DEFAULT") << "\",\"symmetric_support\":" << support[0]
       << ",\"first_window_ms\":" << *std::max_element(first_window_ms.begin(), first_window_ms.end())
       << ",\"first_window\":" << json_quote(first_window[0]) << ",\"rows\":[";
  if (!o.json)
    std::printf("NCCL %d (%s), %d rank(s), allocations of %zu MiB, %s; first window (set-up) %.1f ms, %s\n"
                "%6s  %-28s %7s %12s %12s %10s\n",
                lib.info.version, lib.info.library_path.c_str(), o.ranks, o.mib, o.flag == NCCL_WIN_COLL_SYMMETRIC ? "NCCL_WIN_COLL_SYMMETRIC" : "NCCL_WIN_DEFAULT",
                *std::max_element(first_window_ms.begin(), first_window_ms.end()), first_window[0].c_str(), "N", "one window over the range", "check", "span ms",
                "N windows ms", "span/N");
  for (std::size_t c = 0; c < o.counts.size(); ++c) {
    std::string span = rows[0][c].span_outcome, each = rows[0][c].each_outcome;
    int wrong = 0;
    for (const auto& per_rank : rows) {
      if (per_rank[c].span_outcome != span) span += " (other ranks differ: " + per_rank[c].span_outcome + ")";
      if (per_rank[c].each_outcome != each) each += " (other ranks differ: " + per_rank[c].each_outcome + ")";
      wrong += per_rank[c].span_wrong;
    }
    if (each != "ok" || wrong > 0) ++broken;
    const double span_ms = slowest(c, &RankRow::span_register_ms), each_ms = slowest(c, &RankRow::each_register_ms);
    json << (c ? "," : "") << "{\"allocations\":" << o.counts[c] << ",\"bytes\":" << piece * static_cast<std::size_t>(o.counts[c])
         << ",\"span\":{\"outcome\":" << json_quote(span) << ",\"wrong\":" << wrong << ",\"register_ms\":" << span_ms
         << ",\"deregister_ms\":" << slowest(c, &RankRow::span_deregister_ms) << "},\"each\":{\"outcome\":" << json_quote(each)
         << ",\"register_ms\":" << each_ms << ",\"deregister_ms\":" << slowest(c, &RankRow::each_deregister_ms) << "}}";
    if (!o.json) {
      const bool span_ok = rows[0][c].span_outcome == "ok";
      std::printf("%6d  %-28.28s %7s %12.3f %12.3f %10s\n", o.counts[c], span.c_str(), span_ok ? (wrong ? "WRONG" : "ok") : "-", span_ms, each_ms,
                  span_ok && each_ms > 0 ? std::to_string(span_ms / each_ms).substr(0, 6).c_str() : "-");
      if (!span_ok && span.size() > 28) std::printf("        span: %s\n", span.c_str());
      if (each != "ok") std::printf("        per allocation: %s\n", each.c_str());
    }
  }
  json << "]}";
  if (o.json) std::puts(json.str().c_str());
  return broken > 0 ? 1 : 0;
}

}  // namespace
}  // namespace ncclpool

int main(int argc, char** argv) {
  try {
    return ncclpool::run(ncclpool::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ncclpool_window_span: %s\n", e.what());
    return 2;
  }
}

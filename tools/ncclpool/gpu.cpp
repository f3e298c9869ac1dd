// GPU side of the bench interfaces and of `ncclpool info`: CUDA driver allocation strategies,
// teams of NCCL communicators (one GPU per rank), and device/link descriptions. Built only when
// the CUDA and NCCL headers were found; the driver and NCCL are loaded at run time as the library
// does (the same libnccl.so.2 instance: dlopen returns the one already loaded).

#include "bench.hpp"
#include "gpu_device.hpp"

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>

#include <cstdint>
#include <set>

namespace ncclpool::tool {

bool gpu_benches_built() { return true; }

int gpu_count(std::string* why) {
  std::string w;
  if (!cuda_available(&w)) {
    if (why) *why = w;
    return 0;
  }
  return cuda_device_count();
}

namespace {

// cuMemAllocFromPoolAsync / cuMemFreeAsync from a memory pool of its own that keeps everything it
// got (release threshold = max), as frameworks configure it; release_cached() trims it to zero.
class DriverPoolStrategy final : public AllocStrategy {
 public:
  explicit DriverPoolStrategy(int device) : d_(tool::bench_driver()) {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    cuda::check(d_.cuMemPoolCreate(&pool_, &props), "cuMemPoolCreate");
    cuuint64_t keep_all = UINT64_MAX;
    cuda::check(d_.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), "cuMemPoolSetAttribute");
  }
  ~DriverPoolStrategy() override {
    d_.cuCtxSynchronize();
    d_.cuMemPoolDestroy(pool_);
  }
  [[nodiscard]] std::string name() const override { return "cuMemAllocAsync pool"; }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream) override {
    CUdeviceptr p = 0;
    cuda::check(d_.cuMemAllocFromPoolAsync(&p, bytes, pool_, reinterpret_cast<CUstream>(stream)), "cuMemAllocFromPoolAsync");
    return reinterpret_cast<void*>(p);
  }
  void deallocate(void* ptr, stream_t stream) override {
    cuda::check(d_.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(ptr), reinterpret_cast<CUstream>(stream)), "cuMemFreeAsync");
  }
  void release_cached() override {
    cuda::check(d_.cuCtxSynchronize(), "cuCtxSynchronize");
    cuda::check(d_.cuMemPoolTrimTo(pool_, 0), "cuMemPoolTrimTo");
  }

 private:
  const tool::BenchDriver& d_;
  CUmemoryPool pool_ = nullptr;
};

class CuMemAllocStrategy final : public AllocStrategy {
 public:
  CuMemAllocStrategy() : d_(tool::bench_driver()) {}
  [[nodiscard]] std::string name() const override { return "cuMemAlloc"; }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t) override {
    CUdeviceptr p = 0;
    cuda::check(d_.cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void deallocate(void* ptr, stream_t) override { cuda::check(d_.cuMemFree_v2(reinterpret_cast<CUdeviceptr>(ptr)), "cuMemFree"); }
  void release_cached() override {}

 private:
  const tool::BenchDriver& d_;
};

class NcclTeam final : public Team {
 public:
  NcclTeam(int ranks, int groups, const std::set<int>& zero_cta_groups) : lib_(tool::bench_nccl()), ranks_(ranks) {
    const int available = cuda_device_count();
    if (ranks < 1 || ranks > available)
      throw InvalidArgument(std::to_string(ranks) + " ranks asked for, " + std::to_string(available) + " GPU(s) here (one rank per GPU)");
    std::vector<int> devices(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) devices[static_cast<std::size_t>(r)] = r;
    for (int g = 0; g < groups; ++g) {
      std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks));
      if (zero_cta_groups.count(g) != 0) {
        init_with_zero_cta_policy(comms);
      } else if (ncclResult_t res = lib_.ncclCommInitAll(comms.data(), ranks, devices.data()); res != ncclSuccess) {
        throw BackendError("ncclCommInitAll(" + std::to_string(ranks) + " GPUs): " + nccl::error_text(res));
      }
      native_.push_back(comms);
      std::vector<std::shared_ptr<Communicator>> wrapped;
      NcclCommunicatorOptions options;  // this machine's profile counts for the symmetric CTAs, as in ncclpool_attach_nccl
      options.profile_lookup = [](const MachineKey& m) { return find_profile(m.gpu, m.nccl_version, m.ranks); };
      for (ncclComm_t c : comms) wrapped.push_back(make_nccl_communicator(c, options));
      comms_.push_back(std::move(wrapped));
    }
  }
  ~NcclTeam() override {
    comms_.clear();  // the wrappers first: they own streams on the communicators' devices
    for (auto& group : native_)
      for (ncclComm_t c : group) lib_.ncclCommDestroy(c);
  }
  [[nodiscard]] int ranks() const override { return ranks_; }
  [[nodiscard]] int groups() const override { return static_cast<int>(comms_.size()); }
  [[nodiscard]] std::string description() const override {
    const NcclInfo info = nccl_info();
    return std::to_string(ranks_) + " GPU(s), one thread each; NCCL " + std::to_string(info.version) + " (" + info.library_path + ")";
  }
  [[nodiscard]] bool windows(std::string* why) const override { return comms_.at(0).at(0)->supports_windows(why); }
  [[nodiscard]] std::shared_ptr<SegmentSource> source(int rank) override {
    VmmSourceOptions o;
    o.device = rank;
    return make_vmm_source(o);
  }
  [[nodiscard]] std::shared_ptr<Communicator> comm(int rank, int group) override {
    return comms_.at(static_cast<std::size_t>(group)).at(static_cast<std::size_t>(rank));
  }

 private:
  // One communicator per GPU made with ncclConfig_t.CTAPolicy = NCCL_CTA_POLICY_ZERO (NCCL's
  // copy-engine collectives on windows; the policy is fixed at creation), in one group from this
  // thread, each rank's primary context current for its init (NCCL takes the device from it).
  void init_with_zero_cta_policy(std::vector<ncclComm_t>& comms) {
    const int version = lib_.info.version;
    if (version < kNcclFirstWithCtaPolicy)
      throw Unsupported("NCCL " + std::to_string(version) + " has no CTA policy (copy-engine collectives need NCCL >= 2.28)");
    ncclUniqueId id;
    if (ncclResult_t res = lib_.ncclGetUniqueId(&id); res != ncclSuccess) throw BackendError("ncclGetUniqueId: " + nccl::error_text(res));
    const tool::BenchDriver& d = tool::bench_driver();
    std::vector<std::unique_ptr<cuda::PrimaryContext>> contexts;
    for (int r = 0; r < ranks_; ++r) contexts.push_back(std::make_unique<cuda::PrimaryContext>(r));
    if (ncclResult_t res = lib_.ncclGroupStart(); res != ncclSuccess) throw BackendError("ncclGroupStart: " + nccl::error_text(res));
    // Nothing may throw while the group is open: the group is ended first, then the error reported.
    ncclResult_t first_error = ncclSuccess;
    std::string context_error;
    for (int r = 0; r < ranks_ && context_error.empty() && first_error == ncclSuccess; ++r) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
      if (const CUresult res = d.cuCtxSetCurrent(contexts[static_cast<std::size_t>(r)]->get()); res != CUDA_SUCCESS) {
        context_error = "cuCtxSetCurrent(GPU " + std::to_string(r) + ") failed (CUresult " + std::to_string(static_cast<int>(res)) + ")";
        break;
      }
      first_error = lib_.ncclCommInitRankConfig(&comms[static_cast<std::size_t>(r)], ranks_, id, r, &config);
    }
    const ncclResult_t end = lib_.ncclGroupEnd();
    if (!context_error.empty() || first_error != ncclSuccess || end != ncclSuccess) {
      for (ncclComm_t c : comms)
        if (c != nullptr) lib_.ncclCommAbort(c);
      throw BackendError("ncclCommInitRankConfig(CTAPolicy ZERO, " + std::to_string(ranks_) + " GPUs): " +
                         (!context_error.empty() ? context_error : nccl::error_text(first_error != ncclSuccess ? first_error : end)));
    }
  }

  const tool::BenchNccl& lib_;
  int ranks_;
  std::vector<std::vector<ncclComm_t>> native_;
  std::vector<std::vector<std::shared_ptr<Communicator>>> comms_;
};

}  // namespace

AllocTarget make_gpu_alloc_target(int device) {
  auto streams = std::make_shared<DeviceStreams>(device, 2);
  char name[256] = {};
  tool::bench_driver().cuDeviceGetName(name, sizeof name, streams->context.device());
  AllocTarget t;
  t.description = "GPU " + std::to_string(device) + " (" + name + ")";
  t.streams[0] = reinterpret_cast<stream_t>(streams->streams[0]);
  t.streams[1] = reinterpret_cast<stream_t>(streams->streams[1]);
  VmmSourceOptions o;
  o.device = device;
  t.strategies.push_back(make_pool_strategy("ncclpool", make_vmm_source(o)));
  t.strategies.push_back(std::make_unique<DriverPoolStrategy>(device));
  t.strategies.push_back(std::make_unique<CuMemAllocStrategy>());
  t.has_driver_reference = true;
  t.keep_alive = streams;
  return t;
}

std::unique_ptr<Team> make_nccl_team(int ranks, int groups, const std::set<int>& zero_cta_groups) {
  return std::make_unique<NcclTeam>(ranks, groups, zero_cta_groups);
}

void describe_gpus(std::vector<GpuDescription>& gpus, std::vector<PeerLink>& links) {
  const tool::BenchDriver* d = nullptr;
  try {
    d = &tool::bench_driver();
  } catch (const Error&) {
    return;  // no driver: nothing to describe
  }
  int count = 0;
  if (d->cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
  std::vector<CUdevice> devs(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    d->cuDeviceGet(&dev, i);
    devs[static_cast<std::size_t>(i)] = dev;
    GpuDescription g;
    g.ordinal = i;
    char buf[256] = {};
    d->cuDeviceGetName(buf, sizeof buf, dev);
    g.name = buf;
    char bus[64] = {};
    if (d->cuDeviceGetPCIBusId(bus, sizeof bus, dev) == CUDA_SUCCESS) g.pci_bus_id = bus;
    std::size_t mem = 0;
    d->cuDeviceTotalMem_v2(&mem, dev);
    g.memory = mem;
    auto attr = [&](CUdevice_attribute a, int fallback) {
      int v = 0;
      return d->cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : fallback;
    };
    g.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
    g.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
    g.vmm = attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) != 0;
    g.fabric = attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0) != 0;
    g.host_numa_id = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1);
    gpus.push_back(g);
  }
  for (int i = 0; i < count; ++i)
    for (int j = 0; j < count; ++j) {
      if (i == j) continue;
      PeerLink l;
      l.from = i;
      l.to = j;
      const CUdevice a = devs[static_cast<std::size_t>(i)], b = devs[static_cast<std::size_t>(j)];
      int v = 0;
      l.access = d->cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, a, b) == CUDA_SUCCESS && v != 0;
      v = 0;
      l.native_atomics = d->cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, a, b) == CUDA_SUCCESS && v != 0;
      v = 0;
      if (d->cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, a, b) == CUDA_SUCCESS) l.performance_rank = v;
      links.push_back(l);
    }
}

}  // namespace ncclpool::tool

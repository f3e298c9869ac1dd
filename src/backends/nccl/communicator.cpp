// NcclCommunicator: a caller-owned ncclComm_t seen through the registry's Communicator interface.
//
// Agreement all-gathers are asynchronous: ncclAllGather reads the record from, and writes every
// rank's into, pinned host memory mapped into the device (144 bytes a rank over PCIe: no copies to
// enqueue), on a private stream of the communicator's device, then an event. With
// NCCLPOOL_AGREEMENT_BUFFERS=device the records are staged through device memory instead (two
// copies more per agreement), should a platform refuse host memory in collectives. NCCL orders them with the application's collectives on the
// same communicator by issue order, whatever the stream. Starting one costs a few microseconds and no
// host wait; wait() polls the event against a deadline counted from the start, checking the
// communicator's asynchronous error, so a rank that never arrives ends in AgreementError instead of
// a hang. After such a timeout the communicator is broken: a collective is stuck in it, only its
// owner's ncclCommAbort ends that, and this object starts nothing more and never waits for its
// stream again (the destructor included).
//
// Non-blocking communicators (ncclCommInitRankConfig with blocking = 0, TORCH_NCCL_USE_COMM_NONBLOCKING)
// answer ncclInProgress; every call here then polls ncclCommGetAsyncError until it settles.

#include "library.hpp"

#include "../cuda/driver.hpp"
#include "../cuda/fence.hpp"
#include "core/environment.hpp"

#include <ncclpool/errors.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace ncclpool {

namespace nccl {
namespace {

using Clock = std::chrono::steady_clock;

class NcclCommunicator;

// One agreement's buffers (this rank's record, then every rank's) in pinned host memory, reached by
// NCCL through its device address (or, staged, through a device copy), and the event that says the
// all-gather (and, staged, the copy back) is done. Reused once its event completed.
struct GatherSlot {
  CUdeviceptr device = 0;  // device memory (staged) or the device address of `host` (mapped)
  void* host = nullptr;
  CUevent done = nullptr;
  bool in_use = false;
};

class NcclPendingGather final : public PendingGather {
 public:
  NcclPendingGather(NcclCommunicator& comm, GatherSlot& slot, Clock::time_point deadline) : comm_(comm), slot_(slot), deadline_(deadline) {}
  ~NcclPendingGather() override;
  bool ready() override;
  std::vector<AgreementRecord> wait() override;

 private:
  NcclCommunicator& comm_;
  GatherSlot& slot_;
  Clock::time_point deadline_;
  bool read_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, NcclCommunicatorOptions options) : lib_(library()), comm_(comm), options_(options) {
    if (comm == nullptr) throw InvalidArgument("nccl communicator: ncclComm_t is null");
    options_.agreement_timeout = agreement_timeout_from_env(options_.agreement_timeout);
    staged_ = agreement_buffers_on_device_from_env();
    check(lib_.ncclCommCuDevice(comm_, &device_), "ncclCommCuDevice");
    check(lib_.ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(lib_.ncclCommCount(comm_, &size_), "ncclCommCount");
    symmetric_support_ = symmetric_support(lib_, comm_);
    context_ = std::make_unique<cuda::PrimaryContext>(device_);
    const cuda::Driver& d = cuda::driver();
    cuda::ScopedContext scope(context_->get());
    cuda::check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), describe() + ": cuStreamCreate");
    try {
      for (int i = 0; i < 2; ++i) add_slot();  // the steady state needs one or two
    } catch (...) {
      release_resources();
      throw;
    }
  }

  ~NcclCommunicator() override { release_resources(); }

  int device() const override { return device_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::uintptr_t native_handle() const override { return reinterpret_cast<std::uintptr_t>(comm_); }
  std::string describe() const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "nccl comm %p (rank %d of %d, device %d)", static_cast<void*>(comm_), rank_, size_, device_);
    return buf;
  }
  bool supports_windows(std::string* why) const override {
    if (!lib_.info.windows) {
      if (why) *why = "NCCL " + std::to_string(lib_.info.version) + " at " + lib_.info.library_path + " has no window registration (needs >= 2.27)";
      return false;
    }
    if (symmetric_support_ == 0) {
      if (why)
        *why = "NCCL " + std::to_string(lib_.info.version) + " gives this communicator no symmetric memory (ncclCommQueryProperties: its "
               "ranks are not all NVLink-connected GPUs of one node, or NCCL_WIN_ENABLE=0 or NCCL_CUMEM_ENABLE=0)";
      return false;
    }
    return true;
  }
  bool broken() const override { return broken_.load(); }

  void* register_local(void* base, std::size_t size) override {
    cuda::ScopedContext scope(context_->get());
    void* handle = nullptr;
    check(lib_.ncclCommRegister(comm_, base, size, &handle), "ncclCommRegister", true);
    return handle;
  }
  void deregister_local(void* handle) override {
    cuda::ScopedContext scope(context_->get());
    check(lib_.ncclCommDeregister(comm_, handle), "ncclCommDeregister", true);
  }
  void* register_window(void* base, std::size_t size) override {
    std::string why;
    if (!supports_windows(&why)) throw Unsupported(describe() + ": " + why);
    refuse_if_broken("window registration");
    cuda::ScopedContext scope(context_->get());
    const cuda::RelaxedCaptureMode relaxed;  // another thread's capture must not refuse a step every rank makes
    (void)decide_symmetric_ctas();
    const int flags = decide_symmetric_kernels().enabled ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT;
    ncclWindow_t window = nullptr;
    check(lib_.ncclCommWindowRegister(comm_, base, size, &window, flags), "ncclCommWindowRegister", true);
    if (window == nullptr)  // NCCL >= 2.29 answers success with no window where symmetric memory is not supported
      throw RegistrationError(describe() + ": ncclCommWindowRegister returned no window (symmetric memory unsupported on this communicator: "
                                           "are all its GPUs NVLink-connected in one node?)");
    if (symmetric_support_ < 0 && !is_device_memory(window)) {
      // NCCL 2.28 answers with its local registration handle instead (src/dev_runtime.cc), a host
      // object, where a window is device memory: give it back as NCCL says (the window deregistration
      // deregisters it locally) and refuse, as 2.29 does.
      (void)lib_.ncclCommWindowDeregister(comm_, window);
      throw RegistrationError(describe() + ": NCCL " + std::to_string(lib_.info.version) +
                              " registered the buffer locally instead of as a window (symmetric memory unsupported on this communicator: "
                              "are all its GPUs P2P-connected in one node, NCCL_WIN_ENABLE and NCCL_CUMEM_ENABLE on?)");
    }
    return window;
  }
  void deregister_window(void* window) override {
    cuda::ScopedContext scope(context_->get());
    const cuda::RelaxedCaptureMode relaxed;
    check(lib_.ncclCommWindowDeregister(comm_, static_cast<ncclWindow_t>(window)), "ncclCommWindowDeregister", true);
  }

  // A window is an object in device memory; NCCL 2.28's local registration handle is a host object.
  static bool is_device_memory(const void* p) {
    unsigned int type = 0;
    return cuda::driver().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_DEVICE;
  }

  int prepare_symmetric_kernels() override {
    const SymmetricKernels k = decide_symmetric_kernels();
    return decide_symmetric_ctas() + (!k.enabled ? kSymmetricKernelsOff : k.fence ? kSymmetricKernelsFenced : 0);
  }

  MachineKey machine() const override {
    const cuda::Driver& d = cuda::driver();
    CUdevice dev = 0;
    char name[256] = {};
    int major = 0, minor = 0;
    if (d.cuDeviceGet(&dev, device_) != CUDA_SUCCESS || d.cuDeviceGetName(name, sizeof name - 1, dev) != CUDA_SUCCESS) name[0] = '\0';
    if (d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
        d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
      major = minor = 0;  // unknown: the generic built-in routes
    return MachineKey{name, lib_.info.version, size_, major * 10 + minor};
  }

  // Before the process's first window (the registry asks at a symmetric attach; register_window too):
  // NCCL reads NCCL_SYM_CTAS at its first symmetric collective, which needs a window. Once per
  // process; every later call returns at the first check.
  int decide_symmetric_ctas() const {
    if (const SymmetricCtas decided = symmetric_ctas(); decided.decided) return decided.ctas;
    const cuda::Driver& d = cuda::driver();
    CUdevice dev = 0;
    int major = 0, minor = 0;
    char name[256] = {};
    if (d.cuDeviceGet(&dev, device_) != CUDA_SUCCESS || d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
        d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS ||
        d.cuDeviceGetName(name, sizeof name - 1, dev) != CUDA_SUCCESS)
      major = minor = 0;  // unknown GPU: no measured default, NCCL's choice
    if (!options_.profile_lookup) return apply_symmetric_ctas(major, minor).ctas;
    const ProfileLookup profile = lookup_profile(MachineKey{name, lib_.info.version, size_});
    return apply_symmetric_ctas(major, minor, &profile).ctas;
  }

  // The creator's profile lookup (see NcclCommunicatorOptions). Inside a collective attach: a
  // throwing lookup must not make this rank leave the others waiting, so it counts as no profile.
  ProfileLookup lookup_profile(const MachineKey& machine) const {
    try {
      return options_.profile_lookup(machine);
    } catch (const std::exception& e) {
      ProfileLookup failed;
      failed.why_not = std::string("the profile lookup failed: ") + e.what();
      return failed;
    }
  }

  // Once per process, before the first window: whether windows carry NCCL_WIN_COLL_SYMMETRIC and
  // whether collectives on them are fenced. With the fence, its kernel or scratch byte is set up in
  // this communicator's context at its first symmetric step, before any capture (a failure is left to
  // the first fence, which reports it: this runs inside a collective step, where one rank throwing
  // would strand the others).
  SymmetricKernels decide_symmetric_kernels() const {
    SymmetricKernels decided = symmetric_kernels();
    if (!decided.decided) {
      const cuda::Driver& d = cuda::driver();
      CUdevice dev = 0;
      int major = 0;
      if (d.cuDeviceGet(&dev, device_) != CUDA_SUCCESS || d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS)
        major = 9;  // unknown: assume the GPU that has the hazard, the safe side
      decided = apply_symmetric_kernels(lib_.info.version, major, d.version);
    }
    if (decided.fence && !fence_prepared_.exchange(true)) {
      try {
        cuda::prepare_fence(context_->get(), choose_symmetric_fence_kind(environment::symmetric_fence()));
      } catch (const Error&) {
      }
    }
    return decided;
  }

  std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) override {
    refuse_if_broken("agreement");
    const cuda::Driver& d = cuda::driver();
    cuda::ScopedContext scope(context_->get());
    const cuda::RelaxedCaptureMode relaxed;  // another thread's global-mode capture: see RelaxedCaptureMode
    std::lock_guard lock(mutex_);
    GatherSlot& slot = free_slot();
    const auto deadline = Clock::now() + options_.agreement_timeout;
    const std::size_t record = sizeof(AgreementRecord);
    std::memcpy(slot.host, &mine, record);
    const CUdeviceptr recv = slot.device + record;
    if (staged_) cuda::check(d.cuMemcpyHtoDAsync_v2(slot.device, slot.host, record, stream_), describe() + ": agreement upload");
    check(lib_.ncclAllGather(reinterpret_cast<const void*>(slot.device), reinterpret_cast<void*>(recv), record, ncclUint8, comm_,
                             reinterpret_cast<cudaStream_t>(stream_)),
          "ncclAllGather (agreement)");
    if (staged_)
      cuda::check(d.cuMemcpyDtoHAsync_v2(static_cast<char*>(slot.host) + record, recv, record * static_cast<std::size_t>(size_), stream_),
                  describe() + ": agreement download");
    cuda::check(d.cuEventRecord(slot.done, stream_), describe() + ": agreement event");
    slot.in_use = true;
    return std::make_unique<NcclPendingGather>(*this, slot, deadline);
  }

 private:
  friend class NcclPendingGather;

  void refuse_if_broken(const char* what) const {
    if (broken_.load())
      throw AgreementError(describe() + ": no " + what + ": an earlier agreement on this communicator timed out or failed (" + broken_reason_ +
                           "); abort the communicator and forget it in ncclpool");
  }

  void mark_broken(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (broken_.load()) return;
    broken_reason_ = why;  // written once, before broken_ is seen
    broken_.store(true);
  }

  // A slot whose last use is over (its event completed), else a new one. mutex_ held.
  GatherSlot& free_slot() {
    const cuda::Driver& d = cuda::driver();
    for (auto& slot : slots_)
      if (!slot->in_use && d.cuEventQuery(slot->done) == CUDA_SUCCESS) return *slot;
    add_slot();
    return *slots_.back();
  }

  void add_slot() {
    const cuda::Driver& d = cuda::driver();
    const std::size_t bytes = sizeof(AgreementRecord) * (1 + static_cast<std::size_t>(size_));
    auto slot = std::make_unique<GatherSlot>();
    auto fail = [&](CUresult r, const char* what) {
      if (slot->done) d.cuEventDestroy_v2(slot->done);
      if (slot->host) d.cuMemFreeHost(slot->host);
      if (slot->device && staged_) d.cuMemFree_v2(slot->device);
      cuda::check(r, describe() + ": " + what);
    };
    if (CUresult r = d.cuMemHostAlloc(&slot->host, bytes, staged_ ? 0 : CU_MEMHOSTALLOC_DEVICEMAP); r != CUDA_SUCCESS)
      fail(r, "cuMemHostAlloc of an agreement buffer");
    if (CUresult r = staged_ ? d.cuMemAlloc_v2(&slot->device, bytes) : d.cuMemHostGetDevicePointer_v2(&slot->device, slot->host, 0); r != CUDA_SUCCESS)
      fail(r, staged_ ? "cuMemAlloc of an agreement buffer" : "cuMemHostGetDevicePointer of an agreement buffer");
    if (CUresult r = d.cuEventCreate(&slot->done, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) fail(r, "cuEventCreate");
    slots_.push_back(std::move(slot));
  }

  // Never waits: with work still queued (a stuck all-gather, or an abandoned one not finished yet)
  // the buffers it uses are left to the process, since freeing them would wait for it.
  void release_resources() noexcept {
    const cuda::Driver* d = cuda::try_driver(nullptr);
    if (d == nullptr || !context_) return;
    try {
      cuda::ScopedContext scope(context_->get());  // throws once the driver is shutting down (exit)
      const bool idle = !broken_.load() && d->cuStreamQuery(stream_) == CUDA_SUCCESS;
      if (idle) {
        for (auto& slot : slots_) {
          d->cuEventDestroy_v2(slot->done);
          d->cuMemFreeHost(slot->host);
          if (staged_) d->cuMemFree_v2(slot->device);
        }
      } else if (!slots_.empty()) {
        std::fprintf(stderr, "ncclpool: %s released with an agreement still in flight%s: leaving its %zu small buffer(s) behind\n",
                     describe().c_str(), broken_.load() ? " (the communicator is broken)" : "", slots_.size());
      }
      slots_.clear();
      if (stream_ != nullptr) d->cuStreamDestroy_v2(stream_);  // returns at once; resources go when the work is done
      stream_ = nullptr;
    } catch (const Error&) {
      // Nothing to report to; the driver reclaims the stream and buffers with the context.
    }
  }

  // ncclInProgress (non-blocking communicators): poll the asynchronous error until it settles.
  ncclResult_t settle(ncclResult_t r) const {
    const auto deadline = Clock::now() + options_.agreement_timeout;
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      if (lib_.ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
    }
    return r;
  }

  void check(ncclResult_t r, const char* what, bool registration = false) const {
    r = settle(r);
    if (r == ncclSuccess) return;
    const std::string msg = describe() + ": " + what + " failed: " + (r == ncclInProgress ? "still in progress after the agreement timeout" : error_text(r));
    if (registration) throw RegistrationError(msg);
    throw BackendError(msg);
  }

  const Library& lib_;
  ncclComm_t comm_;
  NcclCommunicatorOptions options_;
  int device_ = 0, rank_ = 0, size_ = 0;
  std::unique_ptr<cuda::PrimaryContext> context_;
  CUstream stream_ = nullptr;
  bool staged_ = false;  // records through device memory (NCCLPOOL_AGREEMENT_BUFFERS=device)
  int symmetric_support_ = -1;  // nccl::symmetric_support: 1, 0, or -1 (the library cannot say)
  mutable std::atomic<bool> fence_prepared_{false};  // the fence set up in context_ (decide_symmetric_kernels)
  std::mutex mutex_;  // slots_ and broken_reason_
  std::vector<std::unique_ptr<GatherSlot>> slots_;
  std::atomic<bool> broken_{false};
  std::string broken_reason_;
};

NcclPendingGather::~NcclPendingGather() {
  std::lock_guard lock(comm_.mutex_);
  slot_.in_use = false;  // reused only once its event completed (free_slot)
}

// On every scope begin and commit: one event query. An asynchronous NCCL error keeps the event
// from completing, so it surfaces in wait() at the latest once the deadline passed.
bool NcclPendingGather::ready() {
  if (read_ || comm_.broken() || Clock::now() > deadline_) return true;
  cuda::ScopedContext scope(comm_.context_->get());
  const cuda::RelaxedCaptureMode relaxed;
  return cuda::driver().cuEventQuery(slot_.done) != CUDA_ERROR_NOT_READY;
}

std::vector<AgreementRecord> NcclPendingGather::wait() {
  if (read_) throw InvalidState(comm_.describe() + ": agreement result already read");
  read_ = true;
  const cuda::Driver& d = cuda::driver();
  cuda::ScopedContext scope(comm_.context_->get());
  const cuda::RelaxedCaptureMode relaxed;
  for (;;) {
    comm_.refuse_if_broken("agreement result");
    const CUresult q = d.cuEventQuery(slot_.done);
    if (q == CUDA_SUCCESS) break;
    if (q != CUDA_ERROR_NOT_READY) cuda::check(q, comm_.describe() + ": agreement all-gather");
    ncclResult_t async = ncclSuccess;
    comm_.lib_.ncclCommGetAsyncError(comm_.comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string why = "agreement all-gather failed: " + error_text(async);
      comm_.mark_broken(why);
      throw AgreementError(comm_.describe() + ": " + why);
    }
    if (Clock::now() > deadline_) {
      const std::string why = "agreement all-gather did not complete within " + std::to_string(comm_.options_.agreement_timeout.count()) + " ms";
      comm_.mark_broken(why);
      throw AgreementError(comm_.describe() + ": " + why +
                           ": some rank did not reach the same agreement point (attach/commit/scope end/detach/trim), or is gone; "
                           "the communicator now has a collective in flight and must be aborted (then forget it in ncclpool)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  std::vector<AgreementRecord> all(static_cast<std::size_t>(comm_.size_));
  std::memcpy(all.data(), static_cast<const char*>(slot_.host) + sizeof(AgreementRecord), sizeof(AgreementRecord) * all.size());
  return all;
}

}  // namespace
}  // namespace nccl

std::shared_ptr<Communicator> make_nccl_communicator(void* nccl_comm, NcclCommunicatorOptions options) {
  return std::make_shared<nccl::NcclCommunicator>(static_cast<ncclComm_t>(nccl_comm), options);
}

}  // namespace ncclpool

// NcclCommunicator: a caller-owned ncclComm_t seen through the registry's Communicator interface.
// Agreement all-gathers run on a private stream of the communicator's device and are waited for
// with a deadline, checking the communicator's asynchronous error, so a rank that never arrives
// ends in AgreementError instead of a hang.

#include "library.hpp"

#include "../cuda/driver.hpp"

#include <ncclpool/errors.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace ncclpool {

namespace nccl {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, NcclCommunicatorOptions options) : lib_(library()), comm_(comm), options_(options) {
    if (comm == nullptr) throw InvalidArgument("nccl communicator: ncclComm_t is null");
    check(lib_.ncclCommCuDevice(comm_, &device_), "ncclCommCuDevice");
    check(lib_.ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(lib_.ncclCommCount(comm_, &size_), "ncclCommCount");
    if (const char* env = std::getenv("NCCLPOOL_AGREEMENT_TIMEOUT_S"))
      options_.agreement_timeout = std::chrono::milliseconds(static_cast<long>(std::atof(env) * 1000));
    context_ = std::make_unique<cuda::PrimaryContext>(device_);
    const cuda::Driver& d = cuda::driver();
    cuda::ScopedContext scope(context_->get());
    cuda::check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), describe() + ": cuStreamCreate");
    const std::size_t bytes = sizeof(AgreementRecord) * (1 + static_cast<std::size_t>(size_));
    CUresult r = d.cuMemAlloc_v2(&scratch_, bytes);
    if (r != CUDA_SUCCESS) {
      d.cuStreamDestroy_v2(stream_);
      cuda::check(r, describe() + ": cuMemAlloc of the agreement buffer");
    }
  }

  ~NcclCommunicator() override {
    const cuda::Driver* d = cuda::try_driver(nullptr);
    if (d == nullptr) return;
    try {
      cuda::ScopedContext scope(context_->get());  // throws once the driver is shutting down (exit)
      d->cuStreamSynchronize(stream_);
      d->cuMemFree_v2(scratch_);
      d->cuStreamDestroy_v2(stream_);
    } catch (const Error&) {
      // Nothing to report to; the driver reclaims the stream and buffer with the context.
    }
  }

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
    if (lib_.info.windows) return true;
    if (why) *why = "NCCL " + std::to_string(lib_.info.version) + " at " + lib_.info.library_path + " has no window registration (needs >= 2.27)";
    return false;
  }

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
    cuda::ScopedContext scope(context_->get());
    ncclWindow_t window = nullptr;
    check(lib_.ncclCommWindowRegister(comm_, base, size, &window, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister", true);
    return window;
  }
  void deregister_window(void* window) override {
    cuda::ScopedContext scope(context_->get());
    check(lib_.ncclCommWindowDeregister(comm_, static_cast<ncclWindow_t>(window)), "ncclCommWindowDeregister", true);
  }

  std::vector<AgreementRecord> all_gather(const AgreementRecord& mine) override {
    const cuda::Driver& d = cuda::driver();
    cuda::ScopedContext scope(context_->get());
    const CUdeviceptr send = scratch_;
    const CUdeviceptr recv = scratch_ + sizeof(AgreementRecord);
    cuda::check(d.cuMemcpyHtoD_v2(send, &mine, sizeof mine), describe() + ": agreement upload");
    check(lib_.ncclAllGather(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), sizeof(AgreementRecord), ncclUint8, comm_,
                             reinterpret_cast<cudaStream_t>(stream_)),
          "ncclAllGather (agreement)");
    const auto deadline = std::chrono::steady_clock::now() + options_.agreement_timeout;
    for (;;) {
      const CUresult q = d.cuStreamQuery(stream_);
      if (q == CUDA_SUCCESS) break;
      if (q != CUDA_ERROR_NOT_READY) cuda::check(q, describe() + ": agreement all-gather");
      ncclResult_t async = ncclSuccess;
      lib_.ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        throw AgreementError(describe() + ": agreement all-gather failed: " + error_text(async));
      if (std::chrono::steady_clock::now() > deadline)
        throw AgreementError(describe() + ": agreement all-gather did not complete within " +
                             std::to_string(options_.agreement_timeout.count()) +
                             " ms: some rank did not reach the same commit/attach/detach/trim (did it skip one, or create other segments?); "
                             "the communicator now has a collective in flight and must be aborted");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::vector<AgreementRecord> all(static_cast<std::size_t>(size_));
    cuda::check(d.cuMemcpyDtoH_v2(all.data(), recv, sizeof(AgreementRecord) * all.size()), describe() + ": agreement download");
    return all;
  }

 private:
  void check(ncclResult_t r, const char* what, bool registration = false) const {
    if (r == ncclSuccess) return;
    const std::string msg = describe() + ": " + what + " failed: " + error_text(r);
    if (registration) throw RegistrationError(msg);
    throw BackendError(msg);
  }

  const Library& lib_;
  ncclComm_t comm_;
  NcclCommunicatorOptions options_;
  int device_ = 0, rank_ = 0, size_ = 0;
  std::unique_ptr<cuda::PrimaryContext> context_;
  CUstream stream_ = nullptr;
  CUdeviceptr scratch_ = 0;
};

}  // namespace
}  // namespace nccl

std::shared_ptr<Communicator> make_nccl_communicator(void* nccl_comm, NcclCommunicatorOptions options) {
  return std::make_shared<nccl::NcclCommunicator>(static_cast<ncclComm_t>(nccl_comm), options);
}

}  // namespace ncclpool

// The lockstep suite (tests/common/lockstep_cases.hpp) over real NCCL: in each case one rank alone
// fails (a late-found mismatch, a profile that applies on one rank only, one part's commit, a local
// registration, an out-of-memory, a vote_no, a scope left with an error, agreed settings or a device
// that differ), and every rank must end in an error at the same collective step, with no NCCL call
// left unmatched: the group's next all-reduce is right, and the teardown after it (a collective detach
// where windows exist) finishes. The loopback simulator runs the same cases in CI
// (tests/unit/test_lockstep_loopback.cpp, and the holes they guard in LockstepFuzz.*,
// tests/unit/test_lockstep_fuzz.cpp); here the agreements, windows and deregistrations are NCCL's own.
// The first eight cases ran on 2x H200, NCCL 2.28.9, 2026-11-27: all pass (docs/registry.md,
// "Failures, rank by rank"); the others came with the shared suite (issue 48 item 4).
//
// Ranks are threads of one process (NcclRanks), so a failure that only a process of its own could
// have (a profile file, a refused ncclCommRegister, another current device) comes from a communicator
// wrapper on that rank (RankFaults): it reports another GPU model or device, or refuses one local
// registration, and passes every other call to the NCCL communicator unchanged.

#include "common/lockstep_cases.hpp"
#include "gpu/nccl_ranks.hpp"

#include <ncclpool/errors.hpp>
#include <ncclpool/registry.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ncclpool {
namespace {

// A rank's own trouble on top of its NCCL communicator: another GPU model in machine() (so that a
// profile applies on the other ranks only), another device in device(), or the next `refuse_local`
// local registrations refused as NCCL would refuse them (RegistrationError, nothing registered).
// Everything else goes to NCCL.
class RankFaults final : public Communicator {
 public:
  explicit RankFaults(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  std::optional<std::string> gpu;  // set: machine() reports this GPU model
  std::optional<int> device_override;  // set: device() reports this device
  std::atomic<int> refuse_local{0};

  [[nodiscard]] int device() const override { return device_override ? *device_override : inner_->device(); }
  [[nodiscard]] int rank() const override { return inner_->rank(); }
  [[nodiscard]] int size() const override { return inner_->size(); }
  [[nodiscard]] std::uintptr_t native_handle() const override { return inner_->native_handle(); }
  [[nodiscard]] std::string describe() const override { return inner_->describe(); }
  [[nodiscard]] bool supports_windows(std::string* why) const override { return inner_->supports_windows(why); }
  [[nodiscard]] void* register_local(void* base, std::size_t size) override {
    if (refuse_local.load() > 0) {
      refuse_local.fetch_sub(1);
      throw RegistrationError("ncclCommRegister refused on " + describe() + " (injected by the test)");
    }
    return inner_->register_local(base, size);
  }
  void deregister_local(void* handle) override { inner_->deregister_local(handle); }
  [[nodiscard]] void* register_window(void* base, std::size_t size) override { return inner_->register_window(base, size); }
  void deregister_window(void* window) override { inner_->deregister_window(window); }
  [[nodiscard]] std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) override { return inner_->start_all_gather(mine); }
  [[nodiscard]] bool broken() const override { return inner_->broken(); }
  [[nodiscard]] int prepare_symmetric_kernels() override { return inner_->prepare_symmetric_kernels(); }
  [[nodiscard]] MachineKey machine() const override {
    MachineKey key = inner_->machine();
    if (gpu) key.gpu = *gpu;
    return key;
  }
  [[nodiscard]] std::uint64_t node() const override { return inner_->node(); }

 private:
  std::shared_ptr<Communicator> inner_;
};

// The suite's ranks on NCCL: every GPU (NCCLPOOL_TEST_GPUS) a rank on the world communicator of
// NcclRanks. A rank's communicator wrapper, its streams and its faults live for one body: they are
// made on the rank's thread (its GPU's context current) and released there when the body returns.
class NcclLockstepRanks : public NcclRanks {
 public:
  static std::string name() { return "gpus"; }

 protected:
  void SetUp() override {
    NcclRanks::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ranks_.resize(static_cast<std::size_t>(n_));
  }

  int ranks() const { return n_; }
  std::vector<std::string> on_ranks(const std::function<void(int)>& body) {
    return NcclRanks::on_ranks([&](int rank) {
      struct Release {
        NcclLockstepRanks* self;
        int rank;
        ~Release() { self->release(rank); }
      } release{this, rank};
      body(rank);
    });
  }
  // This rank's NCCL communicator on the world group; wrapped only where a fault was set.
  std::shared_ptr<Communicator> world(int rank) {
    PerRank& mine = mine_(rank);
    if (!mine.world) {
      auto nccl = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
      if (mine.gpu || mine.refuse_local > 0) {
        auto faults = std::make_shared<RankFaults>(nccl);
        faults->gpu = mine.gpu;
        faults->refuse_local = mine.refuse_local;
        mine.world = faults;
      } else {
        mine.world = nccl;
      }
    }
    return mine.world;
  }
  // The same NCCL communicator, saying it is on `device` (as a rank whose current device differs).
  std::shared_ptr<Communicator> world_on_device(int rank, int device) {
    auto faults = std::make_shared<RankFaults>(world(rank));
    faults->device_override = device;
    return faults;
  }
  std::shared_ptr<SegmentSource> window_source(int rank) { return make_nccl_source(rank); }
  stream_t stream(int rank, int i) {
    CUstream& s = mine_(rank).streams.at(static_cast<std::size_t>(i));
    if (s == nullptr) cuda::check(tool::bench_driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "stream");
    return reinterpret_cast<stream_t>(s);
  }
  void sync_streams(int rank) {
    for (CUstream s : mine_(rank).streams)
      if (s != nullptr) cuda::check(tool::bench_driver().cuStreamSynchronize(s), "sync");
  }
  // The group's next application collective after the failure: an all-reduce that must pair with
  // every other rank's (a stray agreement all-gather left behind would take its place).
  void next_collective(int rank, std::uint64_t /*tag*/) {
    const float sum = all_reduce_one(comms_.world[static_cast<std::size_t>(rank)], static_cast<float>(rank + 1));
    if (sum != static_cast<float>(n_ * (n_ + 1) / 2))
      throw std::runtime_error("the all-reduce after the failure gave " + std::to_string(sum) + ", want " + std::to_string(n_ * (n_ + 1) / 2));
  }
  MachineKey machine_key() {
    cuda::PrimaryContext ctx(0);
    cuda::check(tool::bench_driver().cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
    return make_nccl_communicator(comms_.world[0])->machine();
  }
  void report_another_gpu(int rank) { mine_(rank).gpu = "another GPU model"; }
  void refuse_next_local_registration(int rank) { mine_(rank).refuse_local = 1; }
  // NCCL shows no call log: that every rank's calls paired is the all-reduce in each body (its sum),
  // and the teardown that finished.
  void expect_in_step() const {}
  void expect_no_collective_calls() const {}

 private:
  struct PerRank {
    std::shared_ptr<Communicator> world;
    std::array<CUstream, 3> streams{};
    std::optional<std::string> gpu;
    int refuse_local = 0;
  };
  PerRank& mine_(int rank) { return ranks_.at(static_cast<std::size_t>(rank)); }
  // On the rank's thread once its body returned (its pools and registries are gone): the
  // communicator wrapper, the streams (after their work) and the faults of this case.
  void release(int rank) {
    PerRank& mine = mine_(rank);
    mine.world.reset();
    for (CUstream& s : mine.streams)
      if (s != nullptr) {
        tool::bench_driver().cuStreamSynchronize(s);
        tool::bench_driver().cuStreamDestroy_v2(s);
        s = nullptr;
      }
    mine.gpu.reset();
    mine.refuse_local = 0;
  }

  std::vector<PerRank> ranks_;
};

struct Name {
  template <class Ranks>
  static std::string GetName(int) {
    return Ranks::name();
  }
};

}  // namespace

namespace lockstep {
INSTANTIATE_TYPED_TEST_SUITE_P(Nccl, Lockstep, ::testing::Types<NcclLockstepRanks>, Name);
}  // namespace lockstep

}  // namespace ncclpool

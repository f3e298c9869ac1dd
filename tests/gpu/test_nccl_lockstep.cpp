// The lockstep failure table (docs/registry.md, "Failures, rank by rank") over real NCCL: in each case
// one rank alone fails (a late-found mismatch, a profile that applies on one rank only, one part's
// commit, a local registration, an out-of-memory), and every rank must end in an error at the same
// collective step, with no NCCL call left unmatched: the group's next all-reduce is right, and the
// teardown after it (a collective detach where windows exist) finishes. The simulator runs these
// cases step for step in tests/unit/test_lockstep_recovery.cpp (and the holes they guard in Lockstep.*,
// tests/unit/test_lockstep_fuzz.cpp); here the agreements, windows and deregistrations are NCCL's own.
// Ran on 2x H200, NCCL 2.28.9, 2026-11-27: all pass (docs/registry.md, "Failures, rank by rank").
//
// Ranks are threads of one process (NcclRanks), so a failure that only a process of its own could
// have (a profile file, a refused ncclCommRegister) comes from a communicator wrapper on that rank
// (RankFaults): it reports another GPU model, or refuses one local registration, and passes every
// other call to the NCCL communicator unchanged.

#include "common/lockstep_support.hpp"
#include "common/scoped_profile.hpp"
#include "gpu/nccl_ranks.hpp"

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/limit_source.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registry.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;

// A rank's own trouble on top of its NCCL communicator: another GPU model in machine() (so that a
// profile applies on the other ranks only), or the next `refuse_local` local registrations refused as
// NCCL would refuse them (RegistrationError, nothing registered). Everything else goes to NCCL.
class RankFaults final : public Communicator {
 public:
  explicit RankFaults(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  std::optional<std::string> gpu;  // set: machine() reports this GPU model
  std::atomic<int> refuse_local{0};

  [[nodiscard]] int device() const override { return inner_->device(); }
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

class NcclLockstep : public NcclRanks {
 protected:
  // The group's next application collective after the failure: an all-reduce that must pair with
  // every other rank's (a stray agreement all-gather left behind would take its place).
  void expect_next_all_reduce_right(int rank) {
    const float sum = all_reduce_one(comms_.world[static_cast<std::size_t>(rank)], static_cast<float>(rank + 1));
    if (sum != static_cast<float>(n_ * (n_ + 1) / 2))
      throw std::runtime_error("the all-reduce after the failure gave " + std::to_string(sum) + ", want " + std::to_string(n_ * (n_ + 1) / 2));
  }
  std::vector<std::string> slots() const { return std::vector<std::string>(static_cast<std::size_t>(n_)); }
};

// The routes-over-two-parts pool of the cases, every part over ncclMemAlloc on this rank's GPU.
std::unique_ptr<AutoPool> local_then_symmetric_pool(int device) {
  return ncclpool::local_then_symmetric_pool([device] { return make_nccl_source(device); });
}

// Item 1 (issue 27), then a commit: commit #1 has a window pending on rank 0 only, so rank 0 fails at
// once and the others (nothing pending) only enqueue and hear of it later. Then every rank has the same
// segment pending: commit #2's records are equal, but the late-found mismatch is those ranks' "no",
// so every rank fails #2 and no window exists anywhere. Commit #3 agrees and registers everywhere.
TEST_F(NcclLockstep, ALateFoundErrorIsEveryRanksErrorAtTheNextCommit) {
  auto first = slots(), second = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(make_nccl_source(rank), "late-commit", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = rank == 0 ? pool->allocate(MiB) : nullptr;  // rank 0 grows, the others not yet
    first[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (rank != 0) p = pool->allocate(MiB);  // now every rank has segment 0 pending
    second[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (registry.stats(*world).registered_segments != 0) throw std::runtime_error("a window was registered at a commit that failed");
    expect_next_all_reduce_right(rank);
    registry.commit();  // nothing late any more, equal records: registers segment 0 everywhere
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("commit #3 registered no window");
    pool->deallocate(p);
    registry.detach(*world);
    registry.check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 1; r < n_; ++r) EXPECT_EQ(first[static_cast<std::size_t>(r)], "") << "a rank with nothing pending must not wait" << listing(first);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(second[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail commit #2" << listing(second);
}

// Item 1, then a detach: the late-found mismatch is the "no" vote in the detach agreement. Every rank
// fails the detach and keeps the communicator and its windows; the next detach succeeds everywhere.
TEST_F(NcclLockstep, ALateFoundErrorIsEveryRanksErrorAtDetachAndTheCommunicatorStays) {
  auto late = slots(), detach = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(make_nccl_source(rank), "late-detach", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    registry.attach(world, RegistrationKind::symmetric);
    void* shared = pool->allocate(MiB);
    registry.commit();  // segment 0: a window on every rank
    void* extra = rank == 0 ? pool->allocate(48 * MiB) : nullptr;  // rank 0 grows segment 1 alone
    late[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (extra) pool->deallocate(extra);
    detach[static_cast<std::size_t>(rank)] = caught([&] { registry.detach(*world); });
    if (registry.attached() != 1) throw std::runtime_error("a failed detach dropped the communicator on this rank");
    if (registry.handle_of(shared, *world) == nullptr) throw std::runtime_error("a failed detach released the window on this rank");
    expect_next_all_reduce_right(rank);
    pool->deallocate(shared);
    registry.detach(*world);  // the late error was reported: every rank votes yes now
    if (registry.attached() != 0) throw std::runtime_error("the second detach left the communicator attached");
    registry.check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(late[0], "AgreementError")) << listing(late);
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(detach[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail the detach" << listing(detach);
}

// Item 2: a profile for this machine routes every size to none/local; on the last rank it does not
// apply (its communicator reports another GPU model, as a node with other GPUs would), so that rank
// takes the built-in routes. The routes agreement runs at the attach on every rank and fails on every
// rank; nothing is attached anywhere.
TEST_F(NcclLockstep, AnAutoPoolWhoseProfileAppliesOnOneRankOnlyFailsTheAttachEverywhere) {
  MachineKey key;
  {
    cuda::PrimaryContext ctx(0);
    cuda::check(tool::bench_driver().cuCtxSetCurrent(ctx.get()), "cuCtxSetCurrent");
    key = make_nccl_communicator(comms_.world[0])->machine();
  }
  const testing_support::ScopedProfile file(
      testing_support::profile_for(key.gpu, key.nccl_version, n_, {{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}}, "gpu lockstep test"),
      "gpu-lockstep");
  auto attach = slots();
  const auto errors = on_ranks([&](int rank) {
    AutoPoolConfig config;
    config.make_source = [rank](RegistrationKind) { return make_nccl_source(rank); };
    auto pool = make_auto_pool(config);
    auto world = std::make_shared<RankFaults>(make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]));
    if (rank == n_ - 1) world->gpu = "another GPU model";
    attach[static_cast<std::size_t>(rank)] = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("attached although the ranks route differently");
    expect_next_all_reduce_right(rank);
    std::printf("rank %d routes: %s (%s)\n", rank, pool->routes().describe().c_str(), pool->routes_source().c_str());
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(attach[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must fail the attach" << listing(attach);
}

// Item 4: an auto pool attached as symmetric over two parts (both make windows). Rank 0 grows the
// local part alone: that part's agreement fails on rank 0 at once, and rank 0 still joins the
// symmetric part's agreement, so the next all-reduce pairs. The other ranks hear of it at their next
// commit (their "no" there, though every rank then has the same segment pending). The commit after
// that agrees and registers on every rank.
TEST_F(NcclLockstep, AnAutoPoolsPartFailingItsCommitOnOneRankKeepsEveryRankInStep) {
  auto first = slots(), second = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = local_then_symmetric_pool(rank);
    void* fixed = pool->allocate(2 * MiB);  // the symmetric part's segment, before the attach
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    pool->attach(world, RegistrationKind::symmetric);
    void* small = rank == 0 ? pool->allocate(64 * KiB) : nullptr;  // the local part grows on rank 0 only
    first[static_cast<std::size_t>(rank)] = caught([&] { pool->commit(); });
    expect_next_all_reduce_right(rank);
    if (rank != 0) small = pool->allocate(64 * KiB);
    second[static_cast<std::size_t>(rank)] = caught([&] { pool->commit(); });
    pool->commit();  // equal records, nothing late: the local part's window everywhere
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(fixed, *world) == nullptr)
      throw std::runtime_error("after the agreeing commit a buffer is in no window");
    pool->deallocate(small);
    pool->deallocate(fixed);
    pool->detach(*world);
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(first[0], "AgreementError")) << listing(first);
  for (int r = 0; r < n_; ++r)
    EXPECT_TRUE(has(first[static_cast<std::size_t>(r)] + second[static_cast<std::size_t>(r)], "AgreementError"))
        << "every rank must end in an error" << listing(first) << listing(second);
}

// Item 5: an auto pool with a segment in its local and in its symmetric part before the attach;
// rank 0's local registration is refused. That refusal is rank 0's "no" at the routes agreement:
// every rank fails the attach, the local parts are undone, nothing is attached or registered
// anywhere. The next attach (nothing refused) succeeds everywhere.
TEST_F(NcclLockstep, ALocalRegistrationRefusedOnOneRankFailsTheAutoAttachEverywhere) {
  auto attach = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = local_then_symmetric_pool(rank);
    void* small = pool->allocate(64 * KiB);
    void* large = pool->allocate(2 * MiB);
    auto world = std::make_shared<RankFaults>(make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]));
    if (rank == 0) world->refuse_local = 1;
    attach[static_cast<std::size_t>(rank)] = caught([&] { pool->attach(world, std::nullopt); });
    if (pool->attached(*world)) throw std::runtime_error("a failed attach left the communicator attached");
    if (pool->handle_of(small, *world) != nullptr || pool->handle_of(large, *world) != nullptr)
      throw std::runtime_error("a failed attach left a registration behind");
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
    pool->attach(world, std::nullopt);  // nothing refused now
    if (pool->handle_of(small, *world) == nullptr || pool->handle_of(large, *world) == nullptr)
      throw std::runtime_error("the second attach registered nothing");
    pool->deallocate(small);
    pool->deallocate(large);
    pool->detach(*world);
    pool->check_invariants();
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(attach[0], "RegistrationError")) << listing(attach);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(attach[static_cast<std::size_t>(r)], "AgreementError")) << listing(attach);
}

// Item 3, check mode `layout`: a deterministic pool whose growth is refused on rank 0 (a limit of one
// chunk there: the device is full, as far as the pool can tell) must not reclaim another stream's block
// to place the buffer, since that would move it on rank 0 only: the allocation fails with OutOfMemory.
// Rank 1 grows instead, so the next commit's pending segments differ: every rank ends in an
// AgreementError (rank 0 at the commit or when it polls), and the buffer allocated after it sits at
// the same place on every rank.
TEST_F(NcclLockstep, AnOutOfMemoryOnOneRankIsEveryRanksErrorInLayoutCheckMode) {
  auto oom = slots(), agreement = slots(), places = slots();
  const auto errors = on_ranks([&](int rank) {
    const tool::BenchDriver& d = tool::bench_driver();
    std::shared_ptr<SegmentSource> source = make_nccl_source(rank);
    if (rank == 0) source = std::make_shared<LimitSource>(source, std::make_shared<SharedLimit>(32 * MiB, "rank 0's pool"));
    auto pool = deterministic_pool(source, "oom-layout", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::layout});
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    registry.attach(world, RegistrationKind::symmetric);
    CUstream one = nullptr, two = nullptr;
    cuda::check(d.cuStreamCreate(&one, CU_STREAM_NON_BLOCKING), "stream");
    cuda::check(d.cuStreamCreate(&two, CU_STREAM_NON_BLOCKING), "stream");
    const auto s1 = reinterpret_cast<stream_t>(one), s2 = reinterpret_cast<stream_t>(two);
    void* a = pool->allocate(32 * MiB, s1);  // fills segment 0
    registry.commit();
    pool->deallocate(a, s1);  // a's block stays with stream one
    void* e = nullptr;
    oom[static_cast<std::size_t>(rank)] = caught([&] { e = pool->allocate(32 * MiB, s2); });
    void* f = pool->allocate(32 * MiB, s1);  // a's block on every rank
    std::string error = caught([&] { registry.commit(); });
    // A rank that did not wait hears of the mismatch when it polls after the agreement completed.
    for (int tries = 0; error.empty() && tries < 100; ++tries) {
      error = caught([&] { registry.poll(); });
      if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    agreement[static_cast<std::size_t>(rank)] = error;
    const auto where = pool->locate(f);
    places[static_cast<std::size_t>(rank)] = where ? "segment " + std::to_string(where->segment_sequence) + " offset " + std::to_string(where->offset) : "nowhere";
    expect_next_all_reduce_right(rank);
    if (e) pool->deallocate(e, s2);
    pool->deallocate(f, s1);
    cuda::check(d.cuStreamSynchronize(one), "sync");
    cuda::check(d.cuStreamSynchronize(two), "sync");
    registry.detach(*world);  // segment 0's window on every rank: the detach agrees
    registry.check_invariants();
    d.cuStreamDestroy_v2(one);
    d.cuStreamDestroy_v2(two);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(oom[0], "OutOfMemory")) << listing(oom);
  for (int r = 1; r < n_; ++r) EXPECT_EQ(oom[static_cast<std::size_t>(r)], "") << listing(oom);
  for (int r = 0; r < n_; ++r) {
    EXPECT_TRUE(has(agreement[static_cast<std::size_t>(r)], "AgreementError")) << "every rank must end in an error" << listing(agreement);
    EXPECT_EQ(places[static_cast<std::size_t>(r)], places[0]) << "the buffer after the failure moved on one rank" << listing(places);
  }
}

// Issue 44 (twins of tests/unit/test_lockstep_votes.cpp): a failure found on one rank alone, recorded
// with vote_no, is that rank's "no" at the next commit; every rank fails there, nothing is registered,
// and the next commit agrees.
TEST_F(NcclLockstep, VoteNoBeforeACommitFailsItOnEveryRankAndTheNextAgrees) {
  auto step = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(make_nccl_source(rank), "votes", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off});
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    registry.attach(world, RegistrationKind::symmetric);
    void* p = pool->allocate(MiB);
    if (rank == 0) registry.vote_no("out of memory in the Python layer");
    step[static_cast<std::size_t>(rank)] = caught([&] { registry.commit(); });
    if (registry.handle_of(p, *world) != nullptr) throw std::runtime_error("a window was registered where a rank said no");
    expect_next_all_reduce_right(rank);
    registry.commit();
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the next commit registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  EXPECT_TRUE(has(step[0], "out of memory in the Python layer")) << listing(step);
  for (int r = 1; r < n_; ++r) EXPECT_TRUE(has(step[static_cast<std::size_t>(r)], "voted no")) << listing(step);
}

// Agreed settings: a local attach is collective; one rank attaching symmetric while the others attach
// locally fails on every rank (NCCLPOOL_SGLANG_KIND on one rank only), and the next all-reduce is right.
TEST_F(NcclLockstep, AgreedSettingsMakeALocalAttachCollectiveAndCompareTheKind) {
  auto step = slots();
  const auto errors = on_ranks([&](int rank) {
    auto pool = deterministic_pool(make_nccl_source(rank), "settings", 32 * MiB);
    Registry registry(pool, RegistryOptions{CheckLevel::off, 16, "kind=local"});
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    void* p = pool->allocate(MiB);
    step[static_cast<std::size_t>(rank)] =
        caught([&] { registry.attach(world, rank == 0 ? RegistrationKind::symmetric : RegistrationKind::local); });
    if (registry.attached() != 0) throw std::runtime_error("attached although the kinds differ");
    expect_next_all_reduce_right(rank);
    registry.attach(world, RegistrationKind::local);
    if (registry.handle_of(p, *world) == nullptr) throw std::runtime_error("the agreed local attach registered nothing");
    pool->deallocate(p);
    registry.detach(*world);
    expect_next_all_reduce_right(rank);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  for (int r = 0; r < n_; ++r) EXPECT_TRUE(has(step[static_cast<std::size_t>(r)], "attach with different kinds")) << listing(step);
}

}  // namespace
}  // namespace ncclpool

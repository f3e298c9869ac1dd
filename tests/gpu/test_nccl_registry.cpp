// GPU suite for registration with real NCCL: one thread per GPU, communicators made by the test
// (world + two split sub-groups shaped like FSDP+EP: dp = {0,1},{2,3}, ep = {0,2},{1,3}), one pool
// per rank shared by all three. Collectives run on pool memory and must give the right results.
// NCCLPOOL_TEST_GPUS picks how many GPUs (default: up to 4).

#include "common/lockstep_support.hpp"
#include "gpu/nccl_ranks.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <thread>

namespace ncclpool {
namespace {

// The fixture (communicators world, dp, ep; one thread per GPU) is shared with the lockstep suite.
class NcclRegistry : public NcclRanks {};

TEST_F(NcclRegistry, OnePoolServesWorldAndSubgroupsWithCorrectResults) {
  for (const std::string kind : {"nccl", "vmm"}) {
    const auto errors = on_ranks([&](int rank) {
      const auto& lib = tool::bench_nccl();
      PoolConfig config;
      config.name = "shared-" + kind;
      config.deterministic = true;
      config.growth_chunk = 64 * MiB;
      auto pool = std::make_shared<Pool>(source(kind, rank), config);
      Registry registry(pool);
      const std::size_t count = 4 * MiB / sizeof(float);  // 4 MiB per rank
      void* early = pool->allocate(count * sizeof(float));  // exists before the groups attach
      auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
      auto dp = make_nccl_communicator(comms_.dp[static_cast<std::size_t>(rank)]);
      auto ep = make_nccl_communicator(comms_.ep[static_cast<std::size_t>(rank)]);
      registry.attach(world, RegistrationKind::symmetric);
      registry.attach(dp, RegistrationKind::local);
      registry.attach(ep, RegistrationKind::symmetric);
      const int n = world->size(), ndp = dp->size(), nep = ep->size();
      void* ag_out = pool->allocate(count * sizeof(float) * static_cast<std::size_t>(n));
      void* rs_in = pool->allocate(count * sizeof(float) * static_cast<std::size_t>(ndp));
      void* rs_out = pool->allocate(count * sizeof(float));
      void* ar = pool->allocate(count * sizeof(float));
      registry.commit();
      for (void* p : {early, ag_out, rs_in, rs_out, ar}) {
        if (registry.handle_of(p, *world) == nullptr || registry.handle_of(p, *dp) == nullptr || registry.handle_of(p, *ep) == nullptr)
          throw std::runtime_error("a pool buffer is not registered with every group");
      }
      registry.check_invariants();

      upload(early, std::vector<float>(count, static_cast<float>(rank + 1)));
      std::vector<float> rs(count * static_cast<std::size_t>(ndp));
      for (std::size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i / count + 1) * static_cast<float>(rank + 1);
      upload(rs_in, rs);
      upload(ar, std::vector<float>(count, static_cast<float>(rank)));
      CUstream stream = nullptr;
      cuda::check(tool::bench_driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
      auto s = reinterpret_cast<cudaStream_t>(stream);
      for (int iter = 0; iter < 3; ++iter) {
        if (lib.ncclAllGather(early, ag_out, count, ncclFloat, comms_.world[static_cast<std::size_t>(rank)], s) != ncclSuccess ||
            lib.ncclReduceScatter(rs_in, rs_out, count, ncclFloat, ncclSum, comms_.dp[static_cast<std::size_t>(rank)], s) != ncclSuccess)
          throw std::runtime_error("collective launch failed");
      }
      if (lib.ncclAllReduce(ar, ar, count, ncclFloat, ncclSum, comms_.ep[static_cast<std::size_t>(rank)], s) != ncclSuccess)
        throw std::runtime_error("all-reduce launch failed");
      cuda::check(tool::bench_driver().cuStreamSynchronize(stream), "sync");
      tool::bench_driver().cuStreamDestroy_v2(stream);

      const auto ag = download(ag_out, count * static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r)
        if (ag[static_cast<std::size_t>(r) * count] != static_cast<float>(r + 1) || ag[static_cast<std::size_t>(r + 1) * count - 1] != static_cast<float>(r + 1))
          throw std::runtime_error("all-gather on pool memory gave a wrong result");
      // reduce-scatter over dp: chunk k of every member is (k+1)*(member global rank+1).
      const int dp_rank = dp->rank();
      float expect_rs = 0;
      for (int m = 0; m < ndp; ++m) expect_rs += static_cast<float>(dp_rank + 1) * static_cast<float>((rank / 2) * 2 + m + 1);
      const auto rsv = download(rs_out, count);
      if (rsv.front() != expect_rs || rsv.back() != expect_rs)
        throw std::runtime_error("reduce-scatter: got " + std::to_string(rsv.front()) + ", want " + std::to_string(expect_rs));
      float expect_ar = 0;
      for (int m = 0; m < nep; ++m) expect_ar += static_cast<float>(rank % 2 + 2 * m);
      const auto arv = download(ar, count);
      if (arv.front() != expect_ar || arv.back() != expect_ar)
        throw std::runtime_error("all-reduce: got " + std::to_string(arv.front()) + ", want " + std::to_string(expect_ar));

      const auto ws = registry.stats(*world);
      std::printf("rank %d %s: world windows %zu (%.1f ms), dp local %zu, ep windows %zu, pool segments %zu\n", rank, kind.c_str(),
                  ws.registered_segments, ws.registration_seconds * 1e3, registry.stats(*dp).registered_segments,
                  registry.stats(*ep).registered_segments, pool->stats().segment_count);
      for (void* p : {early, ag_out, rs_in, rs_out, ar}) pool->deallocate(p);
      // Every segment is empty now: a collective trim deregisters the windows and frees them all.
      const std::size_t reserved = pool->stats().reserved_bytes;
      if (registry.trim() != reserved) throw std::runtime_error("collective trim did not release every empty segment");
      // Teardown order differs by rank parity: the registry must not care.
      if (rank % 2 == 0) {
        registry.detach(*world);
        registry.detach(*dp);
        registry.detach(*ep);
      } else {
        registry.detach(*ep);
        registry.detach(*dp);
        registry.detach(*world);
      }
      registry.check_invariants();
    });
    for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << kind << " rank " << r;
  }
}

TEST_F(NcclRegistry, ExtraSegmentOnOneRankIsAnErrorOnEveryRank) {
  const auto errors = on_ranks([&](int rank) {
    PoolConfig config;
    config.deterministic = true;
    config.growth_chunk = 32 * MiB;
    auto pool = std::make_shared<Pool>(make_nccl_source(rank), config);
    Registry registry(pool);
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    registry.attach(world, RegistrationKind::symmetric);
    std::vector<void*> blocks{pool->allocate(16 * MiB)};
    if (rank == n_ - 1) blocks.push_back(pool->allocate(48 * MiB));  // diverges
    std::string error;
    try {
      registry.commit();
    } catch (const AgreementError& e) {
      error = e.what();
    }
    if (error.find("ranks disagree at commit") == std::string::npos ||
        error.find("rank " + std::to_string(n_ - 1) + ": pool 'ncclpool' (attachment #0), commit #1: 2 segment(s)") == std::string::npos)
      throw std::runtime_error("expected an agreement error naming the last rank, got: '" + error + "'");
    if (registry.stats(*world).registered_segments != 0) throw std::runtime_error("something was registered");
    for (void* p : blocks) pool->deallocate(p);
    registry.detach(*world);  // nothing registered: only the agreement runs
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST_F(NcclRegistry, ForgetAfterTheCommunicatorIsDestroyed) {
  const auto errors = on_ranks([&](int rank) {
    const auto& lib = tool::bench_nccl();
    PoolConfig config;
    config.deterministic = true;
    auto pool = std::make_shared<Pool>(make_nccl_source(rank), config);
    Registry registry(pool);
    ncclComm_t& ep = comms_.ep[static_cast<std::size_t>(rank)];
    auto comm = make_nccl_communicator(ep);
    void* p = pool->allocate(8 * MiB);
    registry.attach(comm, RegistrationKind::local);
    if (registry.stats(*comm).registered_segments != 1) throw std::runtime_error("not registered");
    lib.ncclCommDestroy(ep);  // the owner tears the communicator down first ...
    ep = nullptr;
    registry.forget(*comm);   // ... so ncclpool must not call it again
    pool->deallocate(p);
    if (pool->trim() == 0) throw std::runtime_error("segment not released");
    registry.check_invariants();
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// A symmetric attach is collective even where it is refused (the refusal is this rank's "no" in the
// attach agreement), so every rank attaches here. This test used to attach on rank 0 alone; once the
// refusal became a vote, rank 0 waited for a partner that never came, and on 2x H200 (2026-11-27) it
// did not return within the suite's 200 s although the agreement timeout was 30 s: on this new
// communicator (no collective yet) the wait was inside NCCL, not in ncclpool's bounded wait.
TEST_F(NcclRegistry, SymmetricOverCudaMallocMemoryIsAConfigurationError) {
  const auto errors = on_ranks([&](int rank) {
    PoolConfig config;
    config.deterministic = true;
    auto pool = std::make_shared<Pool>(make_cuda_source(rank), config);
    Registry registry(pool);
    try {
      registry.attach(make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]), RegistrationKind::symmetric);
      throw std::runtime_error("expected InvalidArgument");
    } catch (const InvalidArgument& e) {
      if (!has(e.what(), "cannot back NCCL windows")) throw;
    }
    if (registry.attached() != 0) throw std::runtime_error("a refused attach left the communicator attached");
    if (all_reduce_one(comms_.world[static_cast<std::size_t>(rank)], 1.0f) != static_cast<float>(n_))
      throw std::runtime_error("the all-reduce after the refused attach is wrong");
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// ---- no silent corruption on real NCCL (issue: every mismatch is an error on every rank) ----

// A rank's deterministic pool over ncclMemAlloc with its registry, `world` attached symmetrically.
struct SymmetricRank {
  std::shared_ptr<Pool> pool;
  std::unique_ptr<Registry> registry;
  std::shared_ptr<Communicator> world;
};

SymmetricRank symmetric_rank(int rank, ncclComm_t world, const std::string& name, std::size_t chunk, CheckLevel check = CheckLevel::off,
                             NcclCommunicatorOptions options = {}) {
  PoolConfig config;
  config.name = name;
  config.deterministic = true;
  config.growth_chunk = chunk;
  SymmetricRank r;
  r.pool = std::make_shared<Pool>(make_nccl_source(rank), config);
  r.registry = std::make_unique<Registry>(r.pool, RegistryOptions{check});
  r.world = make_nccl_communicator(world, options);
  r.registry->attach(r.world, RegistrationKind::symmetric);
  return r;
}

TEST_F(NcclRegistry, ARankWithNothingPendingJoinsTheAgreementAndTheNextCollectiveIsRight) {
  const auto errors = on_ranks([&](int rank) {
    SymmetricRank r = symmetric_rank(rank, comms_.world[static_cast<std::size_t>(rank)], "skip", 32 * MiB);
    auto& pool = r.pool;
    Registry& registry = *r.registry;
    auto& world = r.world;
    void* base = pool->allocate(MiB);
    registry.commit();
    std::vector<void*> blocks{base};
    if (rank == 0) blocks.push_back(pool->allocate(48 * MiB));  // rank 0 grows; the others reuse their chunk
    else blocks.push_back(pool->allocate(MiB));
    std::string now;
    try {
      registry.commit();
    } catch (const AgreementError& e) {
      now = e.what();
    }
    if (rank == 0 && !has(now, "ranks disagree at commit #2")) throw std::runtime_error("rank 0: expected an agreement error, got '" + now + "'");
    if (rank != 0 && !now.empty()) throw std::runtime_error("a rank with nothing pending waited: " + now);
    // The application's next collective pairs with the others' (no stray agreement all-gather left).
    const float sum = all_reduce_one(comms_.world[static_cast<std::size_t>(rank)], static_cast<float>(rank + 1));
    if (sum != static_cast<float>(n_ * (n_ + 1) / 2)) throw std::runtime_error("all-reduce after the agreement gave " + std::to_string(sum));
    if (rank != 0) {
      std::string later;
      try {
        registry.poll();  // the agreement completed long ago: its result is read now
      } catch (const AgreementError& e) {
        later = e.what();
      }
      if (!has(later, "found after the fact") || !has(later, "rank 0: pool 'skip' (attachment #0), commit #2: 1 segment(s)"))
        throw std::runtime_error("rank " + std::to_string(rank) + ": expected the earlier mismatch, got '" + later + "'");
    }
    for (void* p : blocks) pool->deallocate(p);
    registry.detach(*world);  // every rank has the same window (chunk 0): an agreement, then deregistration
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST_F(NcclRegistry, ADeadRankIsATimeoutThenForgetAndAbortDoNotHang) {
  const auto& lib = tool::bench_nccl();
  const auto errors = on_ranks([&](int rank) {
    ncclComm_t& world_comm = comms_.world[static_cast<std::size_t>(rank)];
    SymmetricRank r = symmetric_rank(rank, world_comm, "dead", 32 * MiB, CheckLevel::off, NcclCommunicatorOptions{std::chrono::seconds(2)});
    auto& pool = r.pool;
    Registry& registry = *r.registry;
    auto& world = r.world;
    void* p = pool->allocate(MiB);
    const bool dead = rank == n_ - 1;  // never reaches the agreement point
    if (!dead) {
      const auto start = std::chrono::steady_clock::now();
      std::string error;
      try {
        registry.commit();
      } catch (const AgreementError& e) {
        error = e.what();
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!has(error, "did not complete within 2000 ms")) throw std::runtime_error("expected a timeout, got '" + error + "'");
      if (waited > 10) throw std::runtime_error("the timeout took " + std::to_string(waited) + " s");
      try {
        registry.commit();
        throw std::runtime_error("a commit on a broken communicator succeeded");
      } catch (const AgreementError& e) {
        if (!has(e.what(), "timed out or failed")) throw;
      }
    }
    // Teardown as torch does it: forget first (never calls NCCL), then abort the communicator.
    registry.forget(*world);
    world.reset();  // the wrapper must not wait for its stuck stream
    pool->deallocate(p);
    if (lib.ncclCommAbort(world_comm) != ncclSuccess) throw std::runtime_error("ncclCommAbort failed");
    world_comm = nullptr;
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST_F(NcclRegistry, TwoPoolsCommittedInOppositeOrdersAreAnErrorOnEveryRank) {
  const auto errors = on_ranks([&](int rank) {
    auto world = make_nccl_communicator(comms_.world[static_cast<std::size_t>(rank)]);
    std::vector<std::shared_ptr<Pool>> pools;
    std::vector<std::unique_ptr<Registry>> registries;
    for (const char* name : {"first", "second"}) {
      PoolConfig config;
      config.name = name;
      config.deterministic = true;
      config.growth_chunk = 32 * MiB;
      pools.push_back(std::make_shared<Pool>(make_nccl_source(rank), config));
      registries.push_back(std::make_unique<Registry>(pools.back(), RegistryOptions{CheckLevel::off}));
      registries.back()->attach(world, RegistrationKind::symmetric);
    }
    std::vector<void*> blocks{pools[0]->allocate(MiB), pools[1]->allocate(MiB)};
    std::string first;
    for (int i : {rank % 2, 1 - rank % 2}) {
      try {
        registries[static_cast<std::size_t>(i)]->commit();
      } catch (const AgreementError& e) {
        if (first.empty()) first = e.what();
      }
    }
    if (!has(first, "ranks disagree at commit")) throw std::runtime_error("expected an agreement error, got '" + first + "'");
    for (auto& r : registries)
      if (r->stats(*world).registered_segments != 0) throw std::runtime_error("a window was registered across crossed pools");
    pools[0]->deallocate(blocks[0]);
    pools[1]->deallocate(blocks[1]);
    for (auto& r : registries) r->detach(*world);  // nothing registered: agreements only, in the same order everywhere
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST_F(NcclRegistry, CheckModeCatchesLayoutsAndBuffersThatDiffer) {
  const auto errors = on_ranks([&](int rank) {
    SymmetricRank r = symmetric_rank(rank, comms_.world[static_cast<std::size_t>(rank)], "checked", 256 * MiB, CheckLevel::layout);
    auto& pool = r.pool;
    Registry& registry = *r.registry;
    auto& world = r.world;
    // Two same-sized buffers in opposite orders (in one segment, reserved first): layouts agree,
    // buffer x is at another offset.
    pool->reserve(256 * MiB);
    void* first = pool->allocate(4 * MiB);
    void* second = pool->allocate(4 * MiB);
    registry.commit();
    void* x = rank == 0 ? first : second;
    std::string buffers;
    try {
      verify_symmetric_buffers(*world, {x, x});
    } catch (const AgreementError& e) {
      buffers = e.what();
    }
    if (!has(buffers, "rank 0: window #0 offset 0;") || !has(buffers, "rank 1: window #0 offset 4194304;"))
      throw std::runtime_error("buffer check: '" + buffers + "'");
    verify_symmetric_buffers(*world, {first, second});  // the same places everywhere: passes
    // Different sizes in opposite orders: the layout proof at the next agreement point names it.
    void* a = pool->allocate(rank == 0 ? 4 * MiB : 8 * MiB);
    void* b = pool->allocate(rank == 0 ? 8 * MiB : 4 * MiB);
    std::string layout;
    try {
      registry.commit();
    } catch (const AgreementError& e) {
      layout = e.what();
    }
    if (!has(layout, "first difference at live block #2") || !has(layout, "rank 0: segment 0 offset 8388608 size 4194304;"))
      throw std::runtime_error("layout check: '" + layout + "'");
    for (void* p : {first, second, a, b}) pool->deallocate(p);
    registry.detach(*world);
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

TEST_F(NcclRegistry, NonBlockingCommunicatorsWork) {
  const auto& lib = tool::bench_nccl();
  if (lib.ncclCommInitRankConfig == nullptr || lib.ncclGetUniqueId == nullptr) GTEST_SKIP() << "no ncclCommInitRankConfig";
  ncclUniqueId id;
  ASSERT_EQ(lib.ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(n_), nullptr);
  auto settle = [&](ncclComm_t comm, ncclResult_t r) {
    while (r == ncclInProgress) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lib.ncclCommGetAsyncError(comm, &r);
    }
    return r;
  };
  const auto errors = on_ranks([&](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t& comm = comms[static_cast<std::size_t>(rank)];
    ncclResult_t r = lib.ncclCommInitRankConfig(&comm, n_, id, rank, &config);
    if (settle(comm, r) != ncclSuccess) throw std::runtime_error("non-blocking init failed");
    PoolConfig pc;
    pc.name = "nonblocking";
    pc.deterministic = true;
    pc.growth_chunk = 32 * MiB;
    auto pool = std::make_shared<Pool>(make_nccl_source(rank), pc);
    Registry registry(pool, {CheckLevel::off});
    auto wrapper = make_nccl_communicator(comm);
    // ncclInProgress from ncclAllGather, ncclCommRegister and ncclCommDeregister must be waited
    // for, not taken as failures.
    AgreementRecord mine;
    mine.words[0] = static_cast<std::uint64_t>(rank) + 100;
    for (int i = 0; i < 3; ++i) {
      const auto all = wrapper->all_gather(mine);
      for (int peer = 0; peer < n_; ++peer)
        if (all[static_cast<std::size_t>(peer)].words[0] != static_cast<std::uint64_t>(peer) + 100) throw std::runtime_error("all-gather gave wrong records");
    }
    registry.attach(wrapper, RegistrationKind::local);
    void* buf = pool->allocate(4 * MiB);
    if (registry.handle_of(buf, *wrapper) == nullptr) throw std::runtime_error("no local registration on a non-blocking communicator");
    pool->deallocate(buf);
    registry.detach(*wrapper);
    // Windows: NCCL 2.28.9 answers success with no window on a communicator made this way; ncclpool
    // must say so clearly instead of keeping a null window.
    Registry symmetric_registry(pool, {CheckLevel::off});
    try {
      symmetric_registry.attach(wrapper, RegistrationKind::symmetric);
      void* b = pool->allocate(MiB);
      symmetric_registry.commit();
      pool->deallocate(b);
      symmetric_registry.detach(*wrapper);
      std::printf("rank %d: windows on a non-blocking communicator: registered\n", rank);
    } catch (const RegistrationError& e) {
      if (!has(e.what(), "returned no window")) throw;
      std::printf("rank %d: windows on a non-blocking communicator: %s\n", rank, e.what());
      if (symmetric_registry.attached() != 0) throw std::runtime_error("a failed symmetric attach left the communicator attached");
    }
    // Abort: after NCCL refused the window the communicator reports an error on finalize.
    if (lib.ncclCommAbort(comm) != ncclSuccess) throw std::runtime_error("abort failed");
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// Copy-engine all-gather (bench coll kind ce, ncclpool.torch.copy_engine_group): one pool attached
// with windows to a communicator made with CTA policy ZERO. NCCL moves the all-gather with its copy
// engines where the windows carry the symmetric flag (symmetric kernels on: gpu-check sets
// NCCLPOOL_SYMMETRIC_KERNELS=on; NCCL_DEBUG_SUBSYS=INIT then logs "Init CE" once per rank). Results
// right out-of-place and in-place on a side stream, reduce-scatter on the same communicator (its
// kernels) right too, and teardown (detach, ncclCommDestroy, reported to hang with such a
// communicator: Megatron-LM PR #5858) finishes.
TEST_F(NcclRegistry, CopyEngineAllGatherOnAZeroCtaPolicyCommunicatorIsRightAndTearsDown) {
  const auto& lib = tool::bench_nccl();
  if (nccl_info().version < 22800) GTEST_SKIP() << "NCCL " << nccl_info().version << " has no CTA policy";
  ncclUniqueId id;
  ASSERT_EQ(lib.ncclGetUniqueId(&id), ncclSuccess);
  std::printf("copy-engine all-gather: symmetric kernels %s\n", symmetric_kernels_on(0).enabled ? "on (windows carry the symmetric flag)" : "off: NCCL runs ring kernels");
  const auto errors = on_ranks([&](int rank) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    ncclComm_t comm = nullptr;
    if (lib.ncclCommInitRankConfig(&comm, n_, id, rank, &config) != ncclSuccess) throw std::runtime_error("ncclCommInitRankConfig(CTAPolicy ZERO) failed");
    PoolConfig pc;
    pc.name = "copy-engine";
    pc.deterministic = true;
    pc.growth_chunk = 64 * MiB;
    auto pool = std::make_shared<Pool>(make_vmm_source(VmmSourceOptions{.device = rank}), pc);
    Registry registry(pool);
    auto wrapper = make_nccl_communicator(comm);
    registry.attach(wrapper, RegistrationKind::symmetric);
    const std::size_t count = 8 * MiB / sizeof(float);  // per rank
    const std::size_t n = static_cast<std::size_t>(n_);
    void* send = pool->allocate(count * sizeof(float));
    void* gathered = pool->allocate(count * sizeof(float) * n);
    void* in_place = pool->allocate(count * sizeof(float) * n);
    void* rs_out = pool->allocate(count * sizeof(float));
    registry.commit();
    if (registry.handle_of(gathered, *wrapper) == nullptr) throw std::runtime_error("the all-gather buffer is not in a window");
    upload(send, std::vector<float>(count, static_cast<float>(rank + 1)));
    upload(static_cast<char*>(in_place) + static_cast<std::size_t>(rank) * count * sizeof(float), std::vector<float>(count, static_cast<float>(10 * (rank + 1))));
    CUstream stream = nullptr;
    cuda::check(tool::bench_driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");  // never the null stream (NCCL #2003)
    auto s = reinterpret_cast<cudaStream_t>(stream);
    void* in_place_send = static_cast<char*>(in_place) + static_cast<std::size_t>(rank) * count * sizeof(float);
    for (int iter = 0; iter < 3; ++iter)
      if (lib.ncclAllGather(send, gathered, count, ncclFloat, comm, s) != ncclSuccess ||
          lib.ncclAllGather(in_place_send, in_place, count, ncclFloat, comm, s) != ncclSuccess)
        throw std::runtime_error("all-gather launch failed");
    if (lib.ncclReduceScatter(gathered, rs_out, count, ncclFloat, ncclSum, comm, s) != ncclSuccess) throw std::runtime_error("reduce-scatter launch failed");
    cuda::check(tool::bench_driver().cuStreamSynchronize(stream), "sync");
    tool::bench_driver().cuStreamDestroy_v2(stream);
    const auto out = download(gathered, count * n), in = download(in_place, count * n), rs = download(rs_out, count);
    for (std::size_t peer = 0; peer < n; ++peer)
      for (std::size_t i : {std::size_t{0}, count / 2, count - 1}) {
        if (out[peer * count + i] != static_cast<float>(peer + 1)) throw std::runtime_error("out-of-place all-gather wrong at peer " + std::to_string(peer));
        if (in[peer * count + i] != static_cast<float>(10 * (peer + 1))) throw std::runtime_error("in-place all-gather wrong at peer " + std::to_string(peer));
      }
    // reduce-scatter of the gathered buffer: every rank's slice r holds r + 1, summed over n ranks.
    if (rs[0] != static_cast<float>(n * static_cast<std::size_t>(rank + 1)) || rs[count - 1] != rs[0]) throw std::runtime_error("reduce-scatter wrong");
    for (void* p : {send, gathered, in_place, rs_out}) pool->deallocate(p);
    registry.detach(*wrapper);
    registry.check_invariants();
    wrapper.reset();
    const auto start = std::chrono::steady_clock::now();
    if (lib.ncclCommDestroy(comm) != ncclSuccess) throw std::runtime_error("ncclCommDestroy failed");
    std::printf("rank %d: copy-engine communicator destroyed in %.1f ms\n", rank, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  });
  for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

}  // namespace
}  // namespace ncclpool

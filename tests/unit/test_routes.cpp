// Auto pools: size routes (routes.hpp), where they come from (profile, built in), and AutoPool
// (auto_pool.hpp) over the simulator: routing, registration per part, the routes agreement,
// rollback, statistics, and registrations counting back to zero.

#include <gtest/gtest.h>

#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/auto_pool.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <unistd.h>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---------------------------------------------------------------- SizeRoutes

TEST(SizeRoutes, LookupMergeAndDescription) {
  const SizeRoutes r({{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::local}, {MiB, RegistrationKind::symmetric}, {4 * MiB, RegistrationKind::symmetric}});
  ASSERT_EQ(r.classes().size(), 3u);  // the two symmetric classes merge
  EXPECT_EQ(r.for_request(1), RegistrationKind::none);
  EXPECT_EQ(r.for_request(64 * KiB - 1), RegistrationKind::none);
  EXPECT_EQ(r.for_request(64 * KiB), RegistrationKind::local);
  EXPECT_EQ(r.for_request(MiB), RegistrationKind::symmetric);
  EXPECT_EQ(r.for_request(SIZE_MAX), RegistrationKind::symmetric);
  EXPECT_EQ(r.describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB");
  EXPECT_EQ(SizeRoutes(RegistrationKind::symmetric).describe(), "symmetric at every size");
  EXPECT_TRUE(r.uses(RegistrationKind::local));
  EXPECT_FALSE(SizeRoutes(RegistrationKind::symmetric).uses(RegistrationKind::local));
  EXPECT_NE(r.digest(), SizeRoutes(RegistrationKind::symmetric).digest());
  EXPECT_EQ(r.digest(), SizeRoutes(r.classes()).digest());
}

TEST(SizeRoutes, RangesTakeTheMostSpannedPlacementTiesToTheLargerSizes) {
  const SizeRoutes r({{0, RegistrationKind::none}, {64 * KiB, RegistrationKind::symmetric}, {256 * KiB, RegistrationKind::none}, {2 * MiB, RegistrationKind::local}});
  EXPECT_EQ(r.for_range(1, MiB), RegistrationKind::none);                 // none twice, symmetric once
  EXPECT_EQ(r.for_range(100 * KiB, 200 * KiB), RegistrationKind::symmetric);
  EXPECT_EQ(r.for_range(MiB, 3 * MiB), RegistrationKind::local);          // none once, local once: the larger sizes'
  EXPECT_EQ(r.for_range(3 * MiB, MiB), RegistrationKind::local);          // bounds in either order
}

TEST(SizeRoutes, BadClassesAreRefused) {
  EXPECT_THROW(SizeRoutes(std::vector<SizeRoute>{}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{4096, RegistrationKind::local}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, RegistrationKind::local}, {0, RegistrationKind::none}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, RegistrationKind::local}, {MiB, RegistrationKind::none}, {KiB, RegistrationKind::symmetric}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, static_cast<RegistrationKind>(7)}}), InvalidArgument);
}

TEST(SizeRoutes, TorchSegmentsServeTheirTensorSizes) {
  std::size_t lo = 0, hi = 0;
  torch_segment_tensors(2 * MiB, lo, hi);
  EXPECT_EQ(lo, 1u);
  EXPECT_EQ(hi, MiB);
  torch_segment_tensors(20 * MiB, lo, hi);
  EXPECT_EQ(lo, MiB + 1);
  EXPECT_EQ(hi, 20 * MiB);
  torch_segment_tensors(64 * MiB, lo, hi);
  EXPECT_EQ(lo, 62 * MiB + 1);
  EXPECT_EQ(hi, 64 * MiB);
}

// ---------------------------------------------------------------- from profiles

Profile sim_profile(int ranks) {
  Profile p;
  p.gpu = "ncclpool simulator";
  p.nccl_version = 0;
  p.ranks = ranks;
  p.measured = "2026-11-23T18:00:00Z";
  p.classes.push_back({KiB, {{"all_gather", RegistrationKind::none}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({64 * KiB, {{"all_gather", RegistrationKind::local}, {"all_reduce", RegistrationKind::local}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({MiB, {{"all_gather", RegistrationKind::symmetric}, {"all_reduce", RegistrationKind::local}, {"reduce_scatter", RegistrationKind::symmetric}}});
  return p;
}

TEST(AutoRoutesWindows, WindowsNeedTheSourceTheCommunicatorAndTheKernels) {
  // The one rule behind an auto pool's routes at its first attach, before it, and in `ncclpool info`.
  std::string why = "stale";
  EXPECT_TRUE(auto_routes_windows(true, true, "", true, &why));
  EXPECT_EQ(why, "");
  EXPECT_FALSE(auto_routes_windows(false, true, "", true, &why));
  EXPECT_EQ(why, "the pool's source cannot back windows");
  EXPECT_FALSE(auto_routes_windows(true, false, "NCCL 2.26.2 has no window API (needs >= 2.27)", true, &why));
  EXPECT_EQ(why, "NCCL 2.26.2 has no window API (needs >= 2.27)");
  EXPECT_FALSE(auto_routes_windows(true, true, "", false, &why));
  EXPECT_TRUE(contains(why, "NCCL's symmetric kernels are off")) << why;
  EXPECT_FALSE(auto_routes_windows(true, true, "", false, nullptr));
}

TEST(RoutesFromProfile, MostCollectivesWinTiesGoToAllReduce) {
  Profile p = sim_profile(2);
  p.classes.push_back({64 * MiB, {{"all_gather", RegistrationKind::none}, {"all_reduce", RegistrationKind::local}, {"reduce_scatter", RegistrationKind::symmetric}}});
  const SizeRoutes r = routes_from_profile(p, /*windows_possible=*/true);
  EXPECT_EQ(r.describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB to below 64 MiB, local from 64 MiB");
  EXPECT_EQ(r.for_request(1), RegistrationKind::none);  // the first class covers the sizes below it
  const SizeRoutes no_windows = routes_from_profile(p, /*windows_possible=*/false);
  EXPECT_FALSE(no_windows.uses(RegistrationKind::symmetric));
  EXPECT_EQ(builtin_routes(true), SizeRoutes(RegistrationKind::symmetric));
  EXPECT_EQ(builtin_routes(false), SizeRoutes(RegistrationKind::local));
}

// A class's measured "any" (tune: the smallest worst case over the collectives) routes the buffers
// that name no collective; the collectives keep their own picks; a class without it: the majority.
TEST(RoutesFromProfile, AClassesAnyKindServesBuffersNamingNoCollective) {
  Profile p = sim_profile(2);
  p.classes.push_back({64 * MiB, {{"all_gather", RegistrationKind::local}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}});
  EXPECT_EQ(routes_from_profile(p, true).for_request(64 * MiB), RegistrationKind::none);  // the tie goes to all_reduce's
  p.classes.back().any = RegistrationKind::local;
  EXPECT_EQ(routes_from_profile(p, true).describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB to below 64 MiB, local from 64 MiB");
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_reduce).for_request(64 * MiB), RegistrationKind::none);
  p.classes.back().any = RegistrationKind::symmetric;  // without windows a symmetric "any" becomes local, as every pick does
  EXPECT_EQ(routes_from_profile(p, false).for_request(64 * MiB), RegistrationKind::local);
}

TEST(RoutesFromProfile, ACollectiveGetsItsOwnPicks) {
  const Profile p = sim_profile(2);
  EXPECT_EQ(routes_from_profile(p, true, Collective::reduce_scatter), SizeRoutes(RegistrationKind::symmetric));
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_gather).describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB");
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_reduce).describe(), "none below 64 KiB, local from 64 KiB");
  EXPECT_EQ(routes_from_profile(p, false, Collective::reduce_scatter), SizeRoutes(RegistrationKind::local));
  EXPECT_STREQ(to_string(Collective::reduce_scatter), "reduce_scatter");
}

// Built-in routes keyed by compute capability and rank count (src/routing/builtin/, made by
// scripts/builtin-routes.py from bench coll runs).
TEST(BuiltinRoutes, KeyedByComputeCapabilityAndTheNearestMeasuredRankCount) {
  const BuiltinRoutes h200_2 = builtin_routes_for(90, 2);
  ASSERT_TRUE(h200_2.profile.has_value()) << h200_2.source;
  EXPECT_EQ(h200_2.profile->ranks, 2);
  EXPECT_TRUE(contains(h200_2.source, "built-in routes for compute capability 9.0 at 2 ranks")) << h200_2.source;
  EXPECT_TRUE(contains(h200_2.source, "data/")) << h200_2.source;  // the raw data they came from
  EXPECT_FALSE(contains(h200_2.source, "the nearest count measured")) << h200_2.source;
  const BuiltinRoutes h200_16 = builtin_routes_for(90, 16);
  ASSERT_TRUE(h200_16.profile.has_value());
  EXPECT_TRUE(contains(h200_16.source, "this communicator has 16 ranks: the nearest count measured")) << h200_16.source;
  for (int cc : {0, 100, 80}) {
    const BuiltinRoutes none = builtin_routes_for(cc, 2);
    EXPECT_FALSE(none.profile.has_value()) << cc;
    EXPECT_TRUE(contains(none.source, "none measured for compute capability")) << none.source;
    EXPECT_EQ(builtin_routes_for(MachineKey{"x", 0, 2, cc}, true), builtin_routes(true));
    EXPECT_EQ(builtin_routes_for(MachineKey{"x", 0, 2, cc}, false), builtin_routes(false));
  }
  // Measured routes follow the profile's rules: no windows where windows are impossible.
  EXPECT_FALSE(builtin_routes_for(MachineKey{"NVIDIA H200", 22809, 2, 90}, false, Collective::all_reduce).uses(RegistrationKind::symmetric));
  EXPECT_EQ(builtin_routes_for(MachineKey{"NVIDIA H200", 22809, 2, 90}, true, Collective::reduce_scatter),
            routes_from_profile(*h200_2.profile, true, Collective::reduce_scatter));
}

// ---------------------------------------------------------------- AutoPool

// A profile file for the test's life (NCCLPOOL_PROFILE).
struct ProfileFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ncclpool-routes-" + std::to_string(::getpid()));
  explicit ProfileFile(const Profile& p) : ProfileFile(profile_to_json(p)) {}
  explicit ProfileFile(const std::string& text) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "profile.json") << text;
    ::setenv("NCCLPOOL_PROFILE", (dir / "profile.json").c_str(), 1);
  }
  ~ProfileFile() {
    ::unsetenv("NCCLPOOL_PROFILE");
    std::filesystem::remove_all(dir);
  }
};

std::unique_ptr<AutoPool> make_auto(bool window_capable = true, const std::string& name = "auto") {
  auto make_part = [=](RegistrationKind p) {
    SimSourceConfig sc;
    sc.window_capable = window_capable;
    PoolConfig pc;
    pc.name = name + "/" + to_string(p);
    pc.deterministic = true;
    pc.growth_chunk = 2 * MiB;
    return std::make_shared<Pool>(std::make_shared<SimSource>(sc), pc);
  };
  return std::make_unique<AutoPool>(name, make_part, builtin_routes(true), "built-in", RegistryOptions{CheckLevel::off});
}

TEST(AutoPool, RoutesFromTheProfileRegisterEachPartItsWay) {
  ProfileFile file(sim_profile(2));
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_TRUE(contains(pool.routes_source(), "the profile")) << pool.routes_source();
    void* small = pool.allocate(4 * KiB);
    void* middle = pool.allocate(256 * KiB);
    void* large = pool.allocate(3 * MiB);
    EXPECT_EQ(pool.part_of(small)->kind, RegistrationKind::none);
    EXPECT_EQ(pool.part_of(middle)->kind, RegistrationKind::local);
    EXPECT_EQ(pool.part_of(large)->kind, RegistrationKind::symmetric);
    pool.commit();  // the symmetric part's window
    EXPECT_EQ(pool.handle_of(small, *comm), nullptr);
    EXPECT_NE(pool.handle_of(middle, *comm), nullptr);
    EXPECT_NE(pool.handle_of(large, *comm), nullptr);
    const CommunicatorStats s = pool.stats(*comm);
    EXPECT_EQ(s.kind, RegistrationKind::symmetric);
    EXPECT_EQ(s.registered_segments, 2u);  // the local part's and the symmetric part's segments
    const PoolStats ps = pool.stats();
    EXPECT_EQ(ps.active_allocations, 3u);
    EXPECT_EQ(ps.segment_count, 3u);
    pool.check_invariants();
    for (void* p : {small, middle, large}) pool.deallocate(p);
    pool.detach(*comm);
    EXPECT_EQ(pool.trim(), pool.stats().peak_reserved_bytes);
    pool.check_invariants();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(AutoPool, BuffersNamedForACollectiveFollowItsRoutes) {
  ProfileFile file(sim_profile(1));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto();
  pool->attach(comm, std::nullopt);
  void* any = pool->allocate(4 * KiB);
  void* rs = pool->allocate(4 * KiB, 0, Collective::reduce_scatter);  // reduce-scatter: windows at every size
  void* ar = pool->allocate(3 * MiB, 0, Collective::all_reduce);      // all-reduce: local from 64 KiB
  EXPECT_EQ(pool->part_of(any)->kind, RegistrationKind::none);
  EXPECT_EQ(pool->part_of(rs)->kind, RegistrationKind::symmetric);
  EXPECT_EQ(pool->part_of(ar)->kind, RegistrationKind::local);
  EXPECT_EQ(pool->routes(Collective::reduce_scatter), SizeRoutes(RegistrationKind::symmetric));
  for (void* p : {any, rs, ar}) pool->deallocate(p);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
}

// Auto pools on `group` (two ranks) route no size to windows, say `why` in their routes' source, and
// register large buffers locally.
void expect_auto_pools_make_no_windows(const std::shared_ptr<LoopbackGroup>& group, const std::string& why) {
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_FALSE(pool.routes().uses(RegistrationKind::symmetric)) << pool.routes().describe();
    EXPECT_TRUE(contains(pool.routes_source(), why)) << pool.routes_source();
    void* big = pool.allocate(MiB);
    EXPECT_EQ(pool.part_of(big)->kind, RegistrationKind::local);
    EXPECT_EQ(pool.stats(*comm).kind, RegistrationKind::local);
    // Registered, too: across nodes the local part was once left unattached (issue 44 item 7: the parts
    // to attach were listed before the windows were dropped), so this memory was never registered.
    EXPECT_NE(pool.handle_of(big, *comm), nullptr) << "the local part the routes send every size to is not attached";
    pool.deallocate(big);
    pool.detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

// Where NCCL's symmetric kernels are off (NCCLPOOL_SYMMETRIC_KERNELS, or the NCCL versions whose
// kernels can read their input early), a window is a local registration that costs a collective.
TEST(AutoPool, AutoPoolsMakeNoWindowsWhereTheSymmetricKernelsAreOff) {
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  group->set_symmetric_kernels(-1, 32 + kSymmetricKernelsOff);
  expect_auto_pools_make_no_windows(group, "symmetric kernels are off");
}

// A communicator NCCL gives no symmetric memory (NCCL >= 2.29 knows before any window).
TEST(AutoPool, AutoPoolsMakeNoWindowsOnACommunicatorWithoutSymmetricMemory) {
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  group->set_windows_supported(-1, false);
  expect_auto_pools_make_no_windows(group, "no symmetric memory");
}

// Ranks on two nodes (NCCL_HOSTID per process, or real nodes): NCCL runs no symmetric kernel or copy
// engine between them. Every rank learns the node count in the routes agreement, so every rank drops
// the windows alike, though each rank's own routes had them.
TEST(AutoPool, AutoPoolsMakeNoWindowsWhenTheRanksSpanNodes) {
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  group->set_node(0, 0x1111);
  group->set_node(1, 0x2222);
  EXPECT_EQ(group->node(1), 0x2222u);
  expect_auto_pools_make_no_windows(group, "the ranks span 2 nodes");
  // Ranks of one node keep their windows (the process's own node unless set).
  auto one_node = std::make_shared<LoopbackGroup>("one-node", 2);
  EXPECT_EQ(one_node->node(0), one_node->node(1));
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(one_node, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_TRUE(pool.routes().uses(RegistrationKind::symmetric)) << pool.routes().describe();
    EXPECT_FALSE(contains(pool.routes_source(), "nodes")) << pool.routes_source();
    pool.detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(one_node->live_registrations(), 0);
}

// ---------------------------------------------------------------- across nodes, one rank differing

// A loopback rank whose node() throws (a host whose name or boot id cannot be read, say): every
// other call goes to the loopback communicator.
class NodeFailingCommunicator final : public Communicator {
 public:
  NodeFailingCommunicator(std::shared_ptr<LoopbackGroup> group, int rank) : inner_(std::move(group), rank) {}
  int device() const override { return inner_.device(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::uintptr_t native_handle() const override { return inner_.native_handle(); }
  std::string describe() const override { return inner_.describe(); }
  bool supports_windows(std::string* why) const override { return inner_.supports_windows(why); }
  void* register_local(void* base, std::size_t size) override { return inner_.register_local(base, size); }
  void deregister_local(void* handle) override { inner_.deregister_local(handle); }
  void* register_window(void* base, std::size_t size) override { return inner_.register_window(base, size); }
  void deregister_window(void* window) override { inner_.deregister_window(window); }
  std::unique_ptr<PendingGather> start_all_gather(const AgreementRecord& mine) override { return inner_.start_all_gather(mine); }
  bool broken() const override { return inner_.broken(); }
  int prepare_symmetric_kernels() override { return inner_.prepare_symmetric_kernels(); }
  MachineKey machine() const override { return inner_.machine(); }
  std::uint64_t node() const override { throw BackendError("node(): cannot read the host name (test)"); }

 private:
  LoopbackCommunicator inner_;
};

// Every rank's collective calls were the same (no step left unmatched).
void expect_same_call_logs(const LoopbackGroup& group) {
  for (int rank = 1; rank < group.size(); ++rank) EXPECT_EQ(group.call_log(rank), group.call_log(0)) << "rank " << rank;
}

// Attaches fresh auto pools on every rank of `group` (rank -> communicator), checks the routes alike
// everywhere and `windows` on every rank, then detaches.
void expect_every_rank_routes(const std::shared_ptr<LoopbackGroup>& group, bool windows,
                              const std::function<std::shared_ptr<Communicator>(int)>& comm_of) {
  const int n = group->size();
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < n; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(n, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = comm_of(rank);
    pool.attach(comm, std::nullopt);
    EXPECT_TRUE(pool.routes_fixed());
    EXPECT_EQ(pool.routes().uses(RegistrationKind::symmetric), windows) << "rank " << rank << ": " << pool.routes_source();
    void* big = pool.allocate(MiB);
    pool.commit();
    pool.deallocate(big);
    pool.detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  expect_same_call_logs(*group);
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(AutoPoolNodes, ARankWhoseNodeThrowsCountsAsANodeOfItsOwnOnEveryRank) {
  auto group = std::make_shared<LoopbackGroup>("world", 4, 2000ms);
  expect_every_rank_routes(group, /*windows=*/false, [&](int rank) -> std::shared_ptr<Communicator> {
    if (rank == 2) return std::make_shared<NodeFailingCommunicator>(group, rank);
    return std::make_shared<LoopbackCommunicator>(group, rank);
  });
}

TEST(AutoPoolNodes, RanksWhoseNodesAllThrowAreNotTakenForOneNode) {
  // Unknown nodes cannot be told apart: two ranks that could not say theirs may be on two nodes.
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  expect_every_rank_routes(group, /*windows=*/false, [&](int rank) -> std::shared_ptr<Communicator> {
    return std::make_shared<NodeFailingCommunicator>(group, rank);
  });
}

TEST(AutoPoolNodes, OneRankOfFourOnAnotherNodeDropsWindowsOnEveryRank) {
  auto group = std::make_shared<LoopbackGroup>("world", 4, 2000ms);
  group->set_node(-1, 0xAAAA);
  group->set_node(3, 0xBBBB);
  expect_every_rank_routes(group, /*windows=*/false, [&](int rank) -> std::shared_ptr<Communicator> {
    return std::make_shared<LoopbackCommunicator>(group, rank);
  });
  group->set_node(3, 0xAAAA);  // all on one node again: windows
  expect_every_rank_routes(group, /*windows=*/true, [&](int rank) -> std::shared_ptr<Communicator> {
    return std::make_shared<LoopbackCommunicator>(group, rank);
  });
}

// One rank's routes were fixed by an allocation before the attach (the same built-in routes as the
// others' at this attach): the routes agreement passes, and whether any rank drops its windows must
// not depend on whether its own routes were still open, or the ranks that keep them run a window
// attach the others never join.
TEST(AutoPoolNodes, ARankWhoseRoutesWereFixedBeforeTheAttachAcrossNodesStaysInLockstep) {
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  group->set_node(0, 0x1111);
  group->set_node(1, 0x2222);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  void* early = pools[1]->allocate(KiB);  // fixes rank 1's routes (built in, with windows)
  ASSERT_TRUE(pools[1]->routes_fixed());
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    pool.detach(*comm);
  });
  EXPECT_EQ(errors[0].empty(), errors[1].empty()) << errors[0] << " / " << errors[1];  // one outcome
  expect_same_call_logs(*group);
  EXPECT_FALSE(group->broken());
  EXPECT_EQ(pools[0]->routes(), pools[1]->routes()) << pools[0]->routes_source() << " / " << pools[1]->routes_source();
  EXPECT_EQ(group->live_registrations(), 0);
  pools[1]->deallocate(early);
}

// A pool attached to a one-node communicator first keeps the windows its routes were fixed with
// when attached to one spanning nodes (every rank alike); the reverse keeps none.
TEST(AutoPoolNodes, APoolKeepsTheRoutesOfItsFirstAttachOnEveryRank) {
  for (const bool one_node_first : {true, false}) {
    SCOPED_TRACE(one_node_first ? "one node, then two" : "two nodes, then one");
    auto one = std::make_shared<LoopbackGroup>("one-node", 2, 2000ms);
    auto two = std::make_shared<LoopbackGroup>("two-nodes", 2, 2000ms);
    two->set_node(1, 0x5151);
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
    const auto errors = on_ranks(2, [&](int rank) {
      AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
      auto a = std::make_shared<LoopbackCommunicator>(one_node_first ? one : two, rank);
      auto b = std::make_shared<LoopbackCommunicator>(one_node_first ? two : one, rank);
      pool.attach(a, std::nullopt);
      pool.attach(b, std::nullopt);
      EXPECT_EQ(pool.routes().uses(RegistrationKind::symmetric), one_node_first) << pool.routes_source();
      void* big = pool.allocate(MiB);
      pool.commit();
      EXPECT_EQ(pool.part_of(big)->kind, one_node_first ? RegistrationKind::symmetric : RegistrationKind::local);
      pool.deallocate(big);
      pool.detach(*a);
      pool.detach(*b);
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    expect_same_call_logs(*one);
    expect_same_call_logs(*two);
    EXPECT_EQ(one->live_registrations() + two->live_registrations(), 0);
  }
}

// The first attach fails on every rank before the node count is known (one rank passes a bad kind:
// its own "no" in the routes agreement). The retry routes as an attach that had not failed would: no
// windows across nodes, on every rank (the failed attach left the routes open).
TEST(AutoPoolNodes, AFailedFirstAttachAcrossNodesRetriesWithoutWindowsOnEveryRank) {
  {
    const bool before_the_count = true;
    auto group = std::make_shared<LoopbackGroup>("world", 4, 2000ms);
    group->set_node(2, 0x7777);
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int i = 0; i < 4; ++i) pools.push_back(make_auto());
    const std::optional<RegistrationKind> kind;
    const auto first = on_ranks(4, [&](int rank) {
      const std::optional<RegistrationKind> mine = before_the_count && rank == 1 ? std::optional(RegistrationKind::none) : kind;
      pools[static_cast<std::size_t>(rank)]->attach(std::make_shared<LoopbackCommunicator>(group, rank), mine);
    });
    for (const auto& e : first) EXPECT_FALSE(e.empty());
    expect_same_call_logs(*group);
    const auto retry = on_ranks(4, [&](int rank) {
      AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
      auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
      EXPECT_FALSE(pool.attached(*comm));
      pool.attach(comm, kind);
      EXPECT_TRUE(pool.routes_fixed());
      EXPECT_FALSE(pool.routes().uses(RegistrationKind::symmetric)) << pool.routes_source();
      pool.detach(*comm);
    });
    for (const auto& e : retry) EXPECT_EQ(e, "");
    expect_same_call_logs(*group);
    EXPECT_EQ(group->live_registrations(), 0);
  }
}

// On every rank an allocation on another thread races the first attach, across nodes: on some
// ranks it fixes the routes before the attach, on others it waits for it. Every rank stays in step
// (the window attaches are made everywhere or nowhere), the allocation sees whole routes (the ones
// the pool keeps), and nothing hangs.
TEST(AutoPoolNodes, AnAllocationRacingTheFirstAttachAcrossNodesKeepsEveryRankInStep) {
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
    group->set_node(1, 0x9999);
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
    const auto errors = on_ranks(2, [&](int rank) {
      AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
      auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
      void* racing = nullptr;
      std::thread allocator([&] {
        if ((round + rank) % 3 == 0) std::this_thread::yield();
        racing = pool.allocate(MiB);
      });
      std::string failed;
      try {
        pool.attach(comm, std::nullopt);
      } catch (const Error& e) {
        failed = e.what();  // an outcome too, if every rank has it
      }
      allocator.join();
      EXPECT_TRUE(pool.routes_fixed());
      EXPECT_EQ(pool.part_of(racing)->kind, pool.routes().for_request(MiB));
      if (failed.empty()) {
        pool.commit();
      }
      pool.deallocate(racing);
      if (failed.empty()) pool.detach(*comm);
      if (!failed.empty()) throw AgreementError(failed);
    });
    EXPECT_EQ(errors[0].empty(), errors[1].empty()) << errors[0] << " / " << errors[1];
    expect_same_call_logs(*group);
    EXPECT_EQ(pools[0]->routes(), pools[1]->routes());
    EXPECT_EQ(group->live_registrations(), 0);
  }
}

TEST(AutoPool, RanksThatRouteDifferentlyFailOnEveryRankBeforeAnyRegistration) {
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  // Rank 1 allocates before attaching, which fixes its built-in routes; rank 0 gets the profile's.
  ProfileFile file(sim_profile(2));
  void* early = pools[1]->allocate(KiB);
  const auto errors = on_ranks(2, [&](int rank) {
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pools[static_cast<std::size_t>(rank)]->attach(comm, std::nullopt);
  });
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "route the auto pool 'auto' differently")) << e;
    EXPECT_TRUE(contains(e, "symmetric at every size (built in)")) << e;
    EXPECT_TRUE(contains(e, "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB and other routes for some collectives")) << e;
    EXPECT_TRUE(contains(e, "(from its profile)")) << e;
  }
  EXPECT_EQ(group->live_registrations(), 0);
  for (auto& p : pools) EXPECT_EQ(p->attached_count(), 0u);
  pools[1]->deallocate(early);
}

TEST(AutoPool, AForeignProfileIsNamedAndTheBuiltInRoutesUsed) {
  ProfileFile file(sim_profile(4));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto pool = make_auto();
  pool->attach(std::make_shared<LoopbackCommunicator>(group, 0), std::nullopt);
  EXPECT_EQ(pool->routes(), SizeRoutes(RegistrationKind::symmetric));
  EXPECT_TRUE(contains(pool->routes_source(), "built-in routes")) << pool->routes_source();
  EXPECT_TRUE(contains(pool->routes_source(), "4 ranks")) << pool->routes_source();
}

TEST(AutoPool, WithoutAProfileAMeasuredGpuTakesItsBuiltInRoutes) {
  ::unsetenv("NCCLPOOL_PROFILE");
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  group->set_machine_gpu(-1, "NVIDIA H200", 90);
  auto pool = make_auto();
  pool->attach(std::make_shared<LoopbackCommunicator>(group, 0), std::nullopt);
  EXPECT_TRUE(contains(pool->routes_source(), "built-in routes for compute capability 9.0 at 2 ranks")) << pool->routes_source();
  EXPECT_EQ(pool->routes(Collective::all_reduce), builtin_routes_for(MachineKey{"NVIDIA H200", 0, 1, 90}, true, Collective::all_reduce));
}

TEST(AutoPool, WithoutWindowsSymmetricSizesGoToTheLocalPart) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto(/*window_capable=*/false);
  EXPECT_EQ(pool->routes(), SizeRoutes(RegistrationKind::local));
  EXPECT_TRUE(contains(pool->routes_source(), "cannot back windows")) << pool->routes_source();
  void* p = pool->allocate(MiB);
  pool->attach(comm, std::nullopt);  // not collective: nothing symmetric
  EXPECT_EQ(pool->part_of(p)->kind, RegistrationKind::local);
  EXPECT_NE(pool->handle_of(p, *comm), nullptr);
  pool->deallocate(p);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(AutoPool, ANamedKindRegistersEveryUsedPartThatWay) {
  ProfileFile file(sim_profile(1));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto();
  pool->attach(comm, RegistrationKind::local);
  void* a = pool->allocate(4 * KiB);
  void* b = pool->allocate(3 * MiB);
  EXPECT_NE(pool->handle_of(a, *comm), nullptr);  // the none part too: the caller named the kind
  EXPECT_NE(pool->handle_of(b, *comm), nullptr);
  EXPECT_EQ(pool->stats(*comm).kind, RegistrationKind::local);
  EXPECT_THROW(pool->attach(comm, std::nullopt), InvalidArgument);  // already attached
  pool->deallocate(a);
  pool->deallocate(b);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(AutoPool, AFailedWindowAttachLeavesNothingAttached) {
  ProfileFile file(sim_profile(1));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto();
  {
    // Segments in every part before the attach (the routes are the profile's only if the attach
    // comes first, so attach once, detach, and allocate).
    pool->attach(comm, std::nullopt);
    pool->detach(*comm);
  }
  void* a = pool->allocate(256 * KiB);  // local part
  void* b = pool->allocate(3 * MiB);    // symmetric part
  group->inject_failure(LoopbackOp::register_window, 0, 1);
  EXPECT_THROW(pool->attach(comm, std::nullopt), RegistrationError);
  EXPECT_EQ(group->live_registrations(), 0);  // the local part's registration was rolled back
  EXPECT_FALSE(pool->attached(*comm));
  pool->attach(comm, std::nullopt);  // and it can be attached again
  EXPECT_NE(pool->handle_of(a, *comm), nullptr);
  EXPECT_NE(pool->handle_of(b, *comm), nullptr);
  pool->deallocate(a);
  pool->deallocate(b);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
  pool->check_invariants();
}

TEST(AutoPool, SinglePoolsNeedAKindAndRouteNothing) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank();
  SinglePool pool(r.pool, RegistryOptions{CheckLevel::off});
  EXPECT_FALSE(pool.chooses_kinds());
  EXPECT_THROW(pool.attach(comm, std::nullopt), InvalidArgument);
  pool.attach(comm, RegistrationKind::local);
  void* p = pool.allocate(KiB);
  EXPECT_NE(pool.handle_of(p, *comm), nullptr);
  int foreign = 0;
  EXPECT_EQ(pool.part_of(&foreign), nullptr);
  EXPECT_THROW(pool.deallocate(&foreign), ForeignPointer);
  pool.deallocate(p);
  pool.detach(*comm);
}

// Two ranks make the same random requests (sizes across every class, frees, scope ends, commits,
// trims) on auto pools whose routes use all three parts: invariants hold after every step, every
// rank's symmetric part agrees, and registrations count back to zero.
TEST(AutoPool, RandomRequestsKeepEveryPartConsistentAndCountBackToZero) {
  ProfileFile file(sim_profile(2));
  auto group = std::make_shared<LoopbackGroup>("world", 2, 5000ms);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    std::mt19937_64 random(42);  // the same on both ranks: the same requests
    std::vector<void*> live;
    for (int step = 0; step < 400; ++step) {
      const auto action = random() % 10;
      if (action < 6 || live.empty()) {
        const std::size_t bytes = std::size_t{1} << (10 + random() % 13);  // 1 KiB .. 4 MiB
        live.push_back(pool.allocate(bytes + random() % 4096));
      } else if (action < 9) {
        const std::size_t victim = random() % live.size();
        pool.deallocate(live[victim]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      } else if (step % 3 == 0) {
        pool.trim();  // collective over the symmetric part
      } else {
        RegisteredPool::ScopeSet scope(pool);
        scope.close();  // commits at the scheduled scope ends
      }
      pool.check_invariants();
    }
    pool.commit();
    for (void* p : live) {
      const PoolPart* part = pool.part_of(p);
      ASSERT_NE(part, nullptr);
      EXPECT_EQ(pool.handle_of(p, *comm) != nullptr, part->kind != RegistrationKind::none);
      pool.deallocate(p);
    }
    pool.detach(*comm);
    pool.trim();
    pool.check_invariants();
    EXPECT_EQ(pool.stats().reserved_bytes, 0u);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(AutoPool, ScopesOpenAndCloseOnEveryPart) {
  auto pool = make_auto();
  {
    RegisteredPool::ScopeSet scope(*pool);
    EXPECT_EQ(pool->open_scopes(), 1);
    for (const auto& part : pool->parts()) EXPECT_EQ(part.registry->open_scopes(), 1);
    scope.close();
  }
  EXPECT_EQ(pool->open_scopes(), 0);
  EXPECT_EQ(current_scope(), nullptr);
  {
    RegisteredPool::ScopeSet failed(*pool);  // destroyed without close (an exception on its way): still a scope end
  }
  EXPECT_EQ(current_scope(), nullptr);
  EXPECT_EQ(pool->first_registry().scope_ends(), 2u);
  for (const auto& part : pool->parts()) EXPECT_EQ(part.registry->scope_ends(), 2u);
  {
    RegisteredPool::ScopeSet left(*pool);
    left.abandon();  // no scope end: what every rank does for a scope(commit=False)
  }
  EXPECT_EQ(current_scope(), nullptr);
  EXPECT_EQ(pool->first_registry().scope_ends(), 2u);
}

// ---------------------------------------------------------------- issue 46 attacked: one rank differing

// Issue 46 (attack): ranks on GPUs of different compute capabilities (a node with another GPU) get
// other built-in routes: every rank's attach fails at the routes agreement, nothing is registered,
// the calls pair, and once the ranks report the same GPU the pools attach (the routes were left open).
TEST(AutoPoolIssue46, RanksOfOtherComputeCapabilitiesFailAtTheRoutesAgreementOnEveryRank) {
  ::unsetenv("NCCLPOOL_PROFILE");
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  group->set_machine_gpu(-1, "NVIDIA H200", 90);
  group->set_machine_gpu(1, "NVIDIA A100", 80);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  std::array<std::string, 2> attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      pool.attach(comm, std::nullopt);
    } catch (const AgreementError& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    EXPECT_EQ(pool.attached_count(), 0u);
    EXPECT_FALSE(pool.routes_fixed()) << "a failed first attach leaves the routes open";
    comm->user_collective(5);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  for (const auto& e : attach_errors) {
    EXPECT_TRUE(contains(e, "route the auto pool 'auto' differently")) << e;
  }
  expect_same_call_logs(*group);
  EXPECT_FALSE(group->broken());
  EXPECT_EQ(group->live_registrations(), 0);
  group->set_machine_gpu(-1, "NVIDIA H200", 90);
  const auto again = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_TRUE(contains(pool.routes_source(), "compute capability 9.0")) << pool.routes_source();
    void* big = pool.allocate(MiB);
    pool.commit();
    pool.deallocate(big);
    pool.detach(*comm);
    pool.check_invariants();
  });
  for (const auto& e : again) EXPECT_EQ(e, "");
  expect_same_call_logs(*group);
  EXPECT_EQ(group->live_registrations(), 0);
}

// Issue 46 (attack): one rank of three decided `fence` alone, the others unfenced `on` (the same
// routes: windows on every rank) or the guard (no windows: other routes). Every rank's attach fails,
// the local part attached before the agreements is undone everywhere, the calls pair, and the pool
// attaches once the decisions match.
TEST(AutoPoolIssue46, OneRankFencedAloneFailsTheAutoAttachOnEveryRank) {
  ProfileFile file(sim_profile(3));
  for (const int others : {32, 32 + kSymmetricKernelsOff}) {
    auto group = std::make_shared<LoopbackGroup>("world", 3, 2000ms);
    group->set_symmetric_kernels(-1, others);
    group->set_symmetric_kernels(2, 32 + kSymmetricKernelsFenced);
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int i = 0; i < 3; ++i) pools.push_back(make_auto());
    std::array<std::string, 3> attach_errors;
    const auto errors = on_ranks(3, [&](int rank) {
      AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
      auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
      try {
        pool.attach(comm, std::nullopt);
      } catch (const AgreementError& e) {
        attach_errors[static_cast<std::size_t>(rank)] = e.what();
      }
      EXPECT_EQ(pool.attached_count(), 0u) << "rank " << rank;
      EXPECT_FALSE(pool.attached(*comm)) << "rank " << rank;
      comm->user_collective(9);
      pool.check_invariants();
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    for (const auto& e : attach_errors) EXPECT_FALSE(e.empty()) << "others " << others;
    expect_same_call_logs(*group);
    EXPECT_FALSE(group->broken());
    EXPECT_EQ(group->live_registrations(), 0);
    group->set_symmetric_kernels(-1, 32 + kSymmetricKernelsFenced);
    const auto again = on_ranks(3, [&](int rank) {
      AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
      auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
      pool.attach(comm, std::nullopt);
      EXPECT_TRUE(pool.routes().uses(RegistrationKind::symmetric) || pool.routes(Collective::reduce_scatter).uses(RegistrationKind::symmetric));
      void* big = pool.allocate(3 * MiB, 0, Collective::all_gather);
      pool.commit();
      EXPECT_NE(pool.handle_of(big, *comm), nullptr);
      pool.deallocate(big);
      pool.detach(*comm);
    });
    for (const auto& e : again) EXPECT_EQ(e, "");
    expect_same_call_logs(*group);
    EXPECT_EQ(group->live_registrations(), 0);
  }
}

// Issue 46 (attack): one machine keeps a profile per rank count in a folder; a rank on which the
// folder's profile does not apply (another GPU model) takes the built-in routes while the others take
// the profile's: every rank fails at the routes agreement, nothing registered, the calls pair.
TEST(AutoPoolIssue46, AProfileFolderThatAppliesOnOneRankOnlyFailsEveryRank) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ncclpool-issue46-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "profile-2ranks.json") << profile_to_json(sim_profile(2));
  ::setenv("NCCLPOOL_PROFILE", (dir.string() + "/").c_str(), 1);
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  group->set_machine_gpu(1, "another GPU", 90);
  std::vector<std::unique_ptr<AutoPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  std::array<std::string, 2> sources, attach_errors;
  const auto errors = on_ranks(2, [&](int rank) {
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      pool.attach(comm, std::nullopt);
    } catch (const AgreementError& e) {
      attach_errors[static_cast<std::size_t>(rank)] = e.what();
    }
    sources[static_cast<std::size_t>(rank)] = pool.routes_source();
    EXPECT_EQ(pool.attached_count(), 0u);
    comm->user_collective(3);
  });
  ::unsetenv("NCCLPOOL_PROFILE");
  std::filesystem::remove_all(dir);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_TRUE(contains(sources[0], "profile-2ranks.json")) << sources[0];
  EXPECT_TRUE(contains(sources[1], "built-in routes")) << sources[1];
  for (const auto& e : attach_errors) EXPECT_TRUE(contains(e, "route the auto pool 'auto' differently")) << e;
  expect_same_call_logs(*group);
  EXPECT_EQ(group->live_registrations(), 0);
}

}  // namespace
}  // namespace ncclpool

// Auto pools: size routes (routes.hpp), where they come from (profile, built in), and RoutedPool
// (routed_pool.hpp) over the simulator: routing, registration per part, the routes agreement,
// rollback, statistics, and registrations counting back to zero.

#include <gtest/gtest.h>

#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/routed_pool.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---------------------------------------------------------------- SizeRoutes

TEST(SizeRoutes, LookupMergeAndDescription) {
  const SizeRoutes r({{0, Placement::none}, {64 * KiB, Placement::local}, {MiB, Placement::symmetric}, {4 * MiB, Placement::symmetric}});
  ASSERT_EQ(r.classes().size(), 3u);  // the two symmetric classes merge
  EXPECT_EQ(r.for_request(1), Placement::none);
  EXPECT_EQ(r.for_request(64 * KiB - 1), Placement::none);
  EXPECT_EQ(r.for_request(64 * KiB), Placement::local);
  EXPECT_EQ(r.for_request(MiB), Placement::symmetric);
  EXPECT_EQ(r.for_request(SIZE_MAX), Placement::symmetric);
  EXPECT_EQ(r.describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB");
  EXPECT_EQ(SizeRoutes(Placement::symmetric).describe(), "symmetric at every size");
  EXPECT_TRUE(r.uses(Placement::local));
  EXPECT_FALSE(SizeRoutes(Placement::symmetric).uses(Placement::local));
  EXPECT_NE(r.digest(), SizeRoutes(Placement::symmetric).digest());
  EXPECT_EQ(r.digest(), SizeRoutes(r.classes()).digest());
}

TEST(SizeRoutes, RangesTakeTheMostSpannedPlacementTiesToTheLargerSizes) {
  const SizeRoutes r({{0, Placement::none}, {64 * KiB, Placement::symmetric}, {256 * KiB, Placement::none}, {2 * MiB, Placement::local}});
  EXPECT_EQ(r.for_range(1, MiB), Placement::none);                 // none twice, symmetric once
  EXPECT_EQ(r.for_range(100 * KiB, 200 * KiB), Placement::symmetric);
  EXPECT_EQ(r.for_range(MiB, 3 * MiB), Placement::local);          // none once, local once: the larger sizes'
  EXPECT_EQ(r.for_range(3 * MiB, MiB), Placement::local);          // bounds in either order
}

TEST(SizeRoutes, BadClassesAreRefused) {
  EXPECT_THROW(SizeRoutes(std::vector<SizeRoute>{}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{4096, Placement::local}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, Placement::local}, {0, Placement::none}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, Placement::local}, {MiB, Placement::none}, {KiB, Placement::symmetric}}), InvalidArgument);
  EXPECT_THROW(SizeRoutes({{0, static_cast<Placement>(7)}}), InvalidArgument);
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
  p.classes.push_back({KiB, {{"all_gather", "none"}, {"all_reduce", "none"}, {"reduce_scatter", "symmetric"}}});
  p.classes.push_back({64 * KiB, {{"all_gather", "local"}, {"all_reduce", "local"}, {"reduce_scatter", "symmetric"}}});
  p.classes.push_back({MiB, {{"all_gather", "symmetric"}, {"all_reduce", "local"}, {"reduce_scatter", "symmetric"}}});
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
  p.classes.push_back({64 * MiB, {{"all_gather", "none"}, {"all_reduce", "local"}, {"reduce_scatter", "symmetric"}}});
  const SizeRoutes r = routes_from_profile(p, /*windows_possible=*/true);
  EXPECT_EQ(r.describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB to below 64 MiB, local from 64 MiB");
  EXPECT_EQ(r.for_request(1), Placement::none);  // the first class covers the sizes below it
  const SizeRoutes no_windows = routes_from_profile(p, /*windows_possible=*/false);
  EXPECT_FALSE(no_windows.uses(Placement::symmetric));
  EXPECT_EQ(builtin_routes(true), SizeRoutes(Placement::symmetric));
  EXPECT_EQ(builtin_routes(false), SizeRoutes(Placement::local));
}

TEST(RoutesFromProfile, ACollectiveGetsItsOwnPicks) {
  const Profile p = sim_profile(2);
  EXPECT_EQ(routes_from_profile(p, true, Collective::reduce_scatter), SizeRoutes(Placement::symmetric));
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_gather).describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB");
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_reduce).describe(), "none below 64 KiB, local from 64 KiB");
  EXPECT_EQ(routes_from_profile(p, false, Collective::reduce_scatter), SizeRoutes(Placement::local));
  EXPECT_STREQ(to_string(Collective::reduce_scatter), "reduce_scatter");
}

// ---------------------------------------------------------------- RoutedPool

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

std::unique_ptr<RoutedPool> make_auto(bool window_capable = true, const std::string& name = "auto") {
  auto make_part = [=](Placement p) {
    SimSourceConfig sc;
    sc.window_capable = window_capable;
    PoolConfig pc;
    pc.name = name + "/" + to_string(p);
    pc.deterministic = true;
    pc.growth_chunk = 2 * MiB;
    return std::make_shared<Pool>(std::make_shared<SimSource>(sc), pc);
  };
  return std::make_unique<RoutedPool>(name, make_part, builtin_routes(true), "built-in", RegistryOptions{CheckLevel::off});
}

TEST(RoutedPool, RoutesFromTheProfileRegisterEachPartItsWay) {
  ProfileFile file(sim_profile(2));
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  std::vector<std::unique_ptr<RoutedPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    RoutedPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_TRUE(contains(pool.routes_source(), "the profile")) << pool.routes_source();
    void* small = pool.allocate(4 * KiB);
    void* middle = pool.allocate(256 * KiB);
    void* large = pool.allocate(3 * MiB);
    EXPECT_EQ(pool.part_of(small)->placement, Placement::none);
    EXPECT_EQ(pool.part_of(middle)->placement, Placement::local);
    EXPECT_EQ(pool.part_of(large)->placement, Placement::symmetric);
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

TEST(RoutedPool, BuffersNamedForACollectiveFollowItsRoutes) {
  ProfileFile file(sim_profile(1));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto();
  pool->attach(comm, std::nullopt);
  void* any = pool->allocate(4 * KiB);
  void* rs = pool->allocate(4 * KiB, 0, Collective::reduce_scatter);  // reduce-scatter: windows at every size
  void* ar = pool->allocate(3 * MiB, 0, Collective::all_reduce);      // all-reduce: local from 64 KiB
  EXPECT_EQ(pool->part_of(any)->placement, Placement::none);
  EXPECT_EQ(pool->part_of(rs)->placement, Placement::symmetric);
  EXPECT_EQ(pool->part_of(ar)->placement, Placement::local);
  EXPECT_EQ(pool->routes(Collective::reduce_scatter), SizeRoutes(Placement::symmetric));
  for (void* p : {any, rs, ar}) pool->deallocate(p);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
}

// Auto pools on `group` (two ranks) route no size to windows, say `why` in their routes' source, and
// register large buffers locally.
void expect_auto_pools_make_no_windows(const std::shared_ptr<LoopbackGroup>& group, const std::string& why) {
  std::vector<std::unique_ptr<RoutedPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    RoutedPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    pool.attach(comm, std::nullopt);
    EXPECT_FALSE(pool.routes().uses(Placement::symmetric)) << pool.routes().describe();
    EXPECT_TRUE(contains(pool.routes_source(), why)) << pool.routes_source();
    void* big = pool.allocate(8 * MiB);
    EXPECT_EQ(pool.part_of(big)->placement, Placement::local);
    EXPECT_EQ(pool.stats(*comm).kind, RegistrationKind::local);
    pool.deallocate(big);
    pool.detach(*comm);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(group->live_registrations(), 0);
}

// Where NCCL's symmetric kernels are off (NCCLPOOL_SYMMETRIC_KERNELS, or the NCCL versions whose
// kernels can read their input early), a window is a local registration that costs a collective.
TEST(RoutedPool, AutoPoolsMakeNoWindowsWhereTheSymmetricKernelsAreOff) {
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  group->set_symmetric_kernels(-1, 32 + kSymmetricKernelsOff);
  expect_auto_pools_make_no_windows(group, "symmetric kernels are off");
}

// A communicator NCCL gives no symmetric memory (NCCL >= 2.29 knows before any window).
TEST(RoutedPool, AutoPoolsMakeNoWindowsOnACommunicatorWithoutSymmetricMemory) {
  auto group = std::make_shared<LoopbackGroup>("world", 2);
  group->set_windows_supported(-1, false);
  expect_auto_pools_make_no_windows(group, "no symmetric memory");
}

TEST(RoutedPool, RanksThatRouteDifferentlyFailOnEveryRankBeforeAnyRegistration) {
  auto group = std::make_shared<LoopbackGroup>("world", 2, 2000ms);
  std::vector<std::unique_ptr<RoutedPool>> pools;
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

TEST(RoutedPool, AForeignProfileIsNamedAndTheBuiltInRoutesUsed) {
  ProfileFile file(sim_profile(4));
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto pool = make_auto();
  pool->attach(std::make_shared<LoopbackCommunicator>(group, 0), std::nullopt);
  EXPECT_EQ(pool->routes(), SizeRoutes(Placement::symmetric));
  EXPECT_TRUE(contains(pool->routes_source(), "built-in routes")) << pool->routes_source();
  EXPECT_TRUE(contains(pool->routes_source(), "4 ranks")) << pool->routes_source();
}

TEST(RoutedPool, WithoutWindowsSymmetricSizesGoToTheLocalPart) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  auto pool = make_auto(/*window_capable=*/false);
  EXPECT_EQ(pool->routes(), SizeRoutes(Placement::local));
  EXPECT_TRUE(contains(pool->routes_source(), "cannot back windows")) << pool->routes_source();
  void* p = pool->allocate(MiB);
  pool->attach(comm, std::nullopt);  // not collective: nothing symmetric
  EXPECT_EQ(pool->part_of(p)->placement, Placement::local);
  EXPECT_NE(pool->handle_of(p, *comm), nullptr);
  pool->deallocate(p);
  pool->detach(*comm);
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(RoutedPool, ANamedKindRegistersEveryUsedPartThatWay) {
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

TEST(RoutedPool, AFailedWindowAttachLeavesNothingAttached) {
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

TEST(RoutedPool, SinglePoolsNeedAKindAndRouteNothing) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  auto comm = std::make_shared<LoopbackCommunicator>(group, 0);
  Rank r = make_rank();
  RoutedPool pool(r.pool, RegistryOptions{CheckLevel::off});
  EXPECT_FALSE(pool.is_auto());
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
TEST(RoutedPool, RandomRequestsKeepEveryPartConsistentAndCountBackToZero) {
  ProfileFile file(sim_profile(2));
  auto group = std::make_shared<LoopbackGroup>("world", 2, 5000ms);
  std::vector<std::unique_ptr<RoutedPool>> pools;
  for (int i = 0; i < 2; ++i) pools.push_back(make_auto());
  const auto errors = on_ranks(2, [&](int rank) {
    RoutedPool& pool = *pools[static_cast<std::size_t>(rank)];
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
        RoutedPool::ScopeSet scope(pool);
        scope.close();  // commits at the scheduled scope ends
      }
      pool.check_invariants();
    }
    pool.commit();
    for (void* p : live) {
      const RoutedPool::Part* part = pool.part_of(p);
      ASSERT_NE(part, nullptr);
      EXPECT_EQ(pool.handle_of(p, *comm) != nullptr, part->placement != Placement::none);
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

TEST(RoutedPool, ScopesOpenAndCloseOnEveryPart) {
  auto pool = make_auto();
  {
    RoutedPool::ScopeSet scope(*pool);
    EXPECT_EQ(pool->open_scopes(), 1);
    for (const auto& part : pool->parts()) EXPECT_EQ(part.registry->open_scopes(), 1);
    scope.close();
  }
  EXPECT_EQ(pool->open_scopes(), 0);
  EXPECT_EQ(current_scope(), nullptr);
  {
    RoutedPool::ScopeSet failed(*pool);  // destroyed without close (an exception on its way): still a scope end
  }
  EXPECT_EQ(current_scope(), nullptr);
  EXPECT_EQ(pool->first_registry().scope_ends(), 2u);
  for (const auto& part : pool->parts()) EXPECT_EQ(part.registry->scope_ends(), 2u);
  {
    RoutedPool::ScopeSet left(*pool);
    left.abandon();  // no scope end: what every rank does for a scope(commit=False)
  }
  EXPECT_EQ(current_scope(), nullptr);
  EXPECT_EQ(pool->first_registry().scope_ends(), 2u);
}

}  // namespace
}  // namespace ncclpool

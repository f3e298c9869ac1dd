// Attack on a profile class's "any" (ProfileClass::any, the kind for buffers that name no
// collective): ranks that read profiles which differ only there route Collective::any differently
// and nothing else, so only the routes agreement's record and digest of the `any` routes can tell
// them apart. Every rank must fail the attach, no collective left unmatched, nothing registered; a
// difference that vanishes in the routes (no windows anywhere) must not fail; a malformed "any" on
// one rank is named on that rank and fails every rank.
//
// The ranks are threads of one process and the profile comes from NCCLPOOL_PROFILE, so the ranks
// read one file in turn: rank r writes its text, then attaches; rank r + 1 waits until rank r has
// posted its routes agreement (its call log grew: it read its profile before), so no rank reads the
// file while another writes it, and the environment never changes while a rank runs.

#include <gtest/gtest.h>

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/routes.hpp>
#include <ncclpool/sim.hpp>

#include "common/registry_ranks.hpp"
#include "common/scoped_env.hpp"

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Three classes like test_routes.cpp's: below 64 KiB {none, none, symmetric} (any: none), from 64 KiB
// {local, none, symmetric} (a tie: all_reduce's none), from 1 MiB {symmetric, local, symmetric}
// (symmetric). Every rank uses every part whatever class 1's "any" says, so an "any" there changes the
// routes of Collective::any and nothing else: not the parts, not the collectives' routes.
// A simulator profile of `ranks` ranks without classes.
Profile sim_profile(int ranks) {
  Profile p;
  p.gpu = "ncclpool simulator";
  p.nccl_version = 0;
  p.ranks = ranks;
  p.measured = "attack";
  return p;
}

Profile three_classes(int ranks, std::optional<RegistrationKind> any_at_64k) {
  Profile p = sim_profile(ranks);
  p.classes.push_back({0, {{"all_gather", RegistrationKind::none}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({64 * KiB, {{"all_gather", RegistrationKind::local}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}, any_at_64k});
  p.classes.push_back({MiB, {{"all_gather", RegistrationKind::symmetric}, {"all_reduce", RegistrationKind::local}, {"reduce_scatter", RegistrationKind::symmetric}}});
  return p;
}

// Thirteen classes, all_gather and all_reduce alternating none / local, reduce_scatter symmetric: the
// `any` routes have 13 classes, more than the routes record carries (11), and the last class (all_gather
// local, all_reduce none: a tie, none) takes `any_last`. A difference there is in the digest only.
Profile thirteen_classes(int ranks, std::optional<RegistrationKind> any_last) {
  Profile p = sim_profile(ranks);
  for (int i = 0; i < 12; ++i) {
    const RegistrationKind k = i % 2 ? RegistrationKind::local : RegistrationKind::none;
    p.classes.push_back({i == 0 ? 0 : KiB << i, {{"all_gather", k}, {"all_reduce", k}, {"reduce_scatter", RegistrationKind::symmetric}}});
  }
  p.classes.push_back({KiB << 12, {{"all_gather", RegistrationKind::local}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}, any_last});
  return p;
}

std::unique_ptr<AutoPool> make_auto() {
  auto make_part = [](RegistrationKind p) {
    PoolConfig pc;
    pc.name = std::string("auto/") + to_string(p);
    pc.deterministic = true;
    pc.growth_chunk = 2 * MiB;
    return std::make_shared<Pool>(std::make_shared<SimSource>(SimSourceConfig{}), pc);
  };
  return std::make_unique<AutoPool>("auto", make_part, builtin_routes(true), "built-in", RegistryOptions{CheckLevel::off});
}

// The profile file every rank reads (NCCLPOOL_PROFILE), for the test's life.
struct SharedProfileFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("ncclpool-any-attack-" + std::to_string(::getpid()) + ".json");
  testing_support::ScopedEnv env{"NCCLPOOL_PROFILE", path.string()};
  ~SharedProfileFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

struct Outcome {
  std::vector<std::string> errors;        // anything but an AgreementError (must stay empty)
  std::vector<std::string> agreement;     // each rank's AgreementError, "" = attached
  std::vector<std::string> sources;       // each rank's routes_source() after the attach
};

// Each rank in turn writes texts[rank] to the file and attaches pools[rank] with no kind, then makes
// one application collective (it must pair with every other rank's: nothing left unmatched).
Outcome staged_attach(const std::shared_ptr<LoopbackGroup>& group, std::vector<std::unique_ptr<AutoPool>>& pools,
                      const std::vector<std::string>& texts, const std::filesystem::path& path) {
  const int n = group->size();
  std::vector<std::size_t> posted_before;
  for (int r = 0; r < n; ++r) posted_before.push_back(group->call_log(r).size());
  Outcome out;
  out.agreement.resize(static_cast<std::size_t>(n));
  out.sources.resize(static_cast<std::size_t>(n));
  out.errors = on_ranks(n, [&](int rank) {
    if (rank > 0) {  // the previous rank read its profile: it posted its routes agreement
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (group->call_log(rank - 1).size() == posted_before[static_cast<std::size_t>(rank - 1)]) {
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("rank " + std::to_string(rank - 1) + " never posted");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    {
      std::ofstream f(path, std::ios::trunc);
      f << texts[static_cast<std::size_t>(rank)];
    }
    AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    try {
      pool.attach(comm, std::nullopt);
    } catch (const AgreementError& e) {
      out.agreement[static_cast<std::size_t>(rank)] = e.what();
    }
    out.sources[static_cast<std::size_t>(rank)] = pool.routes_source();
    pool.check_invariants();
    comm->user_collective(7);
    if (pool.attached(*comm)) pool.detach(*comm);
  });
  return out;
}

void expect_same_call_logs(const LoopbackGroup& group) {
  for (int rank = 1; rank < group.size(); ++rank) EXPECT_EQ(group.call_log(rank), group.call_log(0)) << "rank " << rank;
}

// Rank 2 alone reads the profile with "any" (the others the same profile without it, or with another
// "any"). The collectives' routes are equal on every rank; only Collective::any's differ. Every rank's
// attach must fail at the routes agreement with nothing attached or registered and the calls paired;
// then, every rank reading the same profile, the pool attaches and routes by "any". This test fails if
// the agreement compared the collectives' routes only: nothing else differs between the ranks (the
// parts used are the same, so no window attach would mismatch either), and the attach would succeed.
// The 13-class profile puts the difference past the classes the record carries: only the digest of
// every collective's routes, `any` included, tells the ranks apart there.
TEST(RoutesAnyAttack, OneRankAloneReadingAnAnyKindFailsEveryRankAndLeavesNothing) {
  SharedProfileFile file;
  struct Case {
    const char* what;
    Profile others, odd, all;
    std::size_t bytes;  // a request that "any" routes
    RegistrationKind any_kind, collective_kind;
  };
  const std::vector<Case> cases = {
      {"3 classes, others without any", three_classes(3, std::nullopt), three_classes(3, RegistrationKind::local), three_classes(3, RegistrationKind::local),
       256 * KiB, RegistrationKind::local, RegistrationKind::none},
      {"3 classes, others with another any", three_classes(3, RegistrationKind::symmetric), three_classes(3, RegistrationKind::local),
       three_classes(3, RegistrationKind::symmetric), 256 * KiB, RegistrationKind::symmetric, RegistrationKind::none},
      {"13 classes, digest only", thirteen_classes(3, std::nullopt), thirteen_classes(3, RegistrationKind::symmetric),
       thirteen_classes(3, RegistrationKind::symmetric), 5 * MiB, RegistrationKind::symmetric, RegistrationKind::none},
  };
  for (const Case& c : cases) {
    for (const LoopbackMatching matching : {LoopbackMatching::strict, LoopbackMatching::nccl}) {
      SCOPED_TRACE(std::string(c.what) + (matching == LoopbackMatching::nccl ? ", nccl matching" : ", strict matching"));
      auto group = std::make_shared<LoopbackGroup>("world", 3, std::chrono::milliseconds(3000), matching);
      std::vector<std::unique_ptr<AutoPool>> pools;
      for (int i = 0; i < 3; ++i) pools.push_back(make_auto());
      const std::string others = profile_to_json(c.others), odd = profile_to_json(c.odd);
      const Outcome failed = staged_attach(group, pools, {others, others, odd}, file.path);
      for (const auto& e : failed.errors) EXPECT_EQ(e, "");
      for (std::size_t r = 0; r < 3; ++r) {
        EXPECT_TRUE(contains(failed.agreement[r], "route the auto pool 'auto' differently")) << "rank " << r << ": '" << failed.agreement[r] << "'";
        EXPECT_TRUE(contains(failed.sources[r], "the profile")) << failed.sources[r];
        EXPECT_EQ(pools[r]->attached_count(), 0u);
        EXPECT_FALSE(pools[r]->routes_fixed()) << "a failed first attach leaves the routes open";
      }
      // What the ranks routed differently: Collective::any only.
      for (int col = 1; col < kCollectives; ++col)
        EXPECT_EQ(pools[0]->routes(static_cast<Collective>(col)), pools[2]->routes(static_cast<Collective>(col))) << to_string(static_cast<Collective>(col));
      EXPECT_NE(pools[0]->routes(Collective::any), pools[2]->routes(Collective::any));
      for (std::size_t r = 0; r < 3; ++r) EXPECT_EQ(pools[r]->stats().segment_count, 0u);
      expect_same_call_logs(*group);
      EXPECT_FALSE(group->broken());
      EXPECT_EQ(group->live_registrations(), 0);

      // The same profile on every rank: the pool attaches and routes by "any".
      std::ofstream(file.path, std::ios::trunc) << profile_to_json(c.all);
      const auto again = on_ranks(3, [&](int rank) {
        AutoPool& pool = *pools[static_cast<std::size_t>(rank)];
        auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
        pool.attach(comm, std::nullopt);
        void* any = pool.allocate(c.bytes);
        void* ar = pool.allocate(c.bytes, 0, Collective::all_reduce);
        EXPECT_EQ(pool.part_of(any)->kind, c.any_kind);
        EXPECT_EQ(pool.part_of(ar)->kind, c.collective_kind);
        pool.commit();
        if (c.any_kind != RegistrationKind::none) {
          EXPECT_NE(pool.handle_of(any, *comm), nullptr);
        }
        pool.deallocate(any);
        pool.deallocate(ar);
        pool.detach(*comm);
        pool.trim();
        pool.check_invariants();
        EXPECT_EQ(pool.stats().active_allocations, 0u);
      });
      for (const auto& e : again) EXPECT_EQ(e, "");
      expect_same_call_logs(*group);
      EXPECT_EQ(group->live_registrations(), 0);
    }
  }
}

// The control: an "any" equal to the majority pick, or two "any" kinds that windows-less routes make
// equal (symmetric becomes local), leave the routes equal: every rank attaches. With windows the
// second pair differs again and every rank fails, as any other difference of routes does; and a rank
// whose communicator has no windows, beside ranks with windows, fails every rank as before.
TEST(RoutesAnyAttack, OnlyWhatTheRoutesMakeOfAnyIsCompared) {
  SharedProfileFile file;
  struct Case {
    const char* what;
    std::optional<RegistrationKind> others, odd;
    int windows;  // -1: on every rank, 0: on none, 2: on rank 2 only
    bool attaches;
  };
  const std::vector<Case> cases = {
      {"odd any = the majority's none", std::nullopt, RegistrationKind::none, -1, true},
      {"local vs symmetric, no windows anywhere", RegistrationKind::local, RegistrationKind::symmetric, 0, true},
      {"local vs symmetric, windows everywhere", RegistrationKind::local, RegistrationKind::symmetric, -1, false},
      {"the same any, windows on rank 2 only", RegistrationKind::symmetric, RegistrationKind::symmetric, 2, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto group = std::make_shared<LoopbackGroup>("world", 3, std::chrono::milliseconds(3000));
    if (c.windows != -1) group->set_windows_supported(-1, false);
    if (c.windows == 2) group->set_windows_supported(2, true);
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int i = 0; i < 3; ++i) pools.push_back(make_auto());
    const std::string others = profile_to_json(three_classes(3, c.others)), odd = profile_to_json(three_classes(3, c.odd));
    const Outcome o = staged_attach(group, pools, {others, others, odd}, file.path);
    for (const auto& e : o.errors) EXPECT_EQ(e, "");
    for (std::size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(o.agreement[r].empty(), c.attaches) << "rank " << r << ": " << o.agreement[r];
      EXPECT_EQ(pools[r]->routes_fixed(), c.attaches);
      if (c.windows == 0) {
        EXPECT_FALSE(pools[r]->routes(Collective::any).uses(RegistrationKind::symmetric)) << pools[r]->routes(Collective::any).describe();
      }
    }
    if (c.attaches) {
      for (int col = 0; col < kCollectives; ++col) EXPECT_EQ(pools[0]->routes(static_cast<Collective>(col)), pools[2]->routes(static_cast<Collective>(col)));
    }
    if (c.windows == 0) {
      EXPECT_EQ(pools[2]->routes(Collective::any).for_request(256 * KiB), RegistrationKind::local);
    }
    expect_same_call_logs(*group);
    EXPECT_FALSE(group->broken());
    EXPECT_EQ(group->live_registrations(), 0);
  }
}

// A malformed "any" on one rank: that rank's profile is not used (its routes' source names the file,
// the class and "any"), it takes the built-in routes, and every rank fails the attach.
TEST(RoutesAnyAttack, AMalformedAnyOnOneRankIsNamedThereAndFailsEveryRank) {
  SharedProfileFile file;
  const std::string good = profile_to_json(three_classes(3, RegistrationKind::local));
  const std::string any_member = "\"any\": \"local\"";
  ASSERT_TRUE(contains(good, any_member)) << good;
  struct Case {
    const char* what;
    std::string replacement;  // of `"any": "local"` in class 1
    std::string named;        // what the error says
  };
  const std::vector<Case> cases = {
      {"a number", "\"any\": 1", "class 1: \"any\""},
      {"null", "\"any\": null", "class 1: \"any\""},
      {"an unknown kind", "\"any\": \"fast\"", "class 1: \"any\""},
      {"a kind in another case", "\"any\": \"Local\"", "class 1: \"any\""},
      {"an object", "\"any\": {\"kind\": \"local\"}", "class 1: \"any\""},
  };
  std::vector<std::string> texts;
  for (const Case& c : cases) {
    std::string bad = good;
    bad.replace(bad.find(any_member), any_member.size(), c.replacement);
    texts.push_back(bad);
  }
  {  // "any" inside "kind": a collective the profile may not name
    std::string bad = good;
    bad.replace(bad.find(any_member), any_member.size(), "\"x\": 0");
    const std::string kind_open = "{\"all_gather\": \"local\"";
    bad.replace(bad.find(kind_open), kind_open.size(), "{\"any\": \"local\", \"all_gather\": \"local\"");
    texts.push_back(bad);
  }
  const std::vector<std::string> named = {"class 1: \"any\"", "class 1: \"any\"", "class 1: \"any\"", "class 1: \"any\"", "class 1: \"any\"",
                                          "class 1: unknown collective \"any\""};
  for (std::size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(texts[i]);
    try {
      (void)parse_profile(texts[i], "bad.json");
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "bad.json, " + named[i])) << e.what();
    }
    auto group = std::make_shared<LoopbackGroup>("world", 3, std::chrono::milliseconds(3000));
    std::vector<std::unique_ptr<AutoPool>> pools;
    for (int r = 0; r < 3; ++r) pools.push_back(make_auto());
    const Outcome o = staged_attach(group, pools, {good, good, texts[i]}, file.path);
    for (const auto& e : o.errors) EXPECT_EQ(e, "");
    for (std::size_t r = 0; r < 3; ++r) EXPECT_TRUE(contains(o.agreement[r], "route the auto pool 'auto' differently")) << "rank " << r << ": " << o.agreement[r];
    EXPECT_TRUE(contains(o.sources[2], file.path.string() + ", " + named[i])) << o.sources[2];
    EXPECT_TRUE(contains(o.sources[2], "not used")) << o.sources[2];
    for (auto& p : pools) EXPECT_EQ(p->attached_count(), 0u);
    expect_same_call_logs(*group);
    EXPECT_FALSE(group->broken());
    EXPECT_EQ(group->live_registrations(), 0);
  }
}

// "any" on the first and the last class, on a class whose collectives agree (honoured: it is the
// profile's word), beside an empty "kind", and for_range over the classes it makes.
TEST(RoutesAnyAttack, AnyRoundTripsAndIsHonouredWhereverItIs) {
  Profile p = three_classes(2, std::nullopt);
  p.classes.front().any = RegistrationKind::symmetric;  // the collectives: none, none, symmetric
  p.classes.back().any = RegistrationKind::none;        // symmetric, local, symmetric
  const Profile back = parse_profile(profile_to_json(p), "t");
  ASSERT_EQ(back.classes.size(), 3u);
  EXPECT_EQ(back.classes[0].any, RegistrationKind::symmetric);
  EXPECT_FALSE(back.classes[1].any.has_value());
  EXPECT_EQ(back.classes[2].any, RegistrationKind::none);
  EXPECT_EQ(profile_to_json(back), profile_to_json(p));
  const SizeRoutes any = routes_from_profile(back, true);
  EXPECT_EQ(any.describe(), "symmetric below 64 KiB, none from 64 KiB");
  EXPECT_EQ(routes_from_profile(back, false).describe(), "local below 64 KiB, none from 64 KiB");
  EXPECT_EQ(routes_from_profile(back, true, Collective::all_gather).describe(), "none below 64 KiB, local from 64 KiB to below 1 MiB, symmetric from 1 MiB");
  EXPECT_EQ(any.for_range(KiB, 32 * KiB), RegistrationKind::symmetric);
  EXPECT_EQ(any.for_range(KiB, 2 * MiB), RegistrationKind::none);

  Profile agree = three_classes(2, std::nullopt);
  for (auto& [op, kind] : agree.classes[2].kind) kind = RegistrationKind::symmetric;
  agree.classes[2].any = RegistrationKind::local;  // all agree on symmetric; "any" still wins for Collective::any
  EXPECT_EQ(routes_from_profile(parse_profile(profile_to_json(agree), "t"), true).for_request(2 * MiB), RegistrationKind::local);

  Profile empty_kind;
  empty_kind.gpu = "g";
  empty_kind.ranks = 2;
  empty_kind.classes.push_back({0, {}, RegistrationKind::local});
  const Profile empty_back = parse_profile(profile_to_json(empty_kind), "t");
  EXPECT_EQ(empty_back.classes.front().any, RegistrationKind::local);
  EXPECT_EQ(routes_from_profile(empty_back, true), SizeRoutes(RegistrationKind::local));

  Profile no_classes;
  no_classes.gpu = "g";
  no_classes.ranks = 2;
  EXPECT_EQ(routes_from_profile(parse_profile(profile_to_json(no_classes), "t"), true), builtin_routes(true));
}

// Found by this attack (older than "any", which inherited it): at a rank count that is no power of
// two, bench coll's all-gather and reduce-scatter sizes are multiples of 4 * ranks (64 MiB is 67108860
// bytes at 3 ranks) while all-reduce's are not, and `ncclpool tune` wrote one class per op group:
// {all_gather, reduce_scatter} at 67108860, {all_reduce} at 67108864, and so on. A class without a
// collective took the majority of those it had, so all-gather buffers followed all-reduce's lone kind
// (none) instead of their own measured symmetric. The shape below is what tune wrote for the 4-rank
// run relabelled with 3 ranks' sizes; the library now carries each collective's kind across the
// classes of the others (and tune writes every collective in every class).
TEST(RoutesAnyAttack, ACollectiveKeepsItsOwnKindAcrossClassesOfOtherCollectives) {
  Profile p;
  p.gpu = "NVIDIA H200";
  p.ranks = 3;
  p.classes.push_back({0, {{"all_gather", RegistrationKind::symmetric}, {"reduce_scatter", RegistrationKind::symmetric}, {"all_reduce", RegistrationKind::symmetric}}});
  p.classes.push_back({67108860, {{"all_gather", RegistrationKind::symmetric}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({67108864, {{"all_reduce", RegistrationKind::none}}});
  p.classes.push_back({134217720, {{"all_gather", RegistrationKind::symmetric}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({134217728, {{"all_reduce", RegistrationKind::none}}});
  EXPECT_EQ(routes_from_profile(p, true, Collective::all_gather).for_request(100 * MiB), RegistrationKind::symmetric)
      << routes_from_profile(p, true, Collective::all_gather).describe();
  EXPECT_EQ(routes_from_profile(p, true, Collective::reduce_scatter).for_request(100 * MiB), RegistrationKind::symmetric)
      << routes_from_profile(p, true, Collective::reduce_scatter).describe();
}

}  // namespace
}  // namespace ncclpool

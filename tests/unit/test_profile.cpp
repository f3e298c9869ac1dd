// Profiles (profile.hpp): JSON round trip, strict parsing, the lookup that refuses a profile
// measured on another GPU, NCCL or rank count, and how the symmetric CTA decision uses it.

#include <gtest/gtest.h>
#include <ncclpool/cuda.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/profile.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace ncclpool {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Profile h200() {
  Profile p;
  p.gpu = "NVIDIA H200";
  p.nccl_version = 22809;
  p.ranks = 2;
  p.symmetric_ctas = 32;
  p.measured = "2026-11-23T06:00:00Z";
  p.classes.push_back({16384, {{"all_gather", RegistrationKind::none}, {"all_reduce", RegistrationKind::none}, {"reduce_scatter", RegistrationKind::symmetric}}});
  p.classes.push_back({262144, {{"all_gather", RegistrationKind::symmetric}, {"all_reduce", RegistrationKind::symmetric}, {"reduce_scatter", RegistrationKind::symmetric}}});
  return p;
}

// A profile file in a temporary folder, NCCLPOOL_PROFILE pointing at it for the test's life.
struct ProfileFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ncclpool-profile-" + std::to_string(::getpid()));
  std::filesystem::path path = dir / "profile.json";
  explicit ProfileFile(const std::string& text) {
    std::filesystem::create_directories(dir);
    std::ofstream(path) << text;
    ::setenv("NCCLPOOL_PROFILE", path.c_str(), 1);
  }
  ~ProfileFile() {
    ::unsetenv("NCCLPOOL_PROFILE");
    std::filesystem::remove_all(dir);
  }
};

// "any" (the kind for buffers that name no collective) is a member of the class beside "kind", so a
// library that predates it reads the profile and takes the majority instead.
TEST(Profile, AClassesAnyKindRoundTripsAndIsChecked) {
  Profile p = h200();
  p.classes.front().any = RegistrationKind::local;
  const std::string json = profile_to_json(p);
  EXPECT_TRUE(contains(json, "}, \"any\": \"local\"}")) << json;
  const Profile back = parse_profile(json, "test");
  EXPECT_EQ(back.classes.front().any, RegistrationKind::local);
  EXPECT_FALSE(back.classes.back().any.has_value());
  std::string bad = json;
  bad.replace(bad.find("\"any\": \"local\""), 14, "\"any\": \"fast\"");
  try {
    (void)parse_profile(bad, "bad.json");
    ADD_FAILURE() << "an unknown kind for any was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "bad.json, class 0: \"any\"")) << e.what();
  }
}

TEST(Profile, JsonRoundTrip) {
  const Profile p = h200();
  const Profile back = parse_profile(profile_to_json(p), "test");
  EXPECT_EQ(back.gpu, p.gpu);
  EXPECT_EQ(back.nccl_version, p.nccl_version);
  EXPECT_EQ(back.ranks, p.ranks);
  EXPECT_EQ(back.symmetric_ctas, p.symmetric_ctas);
  EXPECT_EQ(back.measured, p.measured);
  EXPECT_FALSE(back.copy_engine_all_gather);
  Profile ce = p;
  ce.copy_engine_all_gather = true;
  EXPECT_TRUE(parse_profile(profile_to_json(ce), "test").copy_engine_all_gather);
  ASSERT_EQ(back.classes.size(), 2u);
  EXPECT_EQ(back.classes[1].min_bytes, 262144u);
  EXPECT_EQ(back.classes[0].kind.at("reduce_scatter"), RegistrationKind::symmetric);
}

TEST(Profile, BadDocumentsAreRefusedWithTheirReason) {
  const std::string good = profile_to_json(h200());
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "JSON"},
      {"[]", "not a JSON object"},
      {std::string(good).replace(good.find("\"ncclpool_profile\": 1"), 21, "\"ncclpool_profile\": 2"), "format 2"},
      {std::string(good).replace(good.find("\"ranks\": 2"), 10, "\"ranks\": \"2\""), "\"ranks\" has the wrong type"},
      {std::string(good).replace(good.find("\"symmetric_ctas\": 32"), 20, "\"symmetric_ctas\": 99"), "above 64"},
      {std::string(good).replace(good.find("\"none\""), 6, "\"fast\""), "must be \"none\", \"local\" or \"symmetric\""},
      {std::string(good).replace(good.find("\"all_gather\""), 12, "\"broadcast\""), "unknown collective \"broadcast\""},
      {std::string(good).replace(good.find("262144"), 6, "100"), "ascend"},
  };
  for (const auto& [text, why] : cases) {
    try {
      (void)parse_profile(text, "bad.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), why)) << e.what();
      EXPECT_TRUE(contains(e.what(), "bad.json")) << e.what();
    }
  }
}

// Values beyond what the field holds are refused, naming the field and the value: 2^31 read as a
// negative int, and a min_bytes beyond int64 was read as INT64_MAX.
TEST(Profile, OutOfRangeValuesAreRefusedNamingTheFieldAndTheValue) {
  const std::string good = profile_to_json(h200());
  auto with = [&](const std::string& from, const std::string& to) { return std::string(good).replace(good.find(from), from.size(), to); };
  const std::pair<std::string, std::string> cases[] = {
      {with("\"ranks\": 2", "\"ranks\": 2147483648"), "\"ranks\" must be an integer in 1..2147483647, not 2147483648"},
      {with("\"symmetric_ctas\": 32", "\"symmetric_ctas\": 2147483648"),
       "\"symmetric_ctas\" must be an integer in 0..2147483647, not 2147483648"},
      {with("\"nccl_version\": 22809", "\"nccl_version\": -1"), "\"nccl_version\" must be an integer in 0..2147483647, not -1"},
      {with("262144", "1000000000000000000000000000000"),
       "class 1: \"min_bytes\" must be an integer in 0..9223372036854775807, not 1e+30"},
      {with("262144", "2.5"), "class 1: \"min_bytes\" must be an integer in 0..9223372036854775807, not 2.5"},
  };
  for (const auto& [text, why] : cases) {
    try {
      const Profile p = parse_profile(text, "bad.json");
      ADD_FAILURE() << "accepted (ranks " << p.ranks << ", symmetric_ctas " << p.symmetric_ctas << "): " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), why)) << e.what();
      EXPECT_TRUE(contains(e.what(), "bad.json")) << e.what();
    }
  }
}

TEST(Profile, LookupUsesOnlyAProfileOfThisMachine) {
  ::unsetenv("NCCLPOOL_PROFILE");
  ProfileFile file(profile_to_json(h200()));
  EXPECT_EQ(profile_path(), file.path.string());
  ProfileLookup hit = find_profile("NVIDIA H200", 22809, 2);
  ASSERT_TRUE(hit.profile.has_value()) << hit.why_not;
  EXPECT_EQ(hit.profile->symmetric_ctas, 32);
  EXPECT_TRUE(contains(find_profile("NVIDIA H100 80GB HBM3", 22809, 2).why_not, "measured for GPU NVIDIA H200, this is NVIDIA H100"));
  EXPECT_TRUE(contains(find_profile("NVIDIA H200", 22703, 2).why_not, "NCCL 22809, this is 22703"));
  EXPECT_TRUE(contains(find_profile("NVIDIA H200", 22809, 4).why_not, "2 ranks, this communicator has 4"));
  std::ofstream(file.path) << "{";
  testing::internal::CaptureStderr();
  const ProfileLookup broken = find_profile("NVIDIA H200", 22809, 2);
  (void)find_profile("NVIDIA H200", 22809, 2);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(broken.profile.has_value());
  EXPECT_TRUE(contains(broken.why_not, "not used")) << broken.why_not;
  // A file that is there but does not parse is said on stderr, once per path.
  EXPECT_TRUE(contains(said, "ncclpool: " + broken.why_not)) << said;
  EXPECT_EQ(said.find("ncclpool:"), said.rfind("ncclpool:")) << said;
  std::filesystem::remove(file.path);
  EXPECT_TRUE(contains(find_profile("NVIDIA H200", 22809, 2).why_not, "no profile at")) << find_profile("NVIDIA H200", 22809, 2).why_not;
}

TEST(Profile, TheSymmetricCtaDecisionTakesAMatchingProfileAndNamesAForeignOne) {
  Profile p = h200();
  p.symmetric_ctas = 16;
  ProfileFile file(profile_to_json(p));
  const ProfileLookup hit = find_profile("NVIDIA H200", 22809, 2);
  SymmetricCtas c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &hit);
  EXPECT_EQ(c.ctas, 16);
  EXPECT_TRUE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "the profile " + file.path.string())) << c.source;
  // The user's variables still win over a profile.
  EXPECT_EQ(choose_symmetric_ctas(nullptr, "nccl", 9, 0, &hit).ctas, 0);
  EXPECT_EQ(choose_symmetric_ctas("8", nullptr, 9, 0, &hit).ctas, 8);
  // A profile of NCCL's own count: nothing is set.
  p.symmetric_ctas = 0;
  std::ofstream(file.path) << profile_to_json(p);
  const ProfileLookup own = find_profile("NVIDIA H200", 22809, 2);
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &own);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "NCCL's own choice, as the profile")) << c.source;
  // Another machine's profile: the built-in default, and the source says why the profile was not used.
  const ProfileLookup foreign = find_profile("NVIDIA H200", 22809, 8);
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &foreign);
  EXPECT_EQ(c.ctas, 32);
  EXPECT_TRUE(contains(c.source, "not used: measured for 2 ranks")) << c.source;
}

// A process that declared that its symmetric collectives overlap compute (prefer_nccl_symmetric_ctas):
// a profile's measured count still wins (it was measured on this machine, NCCL and rank count); a
// profile with no count (its runs had the symmetric kernels off) or another machine's yields to the
// declaration, and the source names both.
TEST(Profile, AMeasuredCountWinsOverTheDeclarationOfOverlap) {
  Profile p = h200();
  p.symmetric_ctas = 16;
  ProfileFile file(profile_to_json(p));
  const ProfileLookup hit = find_profile("NVIDIA H200", 22809, 2);
  ASSERT_TRUE(hit.profile.has_value()) << hit.why_not;
  SymmetricCtas c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &hit, true);
  EXPECT_EQ(c.ctas, 16);
  EXPECT_TRUE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "the profile " + file.path.string())) << c.source;
  p.symmetric_ctas = 32;  // a profile that measured the default's count: still the profile's
  std::ofstream(file.path) << profile_to_json(p);
  const ProfileLookup same = find_profile("NVIDIA H200", 22809, 2);
  EXPECT_EQ(choose_symmetric_ctas(nullptr, nullptr, 9, 0, &same, true).ctas, 32);
  p.symmetric_ctas = 0;
  p.symmetric_ctas_measured = false;
  std::ofstream(file.path) << profile_to_json(p);
  const ProfileLookup off = find_profile("NVIDIA H200", 22809, 2);
  ASSERT_TRUE(off.profile.has_value()) << off.why_not;
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &off, true);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_FALSE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "ncclpool_prefer_nccl_symmetric_ctas") && contains(c.source, "measured no count")) << c.source;
  const ProfileLookup foreign = find_profile("NVIDIA H200", 22809, 8);
  c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &foreign, true);
  EXPECT_EQ(c.ctas, 0);
  EXPECT_TRUE(contains(c.source, "ncclpool_prefer_nccl_symmetric_ctas") && contains(c.source, "not used: measured for 2 ranks")) << c.source;
  EXPECT_EQ(choose_symmetric_ctas(nullptr, nullptr, 9, 0, &foreign, false).ctas, 32);  // undeclared: the default
}

// An optional boolean field: absent (a profile written before it) it reads as `absent`; anything but
// true or false is refused, naming it.
template <class Field>
void expect_optional_boolean(const std::string& text, const std::string& name, bool absent, Field field) {
  const auto at = text.find("\"" + name + "\": ");
  ASSERT_NE(at, std::string::npos) << text;
  const auto length = text.find(',', at) + 1 - at;
  std::string old = text;
  old.erase(at, length);
  EXPECT_EQ(field(parse_profile(old, "old")), absent) << name;
  std::string wrong = text;
  wrong.replace(at, length, "\"" + name + "\": 1,");
  try {
    (void)parse_profile(wrong, "wrong");
    ADD_FAILURE() << "a number was taken for " << name;
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "\"" + name + "\" must be true or false")) << e.what();
  }
}

TEST(Profile, CopyEngineFieldIsOptionalAndMustBeABoolean) {
  expect_optional_boolean(profile_to_json(h200()), "copy_engine_all_gather", false, [](const Profile& p) { return p.copy_engine_all_gather; });
}

// A profile measured with the symmetric kernels off (the NCCL-version guard) holds no CTA count: the
// library keeps its built-in default (32 on Hopper) instead of reading 0 as "NCCL's own choice",
// which measured 1.3-1.4x slower there. Profiles written before the field measured one.
TEST(Profile, ACountMeasuredWithTheKernelsOffIsNotTaken) {
  Profile p = h200();
  p.symmetric_ctas = 0;
  p.symmetric_ctas_measured = false;
  const std::string text = profile_to_json(p);
  EXPECT_FALSE(parse_profile(text, "off").symmetric_ctas_measured);
  ProfileFile file(text);
  const ProfileLookup hit = find_profile("NVIDIA H200", 22809, 2);
  ASSERT_TRUE(hit.profile.has_value()) << hit.why_not;  // it applies (its routes do), its count does not
  const SymmetricCtas c = choose_symmetric_ctas(nullptr, nullptr, 9, 0, &hit);
  EXPECT_EQ(c.ctas, 32);
  EXPECT_TRUE(c.set_by_ncclpool);
  EXPECT_TRUE(contains(c.source, "measured no count (its runs had the symmetric kernels off)")) << c.source;
  EXPECT_TRUE(contains(c.source, file.path.string())) << c.source;
  expect_optional_boolean(text, "symmetric_ctas_measured", true, [](const Profile& q) { return q.symmetric_ctas_measured; });
}

// The copy-engine vote (CopyEngineVote in nccl.hpp): off switch first, then NCCL's version, then the
// NCCL-version guard, then a request, then the profile; never on by default without a profile.
TEST(CopyEngineVote, FollowsItsRulesInOrder) {
  SymmetricKernels on;
  on.enabled = true;
  on.why = "on: test";
  SymmetricKernels off;
  off.enabled = false;
  off.why = "off: the guard";
  Profile p = h200();
  p.copy_engine_all_gather = true;
  ProfileFile file(profile_to_json(p));
  const ProfileLookup says_yes = find_profile("NVIDIA H200", 22809, 2);
  const ProfileLookup foreign = find_profile("NVIDIA H200", 22809, 8);
  using R = CopyEngineRequest;
  struct Case {
    R requested;
    const char* setting;
    int nccl;
    const SymmetricKernels* kernels;
    const ProfileLookup* profile;
    bool use;
    const char* why_part;
  };
  const Case cases[] = {
      {R::on, "off", 23007, &on, &says_yes, false, "NCCLPOOL_COPY_ENGINE=off"},  // the environment's off wins
      {R::off, "on", 23007, &on, &says_yes, false, "not requested"},
      {R::on, nullptr, 22705, &on, nullptr, false, "has no CTA policy"},
      {R::on, nullptr, 0, &on, nullptr, false, "no NCCL loaded"},
      {R::on, nullptr, 22809, &off, nullptr, false, "symmetric kernels are off"},
      {R::automatic, "on", 22809, &off, &says_yes, false, "off: the guard"},
      {R::on, nullptr, 22809, &on, nullptr, true, "default stream"},  // 2.28.9: the caveat is named
      {R::on, nullptr, 23007, &on, nullptr, true, "requested"},
      {R::automatic, "on", 23007, &on, nullptr, true, "NCCLPOOL_COPY_ENGINE=on"},
      {R::automatic, nullptr, 23007, &on, &says_yes, true, "profile"},
      {R::automatic, "auto", 23007, &on, &foreign, false, "not used: measured for 2 ranks"},
      {R::automatic, nullptr, 23007, &on, nullptr, false, "off by default"},
  };
  for (const Case& c : cases) {
    const CopyEngineVote v = choose_copy_engine(c.requested, c.setting, c.nccl, *c.kernels, c.profile);
    EXPECT_EQ(v.use, c.use) << v.why;
    EXPECT_TRUE(contains(v.why, c.why_part)) << v.why << " lacks " << c.why_part;
    EXPECT_FALSE(v.ignored_setting);
  }
  // A profile that measured no gain says so.
  p.copy_engine_all_gather = false;
  std::ofstream(file.path) << profile_to_json(p);
  const ProfileLookup says_no = find_profile("NVIDIA H200", 22809, 2);
  const CopyEngineVote no = choose_copy_engine(R::automatic, nullptr, 23007, on, &says_no);
  EXPECT_FALSE(no.use);
  EXPECT_TRUE(contains(no.why, "did not measure")) << no.why;
  // Anything but auto|on|off is auto, named.
  const CopyEngineVote odd = choose_copy_engine(R::on, "yes", 23007, on, nullptr);
  EXPECT_TRUE(odd.use);
  EXPECT_TRUE(odd.ignored_setting);
  EXPECT_TRUE(contains(odd.why, "NCCLPOOL_COPY_ENGINE='yes' is not auto, on or off")) << odd.why;
}

// Without a GPU (CI) or NCCL the vote is no, with the reason, even when asked for.
TEST(CopyEngineVote, NoGpuOrNcclMeansNo) {
  if (nccl_info().available && cuda_available(nullptr)) GTEST_SKIP() << "a GPU and NCCL are here";
  const CopyEngineVote v = copy_engine_vote(CopyEngineRequest::on, 0, 2, nullptr);
  EXPECT_FALSE(v.use);
  EXPECT_TRUE(contains(v.why, "off: ")) << v.why;
}

// One machine keeps one profile per rank count: NCCLPOOL_PROFILE naming a folder (or the cache folder)
// holds profile-<N>ranks.json; the cache folder's single profile.json of earlier versions is read
// while the per-count file is absent.
TEST(Profile, AFolderKeepsOneProfilePerRankCount) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ncclpool-profiles-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Profile two = h200(), four = h200();
  four.ranks = 4;
  four.symmetric_ctas = 16;
  std::ofstream(dir / "profile-2ranks.json") << profile_to_json(two);
  std::ofstream(dir / "profile-4ranks.json") << profile_to_json(four);
  ::setenv("NCCLPOOL_PROFILE", dir.c_str(), 1);
  EXPECT_EQ(profile_path(4), (dir / "profile-4ranks.json").string());
  const ProfileLookup at2 = find_profile("NVIDIA H200", 22809, 2), at4 = find_profile("NVIDIA H200", 22809, 4);
  ASSERT_TRUE(at2.profile && at4.profile) << at2.why_not << " / " << at4.why_not;
  EXPECT_EQ(at2.profile->symmetric_ctas, 32);
  EXPECT_EQ(at4.profile->symmetric_ctas, 16);
  EXPECT_TRUE(contains(find_profile("NVIDIA H200", 22809, 8).why_not, "no profile at " + (dir / "profile-8ranks.json").string()));
  EXPECT_TRUE(contains(read_profile().why_not, "profile folder " + dir.string() + ": one profile per rank count")) << read_profile().why_not;
  // The cache folder (NCCLPOOL_PROFILE unset): its old single file serves until a per-count one exists.
  ::unsetenv("NCCLPOOL_PROFILE");
  const char* old_cache = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_cache ? old_cache : "";
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  std::filesystem::create_directories(dir / "ncclpool");
  std::ofstream(dir / "ncclpool" / "profile.json") << profile_to_json(two);
  EXPECT_EQ(profile_path(2), (dir / "ncclpool" / "profile.json").string());
  std::ofstream(dir / "ncclpool" / "profile-2ranks.json") << profile_to_json(two);
  EXPECT_EQ(profile_path(2), (dir / "ncclpool" / "profile-2ranks.json").string());
  EXPECT_EQ(profile_path(4), (dir / "ncclpool" / "profile.json").string());
  if (old_cache) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclpool

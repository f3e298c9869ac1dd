// Statistics made from the field lists (stats_fields.h): the sums of PoolStats and CommunicatorStats
// (an auto pool's parts combined), PoolStats' JSON, and the C ABI's struct_size rule (capi/stats.hpp).

#include "capi/stats.hpp"

#include <ncclpool/registry.hpp>
#include <ncclpool/stats.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ncclpool {
namespace {

// Every field of the C++ struct set to a distinct value: base + its position in the list.
PoolStats numbered_pool_stats(std::size_t base) {
  PoolStats s;
  std::size_t n = base;
#define NCCLPOOL_NUMBER(type, name, merge, scope, doc) NCCLPOOL_STATS_IF_CXX_##scope(s.name = n++;)
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_NUMBER)
#undef NCCLPOOL_NUMBER
  return s;
}

TEST(PoolStats, PartsAddUpLargestBlocksTakeTheMaximum) {
  PoolStats a = numbered_pool_stats(1);
  a.largest_free_block = 4096;
  a.largest_fresh_block = 100;
  PoolStats b = numbered_pool_stats(1000);
  b.largest_free_block = 512;
  b.largest_fresh_block = 8192;
  const PoolStats a_before = a;
  a += b;
  EXPECT_EQ(a.allocated_bytes, a_before.allocated_bytes + b.allocated_bytes);
  EXPECT_EQ(a.peak_allocated_bytes, a_before.peak_allocated_bytes + b.peak_allocated_bytes);  // the parts' peaks, summed
  EXPECT_EQ(a.peak_reserved_bytes, a_before.peak_reserved_bytes + b.peak_reserved_bytes);
  EXPECT_EQ(a.segment_count, a_before.segment_count + b.segment_count);
  EXPECT_EQ(a.oom_count, a_before.oom_count + b.oom_count);
  EXPECT_EQ(a.unpublished_skips, a_before.unpublished_skips + b.unpublished_skips);
  EXPECT_EQ(a.largest_free_block, 4096u);  // a request is served by one part: the larger block
  EXPECT_EQ(a.largest_fresh_block, 8192u);
  // Every field as its `merge` says.
#define NCCLPOOL_CHECK_sum(name) EXPECT_EQ(a.name, a_before.name + b.name) << #name;
#define NCCLPOOL_CHECK_max(name) EXPECT_EQ(a.name, std::max(a_before.name, b.name)) << #name;
#define NCCLPOOL_CHECK(type, name, merge, scope, doc) NCCLPOOL_STATS_IF_CXX_##scope(NCCLPOOL_CHECK_##merge(name))
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_CHECK)
#undef NCCLPOOL_CHECK
#undef NCCLPOOL_CHECK_max
#undef NCCLPOOL_CHECK_sum
}

TEST(PoolStats, JsonHasEveryFieldOfTheCxxStructInTheListsOrder) {
  const PoolStats s = numbered_pool_stats(7);
  const std::string json = to_json(s);
  std::string expected;
  std::size_t n = 7;
#define NCCLPOOL_EXPECT_KEY(type, name, merge, scope, doc) \
  NCCLPOOL_STATS_IF_CXX_##scope(expected += (expected.empty() ? "{" : ",") + std::string("\"" #name "\":") + std::to_string(n++);)
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_EXPECT_KEY)
#undef NCCLPOOL_EXPECT_KEY
  EXPECT_EQ(json, expected + "}");
  EXPECT_NE(json.find("\"allocated_bytes\":7,"), std::string::npos);
  EXPECT_NE(json.find("\"largest_fresh_block\":"), std::string::npos);
  EXPECT_EQ(json.find("attached_communicators"), std::string::npos);  // the C ABI's own field
}

TEST(CommunicatorStats, PartsAddUpSymmetricWhereAnyPartIs) {
  CommunicatorStats local_part;
  local_part.kind = RegistrationKind::local;
  local_part.registrations = 3;
  local_part.registered_segments = 2;
  local_part.bytes_registered = 1 << 20;
  local_part.registration_seconds = 0.25;
  local_part.agreements_in_flight = 1;
  local_part.segments_created_in_capture = 1;
  CommunicatorStats symmetric_part;
  symmetric_part.kind = RegistrationKind::symmetric;
  symmetric_part.registrations = 1;
  symmetric_part.registered_segments = 1;
  symmetric_part.bytes_registered = 1 << 30;
  symmetric_part.registration_seconds = 0.5;
  symmetric_part.agreements = 4;
  symmetric_part.errors = 2;

  CommunicatorStats sum;  // as RegisteredPool::stats(comm) starts: the kind it was attached with
  sum.kind = RegistrationKind::local;
  sum += local_part;
  EXPECT_EQ(sum.kind, RegistrationKind::local);
  sum += symmetric_part;
  EXPECT_EQ(sum.kind, RegistrationKind::symmetric);
  sum += local_part;  // a local part after a symmetric one leaves it symmetric
  EXPECT_EQ(sum.kind, RegistrationKind::symmetric);
  EXPECT_EQ(sum.registrations, 7u);
  EXPECT_EQ(sum.registered_segments, 5u);
  EXPECT_EQ(sum.bytes_registered, (2u << 20) + (1u << 30));
  EXPECT_DOUBLE_EQ(sum.registration_seconds, 1.0);
  EXPECT_EQ(sum.agreements, 4u);
  EXPECT_EQ(sum.agreements_in_flight, 2u);
  EXPECT_EQ(sum.errors, 2u);
  EXPECT_EQ(sum.segments_created_in_capture, 2u);
}

// A stats struct of three versions: the first release had a and b, then c and d were appended.
struct Version3 {
  std::size_t struct_size;
  std::uint64_t a;
  int b;
  double c;  // added later
  int d;     // added later
};
constexpr ncclpool_stats_field_t kVersion3Fields[] = {
    {"struct_size", NCCLPOOL_FIELD_SIZE, offsetof(Version3, struct_size), ""},
    {"a", NCCLPOOL_FIELD_UINT64, offsetof(Version3, a), ""},
    {"b", NCCLPOOL_FIELD_INT, offsetof(Version3, b), ""},
    {"c", NCCLPOOL_FIELD_DOUBLE, offsetof(Version3, c), ""},
    {"d", NCCLPOOL_FIELD_INT, offsetof(Version3, d), ""},
};
const capi::StatsLayout kVersion3{kVersion3Fields, 5, 2, sizeof(Version3), alignof(Version3), "version3_t"};

TEST(CapiStructSize, OlderVersionsGetTheirFieldsNewerOnesThisLibrarys) {
  EXPECT_EQ(sizeof(Version3), 40u);
  EXPECT_EQ(capi::caller_struct_bytes(kVersion3, 24, "stats"), 24u);  // the first release: a, b (padded)
  EXPECT_EQ(capi::caller_struct_bytes(kVersion3, 32, "stats"), 32u);  // a, b, c
  EXPECT_EQ(capi::caller_struct_bytes(kVersion3, 40, "stats"), 40u);  // this library's
  EXPECT_EQ(capi::caller_struct_bytes(kVersion3, 48, "stats"), 40u);  // a newer caller's: this library's fields
  EXPECT_EQ(capi::caller_struct_bytes(kVersion3, 4096, "stats"), 40u);
}

TEST(CapiStructSize, TooSmallOrNoVersionsSizeIsAnError) {
  for (std::size_t wrong : {0u, 8u, 16u, 20u}) {
    try {
      (void)capi::caller_struct_bytes(kVersion3, wrong, "stats");
      ADD_FAILURE() << wrong << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("stats->struct_size is " + std::to_string(wrong) + ", smaller than any version of version3_t (the first release's is 24)"),
                std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("set it to sizeof(version3_t)"), std::string::npos);
    }
  }
  for (std::size_t wrong : {25u, 28u, 36u, 44u}) {
    try {
      (void)capi::caller_struct_bytes(kVersion3, wrong, "stats");
      ADD_FAILURE() << wrong << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not the size of any version of version3_t (40 in this library)"), std::string::npos) << e.what();
    }
  }
}

TEST(CapiStructSize, FillStatsWritesOnlyWhatTheCallersStructHolds) {
  Version3 caller;
  std::memset(&caller, 0x5a, sizeof caller);
  caller.struct_size = 24;  // built against the first release
  const auto make = [] { return Version3{sizeof(Version3), 1, 2, 3.0, 4}; };
  capi::fill_stats(&caller, kVersion3, make);
  EXPECT_EQ(caller.struct_size, 24u);
  EXPECT_EQ(caller.a, 1u);
  EXPECT_EQ(caller.b, 2);
  EXPECT_EQ(caller.d, 0x5a5a5a5a);  // past its struct: not written
  caller.struct_size = 32;
  capi::fill_stats(&caller, kVersion3, make);
  EXPECT_EQ(caller.c, 3.0);
  EXPECT_EQ(caller.d, 0x5a5a5a5a);
  caller.struct_size = 40;
  capi::fill_stats(&caller, kVersion3, make);
  EXPECT_EQ(caller.d, 4);
  caller.struct_size = 28;
  caller.a = 7;
  bool made = false;
  EXPECT_THROW(capi::fill_stats(&caller, kVersion3, [&] {
                 made = true;
                 return make();
               }),
               InvalidArgument);
  EXPECT_FALSE(made);  // checked before the stats are taken
  EXPECT_EQ(caller.struct_size, 28u);
  EXPECT_EQ(caller.a, 7u);
}

}  // namespace
}  // namespace ncclpool

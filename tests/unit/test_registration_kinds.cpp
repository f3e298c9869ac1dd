// The registration kinds' table (RegistrationKindOps, registration.hpp) and the name lists made from
// one place each: the C ABI's enum names (ncclpool_value_name), MemoryBreakdown's fields.

#include <gtest/gtest.h>

#include <ncclpool/loopback.hpp>
#include <ncclpool/ncclpool.h>
#include <ncclpool/pool.hpp>
#include <ncclpool/registration.hpp>

#include <string>

namespace ncclpool {
namespace {

TEST(RegistrationKindOps, OneRowPerKindIndexedByTheEnumNamedAsToString) {
  for (int k = 0; k < kRegistrationKinds; ++k) {
    const auto kind = static_cast<RegistrationKind>(k);
    const RegistrationKindOps& ops = registration_ops(kind);
    EXPECT_EQ(ops.kind, kind);
    EXPECT_STREQ(ops.name, to_string(kind));
    EXPECT_EQ(registration_kind_from_string(ops.name), kind);
    // A kind a communicator is attached with registers and deregisters; 'none' does neither.
    EXPECT_EQ(ops.attachable, ops.register_segment != nullptr) << ops.name;
    EXPECT_EQ(ops.attachable, ops.deregister_segment != nullptr) << ops.name;
    EXPECT_GT(ops.default_growth_chunk, 0u);
  }
  EXPECT_EQ(&registration_ops(static_cast<RegistrationKind>(kRegistrationKinds)), &registration_ops(RegistrationKind::none));
}

TEST(RegistrationKindOps, WhatEachKindDoes) {
  const RegistrationKindOps& none = registration_ops(RegistrationKind::none);
  const RegistrationKindOps& local = registration_ops(RegistrationKind::local);
  const RegistrationKindOps& symmetric = registration_ops(RegistrationKind::symmetric);
  EXPECT_FALSE(none.attachable);
  EXPECT_TRUE(local.attachable && !local.collective && !local.windows && !local.needs_deterministic_pool);
  EXPECT_TRUE(symmetric.attachable && symmetric.collective && symmetric.windows && symmetric.needs_deterministic_pool);
  EXPECT_EQ(local.default_growth_chunk, 2u << 20);
  EXPECT_EQ(symmetric.default_growth_chunk, 1u << 30);
}

// As UCX's registration cache tests its callbacks: every registration through the table is given
// back through it (the loopback counts what is live).
TEST(RegistrationKindOps, RegisterAndDeregisterThroughTheTableCountBackToZero) {
  auto group = std::make_shared<LoopbackGroup>("world", 1);
  LoopbackCommunicator comm(group, 0);
  alignas(64) static char memory[4096];
  const RegistrationKindOps& local = registration_ops(RegistrationKind::local);
  void* handle = local.register_segment(comm, memory, sizeof memory);
  EXPECT_EQ(group->live_registrations(), 1);
  local.deregister_segment(comm, handle);
  EXPECT_EQ(group->live_registrations(), 0);
}

TEST(CapiNames, EveryEnumValueHasTheNameOfItsList) {
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_SOURCE, NCCLPOOL_SOURCE_VMM_HOST_NUMA), "vmm_host_numa");
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_SOURCE, NCCLPOOL_SOURCE_NCCL), "nccl");
  EXPECT_EQ(ncclpool_value_name(NCCLPOOL_NAMES_SOURCE, NCCLPOOL_SOURCE_NCCL + 1), nullptr);
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_REGISTRATION, NCCLPOOL_REGISTRATION_DEFAULT), "default");
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_REGISTRATION, NCCLPOOL_REGISTRATION_LOCAL), "local");
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_REGISTRATION, NCCLPOOL_REGISTRATION_SYMMETRIC), "symmetric");
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_REGISTRATION, NCCLPOOL_REGISTRATION_AUTO), "auto");
  EXPECT_EQ(ncclpool_value_name(NCCLPOOL_NAMES_REGISTRATION, 3), nullptr);
  EXPECT_STREQ(ncclpool_value_name(NCCLPOOL_NAMES_COLLECTIVE, NCCLPOOL_COLLECTIVE_ALL_REDUCE), "all_reduce");
  EXPECT_EQ(ncclpool_value_name(NCCLPOOL_NAMES_COLLECTIVE, -1), nullptr);
  EXPECT_EQ(ncclpool_value_name(7, 0), nullptr);
}

TEST(MemoryBreakdown, SumAndJsonComeFromTheFieldList) {
  MemoryBreakdown a, b;
  a.reserved = 10, a.requested = 4, a.empty_segments = 3;
  b.reserved = 5, b.rounding = 1, b.never_used = 2;
  a += b;
  EXPECT_EQ(a.reserved, 15u);
  EXPECT_EQ(a.rounding, 1u);
  EXPECT_EQ(to_json(a),
            "{\"reserved\":15,\"requested\":4,\"rounding\":1,\"free_in_used_segments\":0,\"never_used\":2,\"other_streams_only\":0,"
            "\"empty_segments\":3}");
}

}  // namespace
}  // namespace ncclpool

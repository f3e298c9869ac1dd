// The typed pool suite and the pool-kind suite (single, auto) over the simulator, plus the rules that need the simulator's knobs:
// stream-ordered reuse, OOM release-and-retry, observer hooks, fault injection.

#include "../common/pool_kind_suite.hpp"
#include "../common/pool_suite.hpp"

#include <gtest/gtest.h>

#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace ncclpool::testing {

INSTANTIATE_TYPED_TEST_SUITE_P(Sim, PoolSuite, ::testing::Types<SimFixture>);
using SimPoolKinds = ::testing::Types<SingleKind<SimFixture>, AutoKind<SimFixture>>;
INSTANTIATE_TYPED_TEST_SUITE_P(Sim, PoolKindSuite, SimPoolKinds, PoolKindName);

namespace {

constexpr std::size_t MiB = 1u << 20;

std::shared_ptr<SimSource> sim(std::size_t capacity = 64ull << 30) {
  SimSourceConfig c;
  c.capacity = capacity;
  return std::make_shared<SimSource>(c);
}

// ---------------------------------------------------------------- stream-ordered reuse

TEST(StreamOrdering, AFreeIsPublishedByTheStreamsNextFreeElsewhereThenCrossesBehindAWait) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB / 2, /*stream=*/1);
  void* s = pool.allocate(MiB / 2, 1);
  void* t = pool.allocate(MiB / 2, 1);
  void* x = pool.allocate(8 * MiB, 1);  // another segment
  pool.deallocate(a);  // freed on stream 1: no event yet
  pool.deallocate(s);  // right after a: joins a's unpublished block, still no event
  EXPECT_EQ(source->sim_ordering().publish_count(), 0u) << "frees in one region record nothing";
  pool.check_invariants();
  pool.deallocate(x);  // a second unpublished block would start elsewhere: stream 1 publishes
  EXPECT_EQ(source->sim_ordering().epoch(1), 1u);
  void* c = pool.allocate(MiB, /*stream=*/3);
  EXPECT_EQ(c, a) << "a and s, published, crossed behind a wait";
  EXPECT_EQ(source->sim_ordering().waited_epoch(3, 1), 1u) << "stream 3 waited for the publish after the frees";
  EXPECT_EQ(pool.stats().cross_stream_reuses, 1u);
  EXPECT_EQ(pool.stats().stream_publishes, 1u);
  for (void* p : {c, t}) pool.deallocate(p);
  pool.check_invariants();
}

TEST(StreamOrdering, AnUnpublishedBlockStaysOnItsStreamAndMakesThatStreamEager) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 2 * MiB});
  void* a = pool.allocate(2 * MiB, 1);
  pool.deallocate(a);  // unpublished: stream 1 may still be destroyed without another call
  void* b = pool.allocate(2 * MiB, 2);
  EXPECT_NE(a, b) << "no stream but 1 may take a block freed after 1's last publish";
  EXPECT_GE(pool.stats().unpublished_skips, 1u);
  EXPECT_EQ(source->sim_ordering().wait_count(), 0u);
  pool.check_invariants();
  void* c = pool.allocate(2 * MiB, 1);  // stream 1 takes its own block back at once
  EXPECT_EQ(c, a);
  pool.deallocate(c);  // stream 1 is eager now: this free publishes
  EXPECT_EQ(source->sim_ordering().epoch(1), 1u);
  void* d = pool.allocate(2 * MiB, 3);
  EXPECT_EQ(d, a);
  EXPECT_EQ(source->sim_ordering().waited_epoch(3, 1), 1u);
  for (void* p : {b, d}) pool.deallocate(p);
  pool.check_invariants();
}

TEST(StreamOrdering, AnEagerStreamStopsPublishingOnceNoOtherStreamTakesItsMemory) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(2 * MiB, 1);
  pool.deallocate(a);
  void* b = pool.allocate(2 * MiB, 2);  // passes over stream 1's unpublished block
  for (int i = 0; i < 400; ++i) pool.deallocate(pool.allocate(4096, 1));
  const std::uint64_t published = source->sim_ordering().epoch(1);
  EXPECT_GT(published, 100u);
  EXPECT_LT(published, 400u) << "eagerness ends after a quiet stretch";
  for (int i = 0; i < 100; ++i) pool.deallocate(pool.allocate(4096, 1));
  EXPECT_EQ(source->sim_ordering().epoch(1), published) << "back to no event on the same-stream path";
  pool.deallocate(b);
  pool.check_invariants();
}

TEST(StreamOrdering, SameStreamAndFreshMemoryNeedNoWaitAndNoEvent) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB, 1);  // fresh memory: no wait
  void* c = pool.allocate(256, 2);  // the rest of the segment is still fresh: no wait
  pool.deallocate(a);
  void* b = pool.allocate(MiB, 1);  // same stream: no wait
  for (int i = 0; i < 1000; ++i) pool.deallocate(pool.allocate(4096 * (1 + i % 3), 1));
  EXPECT_EQ(source->sim_ordering().wait_count(), 0u);
  EXPECT_EQ(source->sim_ordering().publish_count(), 0u) << "alternating allocate/free on one stream records no event";
  pool.deallocate(b);
  pool.deallocate(c);
  pool.check_invariants();
}

TEST(StreamOrdering, APublishedBlockAbsorbsAdjacentFreshMemory) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB, 1);
  void* b = pool.allocate(MiB / 2, 5);  // [a 1 MiB][b 512 KiB][fresh 512 KiB]
  pool.deallocate(a);                   // unpublished: stays apart
  EXPECT_EQ(pool.stats().largest_free_block, MiB);
  EXPECT_EQ(pool.stats().largest_fresh_block, MiB / 2) << "a is stream 1's; only the tail is no stream's";
  pool.check_invariants();
  pool.deallocate(b, 1);  // unpublished too
  pool.publish_frees(1);  // a, b and the fresh tail become one block
  EXPECT_EQ(pool.stats().largest_free_block, 2 * MiB);
  EXPECT_EQ(pool.stats().largest_fresh_block, 0u) << "the tail joined stream 1's block";
  void* c = pool.allocate(2 * MiB, 2);
  EXPECT_EQ(a, c);
  EXPECT_EQ(source->sim_ordering().wait_count(), 1u) << "taking stream 1's memory needs a wait";
  pool.deallocate(c);
  pool.check_invariants();
}

TEST(StreamOrdering, RefusedWaitMakesThePoolGrowInstead) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(2 * MiB, 1);
  pool.deallocate(a);
  pool.publish_frees(1);
  source->sim_ordering().set_refuse_waits(true);  // like a capturing stream
  void* b = pool.allocate(2 * MiB, 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.stats().segments_created, 2u);
  EXPECT_EQ(pool.stats().cross_stream_reuses, 0u);
  EXPECT_EQ(pool.stats().unpublished_skips, 0u) << "the block was published: the wait was refused";
  pool.deallocate(b);
}

TEST(StreamOrdering, ARefusedPublishKeepsEveryBlockOfTheStreamHome) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(2 * MiB, 1);
  void* x = pool.allocate(2 * MiB, 1);
  pool.deallocate(a);
  pool.deallocate(x);
  source->sim_ordering().set_refuse_publishes(true);  // stream 1 captures a graph
  pool.publish_frees(1);                              // refused
  void* b = pool.allocate(2 * MiB, 2);
  EXPECT_NE(b, a);
  EXPECT_NE(b, x);
  EXPECT_EQ(source->sim_ordering().wait_count(), 0u);
  pool.check_invariants();
  source->sim_ordering().set_refuse_publishes(false);
  pool.publish_frees(1);  // the next free outside the capture publishes everything
  void* c = pool.allocate(2 * MiB, 2);
  EXPECT_TRUE(c == a || c == x);
  EXPECT_EQ(source->sim_ordering().wait_count(), 1u);
  for (void* p : {b, c}) pool.deallocate(p);
  pool.check_invariants();
}

TEST(StreamOrdering, AdjacentBlocksOfTwoStreamsMergeBehindWaitsBeforeTheyGrow) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB, .deterministic = true});
  pool.reserve(4 * MiB);  // one 4 MiB segment (a 2 MiB request would get a segment of its own)
  void* a = pool.allocate(2 * MiB, 1);
  void* b = pool.allocate(2 * MiB, 2);  // the segment is full: a (stream 1) then b (stream 2)
  pool.deallocate(a);
  pool.deallocate(b);  // two free blocks that coalesce() keeps apart (different streams)
  pool.publish_frees(1);
  pool.publish_frees(2);
  EXPECT_EQ(pool.stats().largest_free_block, 2 * MiB);
  void* c = pool.allocate(4 * MiB, 3);  // fits only across both
  EXPECT_EQ(c, a);
  EXPECT_EQ(pool.stats().segments_created, 1u) << "merged instead of growing";
  EXPECT_EQ(source->sim_ordering().waited_epoch(3, 1), source->sim_ordering().epoch(1));
  EXPECT_EQ(source->sim_ordering().waited_epoch(3, 2), source->sim_ordering().epoch(2));
  EXPECT_EQ(pool.stats().cross_stream_reuses, 2u);
  pool.check_invariants();
  pool.deallocate(c);
  pool.check_invariants();
}

TEST(StreamOrdering, AMergeNeverTakesAnotherStreamsUnpublishedBlock) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB, .deterministic = true});
  pool.reserve(4 * MiB);  // one 4 MiB segment (a 2 MiB request would get a segment of its own)
  void* a = pool.allocate(2 * MiB, 1);
  void* b = pool.allocate(2 * MiB, 2);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.publish_frees(1);  // stream 2's block stays unpublished
  void* c = pool.allocate(4 * MiB, 3);
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.stats().segments_created, 2u);
  EXPECT_EQ(pool.stats().unpublished_skips, 1u);
  pool.check_invariants();
  pool.deallocate(c);
}

TEST(StreamOrdering, AMergeThatCannotWaitGrowsInstead) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB});
  pool.reserve(4 * MiB);  // one 4 MiB segment for both 2 MiB blocks
  void* a = pool.allocate(2 * MiB, 1);
  void* b = pool.allocate(2 * MiB, 2);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.publish_frees(1);
  pool.publish_frees(2);
  source->sim_ordering().set_refuse_waits(true);
  void* c = pool.allocate(4 * MiB, 3);
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.stats().segments_created, 2u);
  pool.check_invariants();
  pool.deallocate(c);
}

TEST(StreamOrdering, ExplicitFreeStreamOverridesTheAllocationStream) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(2 * MiB, 1);
  pool.deallocate(a, 3);  // last used on stream 3
  void* b = pool.allocate(2 * MiB, 3);
  EXPECT_EQ(a, b);
  EXPECT_EQ(source->sim_ordering().wait_count(), 0u);
  pool.deallocate(b);
}

TEST(StreamOrdering, CompletedEventSkipsTheWaitUnlessDeterministic) {
  for (bool deterministic : {false, true}) {
    auto source = sim();
    source->sim_ordering().set_complete(true);
    Pool pool(source, PoolConfig{.deterministic = deterministic});
    void* a = pool.allocate(2 * MiB, 1);
    pool.deallocate(a);
    pool.publish_frees(1);
    void* b = pool.allocate(2 * MiB, 2);
    EXPECT_EQ(a, b);
    if (deterministic) {
      EXPECT_EQ(source->sim_ordering().poll_count(), 0u) << "deterministic pools never poll events";
      EXPECT_EQ(source->sim_ordering().wait_count(), 1u);
    } else {
      EXPECT_EQ(source->sim_ordering().wait_count(), 0u) << "a completed free needs no dependency";
    }
    pool.deallocate(b);
  }
}

TEST(StreamOrdering, AFailedPublishLeavesTheBlockLive) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(4096, 1);
  void* spacer = pool.allocate(4096, 1);
  void* b = pool.allocate(MiB / 2, 1);
  pool.deallocate(a);  // unpublished, not next to b: b's free will publish
  source->sim_ordering().fail_next_publishes(1);
  EXPECT_THROW(pool.deallocate(b), BackendError);
  pool.check_invariants();
  EXPECT_EQ(pool.stats().active_allocations, 2u) << "b is still live and can be freed again";
  pool.deallocate(b);
  EXPECT_EQ(pool.stats().active_allocations, 1u);
  EXPECT_EQ(pool.stats().stream_publishes, 1u);
  pool.deallocate(spacer);
  pool.check_invariants();
}

TEST(StreamOrdering, TrimWaitsForTheStreamOrTheDeviceBeforeReleasing) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB, 5);
  pool.deallocate(a);  // unpublished: no event covers it
  EXPECT_EQ(pool.trim(), 2 * MiB);
  EXPECT_EQ(source->sim_ordering().device_synchronize_count(), 1u);
  EXPECT_EQ(source->sim_ordering().synchronize_count(), 0u);
  a = pool.allocate(MiB, 5);
  pool.deallocate(a);
  pool.publish_frees(5);  // now an event covers every free of stream 5
  EXPECT_EQ(pool.trim(), 2 * MiB);
  EXPECT_EQ(source->sim_ordering().device_synchronize_count(), 1u);
  EXPECT_EQ(source->sim_ordering().synchronize_count(), 1u);
}

// Issue 27, item 3: an out-of-memory is one rank's state; in a deterministic pool the reclaim would
// put this rank's next requests elsewhere than the same requests on the other ranks. It fails instead,
// saying why, and the pool is unchanged (placement the same as on every other rank).
TEST(StreamOrdering, ADeterministicPoolFailsRatherThanReclaimOnOneRank) {
  auto source = sim(4 * MiB);
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB, .deterministic = true});
  pool.reserve(4 * MiB);
  void* a = pool.allocate(2 * MiB, 1);
  void* keep = pool.allocate(2 * MiB, 1);
  pool.deallocate(a);  // stream 1's unpublished block
  try {
    (void)pool.allocate(2 * MiB, 2);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("not reclaimed after a device synchronization in a deterministic pool"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("publish_frees"), std::string::npos) << e.what();
  }
  EXPECT_EQ(source->sim_ordering().device_synchronize_count(), 0u);
  EXPECT_EQ(pool.stats().oom_recoveries, 0u);
  EXPECT_EQ(pool.placement_recoveries(), 0u);
  pool.check_invariants();
  pool.publish_frees(1);  // what the message says: now stream 2 may take it, behind a wait
  void* b = pool.allocate(2 * MiB, 2);
  EXPECT_EQ(b, a);
  pool.deallocate(b);
  pool.deallocate(keep);
}

TEST(StreamOrdering, OutOfMemoryHandsUnpublishedBlocksToOtherStreamsAfterADeviceSync) {
  auto source = sim(4 * MiB);
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB});
  pool.reserve(4 * MiB);  // one 4 MiB segment for both 2 MiB blocks
  void* a = pool.allocate(2 * MiB, 1);
  void* keep = pool.allocate(2 * MiB, 1);  // the segment stays in use: trimming cannot help
  pool.deallocate(a);                     // stream 1's unpublished block
  source->sim_ordering().set_capturing(true);
  EXPECT_THROW((void)pool.allocate(2 * MiB, 2), OutOfMemory) << "no device sync while a graph is captured";
  source->sim_ordering().set_capturing(false);
  EXPECT_EQ(source->sim_ordering().device_synchronize_count(), 0u);
  void* b = pool.allocate(2 * MiB, 2);
  EXPECT_EQ(b, a);
  EXPECT_EQ(source->sim_ordering().device_synchronize_count(), 1u);
  EXPECT_EQ(source->sim_ordering().wait_count(), 0u) << "after the device sync the block is like fresh memory";
  const auto s = pool.stats();
  EXPECT_EQ(s.oom_count, 1u) << "only the capture-time failure";
  EXPECT_EQ(s.oom_recoveries, 1u);
  pool.check_invariants();
  pool.deallocate(b);
  pool.deallocate(keep);
  pool.check_invariants();
}

TEST(StreamOrdering, AnUnpublishedBlockPublishedWhileWithheldCrossesWhenPutBack) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB, 1);
  void* b = pool.allocate(MiB, 1);  // one 2 MiB segment, two blocks
  pool.deallocate(a);     // stream 1's unpublished block
  pool.deallocate(b, 2);  // stream 2's unpublished block
  ASSERT_EQ(pool.withhold_empty_segments().size(), 1u);
  pool.check_invariants();
  pool.publish_frees(2);  // b is published while withheld
  pool.check_invariants();
  EXPECT_EQ(pool.release_withheld(false), 0u);
  pool.check_invariants();
  EXPECT_EQ(pool.allocate(MiB, 3), b) << "b crosses behind a wait; a is still stream 1's alone";
  EXPECT_EQ(pool.stats().unpublished_skips, 1u);
  pool.check_invariants();
}

// A publish while a collective trim withholds the segment leaves the block uncoalesced beside its
// free neighbour (it coalesces when put back): a legal state, not a broken invariant.
TEST(StreamOrdering, APublishWhileWithheldKeepsTheInvariants) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(MiB, 1);  // the other half of the 2 MiB segment stays fresh
  pool.deallocate(a);               // stream 1's unpublished block, beside the fresh one
  ASSERT_EQ(pool.withhold_empty_segments().size(), 1u);
  pool.publish_frees(1);  // a is published while withheld
  pool.check_invariants();
  EXPECT_EQ(pool.release_withheld(false), 0u);
  pool.check_invariants();
  EXPECT_EQ(pool.allocate(2 * MiB, 2), a) << "put back, a and the fresh half coalesce";
  EXPECT_EQ(pool.stats().segment_count, 1u);
  pool.check_invariants();
}

// ---------------------------------------------------------------- memory breakdown

TEST(MemoryBreakdown, SaysWhereTheReservedBytesAre) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 4 * MiB});
  pool.reserve(4 * MiB);                // one segment of 4 MiB for the three requests below
  void* a = pool.allocate(1000, 1);     // 1,024-byte block: 24 bytes of rounding
  void* b = pool.allocate(MiB, 1);
  void* c = pool.allocate(MiB, 1);
  void* big = pool.allocate(8 * MiB, 1);  // a segment of its own
  pool.deallocate(b);                   // stream 1's unpublished block, between live ones
  pool.deallocate(big);                 // elsewhere: stream 1 publishes; its segment is now empty
  MemoryBreakdown m = pool.memory_breakdown();
  EXPECT_EQ(m.reserved, 12 * MiB);
  EXPECT_EQ(m.requested, 1000 + MiB);
  EXPECT_EQ(m.rounding, 24u);
  EXPECT_EQ(m.empty_segments, 8 * MiB);
  EXPECT_EQ(m.free_in_used_segments, 4 * MiB - 1024 - MiB);
  EXPECT_EQ(m.never_used, 4 * MiB - 1024 - 2 * MiB) << "the chunk's tail after c";
  EXPECT_EQ(m.other_streams_only, 0u) << "b was published by big's free";
  pool.deallocate(a);  // unpublished now: only stream 1 may take it
  m = pool.memory_breakdown();
  EXPECT_EQ(m.other_streams_only, 1024u);
  pool.deallocate(c);
}

// ---------------------------------------------------------------- growth

std::vector<std::size_t> segment_sizes(const Pool& pool) {
  std::vector<std::size_t> sizes;
  for (const SegmentInfo& s : pool.segments()) sizes.push_back(s.size);
  return sizes;
}

TEST(Growth, RequestsGetSegmentsOfTheirOwnSizeWithinTheBudget) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 1024 * MiB});
  // Every request its own size (at least chunk / 128 = 8 MiB), rounded to the 2 MiB granularity.
  void* large = pool.allocate(100 * MiB + 1);
  void* small = pool.allocate(MiB);
  void* beside = pool.allocate(6 * MiB);       // fits beside it
  void* below = pool.allocate(60 * MiB);       // below chunk / 16: its own size too, not a chunk
  EXPECT_EQ(segment_sizes(pool), (std::vector<std::size_t>{102 * MiB, 8 * MiB, 60 * MiB}));
  void* huge = pool.allocate(4 * 1024 * MiB + 1);  // larger than a chunk: not rounded to 5 GiB
  EXPECT_EQ(segment_sizes(pool).back(), 4 * 1024 * MiB + 2 * MiB);
  for (void* p : {large, small, beside, below, huge}) pool.deallocate(p);
  pool.check_invariants();
}

// Segments follow the request sequence only: fed the same requests, pools make the same segments
// (what symmetric pools on different ranks rely on), whatever the addresses.
TEST(Growth, SegmentsFollowTheRequestsOnly) {
  auto source = sim();
  Pool a(source, PoolConfig{.growth_chunk = 1024 * MiB, .deterministic = true});
  Pool b(source, PoolConfig{.growth_chunk = 1024 * MiB, .deterministic = true});
  std::vector<void*> blocks_a, blocks_b;
  auto feed = [&](std::size_t requests) {
    for (std::size_t i = blocks_a.size(); i < requests; ++i) {
      const std::size_t size = (i * 7919 % 37 + 1) * 512 * 1024;  // 0.5 .. 18.5 MiB
      blocks_a.push_back(a.allocate(size));
      blocks_b.push_back(b.allocate(size));
      if (i % 3 == 2) {
        a.deallocate(blocks_a[i - 1]);
        b.deallocate(blocks_b[i - 1]);
        blocks_a[i - 1] = blocks_b[i - 1] = nullptr;
      }
    }
  };
  auto expect_the_same = [&] {
    EXPECT_EQ(segment_sizes(a), segment_sizes(b));
    ASSERT_EQ(a.live_blocks().size(), b.live_blocks().size());
    for (std::size_t i = 0; i < a.live_blocks().size(); ++i) {
      EXPECT_EQ(a.live_blocks()[i].segment_sequence, b.live_blocks()[i].segment_sequence);
      EXPECT_EQ(a.live_blocks()[i].offset, b.live_blocks()[i].offset);
    }
  };
  feed(40);
  expect_the_same();
  EXPECT_GT(segment_sizes(a).size(), 1u);
  EXPECT_LT(a.stats().reserved_bytes, 512 * MiB) << "a pool smaller than a chunk does not reserve one";
  for (const SegmentInfo& s : a.segments()) EXPECT_GE(s.size, 8 * MiB);  // chunk / 128
  feed(1500);  // past the segment budget: ramped chunks, the same on both
  expect_the_same();
  EXPECT_GT(a.stats().segment_count, 64 + a.stats().reserved_bytes / (1024 * MiB));
  for (void* p : blocks_a) a.deallocate(p);
  for (void* p : blocks_b) b.deallocate(p);
  a.check_invariants();
  b.check_invariants();
}

TEST(Growth, SegmentsOfTheirOwnStopAtABudgetThatGrowsWithTheReserve) {
  // Requests that each need a segment (each just at the old own-segment bound, max(chunk / 16,
  // reserved / 64)) would each make a window per group: segments of their own up to 64 plus one per
  // chunk's worth of reserve, then chunks. Past the budget chunks ramp up by an eighth of the reserve
  // from at least chunk / 2 (64 segments of at least chunk / 128) to 8 chunks: at most ~24 more.
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 64 * MiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 200; ++i) {
    const std::size_t reserved = pool.stats().reserved_bytes;
    const std::size_t size = (std::max<std::size_t>(4 * MiB, reserved / 64) + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    blocks.push_back(pool.allocate(size));
    const PoolStats s = pool.stats();
    ASSERT_LE(s.segment_count, 64 + s.reserved_bytes / (64 * MiB) + 24) << "after " << i + 1 << " requests";
  }
  EXPECT_LT(pool.stats().segment_count, 150u);
  for (void* p : blocks) pool.deallocate(p);
  pool.check_invariants();
}

// Past the segment budget, chunks are an eighth of what is reserved (at least growth_chunk / 16) up
// to growth_chunk: a pool that spent its budget on small segments reserves at most
// max(growth_chunk / 16, reserved / 8) past its need, not a whole chunk.
TEST(Growth, PastTheBudgetChunksGrowByAnEighthUpToTheGrowthChunk) {
  auto source = sim();
  Pool pool(source, PoolConfig{.growth_chunk = 64 * MiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(pool.allocate(MiB));  // 1 MiB each
  // Segments of the requests' size (the 2 MiB granularity) while the budget (64 + reserved / chunk)
  // allows, then reserved / 8 rounded up to the granularity (132 MiB / 8 -> 18 MiB).
  const std::vector<std::size_t> sizes = segment_sizes(pool);
  std::size_t own = 0;
  while (own < sizes.size() && sizes[own] == 2 * MiB) ++own;
  EXPECT_EQ(own, 66u) << "64 + 132 MiB / 64 MiB";
  EXPECT_EQ(std::vector<std::size_t>(sizes.begin() + 66, sizes.end()), (std::vector<std::size_t>{18 * MiB, 20 * MiB, 22 * MiB, 24 * MiB}));
  EXPECT_LE(pool.stats().reserved_bytes - 200 * MiB, pool.stats().reserved_bytes / 8);
  for (int i = 0; i < 400; ++i) blocks.push_back(pool.allocate(MiB));  // past 512 MiB reserved: whole 64 MiB chunks
  EXPECT_EQ(segment_sizes(pool).back(), 64 * MiB);
  // Many small tensors (1-4 MiB) in a 1 GiB-chunk pool: whole chunks past the budget reserved 3.0x
  // the live bytes at 511 MiB live; ramped, never more than 1.2x past 256 MiB.
  Pool big(source, PoolConfig{.growth_chunk = 1024 * MiB});
  std::vector<void*> small_blocks;
  std::size_t live = 0;
  for (std::size_t i = 0; i < 1500; ++i) {
    const std::size_t size = (1 + i * 7919 % 4) * MiB - 4096 * (i % 7);
    small_blocks.push_back(big.allocate(size));
    live += size;
    if (live > 256 * MiB) {
      ASSERT_LE(static_cast<double>(big.stats().reserved_bytes), 1.2 * static_cast<double>(live)) << i;
    }
  }
  EXPECT_GT(big.stats().segment_count, 64u) << "past the budget";
  for (void* p : blocks) pool.deallocate(p);
  for (void* p : small_blocks) big.deallocate(p);
  Pool small(source, PoolConfig{.growth_chunk = 1024 * MiB});
  void* p = small.allocate(20 * MiB);  // a torch segment of a small process: its own size, not a chunk
  EXPECT_EQ(segment_sizes(small), (std::vector<std::size_t>{20 * MiB}));
  small.deallocate(p);
  for (Pool* each : {&pool, &big, &small}) each->check_invariants();
}

// min_segment trades reserve for windows: 64 torch segments of 32 MiB (torch_bench.py's first
// registration) make 64 segments of their own by default, 2 shared 1 GiB segments with min_segment
// 1 GiB; a request larger than it still gets its own size; 2 MiB (below the default floor of
// chunk / 128) gives even small requests segments of their own.
TEST(Growth, MinSegmentMakesFewerLargerSegmentsWhichLaterRequestsShare) {
  auto source = sim();
  auto segments_for_64_torch_segments = [&](std::size_t min_segment) {
    Pool pool(source, PoolConfig{.growth_chunk = 1024 * MiB, .min_segment = min_segment, .deterministic = true});
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) blocks.push_back(pool.allocate(32 * MiB));
    std::vector<std::size_t> sizes = segment_sizes(pool);
    EXPECT_EQ(pool.stats().reserved_bytes, 2048 * MiB) << min_segment;
    for (void* p : blocks) pool.deallocate(p);
    pool.check_invariants();
    return sizes;
  };
  EXPECT_EQ(segments_for_64_torch_segments(0), std::vector<std::size_t>(64, 32 * MiB));
  EXPECT_EQ(segments_for_64_torch_segments(1024 * MiB), (std::vector<std::size_t>{1024 * MiB, 1024 * MiB}));
  EXPECT_EQ(segments_for_64_torch_segments(256 * MiB), std::vector<std::size_t>(8, 256 * MiB));

  Pool big(source, PoolConfig{.growth_chunk = 1024 * MiB, .min_segment = 1024 * MiB});
  void* large = big.allocate(1536 * MiB + 1);  // larger than min_segment: its own size (granularity)
  void* small = big.allocate(4 * MiB);  // no room beside it: a new segment of min_segment
  EXPECT_EQ(segment_sizes(big), (std::vector<std::size_t>{1538 * MiB, 1024 * MiB}));
  big.deallocate(large);
  big.deallocate(small);
  Pool fine(source, PoolConfig{.growth_chunk = 1024 * MiB, .min_segment = 2 * MiB});
  void* a = fine.allocate(MiB);
  void* b = fine.allocate(2 * MiB);
  EXPECT_EQ(segment_sizes(fine), (std::vector<std::size_t>{2 * MiB, 2 * MiB})) << "default floor: one 8 MiB segment";
  fine.deallocate(a);
  fine.deallocate(b);
  Pool rounded(source, PoolConfig{.growth_chunk = 1024 * MiB, .min_segment = 3 * MiB});  // up to the granularity
  void* c = rounded.allocate(MiB);
  EXPECT_EQ(segment_sizes(rounded), (std::vector<std::size_t>{4 * MiB}));
  rounded.deallocate(c);
  // reserve() and growth past the budget honour it too.
  Pool reserved(source, PoolConfig{.growth_chunk = 64 * MiB, .min_segment = 128 * MiB});
  reserved.reserve(MiB);
  EXPECT_EQ(segment_sizes(reserved), (std::vector<std::size_t>{128 * MiB}));

  PoolConfig bad{.min_segment = 128ull << 30};  // above the sim's 64 GiB
  EXPECT_THROW(Pool(source, bad), InvalidArgument);
  bad = PoolConfig{.min_segment = 128 * MiB, .max_reserved = 64 * MiB};  // the pool could never grow
  try {
    Pool p(source, bad);
    ADD_FAILURE() << "min_segment above max_reserved accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("min_segment 128.00 MiB (134217728 B) exceeds max_reserved"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- OOM

TEST(OutOfMemory, ReleasesCachedSegmentsAndRetriesOnce) {
  auto source = sim(8 * MiB);  // four 2 MiB granules
  Pool pool(source);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.allocate(2 * MiB));
  pool.deallocate(blocks[0]);
  pool.deallocate(blocks[1]);  // two empty 2 MiB segments stay cached
  void* big = pool.allocate(4 * MiB);  // needs a new 4 MiB segment: OOM, release, retry
  EXPECT_NE(big, nullptr);
  const auto s = pool.stats();
  EXPECT_EQ(s.oom_recoveries, 1u);
  EXPECT_EQ(s.oom_count, 0u);
  EXPECT_EQ(s.segments_released, 2u);
  pool.check_invariants();
  pool.deallocate(big);
  pool.deallocate(blocks[2]);
  pool.deallocate(blocks[3]);
}

TEST(OutOfMemory, FailsWithAClearErrorAndLeavesThePoolUsable) {
  auto source = sim(4 * MiB);
  Pool pool(source, PoolConfig{.name = "acts"});
  void* a = pool.allocate(3 * MiB);
  try {
    (void)pool.allocate(2 * MiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pool 'acts' (device 0, sim)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reserved 4.00 MiB"), std::string::npos) << msg;
  }
  EXPECT_EQ(pool.stats().oom_count, 1u);
  pool.check_invariants();
  pool.deallocate(a);
  void* b = pool.allocate(4 * MiB);  // usable again
  pool.deallocate(b);
}

TEST(OutOfMemory, InjectedOomIsRecoveredOnlyWhenSomethingCanBeReleased) {
  auto source = sim();
  Pool pool(source);
  source->inject_oom(1);
  EXPECT_THROW((void)pool.allocate(MiB), OutOfMemory) << "nothing cached: no retry helps";
  void* a = pool.allocate(MiB);
  pool.deallocate(a);
  source->inject_oom(1);
  void* b = pool.allocate(4 * MiB);  // OOM once, releases the empty segment, retries
  EXPECT_EQ(pool.stats().oom_recoveries, 1u);
  pool.deallocate(b);
  EXPECT_EQ(source->live_segments(), pool.stats().segment_count);
}

TEST(OutOfMemory, BackendErrorsPropagateWithoutRetryOrLeak) {
  auto source = sim();
  Pool pool(source);
  source->inject_error(1);
  EXPECT_THROW((void)pool.allocate(MiB), BackendError);
  EXPECT_EQ(source->live_segments(), 0u);
  pool.check_invariants();
}

TEST(OutOfMemory, MaxReservedCapsTheGrowth) {
  auto source = sim();
  Pool pool(source, PoolConfig{.max_reserved = 4 * MiB});
  void* a = pool.allocate(3 * MiB);
  EXPECT_THROW((void)pool.allocate(2 * MiB), OutOfMemory);
  EXPECT_THROW((void)pool.allocate(5 * MiB), SizeTooLarge);
  pool.deallocate(a);
  void* b = pool.allocate(4 * MiB);  // the empty 4 MiB segment is reused
  pool.deallocate(b);
  pool.check_invariants();
}

// ---------------------------------------------------------------- observers

struct Recorder : PoolObserver {
  explicit Recorder(SimSource* s) : source(s) {}
  void on_segment_created(const SegmentInfo& s) override {
    if (fail_create) throw BackendError("registration refused");
    events.push_back("create " + std::to_string(s.sequence));
  }
  bool may_release(const SegmentInfo&) override { return allow_release; }
  void on_segment_releasing(const SegmentInfo& s) noexcept override {
    // The memory must still be there when we are told.
    memory_alive_at_release = memory_alive_at_release && source->live_segments() > 0;
    events.push_back("release " + std::to_string(s.sequence));
  }
  SimSource* source;
  std::vector<std::string> events;
  bool fail_create = false;
  bool allow_release = true;
  bool memory_alive_at_release = true;
};

TEST(Observers, SeeCreationInSequenceAndReleaseBeforeFree) {
  auto source = sim();
  Recorder rec(source.get());
  {
    Pool pool(source);
    pool.add_observer(rec);
    void* a = pool.allocate(MiB);
    void* b = pool.allocate(3 * MiB);
    pool.deallocate(b);
    pool.trim();
    pool.deallocate(a);
  }
  EXPECT_EQ(rec.events, (std::vector<std::string>{"create 0", "create 1", "release 1", "release 0"}));
  EXPECT_TRUE(rec.memory_alive_at_release);
  EXPECT_EQ(source->live_segments(), 0u);
}

TEST(Observers, ReplayTellsOfExistingSegmentsInCreationOrder) {
  auto source = sim();
  Pool pool(source);
  void* a = pool.allocate(3 * MiB);
  void* b = pool.allocate(3 * MiB);
  Recorder rec(source.get());
  pool.add_observer(rec, /*replay_existing=*/true);
  EXPECT_EQ(rec.events, (std::vector<std::string>{"create 0", "create 1"}));
  EXPECT_THROW(pool.add_observer(rec), InvalidArgument);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.remove_observer(rec);
}

TEST(Observers, AThrowingCreateHookRollsTheSegmentBack) {
  auto source = sim();
  Pool pool(source);
  Recorder first(source.get()), second(source.get());
  pool.add_observer(first);
  pool.add_observer(second);
  second.fail_create = true;
  EXPECT_THROW((void)pool.allocate(MiB), BackendError);
  EXPECT_EQ(first.events, (std::vector<std::string>{"create 0", "release 0"}));
  EXPECT_EQ(source->live_segments(), 0u);
  EXPECT_EQ(pool.stats().segment_count, 0u);
  pool.check_invariants();
  second.fail_create = false;
  void* a = pool.allocate(MiB);
  EXPECT_EQ(pool.segment_of(a)->sequence, 0u) << "a rolled-back segment does not use up a sequence number";
  pool.deallocate(a);
  pool.remove_observer(first);
  pool.remove_observer(second);
}

TEST(Observers, MayReleaseFalseKeepsTheSegmentThroughTrimAndOom) {
  auto source = sim(4 * MiB);
  Pool pool(source);
  Recorder rec(source.get());
  rec.allow_release = false;
  pool.add_observer(rec);
  void* a = pool.allocate(2 * MiB);
  pool.deallocate(a);
  EXPECT_EQ(pool.trim(), 0u);
  EXPECT_THROW((void)pool.allocate(4 * MiB), OutOfMemory);
  rec.allow_release = true;
  EXPECT_EQ(pool.trim(), 2 * MiB);
  pool.remove_observer(rec);
}

// ---------------------------------------------------------------- config validation

TEST(Config, RejectsBadValues) {
  auto source = sim();
  PoolConfig c;
  c.alignment = 100;
  EXPECT_THROW(Pool(source, c), InvalidArgument);
  c.alignment = 128;
  EXPECT_THROW(Pool(source, c), InvalidArgument);
  c.alignment = 8192;  // above the sim's page alignment
  EXPECT_THROW(Pool(source, c), InvalidArgument);
  c = {};
  c.growth_chunk = 0;
  EXPECT_THROW(Pool(source, c), InvalidArgument);
  c.growth_chunk = 128ull << 30;  // above the sim's 64 GiB
  EXPECT_THROW(Pool(source, c), InvalidArgument);
  EXPECT_THROW(Pool(nullptr), InvalidArgument);
  c = {};
  c.growth_chunk = 3 * MiB;  // rounded up to the 2 MiB granularity (chunks reach it from 8 x it reserved)
  Pool pool(source, c);
  std::vector<void*> blocks;  // 2 MiB segments of their own spend the budget (64 + reserved / 4 MiB)
  for (int i = 0; i < 200; ++i) blocks.push_back(pool.allocate(2 * MiB));
  void* a = pool.allocate(1);  // past it: a whole (rounded) chunk
  EXPECT_EQ(pool.segment_of(a)->size, 4 * MiB);
  for (void* p : blocks) pool.deallocate(p);
  pool.deallocate(a);
}

TEST(Config, NullFreeIsANoOp) {
  Pool pool(sim());
  pool.deallocate(nullptr);
  EXPECT_EQ(pool.stats().deallocation_count, 0u);
}

}  // namespace
}  // namespace ncclpool::testing

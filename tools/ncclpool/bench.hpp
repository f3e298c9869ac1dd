#pragma once
// Pieces the `ncclpool bench` suites share: timing loops, ranks run as threads, and the two
// interfaces a suite measures through (allocation strategies, teams of ranks with communicators).
// The simulator implements them here; the GPU implementations live in gpu*.cpp.

#include "report.hpp"

#include <ncclpool/communicator.hpp>
#include <ncclpool/segment_source.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace ncclpool::tool {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point t) { return std::chrono::duration<double>(BenchClock::now() - t).count(); }

/// Per-operation times of `repeats` rounds of `body(n)` (which runs n operations). Each round runs
/// long enough (>= min_seconds, doubling n from 16) that clock resolution does not matter.
/// Returns seconds per operation, one entry per round.
std::vector<double> time_rounds(int repeats, double min_seconds, const std::function<void(std::size_t)>& body);
double median(std::vector<double> values);

/// A barrier for rank threads that cannot hang: when a rank fails, the others waiting (or arriving
/// later) throw instead of waiting for it.
class RankBarrier {
 public:
  explicit RankBarrier(int ranks) : ranks_(ranks) {}
  void wait();
  void abort();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int ranks_, arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
};

/// Runs fn(rank, barrier) on one thread per rank and waits; rethrows the first failure, prefixed
/// with its rank (the other ranks' barrier waits then fail instead of hanging).
void run_on_ranks(int ranks, const std::function<void(int, RankBarrier&)>& fn);

/// Parses "4K,1M,64M" / "1KiB" style byte lists (K, M, G = powers of 1024). @throws UsageError.
std::vector<std::size_t> parse_byte_list(const std::string& option, const std::string& text);
std::size_t parse_bytes(const std::string& option, const std::string& text);
std::vector<int> parse_int_list(const std::string& option, const std::string& text, int min, int max);

// ---- bench alloc -------------------------------------------------------------------------------

/// One way of getting memory: ncclpool, a CUDA driver memory pool, cuMemAlloc.
class AllocStrategy {
 public:
  virtual ~AllocStrategy() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual bool is_ncclpool() const { return false; }
  [[nodiscard]] virtual void* allocate(std::size_t bytes, stream_t stream) = 0;
  virtual void deallocate(void* ptr, stream_t stream) = 0;
  /// Returns cached memory (nothing is live), so that the next allocate must get new memory.
  virtual void release_cached() = 0;
};

/// What `bench alloc` runs against: a device (real or simulated), two streams, the strategies.
struct AllocTarget {
  std::string description;
  stream_t streams[2] = {1, 2};
  std::shared_ptr<void> keep_alive;  // owns streams/contexts; declared first so it outlives the strategies
  std::vector<std::unique_ptr<AllocStrategy>> strategies;
  bool has_driver_reference = false;  // strategies[1] is the CUDA driver's pool (speed-up column)
};

AllocTarget make_sim_alloc_target();
/// An ncclpool Pool (default config) over `source`.
std::unique_ptr<AllocStrategy> make_pool_strategy(std::string name, std::shared_ptr<SegmentSource> source);
class Team;
/// An ncclpool Pool over rank 0's source of `team`, managed by a Registry with every group of the
/// team attached (local registration): what an engine with that many communicators allocates from.
std::unique_ptr<AllocStrategy> make_registered_pool_strategy(std::string name, std::shared_ptr<Team> team);
/// ncclpool over cuMem (vmm), cuMemAllocFromPoolAsync from a driver pool, cuMemAlloc on `device`.
/// @throws Unsupported without a GPU.
AllocTarget make_gpu_alloc_target(int device);

// ---- ranks and communicators (bench scope, bench coll) ------------------------------------------

/// `ranks` ranks, each with a segment source and `groups` communicators over all ranks.
class Team {
 public:
  virtual ~Team() = default;
  [[nodiscard]] virtual int ranks() const = 0;
  [[nodiscard]] virtual int groups() const = 0;
  [[nodiscard]] virtual std::string description() const = 0;
  /// Whether the communicators support windows; if not, why.
  [[nodiscard]] virtual bool windows(std::string* why) const = 0;
  [[nodiscard]] virtual std::shared_ptr<SegmentSource> source(int rank) = 0;
  [[nodiscard]] virtual std::shared_ptr<Communicator> comm(int rank, int group) = 0;
};

/// Loopback communicators (ranks are threads) over simulated devices.
std::unique_ptr<Team> make_loopback_team(int ranks, int groups);
/// One GPU per rank, `groups` NCCL communicators made with ncclCommInitAll, vmm sources; the groups
/// in `zero_cta_groups` are made with NCCL's CTA policy ZERO instead (copy-engine collectives).
/// @throws Unsupported without GPUs/NCCL (or, for zero_cta_groups, NCCL < 2.28), InvalidArgument if
/// `ranks` exceeds the GPUs.
std::unique_ptr<Team> make_nccl_team(int ranks, int groups, const std::set<int>& zero_cta_groups = {});

/// Whether this build has the GPU parts (CUDA and NCCL headers were found at build time).
bool gpu_benches_built();
/// Number of GPUs usable by the benches, 0 (with why) when there are none.
int gpu_count(std::string* why);

// ---- bench coll (GPU only) ----------------------------------------------------------------------

struct CollOptions {
  int ranks = 0;                        // 0 = every GPU
  std::vector<std::string> ops{"all_gather", "reduce_scatter", "all_reduce"};
  std::vector<std::string> kinds{"none", "local", "symmetric"};
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 1ull << 30;
  int factor = 2;
  int warmup = 5;                       // nccl-tests' default -w 5
  int iters = 20;                       // nccl-tests' default -n 20
  bool check = true;                    // nccl-tests' -c 1
  bool auto_kind = false;
  bool auto_pool = false;               // measure buffers from the library's auto pool (AutoPool)
  bool pool_for_any = false;            // auto pool buffers name no collective (the profile's `any` route), not their op
  bool graph = false;                   // time `iters` launches captured in a CUDA graph, replayed
  int replays = 5;                      // graph replays timed (with graph)
  int rounds = 1;                       // every point measured once per round, kinds in rotated order; medians reported
  bool compute = false;                 // also measure each kind with a compute load beside the collective
};

struct Args;
/// Reads `bench coll`'s options. @throws UsageError.
CollOptions parse_coll_options(const Args& args);
/// Runs the collective sweep and fills `report`. @throws Unsupported without GPUs.
void run_coll(const CollOptions& options, Report& report);

/// Busbw factor of nccl-tests (doc/PERFORMANCE.md): (n-1)/n for all-gather and reduce-scatter,
/// 2(n-1)/n for all-reduce.
double busbw_factor(const std::string& op, int ranks);

/// GPU descriptions for `ncclpool info`: names, memory, PCI, links between GPUs.
struct GpuDescription {
  int ordinal = 0;
  std::string name, pci_bus_id;
  std::size_t memory = 0;
  int cc_major = 0, cc_minor = 0;
  bool vmm = false, fabric = false;
  int host_numa_id = -1;
};
struct PeerLink {
  int from = 0, to = 0;
  bool access = false, native_atomics = false;
  int performance_rank = 0;
};
void describe_gpus(std::vector<GpuDescription>& gpus, std::vector<PeerLink>& links);

}  // namespace ncclpool::tool

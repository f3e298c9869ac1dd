#pragma once
// What the three files of `ncclpool bench coll` on GPUs share (internal to the tool):
//   gpu_coll_rank.cpp    one rank's launches, result checks and timings (RankRunner)
//   gpu_coll.cpp         the sweep: ranks, rounds, the order of kinds, the --auto choice
//   gpu_coll_report.cpp  tables, summary and notes from what the sweep measured
// Here: the kinds, one measurement and its medians over rounds, the sweep's sizes, the runner.

#include "bench.hpp"
#include "compute_load.hpp"
#include "gpu_device.hpp"

#include "bench_driver.hpp"
#include "bench_nccl.hpp"

#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/auto_pool.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ncclpool::tool::coll {

// A kind is also the group (communicator) it runs on. ce: windows on a communicator made with NCCL's
// CTA policy ZERO (copy-engine collectives where NCCL has them: all-gather).
inline constexpr int kNone = 0, kLocal = 1, kSymmetric = 2, kCopyEngine = 3, kAutoPoolGroup = 4;  // group 4: the auto pool's communicator
inline const char* const kKindNames[] = {"none", "local", "symmetric", "ce"};

// Whether `kind` is measured for `op`. ce only for all-gather: NCCL's copy engines carry no reduction,
// so reduce-scatter and all-reduce there ran its symmetric kernels on a second communicator over the
// same windows, which told nothing about the copy engines. (Runs with them hung on 2x H200 with NCCL
// 2.28.9; so did runs without ce: docs/tool.md, "tune".)
inline bool kind_carries(int kind, const std::string& op) { return kind != kCopyEngine || op == "all_gather"; }

inline constexpr double kAutoMargin = 0.02;  // --auto takes a costlier kind only when it is >= 2% faster

inline double mean_of(const std::vector<double>& values) {
  double s = 0;
  for (double v : values) s += v;
  return values.empty() ? 0 : s / static_cast<double>(values.size());
}

// One round's measurement of one op, size, kind and placement; each field per rank.
struct Measurement {
  std::vector<double> seconds;  // per operation, alone
  std::vector<double> beside;   // per operation, with the compute load beside it (--compute)
  std::vector<double> step;     // (collectives + compute load) time / compute load alone (--compute)
  std::vector<int> wrong;
};

// A value of the measurements over the rounds: per round the mean over ranks, then the median
// over rounds and the spread ((max - min) / median) that says how far one round can be trusted.
struct OverRounds {
  double median = 0, spread = 0;
};
inline OverRounds over_rounds(const std::vector<Measurement>& rounds, std::vector<double> Measurement::*field) {
  std::vector<double> values;
  for (const Measurement& m : rounds) values.push_back(mean_of(m.*field));
  if (values.empty()) return {};
  const double mid = median(values);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {mid, mid > 0 ? (*hi - *lo) / mid : 0};
}

// What all rank threads write into; read by every rank after a barrier (so all make the same choices).
struct Shared {
  std::mutex mutex;
  std::map<std::string, std::vector<Measurement>> results;  // key: op/bytes/kind/placement; one entry per round
  Measurement& at(const std::string& key, int ranks, int round) {
    std::lock_guard lock(mutex);
    std::vector<Measurement>& rounds = results[key];
    if (rounds.size() <= static_cast<std::size_t>(round)) rounds.resize(static_cast<std::size_t>(round) + 1);
    Measurement& m = rounds[static_cast<std::size_t>(round)];
    for (auto* field : {&m.seconds, &m.beside, &m.step}) field->resize(static_cast<std::size_t>(ranks));
    m.wrong.resize(static_cast<std::size_t>(ranks));
    return m;
  }
  // Median and spread over the rounds so far (after a barrier: every rank's values are in).
  OverRounds get(const std::string& key, std::vector<double> Measurement::*field = &Measurement::seconds) {
    std::lock_guard lock(mutex);
    return over_rounds(results[key], field);
  }
  int wrong(const std::string& key) {
    std::lock_guard lock(mutex);
    int w = 0;
    for (const Measurement& m : results[key])
      for (int v : m.wrong) w += v;
    return w;
  }
};

inline std::string key_of(const std::string& op, std::size_t bytes, const std::string& kind, bool in_place) {
  return op + "/" + std::to_string(bytes) + "/" + kind + "/" + (in_place ? "in" : "out");
}

// One measured point of an op: the per-rank element count and nccl-tests' size for it.
struct Point {
  std::size_t count = 0, size = 0;
};

// The sweep's sizes for `op` with n ranks, nccl-tests' convention: size = gathered output
// (all-gather), scattered input (reduce-scatter), buffer (all-reduce); the per-rank count is
// rounded down to fit, and sizes too small for one element per rank are skipped.
inline std::vector<Point> points_for(const std::string& op, const std::vector<std::size_t>& sizes, int n) {
  std::vector<Point> out;
  const std::size_t per_count = op == "all_reduce" ? sizeof(float) : sizeof(float) * static_cast<std::size_t>(n);
  for (std::size_t bytes : sizes)
    if (const std::size_t count = bytes / per_count; count > 0) out.push_back({count, count * per_count});
  return out;
}

inline double busbw_gbs(const std::string& op, std::size_t size, double seconds, int n) {
  return seconds > 0 ? static_cast<double>(size) / seconds / 1e9 * busbw_factor(op, n) : 0;
}

// One rank's side of the sweep: its device, streams and pool (one pool registered with every kind's
// communicator; --auto-pool: the library's auto pool besides), and the measurement of one op.
class RankRunner {
 public:
  RankRunner(Team& team, int rank, const CollOptions& o);
  ~RankRunner();
  [[nodiscard]] std::string compute_description() const { return compute_ ? compute_->description() : ""; }

  // Collective over the ranks: registers the pool's segments with the kind's communicator.
  void attach(int kind);

  // Collective: attaches the auto pool (auto registration) to its own communicator.
  void attach_auto_pool();
  // Per collective where they differ ("all_gather: ...; ..."), as the pool column allocates (for the op).
  [[nodiscard]] std::string auto_routes() const;

  // One op on `kind`'s communicator over the shared pool's buffers.
  void measure(const std::string& op, std::size_t count, int kind, bool in_place, Measurement& out, RankBarrier& sync);

  // Both placements of one op on buffers the auto pool serves for `op`'s messages of `size` bytes
  // (the library's routing for that collective; nothing chosen here); returns the part they came
  // from. Collective (the pool commits its windows before the first launch).
  std::string measure_auto_pool(const std::string& op, std::size_t count, std::size_t size, Measurement& out_of_place, Measurement& in_place, RankBarrier& sync);

 private:
  void measure_on(const std::string& op, std::size_t count, int group, const std::string& label, void* send_buffer, void* recv_buffer, bool in_place,
                  Measurement& out, RankBarrier& sync);
  template <class LaunchOn>
  void time_beside_compute(const std::string& op, std::size_t count, const LaunchOn& launch_on, Measurement& out, RankBarrier& sync);
  template <class Launch>
  double time_graph(const Launch& launch, RankBarrier& sync);
  int check_result(const std::string& op, void* res, std::size_t count);

  const tool::BenchDriver& d_;
  const tool::BenchNccl& lib_;
  Team& team_;
  int rank_, n_;
  const CollOptions& o_;
  DeviceStreams device_;  // context and streams: synchronized and destroyed after the pool is gone
  CUstream stream_;
  std::unique_ptr<ComputeLoad> compute_;  // --compute: on device_.streams[1]
  struct Events;  // the three timing events of time_beside_compute (gpu_coll_rank.cpp)
  std::unique_ptr<Events> events_;  // --compute
  std::shared_ptr<Pool> pool_;
  std::unique_ptr<Registry> registry_;
  std::vector<int> attached_;
  std::unique_ptr<AutoPool> auto_pool_;  // --auto-pool
  bool auto_attached_ = false;
  void* send_ = nullptr;
  void* recv_ = nullptr;
};

int kind_index(const std::string& name);

// Whether a measured column (a kind's name, or "pool" / "auto", which every op has) is measured for
// `op`: kind_carries by name. The same on every rank (the column and op alone).
inline bool column_carries(const std::string& column, const std::string& op) {
  return column == "pool" || column == "auto" || kind_carries(kind_index(column), op);
}

// What one sweep measured, read by the report once every rank is done.
struct Sweep {
  int ranks = 0;
  std::vector<int> kinds;                         // the kinds measured (kNone, kLocal, kSymmetric, kCopyEngine)
  std::vector<std::size_t> sizes;
  Shared shared;
  std::map<std::string, int> auto_choice;         // op/bytes -> kind (--auto)
  std::map<std::string, std::string> pool_part;   // op/bytes -> the auto pool's part (--auto-pool)
  std::string pool_routes, compute_description;
};

// Tables (one per op), the bus bandwidth summary, facts and notes. @throws BackendError when a
// sampled result was wrong (with the report so far).
void report_sweep(const CollOptions& o, Sweep& sweep, Report& report);

}  // namespace ncclpool::tool::coll

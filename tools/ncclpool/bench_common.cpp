// Timing loops, rank threads, argument lists, and the simulator's side of the bench interfaces.

#include "bench.hpp"
#include "commands.hpp"

#include <ncclpool/loopback.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>

namespace ncclpool::tool {

std::vector<double> time_rounds(int repeats, double min_seconds, const std::function<void(std::size_t)>& body) {
  std::size_t n = 16;
  for (;;) {  // calibrate: grow n until one round takes long enough
    const auto t = BenchClock::now();
    body(n);
    const double s = seconds_since(t);
    if (s >= min_seconds || n >= (std::size_t{1} << 30)) break;
    n = s <= 0 ? n * 16 : std::min(n * 16, static_cast<std::size_t>(static_cast<double>(n) * 1.2 * min_seconds / s) + 1);
  }
  std::vector<double> per_op;
  for (int r = 0; r < repeats; ++r) {
    const auto t = BenchClock::now();
    body(n);
    per_op.push_back(seconds_since(t) / static_cast<double>(n));
  }
  return per_op;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

void RankBarrier::wait() {
  std::unique_lock lock(mutex_);
  if (aborted_) throw std::runtime_error("stopped: another rank failed");
  const std::uint64_t generation = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw std::runtime_error("stopped: another rank failed");
}

void RankBarrier::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

void run_on_ranks(int ranks, const std::function<void(int, RankBarrier&)>& fn) {
  RankBarrier barrier(ranks);
  std::mutex m;
  std::string first_error;
  bool first_is_secondary = false;
  auto guarded = [&](int rank) {
    try {
      fn(rank, barrier);
    } catch (const std::exception& e) {
      barrier.abort();
      std::lock_guard lock(m);
      // The first real failure wins over the "another rank failed" it causes elsewhere.
      const bool secondary = std::string(e.what()).rfind("stopped: another rank failed", 0) == 0;
      if (first_error.empty() || (first_is_secondary && !secondary)) {
        first_error = "rank " + std::to_string(rank) + ": " + e.what();
        first_is_secondary = secondary;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
}

std::size_t parse_bytes(const std::string& option, const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // KiB -> K
  int shift = -1;
  if (unit.empty()) shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  if (end == s || shift < 0 || v == 0 || v > (1ull << (62 - shift)))
    throw UsageError("--" + option + ": '" + text + "' is not a size (e.g. 4096, 4K, 64M, 1G)");
  return static_cast<std::size_t>(v << shift);
}

std::vector<std::size_t> parse_byte_list(const std::string& option, const std::string& text) {
  std::vector<std::size_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(parse_bytes(option, item));
  if (out.empty()) throw UsageError("--" + option + " needs at least one size");
  return out;
}

std::vector<int> parse_int_list(const std::string& option, const std::string& text, int min, int max) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < min || v > max)
      throw UsageError("--" + option + ": '" + item + "' is not an integer in " + std::to_string(min) + ".." + std::to_string(max));
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError("--" + option + " needs at least one value");
  return out;
}

double busbw_factor(const std::string& op, int ranks) {
  const double n = ranks;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  return (n - 1) / n;  // all_gather, reduce_scatter
}

namespace {

PoolConfig bench_pool_config() {
  PoolConfig c;
  c.name = "bench";
  return c;
}

class PoolStrategy final : public AllocStrategy {
 public:
  PoolStrategy(std::string name, std::shared_ptr<SegmentSource> source) : name_(std::move(name)), pool_(std::move(source), bench_pool_config()) {}
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] bool is_ncclpool() const override { return true; }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream) override { return pool_.allocate(bytes, stream); }
  void deallocate(void* ptr, stream_t stream) override { pool_.deallocate(ptr, stream); }
  void release_cached() override { (void)pool_.trim(); }

 private:
  std::string name_;
  Pool pool_;
};

class LoopbackTeam final : public Team {
 public:
  LoopbackTeam(int ranks, int groups) : ranks_(ranks) {
    for (int g = 0; g < groups; ++g) {
      auto group = std::make_shared<LoopbackGroup>("group" + std::to_string(g), ranks, std::chrono::seconds(60));
      std::vector<std::shared_ptr<Communicator>> comms;
      for (int r = 0; r < ranks; ++r) comms.push_back(std::make_shared<LoopbackCommunicator>(group, r, r));
      comms_.push_back(std::move(comms));
    }
  }
  [[nodiscard]] int ranks() const override { return ranks_; }
  [[nodiscard]] int groups() const override { return static_cast<int>(comms_.size()); }
  [[nodiscard]] std::string description() const override {
    return std::to_string(ranks_) + " simulated rank(s) (threads), loopback communicators, host-memory segments";
  }
  [[nodiscard]] bool windows(std::string* /*why*/) const override { return true; }
  [[nodiscard]] std::shared_ptr<SegmentSource> source(int rank) override {
    SimSourceConfig c;
    c.device = rank;
    c.capacity = 1ull << 40;  // address space only: the simulator maps pages lazily
    return std::make_shared<SimSource>(c);
  }
  [[nodiscard]] std::shared_ptr<Communicator> comm(int rank, int group) override {
    return comms_.at(static_cast<std::size_t>(group)).at(static_cast<std::size_t>(rank));
  }

 private:
  int ranks_;
  std::vector<std::vector<std::shared_ptr<Communicator>>> comms_;
};

}  // namespace

AllocTarget make_sim_alloc_target() {
  AllocTarget t;
  t.description = "simulator (host memory; the pool's own bookkeeping, no device allocations)";
  t.strategies.push_back(std::make_unique<PoolStrategy>("ncclpool (sim)", std::make_shared<SimSource>()));
  return t;
}

std::unique_ptr<AllocStrategy> make_pool_strategy(std::string name, std::shared_ptr<SegmentSource> source) {
  return std::make_unique<PoolStrategy>(std::move(name), std::move(source));
}

namespace {

class RegisteredPoolStrategy final : public AllocStrategy {
 public:
  RegisteredPoolStrategy(std::string name, std::shared_ptr<Team> team)
      : name_(std::move(name)), team_(std::move(team)), registry_(std::make_shared<Pool>(team_->source(0), bench_pool_config())) {
    for (int g = 0; g < team_->groups(); ++g) registry_.attach(team_->comm(0, g), RegistrationKind::local);
  }
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] bool is_ncclpool() const override { return true; }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_t stream) override { return registry_.pool().allocate(bytes, stream); }
  void deallocate(void* ptr, stream_t stream) override { registry_.pool().deallocate(ptr, stream); }
  void release_cached() override { (void)registry_.trim(); }

 private:
  std::string name_;
  std::shared_ptr<Team> team_;  // outlives the registry (declared first)
  Registry registry_;
};

}  // namespace

std::unique_ptr<AllocStrategy> make_registered_pool_strategy(std::string name, std::shared_ptr<Team> team) {
  return std::make_unique<RegisteredPoolStrategy>(std::move(name), std::move(team));
}

std::unique_ptr<Team> make_loopback_team(int ranks, int groups) { return std::make_unique<LoopbackTeam>(ranks, groups); }

}  // namespace ncclpool::tool

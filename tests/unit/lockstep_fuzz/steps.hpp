#pragma once
// What the lockstep suites on the simulator build on (tests/unit/test_lockstep_fuzz.cpp and the
// fuzzer beside this file): ranks run in steps behind a barrier, their collective call logs compared
// after each step; loopback groups in NCCL pairing mode; profiles and auto pools for the simulator.

#include <gtest/gtest.h>

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/loopback.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include "common/lockstep_support.hpp"
#include "common/registry_ranks.hpp"
#include "common/scoped_profile.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t KiB = 1u << 10;
constexpr auto kTimeout = std::chrono::milliseconds(300);  // short: a missing rank costs 300 ms, not 60 s

std::string shorten(const std::string& text, std::size_t most = 400) {
  return text.size() <= most ? text : text.substr(0, most) + "...";
}

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// "" when every rank in `ranks` made the same collective calls; else where they first differ. A rank in
// `may_lag` (one that stopped calling) may have made only a prefix of the others' calls.
std::string call_log_difference(const LoopbackGroup& group, const std::vector<bool>& may_lag = {}) {
  std::vector<std::vector<std::string>> logs;
  for (int r = 0; r < group.size(); ++r) logs.push_back(group.call_log(r));
  const auto lags = [&](int r) { return !may_lag.empty() && may_lag[static_cast<std::size_t>(r)]; };
  int reference = -1;
  for (int r = 0; r < group.size() && reference < 0; ++r)
    if (!lags(r)) reference = r;
  if (reference < 0) return "";
  const auto& ref = logs[static_cast<std::size_t>(reference)];
  std::ostringstream msg;
  bool differ = false;
  for (int r = 0; r < group.size(); ++r) {
    const auto& mine = logs[static_cast<std::size_t>(r)];
    const bool equal = lags(r) ? mine.size() <= ref.size() && std::equal(mine.begin(), mine.end(), ref.begin()) : mine == ref;
    if (!equal) differ = true;
  }
  if (!differ) return "";
  std::size_t first = 0;  // the first call where some rank differs from the reference
  while (true) {
    bool same = true;
    for (const auto& l : logs)
      if (first >= l.size() || first >= ref.size() || l[first] != ref[first]) same = false;
    if (!same) break;
    ++first;
  }
  msg << "collective call logs differ from call #" << first << ":";
  for (int r = 0; r < group.size(); ++r) {
    const auto& l = logs[static_cast<std::size_t>(r)];
    std::vector<std::string> tail(l.begin() + static_cast<long>(std::min(first, l.size())), l.end());
    msg << " rank " << r << " made " << l.size() << " call(s)" << (tail.empty() ? "" : ", then " + join(tail)) << ";";
  }
  return msg.str();
}

// ------------------------------------------------------------------------------------------------
// Steps behind a barrier: every rank finishes step k before any rank starts step k+1, and after each
// step the call logs are compared (while no rank runs). The group holds completions: a rank that does
// not wait for an all-gather sees it complete only from the next step on, whatever the thread timing.
// ------------------------------------------------------------------------------------------------

struct StepOutcome {
  std::vector<std::string> errors;  // per rank, "" = no error
  std::string log_difference;       // "" = every rank made the same collective calls so far
};

std::vector<StepOutcome> run_in_steps(LoopbackGroup& group, const std::vector<std::function<void(int)>>& steps) {
  const int n = group.size();
  std::vector<StepOutcome> out(steps.size(), StepOutcome{std::vector<std::string>(static_cast<std::size_t>(n)), ""});
  std::size_t current = 0;
  auto after_step = [&]() noexcept {
    out[current].log_difference = call_log_difference(group);
    group.release_completions();
    ++current;
  };
  group.hold_completions(true);
  std::barrier sync(n, after_step);
  (void)on_ranks(n, [&](int rank) {
    for (std::size_t k = 0; k < steps.size(); ++k) {
      try {
        steps[k](rank);
      } catch (const std::exception& e) {
        out[k].errors[static_cast<std::size_t>(rank)] = describe_error(e);
      }
      sync.arrive_and_wait();
    }
  });
  return out;
}

std::shared_ptr<LoopbackGroup> nccl_group(int size) {
  return std::make_shared<LoopbackGroup>("world", size, kTimeout, LoopbackMatching::nccl);
}

// ------------------------------------------------------------------------------------------------
// Profiles and auto pools
// ------------------------------------------------------------------------------------------------

// A profile for the simulator's machine key ("ncclpool simulator", NCCL 0, `ranks` ranks): classes of
// (from bytes, kind name), the same kind for every collective.
Profile sim_profile(int ranks, const std::vector<std::pair<std::size_t, std::string>>& classes) {
  std::vector<std::pair<std::size_t, RegistrationKind>> kinds;
  for (const auto& [from, kind] : classes) kinds.emplace_back(from, *registration_kind_from_string(kind));
  return testing_support::profile_for("ncclpool simulator", 0, ranks, kinds);
}
using testing_support::ScopedProfile;

// A sim source that can be told to fail its next growth with an OutOfMemory, and says whether it
// did (the fuzzer's coverage: a fault that never fired tested nothing). Unarmed it is the SimSource.
class FaultSource final : public SegmentSource {
 public:
  FaultSource() : inner_(std::make_shared<SimSource>(SimSourceConfig{})) {}
  [[nodiscard]] const SourceProperties& properties() const noexcept override { return inner_->properties(); }
  [[nodiscard]] StreamOrdering& ordering() noexcept override { return inner_->ordering(); }
  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override {
    if (armed_.exchange(false)) {
      ++fired_;
      throw OutOfMemory(properties().description + ": injected out-of-memory");
    }
    return inner_->allocate(size);
  }
  void deallocate(const SegmentAllocation& segment) noexcept override { inner_->deallocate(segment); }
  /// The next allocate() throws OutOfMemory.
  void inject_oom() noexcept { armed_ = true; }
  /// How many injected out-of-memory errors were thrown.
  [[nodiscard]] int fired() const noexcept { return fired_.load(); }

 private:
  std::shared_ptr<SimSource> inner_;
  std::atomic<bool> armed_{false};
  std::atomic<int> fired_{0};
};

// An auto pool whose three parts are deterministic sim pools with 2 MiB chunks; `sources` gets each
// part's source, by RegistrationKind (for OOM injection).
std::unique_ptr<RegisteredPool> make_auto_pool(const std::string& name, const SizeRoutes& routes, RegistryOptions options,
                                           std::vector<std::shared_ptr<FaultSource>>* sources = nullptr) {
  auto make_part = [&](RegistrationKind placement) {
    auto source = std::make_shared<FaultSource>();
    if (sources) sources->push_back(source);
    PoolConfig config;
    config.name = name + "/" + to_string(placement);
    config.growth_chunk = 2 * MiB;
    config.deterministic = true;
    return std::make_shared<Pool>(source, config);
  };
  return std::make_unique<AutoPool>(name, make_part, routes, "set by the test", options);
}

// local below 1 MiB, symmetric from 1 MiB: an auto pool whose routes use two registered parts.
SizeRoutes local_then_symmetric() { return SizeRoutes({{0, RegistrationKind::local}, {MiB, RegistrationKind::symmetric}}); }

}  // namespace
}  // namespace ncclpool

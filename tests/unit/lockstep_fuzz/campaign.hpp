#pragma once
// A campaign of lockstep fuzz runs: which seeds (CI's fixed set, or what the environment asks for),
// the replay hint of a failing seed (the same setup, through the same test), and the fault coverage:
// a fault fires on the next call of its kind, so a seed without such a call tests nothing; CI's seeds
// must make every kind fire.

#include "unit/lockstep_fuzz/fuzz_run.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>

namespace ncclpool {
namespace {

// The setup a test gives every seed it runs; `test` is that test's name, which a replay names.
struct FuzzSetup {
  Layout layout = Layout::world;
  bool across_nodes = false;
  const char* test = "EveryRankInStepUnderOneFault";
  bool ensure_firing = true;  // make_program's: false for seeds pinned as found (their programs stay as they were)
};

std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::strtoull(v, nullptr, 10);
}

// What a campaign runs: NCCLPOOL_FUZZ_SEED=s replays one seed, NCCLPOOL_FUZZ_SEEDS=N runs 1..N, else
// seeds 1..ci_count (CI's set, `ci`); NCCLPOOL_FUZZ_FAULT=<name> forces one fault kind.
struct Selection {
  std::vector<std::uint64_t> seeds;
  std::optional<Fault> forced;
  bool ci = false;    // CI's own set: no seed or fault asked for
  std::string error;  // an unknown fault name
};

Selection select_seeds(std::uint64_t ci_count) {
  Selection s;
  if (const char* f = std::getenv("NCCLPOOL_FUZZ_FAULT"); f != nullptr && *f != '\0') {
    s.forced = fault_from_name(f);
    if (!s.forced) s.error = std::string("NCCLPOOL_FUZZ_FAULT=") + f + " is not one of none, oom, register_local, register_window, scope_throw, profile, trim_race, stop";
  }
  if (const auto one = env_number("NCCLPOOL_FUZZ_SEED")) {
    s.seeds.push_back(*one);
  } else {
    const auto count = env_number("NCCLPOOL_FUZZ_SEEDS");
    for (std::uint64_t seed = 1; seed <= count.value_or(ci_count); ++seed) s.seeds.push_back(seed);
    s.ci = !count && !s.forced;
  }
  return s;
}

// The program a seed runs under a setup.
Program program_for(std::uint64_t seed, std::optional<Fault> forced, const FuzzSetup& setup) {
  Program program = make_program(seed, forced, setup.layout, setup.ensure_firing);
  if (setup.across_nodes) {  // the last rank alone on another node: auto pools whose routes open at an attach drop windows
    program.nodes.assign(static_cast<std::size_t>(program.ranks), 0x4e4f4445ull);
    program.nodes.back() = 0x4e4f4446ull;
  }
  return program;
}

// How to run a seed again, alone, with the same setup: the environment and the test that reads it.
std::string replay_hint(const FuzzSetup& setup, std::uint64_t seed, std::optional<Fault> forced) {
  return "NCCLPOOL_FUZZ_SEED=" + std::to_string(seed) + (forced ? std::string(" NCCLPOOL_FUZZ_FAULT=") + fault_name(*forced) : "") +
         " NCCLPOOL_FUZZ_VERBOSE=1 ncclpool_unit_tests --gtest_filter=LockstepFuzz." + setup.test;
}

// Per fault kind: seeds run, seeds where it fired, seeds that ended with an error on some rank.
struct KindCoverage {
  int seeds = 0;
  int fired = 0;
  int errored = 0;
};
using Coverage = std::map<Fault, KindCoverage>;

// The kinds (other than none) that ran in some seed and never fired.
std::vector<Fault> never_fired(const Coverage& coverage) {
  std::vector<Fault> out;
  for (const auto& [fault, c] : coverage)
    if (fault != Fault::none && c.seeds > 0 && c.fired == 0) out.push_back(fault);
  return out;
}

std::string describe_coverage(const Coverage& coverage) {
  std::string out;
  for (const auto& [fault, c] : coverage)
    out += std::string(out.empty() ? "" : ", ") + fault_name(fault) + " " + std::to_string(c.fired) + "/" + std::to_string(c.seeds) + " fired (" +
           std::to_string(c.errored) + " with an error)";
  return out;
}

// Runs one seed; a failure message says how to replay it.
bool run_seed(std::uint64_t seed, std::optional<Fault> forced, bool verbose, const FuzzSetup& setup = {}, Coverage* coverage = nullptr) {
  const Program program = program_for(seed, forced, setup);
  const FuzzResult result = FuzzRun(program).run();
  if (verbose) std::printf("%s  fault fired: %s\n", result.program.c_str(), result.fired ? "yes" : "no");
  if (coverage) {
    KindCoverage& c = (*coverage)[program.fault];
    ++c.seeds;
    c.fired += result.fired ? 1 : 0;
    c.errored += result.any_error ? 1 : 0;
  }
  if (result.violations.empty()) return true;
  std::ostringstream msg;
  msg << "seed " << seed << " (" << layout_name(setup.layout) << (setup.across_nodes ? ", across nodes" : "") << "; fault " << fault_name(program.fault)
      << " on rank " << program.fault_rank << " at step " << program.fault_step << "; replay: " << replay_hint(setup, seed, forced) << "):\n";
  for (const std::string& v : result.violations) msg << "  " << v << "\n";
  ADD_FAILURE() << msg.str() << result.program;
  return false;
}

// The seeds the environment selects (CI's first `ci_count` by default) under one setup; in CI's own
// set every fault kind must fire in some seed.
Coverage run_campaign(const FuzzSetup& setup, std::uint64_t ci_count) {
  const Selection selection = select_seeds(ci_count);
  if (!selection.error.empty()) {
    ADD_FAILURE() << selection.error;
    return {};
  }
  const bool verbose = env_number("NCCLPOOL_FUZZ_VERBOSE").value_or(0) != 0;
  Coverage coverage;
  int failed = 0;
  for (std::uint64_t seed : selection.seeds) failed += run_seed(seed, selection.forced, verbose, setup, &coverage) ? 0 : 1;
  std::printf("lockstep fuzz, %s%s: %zu seed(s), %d with violations; %s\n", layout_name(setup.layout), setup.across_nodes ? ", across nodes" : "",
              selection.seeds.size(), failed, describe_coverage(coverage).c_str());
  if (selection.ci) {
    std::string missing;
    for (Fault f : never_fired(coverage)) missing += std::string(missing.empty() ? "" : ", ") + fault_name(f);
    EXPECT_EQ(missing, "") << "fault kind(s) that never fired in CI's seeds (" << layout_name(setup.layout)
                           << "): their seeds test nothing; coverage: " << describe_coverage(coverage);
  }
  return coverage;
}

}  // namespace
}  // namespace ncclpool

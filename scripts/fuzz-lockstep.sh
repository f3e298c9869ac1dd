#!/usr/bin/env bash
# A longer run of the cross-rank lockstep fuzzer (tests/unit/test_lockstep_fuzz.cpp, tests/unit/lockstep_fuzz/)
# than CI's fixed seed sets, in every setup: one world communicator, the same across nodes, and two
# partly overlapping groups. Each setup prints its fault coverage (per kind: seeds, fired, with an
# error). Usage: scripts/fuzz-lockstep.sh [SEEDS] [FAULT] [BUILD_DIR]
#   SEEDS      seeds 1..SEEDS (default 2000)
#   FAULT      one of none, oom, register_local, register_window, scope_throw, profile, trim_race,
#              stop; default: every kind in turn (seed % 8)
#   BUILD_DIR  default build/default (build it: cmake --build --preset default --target ncclpool_unit_tests)
# Replay a failing seed as its message says, through the test that found it (its setup):
#   NCCLPOOL_FUZZ_SEED=<s> [NCCLPOOL_FUZZ_FAULT=<f>] NCCLPOOL_FUZZ_VERBOSE=1 \
#   <build>/tests/ncclpool_unit_tests --gtest_filter=LockstepFuzz.<test>
# scripts/fuzz-rule-breaks.sh shows that these tests fail with a rule broken on purpose.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-2000}
fault=${2:-}
build=${3:-build/default}
export NCCLPOOL_FUZZ_SEEDS="$seeds"
if [[ -n "$fault" ]]; then export NCCLPOOL_FUZZ_FAULT="$fault"; fi
exec "$build/tests/ncclpool_unit_tests" --gtest_filter='LockstepFuzz*' --gtest_color=no

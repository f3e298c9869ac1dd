#!/usr/bin/env bash
# Shows that the lockstep fuzzer can fail: each tests/unit/rule_breaks/*.patch puts one break in on
# purpose (a lockstep rule broken in src/, or the fuzzer's own coverage dropped), and the fuzz tests
# its header names must then fail. Not in CI: it builds the unit tests (minutes on 2 cores).
#
# Usage: scripts/fuzz-rule-breaks.sh [PATCH...]   (default: every tests/unit/rule_breaks/*.patch)
# Env:   REV   the commit to break (default HEAD: commit the fuzzer first)
#        WORK  a scratch folder (default: a new one under /tmp), JOBS (default 2), KEEP=1 keeps it
#
# The patches are applied to a temporary git worktree of REV, never to this tree. The unpatched
# worktree is built and run first (the control: every named test passes there), then each patch in
# turn: applied, built, run, reverted. A patch's header names
#   Expect-fail:   gtest filter of tests that must fail with it (the fuzzer catches the break)
#   Expect-output: text that the failing run must print (what caught it)
#   Expect-pass:   tests that stay blind to it (reported, not asserted: where a layout cannot see it)
# Exit 0 when every patch was caught, 1 otherwise. docs/registry.md ("Tests") shows a run's output.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${REV:-HEAD}
jobs=${JOBS:-2}
if [[ $# -gt 0 ]]; then patches=("$@"); else patches=("$root"/tests/unit/rule_breaks/*.patch); fi
for p in "${patches[@]}"; do [[ -f "$p" ]] || { echo "no such patch: $p" >&2; exit 2; }; done
for i in "${!patches[@]}"; do patches[$i]=$(cd "$(dirname "${patches[$i]}")" && pwd)/$(basename "${patches[$i]}"); done

work=${WORK:-$(mktemp -d /tmp/ncclpool-rule-breaks.XXXXXX)}
mkdir -p "$work"
tree="$work/tree"
build="$work/build"
git -C "$root" worktree add --detach "$tree" "$rev" >/dev/null
cleanup() {
  if [[ -z "${KEEP:-}" ]]; then
    git -C "$root" worktree remove --force "$tree" || true
    rm -rf "$work"
  else
    echo "kept: $work (remove with: git worktree remove --force $tree)"
  fi
}
trap cleanup EXIT
echo "rule breaks against $(git -C "$tree" rev-parse --short HEAD), in $work"

header() { sed -n "s/^$2: //p" "$1" | head -n 1; }
build_tests() { cmake --build "$build" -j "$jobs" --target ncclpool_unit_tests >"$1" 2>&1; }
# run FILTER LOG: the unit tests of that filter, without any fuzz setting from the caller's environment
run_tests() {
  env -u NCCLPOOL_FUZZ_SEED -u NCCLPOOL_FUZZ_SEEDS -u NCCLPOOL_FUZZ_FAULT -u NCCLPOOL_FUZZ_VERBOSE \
    "$build/tests/ncclpool_unit_tests" --gtest_filter="$1" --gtest_color=no >"$2" 2>&1
}

cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" 2>&1
build_tests "$work/control.build.log" || { echo "control: the unpatched tree does not build (see $work/control.build.log)"; KEEP=1; exit 1; }
filters=""
for p in "${patches[@]}"; do filters+="$(header "$p" Expect-fail):$(header "$p" Expect-pass):"; done
if ! run_tests "$filters" "$work/control.log"; then
  echo "control: the fuzz tests fail without any patch; a failure below would prove nothing:"
  grep -E '^\[  FAILED  \]' "$work/control.log" || tail -n 20 "$work/control.log"
  KEEP=1
  exit 1
fi
echo "control (no patch): $(grep -c '^\[       OK \]' "$work/control.log") test(s) passed"

status=0
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  fail=$(header "$p" Expect-fail)
  output=$(header "$p" Expect-output)
  pass=$(header "$p" Expect-pass)
  if ! git -C "$tree" apply "$p"; then
    echo "$name: does not apply to $rev (update the patch)"
    status=1
    continue
  fi
  if ! build_tests "$work/$name.build.log"; then
    echo "$name: does not build (see $work/$name.build.log)"
    status=1
    KEEP=1
  elif run_tests "$fail" "$work/$name.log"; then
    echo "$name: NOT CAUGHT: $fail passed with the break in"
    status=1
    KEEP=1
  elif [[ -n "$output" ]] && ! grep -qF -- "$output" "$work/$name.log"; then
    echo "$name: $fail failed, but without '$output' (another failure? see $work/$name.log)"
    status=1
    KEEP=1
  else
    echo "$name: caught by $(grep -E '^\[  FAILED  \] LockstepFuzz' "$work/$name.log" | sed 's/^\[  FAILED  \] //; s/ (.*//' | sort -u | paste -sd, -)"
    grep -E '^lockstep fuzz' "$work/$name.log" | sed 's/^/    /' | cut -c1-160 || true
    seeds=$(grep -oE '^seed [0-9]+ \(.*replay' "$work/$name.log" | sed -E 's/^seed ([0-9]+) .*/\1/' | paste -sd, - || true)
    [[ -z "$seeds" ]] || echo "    seeds with violations: $seeds"
    grep -E '^seed [0-9]+ \(.*replay' "$work/$name.log" | head -n 3 | sed 's/^/    /' | cut -c1-200 || true
    grep -m 1 -F -- "$output" "$work/$name.log" | sed 's/^ */    first: /' | cut -c1-300 || true
    if [[ -n "$pass" ]]; then
      if run_tests "$pass" "$work/$name.blind.log"; then
        echo "    blind to it, as its header says: $pass"
      else
        echo "    also caught by $pass (its header says blind: update it)"
      fi
    fi
  fi
  git -C "$tree" apply -R "$p"
done
exit $status

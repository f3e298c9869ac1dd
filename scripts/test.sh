#!/usr/bin/env bash
# First the tree checks (scripts/check-tree.py: no build needed, a second). Then builds ncclpool and
# runs every CPU test: the unit suite on the simulator in the default build, then
# again under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer. GPU tests
# (label `gpu`) are left to scripts/gpu-check.sh. NCCLPOOL_TSAN=0 skips the TSan build. Last,
# tests/packaging/run.sh: `pip install .` into a fresh virtual environment (needs PyPI for the build
# backend, scikit-build-core), and scripts/check-nccl-headers.sh: the NCCL backend compiled against a
# newer NCCL's headers (2.32.3, from PyPI, cached) beside the toolkit's 2.28.9.
#
# A skip reads as a skip: every test that did not run (GTEST_SKIP, pytest's skips inside the one
# ctest test python_ctypes, the NCCL-headers check without cuda.h or PyPI) is listed with its reason
# at the end (scripts/report-skips.py), and the last line counts them.
set -euo pipefail
cd "$(dirname "$0")/.."
skips=()  # "what: why", one per skipped test or check
echo "=== tree checks (scripts/check-tree.py, docs/checks.md): layers, file sizes, environment, library sources"
python3 scripts/check-tree.py
scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

presets=(default asan)
[ "${NCCLPOOL_TSAN:-1}" = 1 ] && presets+=(tsan)

for preset in "${presets[@]}"; do
  echo "=== ${preset}: build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== ${preset}: tests"
  junit="build/$preset/junit"
  rm -rf "$junit" && mkdir -p "$junit"  # what the report reads comes from this run
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TSAN_OPTIONS=halt_on_error=1 \
    ctest --preset "$preset" -j "$jobs" --output-junit "$PWD/$junit/ctest.xml"
  python3 scripts/report-skips.py "$preset" "$junit"/*.xml >"$junit/skips.txt"
  mapfile -t found <"$junit/skips.txt"
  skips+=(${found[@]+"${found[@]}"})
done
echo "=== packaging: pip install . in a fresh virtual environment"
tests/packaging/run.sh
echo "=== NCCL headers: the NCCL backend against another NCCL's nccl.h"
headers="NCCL headers"
headers_log=$(mktemp)
trap 'rm -f "$headers_log"' EXIT
# Exit 77: skipped (no cuda.h, or the headers could not be downloaded): a skip, listed below.
if scripts/check-nccl-headers.sh 2>&1 | tee "$headers_log"; then
  :
elif [ "${PIPESTATUS[0]}" = 77 ]; then
  skips+=("NCCL headers: $(grep -m1 'skipped' "$headers_log" | sed 's/^check-nccl-headers: skipped //')")
  headers="NCCL headers SKIPPED"
else
  exit 1
fi
if [ ${#skips[@]} -gt 0 ]; then
  echo "=== skipped: ${#skips[@]} test(s) or check(s), each with its reason"
  printf '  %s\n' "${skips[@]}"
fi
echo "=== all CPU tests passed (${presets[*]}, packaging, ${headers}); ${#skips[@]} skipped${skips[*]:+ (listed above)}"

#!/usr/bin/env bash
# First the tree checks (scripts/check-tree.py: no build needed, a second). Then builds ncclpool and
# runs every CPU test: the unit suite on the simulator in the default build, then
# again under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer. GPU tests
# (label `gpu`) are left to scripts/gpu-check.sh. NCCLPOOL_TSAN=0 skips the TSan build. Last,
# tests/packaging/run.sh: `pip install .` into a fresh virtual environment (needs PyPI for the build
# backend, scikit-build-core), and scripts/check-nccl-headers.sh: the NCCL backend compiled against a
# newer NCCL's headers (2.32.3, from PyPI, cached) beside the toolkit's 2.28.9.
set -euo pipefail
cd "$(dirname "$0")/.."
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
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TSAN_OPTIONS=halt_on_error=1 \
    ctest --preset "$preset" -j "$jobs"
done
echo "=== packaging: pip install . in a fresh virtual environment"
tests/packaging/run.sh
echo "=== NCCL headers: the NCCL backend against another NCCL's nccl.h"
scripts/check-nccl-headers.sh
echo "=== all CPU tests passed (${presets[*]}, packaging, NCCL headers)"

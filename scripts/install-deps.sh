#!/usr/bin/env bash
# Installs what building and testing ncclpool needs, if it is missing: a C++20 compiler, CMake,
# Ninja, GoogleTest, Google Benchmark (Debian/Ubuntu packages), and pytest. The CUDA toolkit is
# optional: without cuda.h, ncclpool builds the core and the simulator only.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need+=(libbenchmark-dev)

if [ ${#need[@]} -gt 0 ]; then
  echo "ncclpool: installing ${need[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "ncclpool: please install ${need[*]} with your package manager" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# pytest for the Python package's tests (the package itself needs only the standard library).
if ! python3 -m pytest --version >/dev/null 2>&1; then
  echo "ncclpool: installing pytest (python3 -m pip)"
  python3 -m pip install --quiet --disable-pip-version-check pytest 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user pytest 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --user pytest
fi

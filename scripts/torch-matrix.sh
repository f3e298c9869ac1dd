#!/usr/bin/env bash
# The torch matrix on the CPU (issue 45 item 3): for each torch version, the real wheels from PyPI
# (cp of this python, with their nvidia-* dependencies: about 2.6 GB each) installed with
# `pip install --target` into a directory of its own, then scripts/torch-matrix.py under it.
#   scripts/torch-matrix.sh [OUTDIR]      (default docs/benchmarks/data/<date>-torch-matrix-cpu)
# TORCH_MATRIX_VERSIONS (default "2.11.0 2.14.1 2.15.0"), TORCH_MATRIX_CACHE (wheels, default
# /tmp/torchwheels), TORCH_MATRIX_ENVS (installs, default /tmp/torchenv; an existing install is reused),
# TORCH_MATRIX_KEEP=0 removes each install after its run. Not in .ci/run: downloads and installs
# take minutes per version; the checks themselves take about 15 s per version on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/benchmarks/data/$(date -u +%Y-%m-%d)-torch-matrix-cpu}
versions=${TORCH_MATRIX_VERSIONS:-2.11.0 2.14.1 2.15.0}
cache=${TORCH_MATRIX_CACHE:-/tmp/torchwheels}
envs=${TORCH_MATRIX_ENVS:-/tmp/torchenv}
mkdir -p "$out"
status=0
for v in $versions; do
  target="$envs/$v"
  if [ ! -d "$target/torch" ]; then
    pip download --only-binary=:all: "torch==$v" -d "$cache/$v"
    pip install --no-index --find-links "$cache/$v" --target "$target" "torch==$v"
  fi
  echo "== torch $v ($target)"
  {
    echo "# scripts/torch-matrix.py under torch $v: PYTHONPATH=$target python3 scripts/torch-matrix.py"
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- python/ncclpool/torch scripts/torch-matrix.py || echo '+changes'), $(uname -srm), $(nproc) CPUs, $(python3 --version), no GPU"
    PYTHONPATH="$target" python3 scripts/torch-matrix.py --json "$out/torch-$v.json" 2>&1 \
      | grep -v -e "Failed to initialize NumPy" -e "_conversion_method_template" || true
  } > "$out/torch-$v.txt"
  # what `ncclpool info` says about this torch (the checkout's package: python -m ncclpool), unset and both values
  for flag in "" 0 1; do
    echo "# TORCH_DIST_USE_NCCL2=${flag:-(unset)} PYTHONPATH=python:$target python3 -m ncclpool info | tail -1"
    env ${flag:+TORCH_DIST_USE_NCCL2=$flag} PYTHONPATH="python:$target" python3 -m ncclpool info 2>/dev/null | tail -1
  done > "$out/info-$v.txt"
  tail -1 "$out/torch-$v.txt"
  grep -q '^summary: .* 0 FAIL' "$out/torch-$v.txt" || status=1
  if [ "${TORCH_MATRIX_KEEP:-1}" = 0 ]; then rm -rf "$target"; fi
done
exit $status

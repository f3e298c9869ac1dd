#!/usr/bin/env bash
# Prepares the ignored inputs that scripts/gpu-check.sh takes from .whl/ on the GPU host (which
# reaches no package registry), on a build machine that reaches PyPI:
#   .whl/site/megatron_fsdp   megatron-fsdp 0.6.1, unpacked (section `megatron`)
#   .whl/mcore/megatron       Megatron-Core 0.16.1's Python source, for its own allocator (`megatron`)
#   .whl/ncclpool-*.whl       this checkout's wheel (`wheel`)
#   .whl/sglang               SGLang 0.5.23's pynccl*.py and ninja (`sglang`: scripts/sglang-inputs.sh)
# and says where .whl/nccl-tests stands (`nccltests`: a checkout of NVIDIA/nccl-tests, brought by
# other means). Carry .whl with the build folder. Re-running replaces what it made.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p .whl
python3 -m pip download -q --no-deps -d "$tmp/dl" megatron-fsdp==0.6.1 megatron-core==0.16.1
rm -rf .whl/site .whl/mcore
python3 -m zipfile -e "$tmp"/dl/megatron_fsdp-0.6.1-*.whl .whl/site
python3 -m zipfile -e "$tmp"/dl/megatron_core-0.16.1-*.whl "$tmp/mcore"
mkdir -p .whl/mcore && cp -r "$tmp/mcore/megatron" .whl/mcore/  # the Python source is what is used
find .whl/mcore -name '*.so' -delete  # a CPython-version-specific extension the benchmark does not load
rm -f .whl/ncclpool-*.whl
python3 -m pip wheel -q . --no-deps -w "$tmp/wheel"
cp "$tmp"/wheel/ncclpool-*.whl .whl/
scripts/sglang-inputs.sh >/dev/null
echo "gpu-inputs: $(ls .whl | tr '\n' ' ')($(du -sh .whl | cut -f1))"
if [ -d .whl/nccl-tests ]; then
  echo "gpu-inputs: .whl/nccl-tests is there"
else
  echo "gpu-inputs: no .whl/nccl-tests: put a checkout of NVIDIA/nccl-tests there for the nccltests section"
fi

#!/usr/bin/env bash
# The inputs of the SGLang benchmark and smoke test (bench/sglang_bench.py), made on a machine that
# reaches PyPI and carried to the GPU host, which reaches none. Into .whl/sglang (ignored by git;
# SGLang's code is never committed here):
#   .whl/sglang/sglang/srt/distributed/device_communicators/{pynccl,pynccl_wrapper,pynccl_allocator}.py
#       the three pure-Python files of the sglang==0.5.23 wheel, unmodified (the wheel is 39 MB, cp311
#       with native extensions: only these files are taken); bench/sglang_standins/ gives the SGLang
#       modules they import;
#   .whl/sglang/bin/ninja
#       ninja from PyPI's `ninja` wheel: torch's load_inline (SGLang's JIT build of its allocator)
#       needs it on PATH, and the GPU host may not have it;
#   .whl/sglang/SOURCES  what was taken, from which wheel, with its sha256.
#
#   scripts/sglang-inputs.sh [OUT_DIR]      (default .whl/sglang; SGLANG_VERSION=0.5.23)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.whl/sglang}
version=${SGLANG_VERSION:-0.5.23}
files=(pynccl.py pynccl_wrapper.py pynccl_allocator.py)
inner=sglang/srt/distributed/device_communicators
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The wheel is the same for every Python (only its native parts differ): ask for the one PyPI has.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_34_x86_64 -d "$work" "sglang==$version"
wheel=$(ls "$work"/sglang-"$version"-*.whl)
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 --python-version 3.11 \
  -d "$work" ninja
ninja_wheel=$(ls "$work"/ninja-*.whl)

rm -rf "$out"
mkdir -p "$out/$inner" "$out/bin"
python3 - "$wheel" "$out" "$inner" "${files[@]}" <<'PY'
import sys, zipfile
wheel, out, inner, *files = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in files:
        with open(f"{out}/{inner}/{name}", "wb") as f:
            f.write(z.read(f"{inner}/{name}"))
PY
python3 - "$ninja_wheel" "$out/bin/ninja" <<'PY'
import sys, zipfile
wheel, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    binary = [n for n in z.namelist() if n.endswith(("/bin/ninja", "/scripts/ninja"))]
    if not binary:
        sys.exit(f"no ninja binary in {wheel}")
    with open(target, "wb") as f:
        f.write(z.read(binary[0]))
PY
chmod +x "$out/bin/ninja"
{
  echo "sglang $version: $(basename "$wheel") sha256 $(sha256sum "$wheel" | cut -d' ' -f1)"
  for f in "${files[@]}"; do echo "  $inner/$f sha256 $(sha256sum "$out/$inner/$f" | cut -d' ' -f1)"; done
  echo "ninja: $(basename "$ninja_wheel") sha256 $(sha256sum "$ninja_wheel" | cut -d' ' -f1) -> bin/ninja ($("$out/bin/ninja" --version))"
  echo "made $(date -u +%FT%TZ) by scripts/sglang-inputs.sh"
} >"$out/SOURCES"
cat "$out/SOURCES"

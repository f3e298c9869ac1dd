#!/usr/bin/env bash
# `pip install .` from the repository root, as a user installs: a fresh virtual environment, the
# scikit-build-core build (libncclpool + the `ncclpool` command inside the package), then the
# command, `python -m ncclpool info`, the library through ctypes, the version (one source: project()
# in CMakeLists.txt, the same in the wheel's metadata, the library and the command), and the wheel's
# contents. Needs PyPI (pip fetches scikit-build-core into the build's own environment).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 -m venv "$work/venv" || fail "python3 -m venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check "$repo" || fail "pip install ."
cd "$work"  # away from the checkout: the installed package must be the one imported
"$py" -m ncclpool info >"$work/info.txt" || fail "python -m ncclpool info"
grep -q '^ncclpool 0\.' "$work/info.txt" || fail "python -m ncclpool info printed: $(head -3 "$work/info.txt")"
# "simulator" says whether an auto pool here runs on the simulator: exactly when there is no CUDA device.
"$work/venv/bin/ncclpool" info --json | "$py" -c 'import json, sys; j = json.load(sys.stdin); assert j["simulator"] is (not j["cuda"]["available"]), j' ||
  fail "the ncclpool console script"
version=$(sed -n 's/^project(ncclpool VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
[ -n "$version" ] || fail "no project(ncclpool VERSION ...) line in CMakeLists.txt"
[ "$("$work/venv/bin/ncclpool" version)" = "$version" ] || fail "ncclpool version: $("$work/venv/bin/ncclpool" version), not $version"
"$py" - "$version" <<'PY' || fail "the installed package"
import importlib.metadata, os, sys, ncclpool
want = sys.argv[1]
assert ncclpool.version() == want, f"ncclpool.version() is {ncclpool.version()}, CMakeLists.txt says {want}"
assert importlib.metadata.version("ncclpool") == want, f"the wheel's version is {importlib.metadata.version('ncclpool')}, not {want}"
lib = ncclpool.features()["library"]
assert os.path.dirname(lib) == os.path.dirname(ncclpool.__file__), f"library {lib} is not the bundled one"
with ncclpool.Pool(source="sim", name="packaging") as pool:
    pool.free(pool.alloc(1 << 20))
    pool.check()
PY
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/wheels" "$repo" || fail "pip wheel ."
wheel=$(ls "$work"/wheels/ncclpool-"$version"-*.whl) || fail "no ncclpool-$version wheel: $(ls "$work/wheels")"
"$py" - "$wheel" <<'PY' || fail "wheel contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("ncclpool/libncclpool.so", "ncclpool/bin/ncclpool", "ncclpool/torch/__init__.py", "ncclpool/__main__.py",
             "ncclpool/sglang.py", "ncclpool-sglang.pth"):
    assert need in names, f"{need} missing from {sys.argv[1]}: {names}"
PY
echo "packaging: pip install . and pip wheel . work ($(basename "$wheel"))"

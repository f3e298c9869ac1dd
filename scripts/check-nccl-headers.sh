#!/usr/bin/env bash
# Compiles ncclpool's NCCL-facing sources (-fsyntax-only) against the headers of another NCCL than
# the CUDA toolkit's (2.28.9 here, which the normal build uses): the nvidia-nccl-cu12 wheel's, 2.32.3
# by default (NCCLPOOL_NCCL_HEADERS_VERSION), so that a newer nccl.h breaks the build here rather
# than on a user's machine. The wheel (~350 MB) is downloaded once; only its headers are kept, in
# ${XDG_CACHE_HOME:-~/.cache}/ncclpool/nccl-headers-VERSION. Without PyPI or cuda.h it says so and
# exits 77, "skipped" (nothing was checked: scripts/test.sh lists it as a skip, not as a pass).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${NCCLPOOL_NCCL_HEADERS_VERSION:-2.32.3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ncclpool/nccl-headers-$ver
cuda_inc=""
for d in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include /usr/include; do
  [ -f "$d/cuda.h" ] && { cuda_inc=$d; break; }
done
if [ -z "$cuda_inc" ]; then
  echo "check-nccl-headers: skipped (no cuda.h: the NCCL backend is not built here)"
  exit 77
fi
if [ ! -f "$cache/nccl.h" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if ! python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$tmp" "nvidia-nccl-cu12==$ver" >"$tmp/pip.log" 2>&1; then
    echo "check-nccl-headers: skipped (could not download nvidia-nccl-cu12==$ver: $(tail -1 "$tmp/pip.log"))"
    exit 77
  fi
  mkdir -p "$cache"
  python3 - "$tmp" "$cache" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if "/include/" in name and not name.endswith("/"):
            rel = name.split("/include/", 1)[1]
            os.makedirs(os.path.join(sys.argv[2], os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(sys.argv[2], rel), "wb") as out:
                out.write(z.read(name))
PY
fi
got=$(sed -n 's/^#define NCCL_VERSION_CODE \([0-9]*\).*/\1/p' "$cache/nccl.h")
# The wheel's headers first: the toolkit's include directory has an nccl.h of its own.
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -Werror -Iinclude -Isrc -isystem "$cache" -isystem "$cuda_inc")
failed=0
for f in src/backends/nccl/library.cpp src/backends/nccl/communicator.cpp src/backends/nccl/nccl_source.cpp; do
  if ! g++ "${flags[@]}" "$f"; then
    echo "check-nccl-headers: $f does not compile against NCCL $got's headers" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] && echo "check-nccl-headers: the NCCL backend compiles against NCCL $got's headers ($cache) and the toolkit's"
exit "$failed"

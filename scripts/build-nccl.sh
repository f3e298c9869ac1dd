#!/usr/bin/env bash
# Builds NCCL from a source tarball for this machine's GPUs (sm_90 by default, ~190 s on 16 cores),
# for the NCCL-version runs of scripts/gpu-check.sh (section `ncclversions`, docs/python.md "NCCL
# versions"). Nothing of NCCL is committed: the tarball is made from NVIDIA/nccl and carried.
#
#   scripts/build-nccl.sh .whl/nccl-src-2.30.7-1.tar.gz [OUTDIR]    -> OUTDIR/lib/libnccl.so.2
#                                                                     (default OUTDIR: build/gpu/nccl-2.30.7-1)
# Make the tarball from a checkout (or the search tool's mirror) of NVIDIA/nccl:
#   git -C NCCL_REPO archive --format=tar.gz --prefix=nccl-2.30.7-1/ v2.30.7-1 -o .whl/nccl-src-2.30.7-1.tar.gz
# NCCL_GENCODE overrides the architectures (default "-gencode=arch=compute_90,code=sm_90").
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/build-nccl.sh NCCL_SOURCE_TARBALL [OUTDIR]}
ver=$(basename "$src" .tar.gz)
ver=${ver#nccl-src-}
out=${2:-build/gpu/nccl-$ver}
if [ -f "$out/lib/libnccl.so.2" ]; then
  echo "build-nccl: $out/lib/libnccl.so.2 (built before)"
  exit 0
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "build-nccl: no nvcc" >&2; exit 1; }
cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$nvcc")")")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$src" -C "$work"
# A CUDA toolkit with NCCL's headers in it (nccl.h, nccl_device/: a build machine of this project has
# them) would shadow the tree's own: NCCL's host sources reach nccl_device/... through
# -I$CUDA_HOME/include. Build against a view of the toolkit without them.
if compgen -G "$cuda_home/include/nccl*" >/dev/null; then
  view="$work/cuda-without-nccl"
  mkdir -p "$view/include"
  for entry in "$cuda_home"/*; do [ "$(basename "$entry")" = include ] || ln -s "$entry" "$view/"; done
  for entry in "$cuda_home"/include/*; do
    case "$(basename "$entry")" in nccl*) ;; *) ln -s "$entry" "$view/include/" ;; esac
  done
  echo "build-nccl: $cuda_home/include has NCCL headers: building against $view (the same toolkit without them)"
  cuda_home=$view
fi
tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
start=$(date +%s)
if ! make -C "$tree" -j "$(nproc)" src.build CUDA_HOME="$cuda_home" BUILDDIR="$work/build" \
    NVCC_GENCODE="${NCCL_GENCODE:--gencode=arch=compute_90,code=sm_90}" >"$work/build.log" 2>&1; then
  tail -40 "$work/build.log" >&2
  echo "build-nccl: the build of $ver failed" >&2
  exit 1
fi
mkdir -p "$out/lib" "$out/include"
cp -L "$work/build/lib/libnccl.so.2" "$out/lib/"
cp "$work/build/include/"*.h "$out/include/"
echo "build-nccl: $out/lib/libnccl.so.2 ($ver, $(( $(date +%s) - start )) s, $(du -h "$out/lib/libnccl.so.2" | cut -f1))"

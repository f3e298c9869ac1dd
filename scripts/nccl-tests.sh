#!/usr/bin/env bash
# NVIDIA's nccl-tests beside `ncclpool bench coll`, in one run on this machine's GPUs.
#
#   scripts/nccl-tests.sh SRC [OUT]
#
# SRC is a checkout of https://github.com/NVIDIA/nccl-tests (fetched, never copied into this
# repository: carry it as an ignored folder to the GPU host). It is built here with nvcc against the
# NCCL that torch ships (its headers and library, so both programs use the same NCCL), for sm_90 unless
# NVCC_GENCODE says otherwise. Then, one thread per GPU (-t N -g 1, like bench coll's rank threads),
# for all_gather / reduce_scatter / all_reduce, 1 KiB .. 1 GiB, -n 100 -w 10, without registration
# (-R 0), local (-R 1) and symmetric (-R 2); and `ncclpool bench coll` with the same sizes and
# iterations, both with NCCL's own symmetric CTA count. OUT (default build/nccl-tests) receives the logs, nccl-tests-{none,local,symmetric}.json
# (reference format of scripts/bench-report.py) and compare-*.txt. NVLS stays off.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/nccl-tests.sh NCCL_TESTS_SRC [OUT]}
out=${2:-build/nccl-tests}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# NCCL's own symmetric CTA count on both sides (nccl-tests and bench coll, below): a caller's
# NCCL_SYM_CTAS would reach one program only.
unset NCCL_SYM_CTAS
[ -f "$src/src/Makefile" ] || { echo "nccl-tests.sh: $src is not an nccl-tests checkout (no src/Makefile)" >&2; exit 2; }
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])') ||
  { echo "nccl-tests.sh: torch's NCCL (python3 -c 'import nvidia.nccl') not found" >&2; exit 2; }
gpus=${NCCLPOOL_GPUS:-$(nvidia-smi -L | wc -l)}
[ "$gpus" -ge 2 ] || { echo "nccl-tests.sh: needs 2+ GPUs (have $gpus)" >&2; exit 1; }

# torch's wheel has lib/libnccl.so.2 but no libnccl.so to link against: give the linker one.
home="$out/nccl-home"
mkdir -p "$home/lib"
ln -sf "$nccl_dir/include" "$home/include"
ln -sf "$nccl_dir/lib/libnccl.so.2" "$home/lib/libnccl.so"
ln -sf "$nccl_dir/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
build=$(realpath "$out")/build
echo "nccl-tests.sh: building $src against $nccl_dir (log: $out/build.log)"
make -C "$src/src" -j "$(nproc)" BUILDDIR="$build" NCCL_HOME="$(realpath "$home")" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
  NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" >"$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; echo "nccl-tests.sh: build failed" >&2; exit 1; }
export LD_LIBRARY_PATH="$(realpath "$home")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

for kind in none local symmetric; do
  case $kind in none) r=0 ;; local) r=1 ;; symmetric) r=2 ;; esac
  logs=()
  for op in all_gather reduce_scatter all_reduce; do
    log="$out/${op}-${kind}.txt"
    echo "nccl-tests.sh: ${op}_perf -R $r on $gpus GPUs"
    timeout 600 "$build/${op}_perf" -b 1K -e 1G -f 2 -g 1 -t "$gpus" -n 100 -w 10 -c 1 -R "$r" >"$log" 2>&1 ||
      { tail -5 "$log"; echo "nccl-tests.sh: ${op}_perf -R $r failed" >&2; exit 1; }
    logs+=("$log")
  done
  python3 scripts/bench-report.py from-nccl-tests --kind "$kind" "${logs[@]}" >"$out/nccl-tests-$kind.json"
done

tool=${NCCLPOOL_TOOL:-build/gpu/tools/ncclpool}
if [ -x "$tool" ]; then
  echo "nccl-tests.sh: $tool bench coll (same sizes and iterations)"
  # NCCL's own symmetric CTA count, as nccl-tests runs with (ncclpool's default is 32 on sm_90:
  # beside nccl-tests' -R 2 it would compare two CTA counts, not two programs).
  NCCLPOOL_SYM_CTAS=nccl "$tool" bench coll --min 1K --max 1G --iters 100 --warmup 10 --json >"$out/bench-coll.json"
  for kind in none local symmetric; do
    python3 scripts/bench-report.py compare "$out/bench-coll.json" "$out/nccl-tests-$kind.json" >"$out/compare-$kind.txt"
    echo "== bench coll vs nccl-tests -R ($kind)"; tail -1 "$out/compare-$kind.txt"
  done
else
  echo "nccl-tests.sh: no $tool (build it, or set NCCLPOOL_TOOL): nccl-tests results only, in $out"
fi

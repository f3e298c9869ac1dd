#!/usr/bin/env bash
# Which ingredient makes tune's child `bench coll` hang on 2x H200 (NCCL 2.28.9)? Interleaved rounds:
#   A: symmetric kernels on, --compute        B: the guard's default (kernels off), --compute
#   E: symmetric kernels on, no --compute     F: NCCL 2.30.7 (built here), kernels on, --compute
set -u
START=$(date +%s)
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/build/gpu/runtime:$PWD/build/gpu/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=$PWD/build/gpu/tools/ncclpool
D=$OUT/diag; mkdir -p "$D"
(nice -n 19 scripts/build-nccl.sh .whl/nccl-src-2.30.7-1.tar.gz /tmp/nccl-2.30.7 >"$D/build-nccl.log" 2>&1; echo "rc=$?" >>"$D/build-nccl.log") &
builder=$!
args=(bench coll --json --min 16K --max 1G --factor 4 --iters 30 --warmup 5 --graph --replays 5)
one() {  # name, env..., -- extra args
  local name=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s)
  env -u NCCL_SYM_CTAS NCCLPOOL_SYM_CTAS=nccl "${envs[@]}" timeout -k 5 60 "$T" "${args[@]}" "$@" >"$D/$name.json" 2>"$D/$name.err" &
  local pid=$!
  ( sleep 50; kill -0 $pid 2>/dev/null && nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader >"$D/$name.smi" ) &
  local watcher=$!
  wait $pid; local rc=$?
  kill $watcher 2>/dev/null; wait $watcher 2>/dev/null
  printf '%-10s rc=%-4s %4ss %s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(tr '\n' ' ' <"$D/$name.smi" 2>/dev/null)" | tee -a "$D/summary.txt"
}
for r in 1 2 3; do
  one A$r NCCLPOOL_SYMMETRIC_KERNELS=on -- --compute
  one B$r NCCLPOOL_SYMMETRIC_KERNELS=auto -- --compute
  one E$r NCCLPOOL_SYMMETRIC_KERNELS=on --
done
wait $builder; tail -2 "$D/build-nccl.log" | tee -a "$D/summary.txt"
if [ -f /tmp/nccl-2.30.7/lib/libnccl.so.2 ]; then
  for r in 1 2 3; do
    one F$r NCCLPOOL_SYMMETRIC_KERNELS=on NCCLPOOL_NCCL_LIBRARY=/tmp/nccl-2.30.7/lib/libnccl.so.2 -- --compute
    [ $(( $(date +%s) - START )) -gt 500 ] && break
  done
fi

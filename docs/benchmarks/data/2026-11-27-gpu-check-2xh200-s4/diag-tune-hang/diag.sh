#!/usr/bin/env bash
# One-off diagnosis (not part of the repository): does a copy-engine all-gather captured in a CUDA graph hang?
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCLPOOL_SYMMETRIC_KERNELS=on
B=build/gpu
export LD_LIBRARY_PATH=$PWD/$B/runtime:$PWD/$B/src
NCCL_DIR=$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib"))')
export NCCLPOOL_NCCL_LIBRARY=$NCCL_DIR/libnccl.so.2
T=$B/tools/ncclpool
D=$OUT/diag; mkdir -p $D
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
case_run() {  # name limit args...
  local name=$1 limit=$2; shift 2
  local s=$(date +%s.%N)
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING NCCL_DEBUG_FILE=$D/nccl-$name.%p.log "$T" bench coll --json "$@" >$D/$name.json 2>$D/$name.err &
  local pid=$! i=0
  while kill -0 $pid 2>/dev/null && (( i < limit * 5 )); do sleep 0.2; i=$((i+1)); done
  if kill -0 $pid 2>/dev/null; then
    nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader > $D/$name.smi 2>&1
    if command -v gdb >/dev/null; then timeout 40 gdb -p $pid -batch -ex 'thread apply all bt' > $D/$name.gdb 2>&1; fi
    kill -9 $pid; wait $pid 2>/dev/null
    echo "CASE $name: HUNG after ${limit} s (gpu util: $(tr '\n' ' ' < $D/$name.smi)) [t=$(el)]"
  else
    wait $pid; local rc=$?
    echo "CASE $name: rc=$rc in $(python3 -c "import time;print(round(time.time()-$s,1))") s; $(python3 -c "
import json,sys
try:
  j=json.load(open('$D/$name.json'))
  for t in j['tables']:
    for r in t['rows']: print(t['title'][:20], {k:v for k,v in r.items() if k in ('bytes','placement','ce_us','symmetric_us','none_us','wrong','ce_step','symmetric_step')})
except Exception as e: print('no json', e, open('$D/$name.err').read()[-300:])
" | head -4 | tr '\n' ' ') [t=$(el)]"
  fi
}
A="--ops all_gather --min 1M --max 1M --iters 5 --warmup 2"
case_run ce-eager 30 $A --kinds ce
case_run ce-graph 30 $A --kinds ce --graph --replays 2
case_run sym-graph-compute 30 $A --kinds symmetric --graph --replays 2 --compute
echo "=== torch check_copy_engine (with the graph check) [t=$(el)]"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_DEBUG_FILE=$D/ce-torch.%p.log NCCLPOOL_LIBRARY=$PWD/$B/src/libncclpool.so PYTHONPATH=$PWD/python NCCLPOOL_AGREEMENT_TIMEOUT_S=60 \
  timeout 130 python3 -m torch.distributed.run --nproc-per-node 2 tests/gpu/torch/check_copy_engine.py > $D/torch-ce.log 2>&1
echo "torch rc=$? [t=$(el)]"; grep -E '^CHECK|^RESULT|replays|Error|error' $D/torch-ce.log | head -20
echo "=== tune --rounds 1 --eager [t=$(el)]"
timeout 130 $T tune --rounds 1 --eager --keep $D/tune-runs --out $D/profile.json > $D/tune.txt 2>$D/tune.err
echo "tune rc=$? [t=$(el)]"; tail -5 $D/tune.err; grep -iE 'copy|ce |symmetric CTAs' $D/tune.txt | head -8
case_run ce-graph-iters1 25 --ops all_gather --min 1M --max 1M --iters 1 --warmup 1 --kinds ce --graph --replays 1
echo "done [t=$(el)]"

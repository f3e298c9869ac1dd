#!/usr/bin/env bash
# The main job: builds ncclpool, then shows what it sees and does on this machine: `ncclpool info`
# (GPUs, NCCL, window support, segment sources; on a machine without a GPU it says so), the demo
# (the pool on the GPU if there is one, else the built-in simulator, which it says) and
# the benches: `memory` (a shared pool vs one pool per group for an FSDP+EP step, on the simulator),
# `alloc` and `scope` (on the GPU, else on the simulator) and `coll` (GPUs only).
# Arguments are passed to the demo (--source, --device, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
echo "=== ncclpool info"
build/default/tools/ncclpool info
echo
echo "=== ncclpool demo"
build/default/examples/ncclpool_demo "$@"
echo
echo "=== ncclpool bench memory"
build/default/tools/ncclpool bench memory
echo
echo "=== ncclpool bench alloc"
build/default/tools/ncclpool bench alloc --repeats 3 --min-ms 20
echo
echo "=== ncclpool bench scope"
build/default/tools/ncclpool bench scope --segments 8,64 --groups 2
echo
echo "=== ncclpool bench coll"
if build/default/tools/ncclpool info --json | grep -q '"cuda":{"available":true'; then
  build/default/tools/ncclpool bench coll --max 64M --auto
else
  echo "skipped: bench coll measures collectives on GPUs, and this machine has none"
fi
echo
echo "More: build/default/tools/ncclpool --help (replay your own trace: docs/tool.md)"

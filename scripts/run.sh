#!/usr/bin/env bash
# The main job: builds ncclpool, then shows what it sees and does on this machine: `ncclpool info`
# (GPUs, NCCL, window support, segment sources; on a machine without a GPU it says so), the demo
# (the pool on the GPU if there is one, else the built-in simulator, which it says) and
# `ncclpool bench memory` (a shared pool vs one pool per group for an FSDP+EP step, on the simulator).
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
echo "More: build/default/tools/ncclpool --help (replay your own trace: docs/tool.md)"

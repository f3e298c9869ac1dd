#!/usr/bin/env bash
# The main job: builds ncclpool and runs the demo on this machine (GPU if there is one, else the
# built-in simulator, which it says). Arguments are passed to the demo (--source, --device, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
exec build/default/examples/ncclpool_demo "$@"

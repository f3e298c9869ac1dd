#!/bin/bash
# A second set of `bench alloc --json` only (20 rounds, order flipping), after the first set's alloc
# medians differed by up to 14% with per-round ratios 0.6-1.7 (noise of the shared 2-core machine).
# usage: run-alloc2.sh BEFORE AFTER OUTDIR
set -eu
before=$1; after=$2; out=$3
for round in $(seq 1 20); do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=$before; [ $which = after ] && bin=$after
    echo "round $round $which $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log.txt"
    "$bin" bench alloc --json > "$out/alloc-$which-run$round.json"
  done
done

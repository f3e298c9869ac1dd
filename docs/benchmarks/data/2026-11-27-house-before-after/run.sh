#!/bin/bash
# A/B of `bench scope --sim --json` and `bench alloc --json` (the simulator: this machine has no GPU),
# before (BEFORE: the `ncclpool` command built at 9b37638) and after (AFTER: built at 879e963), 10
# rounds, the order flipping each round (A B, B A, ...), each run's JSON and the load kept.
# usage: run.sh BEFORE AFTER OUTDIR
set -eu
before=$1; after=$2; out=$3
for round in $(seq 1 10); do
  if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    bin=$before; [ $which = after ] && bin=$after
    echo "round $round $which $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log.txt"
    "$bin" bench scope --sim --json > "$out/scope-$which-run$round.json"
    "$bin" bench alloc --json > "$out/alloc-$which-run$round.json"
  done
done

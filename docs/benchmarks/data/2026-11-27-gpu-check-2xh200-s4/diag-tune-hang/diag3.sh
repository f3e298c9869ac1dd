#!/usr/bin/env bash
set -u
source <(sed -n '1,/^A=/p' .whl/diag.sh | grep -v '^A=')
for i in 1 2 3 4 5 6; do
  for c in nccl 32; do
    (( $(el) > 110 )) && break 2
    NCCLPOOL_SYM_CTAS=$c case_run child-$c-$i 35 --min 16K --max 1G --factor 4 --iters 30 --warmup 5 --compute --kinds none,local,symmetric,ce --graph --replays 5 2>&1 | cut -c1-120
    if [ -f $D/child-$c-$i.gdb ]; then tail -c 1500 $D/child-$c-$i.err; grep -E '^#[0-9]+ ' $D/child-$c-$i.gdb | sed -E 's/^#[0-9]+ +(0x[0-9a-f]+ in )?//; s/\(.*//' | sort | uniq -c | sort -rn | head -25; break 2; fi
  done
done
tar czf $OUT/diag3.tgz -C $OUT diag; rm -rf $OUT/diag

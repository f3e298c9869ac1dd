#!/usr/bin/env bash
set -u
source <(sed -n '1,/^A=/p' .whl/diag.sh | grep -v '^A=')
NCCLPOOL_SYM_CTAS=32 case_run tune-child-32 75 --min 16K --max 1G --factor 4 --iters 30 --warmup 5 --compute --kinds none,local,symmetric,ce
tail -c 3000 $D/tune-child-32.err
grep -c . $D/tune-child-32.gdb; grep -E '^#[0-9]+ .* in (ncclpool|nccl|cu[A-Z])' $D/tune-child-32.gdb | awk '{$1="";$2="";print}' | sort | uniq -c | sort -rn | head -30
tar czf $OUT/diag2.tgz -C $OUT diag

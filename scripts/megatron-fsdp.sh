#!/usr/bin/env bash
# Megatron-FSDP end to end on this machine's GPUs (2, or 4 where there are 4): bench/megatron_fsdp_bench.py
# in every configuration, configurations interleaved, ROUNDS rounds; then a table (median and spread
# of the steady step over rounds, setup, first step, memory) and the loss comparison. Exits non-zero
# when a run fails (a teardown that hangs included) or the losses of two configurations differ by more
# than the tolerance.
#
#   scripts/megatron-fsdp.sh [OUT]       raw lines in OUT/megatron-fsdp.jsonl (default build/megatron-fsdp)
#
# Needs: torch, the megatron_fsdp package, and for the 'megatron' configurations Megatron-Core's
# source (MEGATRON_CORE_PATH: a folder holding the megatron package; default .whl/mcore; only its
# nccl_allocator.py is loaded, see bench/megatron_fsdp_bench.py). Environment:
#   ROUNDS=2  CONFIGS="none megatron:1 ncclpool:1 megatron:0 ncclpool:0"  AG_GROUP="0 1"
#   AG_CTA_POLICY="default"   the all-gather group's NCCL CTA policies, for the AG_GROUP=1 runs: "default
#             zero" adds copy-engine all-gather runs (issue 35), and then every run gets
#             NCCLPOOL_SYMMETRIC_KERNELS=on unless it is set (ncclpool's windows carry the symmetric flag
#             that copy engines need; the runs differ only in the policy). A torch that cannot set the
#             policy: those runs say 'not available' and do not fail.
#   MEGATRON_FSDP_ARGS="--layers 8 --dim 2048 --steps 12"   MEGATRON_FSDP_PATH (megatron_fsdp's parent)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-build/megatron-fsdp}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2}
CONFIGS=${CONFIGS:-"none megatron:1 ncclpool:1 megatron:0 ncclpool:0"}
AG_GROUP=${AG_GROUP:-"0 1"}
AG_CTA_POLICY=${AG_CTA_POLICY:-default}
for policy in $AG_CTA_POLICY; do
  case $policy in
    default) ;;
    zero) export NCCLPOOL_SYMMETRIC_KERNELS=${NCCLPOOL_SYMMETRIC_KERNELS:-on} ;;
    *) echo "megatron-fsdp: AG_CTA_POLICY: unknown policy '$policy' (default, zero)" >&2; exit 2 ;;
  esac
done
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$GPUS" -ge 2 ] || { echo "megatron-fsdp: needs 2 GPUs, found $GPUS" >&2; exit 1; }
NPROC=$(( GPUS >= 4 ? 4 : 2 ))
MCORE=${MEGATRON_CORE_PATH:-$PWD/.whl/mcore}
FSDP=${MEGATRON_FSDP_PATH:-$PWD/.whl/site}
: >"$OUT/megatron-fsdp.jsonl"
failed=0
for round in $(seq 1 "$ROUNDS"); do
  for ag in $AG_GROUP; do
    policies=default; [ "$ag" = 1 ] && policies=$AG_CTA_POLICY
    for policy in $policies; do
      for config in $CONFIGS; do
        allocator=${config%%:*}
        symmetric=${config#*:}; [ "$symmetric" = "$config" ] && symmetric=1
        extra=(); [ "$ag" = 1 ] && extra=(--ag-group --ag-cta-policy "$policy")
        path="$PWD/python:$FSDP"
        log="$OUT/run-$round-$allocator-$symmetric-ag$ag$([ "$policy" = zero ] && echo -zero).log"
        echo "megatron-fsdp: round $round/$ROUNDS, $allocator symmetric=$symmetric ag_group=$ag cta_policy=$policy" >&2
        MEGATRON_CORE_PATH="$MCORE" PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}" timeout 300 python3 -m torch.distributed.run --nproc-per-node "$NPROC" \
          bench/megatron_fsdp_bench.py --allocator "$allocator" --symmetric "$symmetric" "${extra[@]}" ${MEGATRON_FSDP_ARGS:-} >"$log" 2>&1
        rc=$?
        line=$(grep -m1 '^BENCH ' "$log" | cut -c7-)
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
          echo "megatron-fsdp: FAILED (rc=$rc$(grep -q '^TEARDOWN hung' "$log" && echo ', destroy_process_group hung')), see $log" >&2
          tail -5 "$log" >&2
          failed=1
          [ -z "$line" ] && continue  # a run that hung in teardown keeps its results
        fi
        echo "{\"round\": $round, \"result\": $line}" >>"$OUT/megatron-fsdp.jsonl"
      done
    done
  done
done

python3 - "$OUT/megatron-fsdp.jsonl" <<'EOF' || failed=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
unavailable = sorted({f"not available: {r['result']['allocator']} symmetric={r['result']['symmetric']} ag group, "
                      f"{r['result']['ag_cta_policy']} CTA policy: {r['result']['unavailable']}" for r in rows if "unavailable" in r["result"]})
rows = [r for r in rows if "unavailable" not in r["result"]]
if not rows:
    sys.exit("\n".join(unavailable + ["no results"]))
def key(r):
    s = r["symmetric"]
    kind = "no user buffers" if r["allocator"] == "none" else ("symmetric" if s else "local")
    groups = "one group" if not r["ag_group"] else "ag group" + (", zero CTAs" if r.get("ag_cta_policy") == "zero" else "")
    return (r["allocator"], kind, groups)
groups = {}
for row in rows:
    groups.setdefault(key(row["result"]), []).append(row["result"])
first = rows[0]["result"]
print(f"Megatron-FSDP, {first['world']} GPUs, {first['layers']} blocks of dim {first['dim']}, {first['tokens']} tokens per rank, "
      f"{len(first['losses'])} steps; {max(r['round'] for r in rows)} round(s), configurations interleaved")
print(f"{'allocator':<9} {'kind':<16} {'groups':<21} {'steady ms (median, min-max over rounds)':<40} {'setup ms':>9} {'1st step ms':>11} {'peak reserved GiB':>17} {'device GiB':>10}")
for k, rs in groups.items():
    med = [r["steady_step_ms"] for r in rs]
    print(f"{k[0]:<9} {k[1]:<16} {k[2]:<21} {statistics.median(med):7.2f} ({min(med):.2f}-{max(med):.2f}){'':<22} "
          f"{statistics.median(r['setup_ms'] for r in rs):9.1f} {statistics.median(r['first_step_ms'] for r in rs):11.1f} "
          f"{max(r['peak_reserved_gib'] for r in rs):17.2f} {max(r['device_used_gib'] for r in rs):10.2f}")
# Losses: the same model, data and math in every configuration. Bitwise equality is expected between
# allocators of one registration kind (same NCCL algorithms), and between an all-gather group with the
# zero CTA policy and one without (an all-gather moves bytes; only its transport changed); across kinds
# NCCL may sum in another order.
ref = {}
worst = 0.0
bad = []
for k, rs in groups.items():
    for r in rs:
        base = ref.setdefault((k[1], k[2].split(",")[0]), r["losses"])
        exact = base == r["losses"]
        any_ref = rows[0]["result"]["losses"]
        rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], any_ref))
        worst = max(worst, rel)
        if not exact and k[0] != "none":
            bad.append(f"{k}: losses differ from the first run of the same kind and groups (zero CTA policy or not)")
        if rel > 1e-3:
            bad.append(f"{k}: losses differ by {rel:.2e} (relative) from the first configuration")
print(f"losses: step 1 {rows[0]['result']['losses'][0]:.6f}, last {rows[0]['result']['losses'][-1]:.6f}; "
      f"largest relative difference across all runs {worst:.2e}; bitwise equal within each kind and group setting: {'yes' if not bad else 'NO'}")
for k, rs in groups.items():  # the symmetric kernels' CTA count ncclpool's runs reported
    for count, source in sorted({(r["ncclpool"].get("symmetric_ctas"), r["ncclpool"].get("symmetric_ctas_source"))
                                 for r in rs if k[1] == "symmetric" and "ncclpool" in r}, key=str):
        if source is not None:
            print(f"  {' '.join(k)}: symmetric kernels' CTAs {count if count else 'NCCL choice'}: {source}")
for b in bad:
    print("  " + b)
for line in unavailable:
    print("  " + line)
sys.exit(1 if bad else 0)
EOF
exit $failed

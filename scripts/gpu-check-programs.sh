# Sourced by scripts/gpu-check.sh (not run alone): the sections that run whole programs over the
# built library and torch — Megatron-FSDP, FSDP2, decode, SGLang, copy-engine training, the wheel,
# the `ncclpool` command, its GPU benches, nccl-tests, the demo and the examples ("as across nodes":
# scripts/gpu-check-asnodes.sh). They use gpu-check.sh's helpers (want, row, fresh, within, ...) and
# variables (BUILD, OUT, gpus, ...), and add rows to its summary.

# 6b. Megatron-FSDP end to end (nccl_ub=True): Megatron-Core's allocator vs ncclpool installed as
#     megatron.core.nccl_allocator, symmetric and local, one group and a separate all-gather group.
if want megatron; then
  fsdp_path=${MEGATRON_FSDP_PATH:-$PWD/.whl/site}
  if [ "$gpus" -ge 2 ] && PYTHONPATH="$fsdp_path" python3 -c 'import megatron_fsdp' 2>/dev/null; then
    configs="none ncclpool:1 ncclpool:0"
    [ -f "${MEGATRON_CORE_PATH:-$PWD/.whl/mcore}/megatron/core/nccl_allocator.py" ] && configs="none megatron:1 ncclpool:1 megatron:0 ncclpool:0"
    NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" MEGATRON_FSDP_PATH="$fsdp_path" CONFIGS="$configs" ROUNDS="${MEGATRON_ROUNDS:-1}"       timeout "$(within 900)" scripts/megatron-fsdp.sh "$OUT/megatron-fsdp" >"$OUT/megatron-fsdp.txt" 2>&1
    rc=$?
    cat "$OUT/megatron-fsdp.txt" >>"$LOG"
    tables+=("$(sed -n '/^Megatron-FSDP,/,$p' "$OUT/megatron-fsdp.txt")" "(megatron-fsdp rc=$rc)")
    row "Megatron-FSDP (nccl_ub), losses" "rc=$rc; $(grep -m1 '^losses:' "$OUT/megatron-fsdp.txt" | sed 's/.*bitwise/bitwise/')"
  else
    row "Megatron-FSDP" "not run (needs 2+ GPUs and megatron_fsdp: unpack megatron-fsdp into .whl/site)"
  fi
fi

# 6d. FSDP2 (fully_shard): plain vs torch's own registered route vs ncclpool local and symmetric
#     (with ncclpool's symmetric CTA count and with NCCL's), step time and device memory (the "never
#     bigger" target: symmetric <= plain + 2%). FSDP2_MODES replaces the list.
if want fsdp2; then
  if [ "$gpus" -ge 2 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    run_fsdp2 "$OUT/fsdp2" "$OUT/fsdp2.txt" --rounds "${FSDP2_ROUNDS:-1}"  # FSDP2_MODES, else FSDP2_DEFAULT_MODES
    cat "$OUT/fsdp2.txt" >>"$LOG"
    tables+=("$(sed -n '/^FSDP2,/,$p' "$OUT/fsdp2.txt")" "(fsdp2 rc=$rc)")
    row "FSDP2, device memory vs plain" "rc=$rc; $(fsdp2_memory_text "$OUT/fsdp2/fsdp2.json")"
  else
    row "FSDP2" "not run (needs 2+ GPUs and torch with CUDA)"
  fi
fi

# 6e. Decode: in-place bf16 all-reduce in a CUDA graph, plain vs a symmetric pool (graph(reserve=)) vs
#     a capture that grows the pool (no window in the graph).
if want decode; then
  if [ "$gpus" -ge 2 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    run_decode "$OUT/decode.json" "$OUT/decode.txt" --rounds "${DECODE_ROUNDS:-3}"
    cat "$OUT/decode.txt" >>"$LOG"
    tables+=("$(sed -n '/^decode all-reduce/,/^ratio/p' "$OUT/decode.txt")" "(decode rc=$rc)")
    row "decode: symmetric/plain per size" "rc=$rc; $(decode_text "$OUT/decode.txt")"
    if [ -n "${DECODE_SYM_CTAS:-}" ]; then  # the symmetric kernels' CTA count, one run per value and round
      NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" timeout "$(within 900)" python3 bench/decode_bench.py --sym-ctas "$DECODE_SYM_CTAS" \
        --nproc "${DECODE_NPROC:-2}" --rounds "${DECODE_ROUNDS:-3}" --json "$OUT/decode-ctas.json" >"$OUT/decode-ctas.txt" 2>&1
      rc=$?
      cat "$OUT/decode-ctas.txt" >>"$LOG"
      tables+=("$(sed -n '/^decode all-reduce/,$p' "$OUT/decode-ctas.txt")" "(decode CTA sweep rc=$rc)")
      row "decode: plain/best symmetric per size" "rc=$rc; $(awk '/Ki / {printf "%s %s, ", $1, $NF}' "$OUT/decode-ctas.txt")"
    fi
    # What the guard and the fence cost (DECODE_GUARD, e.g. guard,fence,fence-memset,on): one run per
    # setting and round on DECODE_NPROC GPUs (2); DECODE_NOMIX=1: again with NCCL_GRAPH_MIXING_SUPPORT=0,
    # where NCCL < 2.29 orders no graph itself and the fence adds its node (DECODE_GUARD_NOMIX: other
    # settings there, e.g. the memset fence, which with graph mixing on adds nothing to a graph).
    # DECODE_NOMIX=only: with graph mixing off alone.
    mixes=(""); [ -n "${DECODE_NOMIX:-}" ] && mixes+=(0); [ "${DECODE_NOMIX:-}" = only ] && mixes=(0)
    for mix in "${mixes[@]}"; do
      [ -n "${DECODE_GUARD:-}" ] || break
      guard_out=decode-guard${mix:+-nomix}
      guards=$DECODE_GUARD; [ -n "$mix" ] && guards=${DECODE_GUARD_NOMIX:-$DECODE_GUARD}
      env ${mix:+NCCL_GRAPH_MIXING_SUPPORT=0} NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" timeout "$(within 900)" python3 bench/decode_bench.py \
        --guard "$guards" --nproc "${DECODE_NPROC:-2}" --rounds "${DECODE_ROUNDS:-3}" ${DECODE_SIZES:+--sizes "$DECODE_SIZES"} \
        --json "$OUT/$guard_out.json" >"$OUT/$guard_out.txt" 2>&1
      rc=$?
      cat "$OUT/$guard_out.txt" >>"$LOG"
      tables+=("$(sed -n '/^decode all-reduce/,$p' "$OUT/$guard_out.txt")" "(decode guard${mix:+, graph mixing off} rc=$rc)")
      row "decode: plain/(symm,auto pool) per guard ($guards${mix:+, graph mixing off})" "rc=$rc; $(awk '/Ki / {s=$1; for (i=2; i<=NF; i++) if ($i ~ /x$/) s=s " " $i; printf "%s, ", s}' "$OUT/$guard_out.txt")"
    done
  else
    row "decode" "not run (needs 2+ GPUs and torch with CUDA)"
  fi
fi

# 6f. SGLang (issue 31): SGLang 0.5.23's own symmetric-memory allocator, unmodified (three files of its
#     wheel, carried in .whl/sglang) beside ncclpool.sglang. One GPU: the smoke test (imports, the
#     stand-ins, SGLang's JIT build from cold, ncclpool.sglang's null-context paths, install()). Two or
#     more: the benchmark (a decode step in a CUDA graph, plain / SGLang's / ncclpool's, per
#     SGLANG_BENCH_CONFIGS; then growth at run time and buffers at other offsets on both allocators).
if want sglang; then
  if [ ! -f .whl/sglang/sglang/srt/distributed/device_communicators/pynccl_allocator.py ]; then
    row "sglang" "not run (no .whl/sglang: run scripts/sglang-inputs.sh where PyPI is reachable, carry .whl/sglang)"
  elif ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    row "sglang" "not run (no torch with CUDA)"
  else
    fresh "$OUT/sglang-smoke.json" "$OUT/sglang.json"
    NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" timeout "$(within 420)" python3 bench/sglang_bench.py --smoke --cold-jit \
      --json "$OUT/sglang-smoke.json" >"$OUT/sglang-smoke.txt" 2>&1
    rc=$?
    cat "$OUT/sglang-smoke.txt" >>"$LOG"
    row "sglang smoke (1 GPU)" "rc=$rc; $(grep -c '^SMOKE .*: ok' "$OUT/sglang-smoke.txt") ok, $(grep -c '^SMOKE .*: FAILED' "$OUT/sglang-smoke.txt") failed; JIT: $(grep -m1 "^SMOKE SGLang's JIT" "$OUT/sglang-smoke.txt" | grep -o '([0-9.]* s)')"
    grep '^SMOKE .*: FAILED' "$OUT/sglang-smoke.txt" | cut -c1-300 | while read -r line; do echo "  $line"; done >>"$LOG"
    sglang_ranks=${SGLANG_NPROC:-2}  # ranks of the bench (issue 46 runs it at 4)
    (( sglang_ranks > gpus )) && { row "sglang bench ($sglang_ranks GPUs)" "not run (SGLANG_NPROC=$sglang_ranks, $gpus GPU(s) here)"; sglang_ranks=0; }
    if [ "$gpus" -ge 2 ] && [ "$sglang_ranks" -ge 2 ]; then
      # --warm-jit: the smoke test built SGLang's allocator from cold just now (its time is above).
      # SGLANG_BENCH_CONFIGS: the perf configurations (set and empty: none, the cases alone);
      # SGLANG_BENCH_CASES: the failure cases (default all; e.g. pdl,pdl-nomix).
      run_sglang_bench "$OUT/sglang.json" "$OUT/sglang.txt" --nproc "$sglang_ranks" --warm-jit ${SGLANG_BENCH_CONFIGS+--configs "$SGLANG_BENCH_CONFIGS"} \
        ${SGLANG_BENCH_CASES:+--cases "$SGLANG_BENCH_CASES"}
      cat "$OUT/sglang.txt" >>"$LOG"
      tables+=("$(grep -v '^sglang_bench:' "$OUT/sglang.txt" | head -80)" "(sglang bench rc=$rc)")
      right=$(grep -c '^results: right' "$OUT/sglang.txt"); others=$(grep '^results: ' "$OUT/sglang.txt" | grep -vc '^results: right')
      # Every config's results right (none wrong, none with a mode that failed setup), and at least one
      # unless none was asked.
      row "sglang bench ($sglang_ranks GPUs): results" "rc=$rc; $right config(s) right, $others wrong or not set up" \
        "$( [ "$rc" = 0 ] && { [ "$right" -gt 0 ] || [ "${SGLANG_BENCH_CONFIGS-x}" = "" ]; } && [ "$others" = 0 ] && echo ok || echo fail)"
      sglang_case_rows "$OUT/sglang.txt"
    fi
  fi
fi

# 6g. Copy-engine (zero-SM) all-gather in training (issue 35; docs/benchmarks/fsdp2.md and
#     megatron-fsdp.md, "Copy-engine all-gather"). FSDP2: plain, torch's own zero-CTA route (torch-ce),
#     ncclpool symmetric and ncclpool with copy_engine=True: first a short run with NCCL's TUNING log
#     that counts how each all-gather ran (copy engine / symmetric kernel / other kernel), then the
#     timed runs in both configurations (comm-heavy, compute-bound). Megatron-FSDP: its separate
#     all-gather group with the default and with the ZERO CTA policy, ncclpool and (with .whl/mcore)
#     Megatron-Core's allocator, symmetric; then the paths of a short zero-policy run. Needs 2 GPUs.
#     CETRAIN_MODES, CETRAIN_CONFIGS, CETRAIN_ROUNDS (default 1) replace the lists; CETRAIN_PARTS (default
#     "paths fsdp2 megatron") picks parts, to split the section over device calls of 10 minutes.
cetrain_fsdp2_summary() {  # fsdp2.json -> "plain 100.1 ms, torch-ce 99.0 ms (-1.1%), ..."
  python3 - "$1" <<'PY' 2>&1
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
steps, missing = {}, []
for r in rows:
    if "unavailable" in r:
        missing.append(f"{r['spec']} not available ({r['unavailable'][:90]})")
    else:
        steps.setdefault(r["spec"], []).append(r["steady_step_ms"])
plain = statistics.median(steps["plain"]) if "plain" in steps else None
print(", ".join([f"{s} {statistics.median(v):.2f} ms" + (f" ({(statistics.median(v) / plain - 1) * 100:+.1f}%)" if plain and s != "plain" else "")
                 for s, v in steps.items()] + sorted(set(missing))))
PY
}
cetrain_megatron_summary() {  # megatron-fsdp.jsonl -> "megatron default 75.1, megatron zero 74.0, ..."
  python3 - "$1" <<'PY' 2>&1
import json, statistics, sys
rows = [json.loads(l)["result"] for l in open(sys.argv[1])]
steps = {}
for r in rows:
    key = f"{r['allocator']} {r['ag_cta_policy']}" + (" not available" if "unavailable" in r else "")
    steps.setdefault(key, []).append(r.get("steady_step_ms"))
print(", ".join(k if None in v else f"{k} {statistics.median(v):.2f}" for k, v in sorted(steps.items())))
PY
}
if want cetrain; then
  if [ "$gpus" -lt 2 ]; then
    row "cetrain" "not run: needs 2 GPUs, found $gpus (one rank copies locally: no copy-engine all-gather to measure)"
  elif ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    row "cetrain" "not run (no torch with CUDA here)"
  else
    ce_modes=${CETRAIN_MODES:-plain,torch-ce,ncclpool-symmetric,ncclpool-ce}
    ce_parts=" ${CETRAIN_PARTS:-paths fsdp2 megatron} "
    if [[ "$ce_parts" == *" paths "* ]]; then
      NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" timeout "$(within 300)" python3 bench/fsdp2_bench.py --rounds 1 --layers 2 --steps 3 \
        --nccl-paths --modes "$ce_modes" --out "$OUT/cetrain-paths" >"$OUT/cetrain-paths.txt" 2>&1
      rc=$?
      cat "$OUT/cetrain-paths.txt" >>"$LOG"
      row "cetrain: FSDP2 all-gather paths (NCCL log)" "rc=$rc"
      while read -r line; do row "  ${line%%: *}" "${line#*: }"; done < <(grep -E '^  [^ ]+: (NCCL all-gather paths|not available):' "$OUT/cetrain-paths.txt" | sed 's/^  //' | cut -c1-220)
    fi
    [[ "$ce_parts" == *" fsdp2 "* ]] && for config in ${CETRAIN_CONFIGS:-comm-heavy compute-bound}; do
      fresh "$OUT/cetrain-$config/fsdp2.json" "$OUT/cetrain-$config/fsdp2.jsonl"
      NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" timeout "$(within 900)" python3 bench/fsdp2_bench.py --config "$config" \
        --rounds "${CETRAIN_ROUNDS:-1}" --modes "$ce_modes" --out "$OUT/cetrain-$config" --json "$OUT/cetrain-$config/fsdp2.json" >"$OUT/cetrain-$config.txt" 2>&1
      rc=$?
      cat "$OUT/cetrain-$config.txt" >>"$LOG"
      tables+=("$(sed -n '/^FSDP2,/,$p' "$OUT/cetrain-$config.txt")" "(cetrain $config rc=$rc)")
      row "cetrain: FSDP2 $config, steady step" "rc=$rc; $(cetrain_fsdp2_summary "$OUT/cetrain-$config/fsdp2.json" | cut -c1-300)"
      flagged=$(grep -cE '^  (FLAG|FAILED) ' "$OUT/cetrain-$config.txt")
      row "  losses" "$(grep -m1 '^losses:' "$OUT/cetrain-$config.txt" | sed 's/^losses: //'); FLAG/FAILED lines: $flagged" "$( [ "$flagged" = 0 ] && echo ok || echo fail)"
    done
    fsdp_path=${MEGATRON_FSDP_PATH:-$PWD/.whl/site}
    if [[ "$ce_parts" != *" megatron "* ]]; then
      :
    elif PYTHONPATH="$fsdp_path" python3 -c 'import megatron_fsdp' 2>/dev/null; then
      configs="ncclpool:1"
      [ -f "${MEGATRON_CORE_PATH:-$PWD/.whl/mcore}/megatron/core/nccl_allocator.py" ] && configs="megatron:1 ncclpool:1"
      NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" MEGATRON_FSDP_PATH="$fsdp_path" CONFIGS="$configs" AG_GROUP=1 AG_CTA_POLICY="default zero" \
        ROUNDS="${CETRAIN_ROUNDS:-1}" timeout "$(within 600)" scripts/megatron-fsdp.sh "$OUT/cetrain-megatron" >"$OUT/cetrain-megatron.txt" 2>&1
      rc=$?
      cat "$OUT/cetrain-megatron.txt" >>"$LOG"
      tables+=("$(sed -n '/^Megatron-FSDP,/,$p' "$OUT/cetrain-megatron.txt")" "(cetrain megatron rc=$rc)")
      row "cetrain: Megatron-FSDP ag group, steady ms" "rc=$rc; $(cetrain_megatron_summary "$OUT/cetrain-megatron/megatron-fsdp.jsonl" | cut -c1-300)"
      row "  losses" "$(grep -m1 '^losses:' "$OUT/cetrain-megatron.txt" | sed 's/.*bitwise/bitwise/')"
      rm -f "$OUT"/cetrain-megatron-nccl.*.log
      NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" PYTHONPATH="$PWD/python:$fsdp_path${PYTHONPATH:+:$PYTHONPATH}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
        NCCL_DEBUG_FILE="$OUT/cetrain-megatron-nccl.%h.%p.log" timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node 2 \
        bench/megatron_fsdp_bench.py --allocator ncclpool --symmetric 1 --ag-group --ag-cta-policy zero --steps 3 >"$OUT/cetrain-megatron-paths.log" 2>&1
      rc=$?
      cat "$OUT/cetrain-megatron-paths.log" >>"$LOG"
      row "  ncclpool, zero CTAs: NCCL paths" "rc=$rc; $(grep -m1 '^BENCH .*unavailable' "$OUT/cetrain-megatron-paths.log" | cut -c1-200)$(python3 bench/ce_common.py paths "$OUT"/cetrain-megatron-nccl.*.log 2>&1 | head -1 | cut -c1-250)"
    else
      row "cetrain: Megatron-FSDP" "not run (no megatron_fsdp: unpack megatron-fsdp into .whl/site, scripts/gpu-inputs.sh)"
    fi
  fi
fi

# 6c. The wheel (`pip wheel .` on a build machine) installed on this host, without the repository:
#     the torch layer checks against the library inside the wheel.
if want wheel; then
  wheel=$(ls .whl/ncclpool-*.whl dist/ncclpool-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ] && [ "$gpus" -ge 2 ] && python3 -c 'import torch' 2>/dev/null; then
    site=$(mktemp -d) && work=$(mktemp -d)
    python3 -m pip install -q --no-deps --no-index --target "$site" "$wheel" >>"$LOG" 2>&1
    # The check with every helper its folder has (it imports check_support and toy_fsdp; a copy of it
    # alone failed on 2x H200, 2026-11-27), without the repository's python/ beside it: the ncclpool
    # imported is the wheel's.
    cp tests/gpu/torch/*.py "$work/"
    (cd "$work" && env -u NCCLPOOL_LIBRARY PYTHONPATH="$site" timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node 2       check_torch_layer.py) >"$OUT/wheel.log" 2>&1
    rc=$?
    lib=$(cd "$work" && env -u NCCLPOOL_LIBRARY PYTHONPATH="$site" python3 -c 'import ncclpool._capi as c; print(c.library_path())' 2>&1)
    cat "$OUT/wheel.log" >>"$LOG"
    row "wheel $(basename "$wheel")" "$(grep -c '^CHECK .*: ok' "$OUT/wheel.log") ok, $(grep -c '^CHECK .*: FAILED' "$OUT/wheel.log") failed, $(grep -c '^CHECK .*: skipped' "$OUT/wheel.log") skipped (rc=$rc); library $lib"
    rm -rf "$site" "$work"
  else
    if [ -z "$wheel" ]; then
      row "wheel" "not run (no .whl/ncclpool-*.whl or dist/ncclpool-*.whl: pip wheel . -w .whl on a build machine)"
    else
      row "wheel" "not run (needs 2+ GPUs and torch; $(basename "$wheel") is here)"
    fi
  fi
fi

# 7. The `ncclpool` tool on the GPU: info, and traces of real training steps recorded with torch
#    (FSDP2 on 2 GPUs, FSDP+EP on 4, a decode loop with CUDA graphs on 2), replayed. The traces land
#    in $OUT/traces (test data).
if want tool && [ -x "$BUILD/tools/ncclpool" ]; then
  { echo "=== ncclpool info"; "$BUILD/tools/ncclpool" info; } >>"$LOG" 2>&1
  row "ncclpool info" "rc=$?; $("$BUILD/tools/ncclpool" info --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(sum(s["ok"] for s in j["sources"]), "of", len(j["sources"]), "source probes ok; symmetric:", j["registration"]["symmetric"])' 2>&1)"
  if python3 -c 'import torch; assert torch.cuda.device_count() >= 2' 2>/dev/null; then
    mkdir -p "$OUT/traces"
    for spec in "fsdp2 2" "fsdp-ep $(( gpus >= 4 ? 4 : 2 ))" "decode 2"; do
      set -- $spec
      trace="$OUT/traces/${1//-/_}_${2}gpu.json"
      timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node "$2" scripts/record-torch-trace.py --layout "$1" --out "$trace" >>"$LOG" 2>&1
      rc=$?
      { echo "=== replay $trace"; "$BUILD/tools/ncclpool" replay "$trace" --group-by stream; } >>"$LOG" 2>&1
      row "trace $1 ($2 GPUs)" "record rc=$rc; $(du -h "$trace" 2>/dev/null | cut -f1); $("$BUILD/tools/ncclpool" replay "$trace" --group-by stream | grep -E '^shared pool ' | tr -s ' ' | cut -c1-90)"
    done
  fi
elif named tool && [ ! -x "$BUILD/tools/ncclpool" ] && [ "$(left)" -ge 30 ]; then
  row "tool" "not run (no $BUILD/tools/ncclpool in the build)"
fi

# 8. The tool's GPU benches: allocation latency, scope cost, collectives per registration kind, and
#    `ncclpool tune` (the profile it writes lands in $OUT/profile-tune.json, not in the host's cache).
#    JSON for plots lands in $OUT/bench-*.json (scripts/bench-report.py plots them).
if want toolbench && [ -x "$BUILD/tools/ncclpool" ]; then
  T="$BUILD/tools/ncclpool"
  # coll: 100 launches after 10 warm-up (nccl-tests -n 100 -w 10) so that --auto's comparison of
  # two measurements is not lost in launch jitter at small sizes.
  # --auto-pool: buffers from the library's auto pool beside the single kinds (pool/best, pool/none);
  # --rounds 3: every point three times, the kinds in rotated order, medians and each row's spread.
  # TOOLBENCH_POOL_FOR=any: the pool column's buffers name no collective (the routes' `any`: what
  # ncclpool.torch's allocations get outside a collective scope) instead of their op, in coll and graph.
  parts=" ${TOOLBENCH_PARTS:-alloc scope coll graph tune} "
  pool_for="--pool-for ${TOOLBENCH_POOL_FOR:-op}"
  for suite in "alloc" "scope --segments 1,8,64 --groups 1,2,4" "coll --auto --auto-pool $pool_for --iters 100 --warmup 10 --rounds 3"; do
    set -- $suite
    name=$1
    [[ "$parts" == *" $name "* ]] || continue
    timeout "$(within 420)" $T bench $suite --json >"$OUT/bench-$name.json" 2>>"$LOG"
    rc=$?
    { echo "=== ncclpool bench $suite (rc=$rc)"; python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
for k, v in j["facts"].items(): print(" ", k, v)
for t in j["tables"]:
    print(t["title"])
    for r in t["rows"]: print("  ", "  ".join(f"{k}={v}" for k, v in r.items()))
for n in j["notes"]: print("*", n)' "$OUT/bench-$name.json"; } >>"$LOG" 2>&1
    row "ncclpool bench $name" "rc=$rc; $(python3 scripts/bench-report.py summary "$OUT/bench-$name.json" 2>&1 | head -c 300)"
  done
  # scopeab (only when named): bench scope of two builds alternated on this lease, so that a change of
  # the per-use cost is measured side by side (NCCLPOOL_AB_BUILD: the other build, made with
  # `scripts/gpu-check.sh --build` in another checkout and carried, e.g. build/gpu-base; it is "base",
  # this one "new"). TOOLBENCH_AB_ROUNDS rounds (default 3), the order flipped each round.
  if [[ "$parts" == *" scopeab "* ]]; then
    if [ -x "${NCCLPOOL_AB_BUILD:-}/tools/ncclpool" ]; then
      mkdir -p "$OUT/scope-ab"
      fresh "$OUT"/scope-ab/*.json
      ab_rc=0
      for (( round = 1; round <= ${TOOLBENCH_AB_ROUNDS:-3}; round++ )); do
        order="base new"; (( round % 2 == 0 )) && order="new base"
        for side in $order; do
          dir=$PWD/$BUILD; [ "$side" = base ] && dir=$(cd "$NCCLPOOL_AB_BUILD" && pwd)
          LD_LIBRARY_PATH="$dir/runtime:$dir/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$(within 240)" \
            "$dir/tools/ncclpool" bench scope --segments 1,8,64 --groups 1,2,4 --json >"$OUT/scope-ab/$side-run$round.json" 2>>"$LOG"
          rc=$?; [ "$rc" = 0 ] || ab_rc=$rc
        done
      done
      python3 scripts/bench-report.py scope-ab "$OUT/scope-ab" >"$OUT/scope-ab.txt" 2>&1
      rc=$?
      cat "$OUT/scope-ab.txt" >>"$LOG"
      # rc= the last failing bench run's (0 if none failed), then the report's
      row "bench scope A/B (new/base host us/use, S=64)" "runs rc=$ab_rc, report rc=$rc; $(awk '$1 == 64 && $3 == "host_per_use_us" {printf "G=%s %s  ", $2, $(NF-1)}' "$OUT/scope-ab.txt")"
    else
      row "bench scope A/B" "not run: NCCLPOOL_AB_BUILD='${NCCLPOOL_AB_BUILD:-}' has no tools/ncclpool"
    fi
  fi
  # coll with CUDA graphs: captured launches replayed, no host launch cost (what resolves small sizes).
  if [[ "$parts" == *" graph "* ]]; then
  timeout "$(within 300)" $T bench coll --graph --auto-pool $pool_for --factor 4 --min 16K --iters 30 --replays 5 --rounds 3 --json >"$OUT/bench-coll-graph.json" 2>>"$LOG"
  rc=$?
  row "ncclpool bench coll --graph" "rc=$rc; $(python3 scripts/bench-report.py summary "$OUT/bench-coll-graph.json" 2>&1 | head -c 500)"
  fi
  # tune: this machine's profile (kinds per op and size, symmetric CTA count), 3 alternating rounds,
  # each collective alone and beside the compute load (bench coll --compute). tunece (only when
  # named): the same with --copy-engine (the copy-engine all-gather judged too). --run-timeout: a
  # hung run ends tune with an error naming it (in the log), well inside the section's limit.
  # With the symmetric kernels forced on (this script's default), NCCL 2.28.x hung beside the compute
  # load (2x H200, 2.28.3 and 2.28.9: 5 runs in 10; 2.30.7: none in 21; 2.29-2.30.6 have the same
  # hazard, not run; docs/tool.md "tune"). Where the loaded NCCL has the hazard and the kernels are
  # on, tune runs on a carried NCCL >= 2.30.7 (the newest .whl/nccl-src-VER.tar.gz, built as in
  # ncclversions), else with the guard's default (symmetric kernels off: NCCL's CTA choice only).
  tune_env=()
  if [[ "$parts" == *" tune "* || "$parts" == *" tunece "* ]] &&
     [ "$($T info --json 2>/dev/null | python3 -c 'import json,sys; k=json.load(sys.stdin)["registration"]["symmetric_kernels"]; print(k["enabled"] and k["hazard"])' 2>/dev/null)" = True ]; then
    tarball=$(printf '%s\n' .whl/nccl-src-*.tar.gz | sort -V | tail -1)
    ver=$(basename "$tarball" .tar.gz); ver=${ver#nccl-src-}
    lib=""
    if [ -f "$tarball" ] && [ "$(printf '%s\n' 2.30.7 "${ver%-*}" | sort -V | head -1)" = 2.30.7 ]; then
      timeout "$(within 420)" scripts/build-nccl.sh "$tarball" "$BUILD/nccl-$ver" >>"$LOG" 2>&1
      [ -f "$BUILD/nccl-$ver/lib/libnccl.so.2" ] && lib="$PWD/$BUILD/nccl-$ver/lib/libnccl.so.2"
    fi
    if [ -n "$lib" ]; then
      tune_env=(NCCLPOOL_NCCL_LIBRARY="$lib")
      row "tune: NCCL" "$ver (carried, built here): the loaded NCCL's symmetric kernels hung beside compute (docs/tool.md)"
    else
      tune_env=(NCCLPOOL_SYMMETRIC_KERNELS=off)  # not auto: tune declares the fence, so auto would keep them on, fenced
      row "tune: NCCL" "the loaded one, symmetric kernels off (the guard): no NCCL >= 2.30.7 carried or built (.whl/nccl-src-VER.tar.gz)"
    fi
  fi
  for part in tune tunece; do
    [[ "$parts" == *" $part "* ]] || continue
    extra=(); [ "$part" = tunece ] && extra=(--copy-engine)
    fresh "$OUT/profile-$part.json"
    env ${tune_env[@]+"${tune_env[@]}"} NCCL_NVLS_ENABLE=0 timeout "$(within 300)" $T tune --rounds 3 --run-timeout 90 ${extra[@]+"${extra[@]}"} --keep "$OUT/$part-runs" \
      --out "$OUT/profile-$part.json" >"$OUT/$part.txt" 2>"$OUT/$part.err"
    rc=$?
    cat "$OUT/$part.err" "$OUT/$part.txt" >>"$LOG"
    row "ncclpool $part" "rc=$rc; $(grep -m1 'symmetric CTAs:' "$OUT/$part.txt" | cut -c1-100) $(grep -m1 'copy-engine all-gather:' "$OUT/$part.txt" | cut -c1-100)"
    [ "$rc" = 0 ] || row "  $part: why" "$(grep 'ncclpool: ' "$OUT/$part.err" | tail -1 | cut -c1-200)$(tail -1 "$OUT/$part.err" | grep -o 'tune: round .*' | sed 's/^/; last: /')"
  done
  # nccl-tests is not on the GPU host: an independent plain-memory measurement through torch instead.
  if [[ "$parts" == *" coll "* ]] && [ "$gpus" -ge 2 ] && python3 -c 'import torch' 2>/dev/null; then
    fresh "$OUT/coll-reference.json"
    timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node "$gpus" bench/coll_reference_torch.py --iters 100 --warmup 10 --out "$OUT/coll-reference.json" >>"$LOG" 2>&1
    ref_rc=$?
    python3 scripts/bench-report.py compare "$OUT/bench-coll.json" "$OUT/coll-reference.json" >"$OUT/coll-compare.txt" 2>&1
    rc=$?
    cat "$OUT/coll-compare.txt" >>"$LOG"
    row "bench coll vs torch reference (>= 1 MiB)" "reference rc=$ref_rc, compare rc=$rc; $(tail -1 "$OUT/coll-compare.txt" | cut -c1-120)"
  fi
elif named toolbench && [ ! -x "$BUILD/tools/ncclpool" ] && [ "$(left)" -ge 30 ]; then
  row "toolbench" "not run (no $BUILD/tools/ncclpool in the build)"
fi

# 8a. Copy-engine all-gather (issue 35): all-gather on windows of a communicator made with CTA policy
#     ZERO (kind ce) beside the symmetric kernels (this machine's CTA count) and plain memory, each alone
#     and beside the compute load, 3 rounds in rotated order. One GPU: the plumbing only (NCCL copies
#     locally for one rank; the report says so).
#     NCCL logs "Init CE" (NCCL_DEBUG_SUBSYS=INIT) when a rank first reaches its copy-engine path: the
#     rows count those lines, which says whether the copy engines ran at all.
if want cecoll && [ -x "$BUILD/tools/ncclpool" ]; then
  # NCCL's INFO lines go to a file of their own (NCCL_DEBUG_FILE): on stdout they would break the JSON.
  fresh "$OUT"/nccl-info-ce-test.*.log "$OUT"/nccl-info-ce-bench.*.log "$OUT/bench-coll-ce.json"
  if [ -x "$BUILD/tests/ncclpool_nccl_tests" ]; then
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE="$OUT/nccl-info-ce-test.%p.log" timeout "$(within 180)" \
      "$BUILD/tests/ncclpool_nccl_tests" --gtest_filter='*CopyEngine*' >"$OUT/nccl-copy-engine.log" 2>&1
    rc=$?
    cat "$OUT/nccl-copy-engine.log" >>"$LOG"
    row "nccl: copy-engine all-gather test" "rc=$rc; $(cat "$OUT"/nccl-info-ce-test.*.log 2>/dev/null | grep -c 'Init CE') 'Init CE'; $(grep -m1 -o 'PASSED.*\|SKIPPED.*\|FAILED.*' "$OUT/nccl-copy-engine.log")"
  fi
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_DEBUG_FILE="$OUT/nccl-info-ce-bench.%p.log" timeout "$(within 420)" "$BUILD/tools/ncclpool" bench coll \
    --ops all_gather --kinds none,symmetric,ce --compute --min 1M --max 1G --factor 4 --iters 30 --rounds 3 --json >"$OUT/bench-coll-ce.json" 2>>"$LOG"
  rc=$?
  row "bench coll ce: NCCL's copy-engine init" "$(cat "$OUT"/nccl-info-ce-bench.*.log 2>/dev/null | grep -c 'Init CE') 'Init CE' line(s) (one per rank when the copy engines ran)"
  python3 scripts/bench-report.py summary "$OUT/bench-coll-ce.json" >>"$LOG" 2>&1
  row "bench coll ce (copy-engine all-gather)" "rc=$rc; $(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
rows = [r for t in j["tables"] if t["title"].startswith("all_gather") for r in t["rows"] if r.get("placement") == "out"]
def cell(r, k, fmt):  # a kind not measured at this size shows as "-", never as 0
    return fmt % r[k] if isinstance(r.get(k), (int, float)) else "-"
print("; ".join("%dM ce/sym/none %sus step %s" % (r["bytes"] >> 20, "/".join(cell(r, k + "_us", "%.0f") for k in ("ce", "symmetric", "none")),
                                                 "/".join(cell(r, k + "_step", "%.3f") for k in ("ce", "symmetric", "none"))) for r in rows))
print(" | ".join(n for n in j["notes"] if n.startswith("ce")))' "$OUT/bench-coll-ce.json" 2>&1 | head -c 600)"
elif named cecoll && [ ! -x "$BUILD/tools/ncclpool" ] && [ "$(left)" -ge 30 ]; then
  row "cecoll" "not run (no $BUILD/tools/ncclpool in the build)"
fi

# 8b. NVIDIA's nccl-tests beside bench coll (one thread per GPU), when a checkout was carried.
if want nccltests; then
  src=${NCCL_TESTS_SRC:-.whl/nccl-tests}
  if [ -f "$src/src/Makefile" ] && [ "$gpus" -ge 2 ]; then
    NCCLPOOL_TOOL="$BUILD/tools/ncclpool" timeout "$(within 900)" scripts/nccl-tests.sh "$src" "$OUT/nccl-tests" >"$OUT/nccl-tests.txt" 2>&1
    rc=$?
    cat "$OUT/nccl-tests.txt" >>"$LOG"
    for kind in none local symmetric; do
      row "bench coll vs nccl-tests -R $kind" "rc=$rc; $(tail -1 "$OUT/nccl-tests/compare-$kind.txt" 2>/dev/null | cut -c1-110)"
    done
  else
    row "nccl-tests" "not run (no nccl-tests checkout at $src)"
  fi
fi

# 9. The demo on the GPU.
if want demo; then
  "$BUILD/examples/ncclpool_demo" >>"$LOG" 2>&1
  row "demo (vmm source)" "rc=$?"
fi

# 10. The examples (docs/examples.md) as a user runs them: the simulated ranks, then the torch ones
#     under torchrun on every GPU of this host (one included). Each torch example checks its own
#     results and ends with a 'done:' line on rank 0; megatron_shim needs megatron_fsdp (.whl/site).
run_example() {  # name, command...
  local name=$1 rc
  shift
  timeout "$(within 300)" env NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" "$@" \
    >"$OUT/example-$name.log" 2>&1
  rc=$?
  { echo "=== example $name (rc=$rc)"; cat "$OUT/example-$name.log"; } >>"$LOG"
  row "example $name" "rc=$rc; $(grep -m1 '^done:' "$OUT/example-$name.log" || tail -1 "$OUT/example-$name.log" | cut -c1-150)"
}
if want examples; then
  run_example sim_ranks env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 examples/sim_ranks.py --ranks 4
  if [ "$gpus" -ge 1 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    for ex in torch_two_groups fsdp2; do
      run_example "$ex" env PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m torch.distributed.run --nproc-per-node "$gpus" "examples/$ex.py"
    done
    fsdp_path=${MEGATRON_FSDP_PATH:-$PWD/.whl/site}
    if PYTHONPATH="$fsdp_path" python3 -c 'import megatron_fsdp' 2>/dev/null; then
      run_example megatron_shim env PYTHONPATH="$PWD/python:$fsdp_path${PYTHONPATH:+:$PYTHONPATH}" python3 -m torch.distributed.run --nproc-per-node "$gpus" \
        examples/megatron_shim.py
    else
      row "example megatron_shim" "not run (no megatron_fsdp: unpack megatron-fsdp into .whl/site, scripts/gpu-inputs.sh)"
    fi
  else
    row "examples (torch)" "not run (no GPU, or no torch with CUDA here)"
  fi
fi

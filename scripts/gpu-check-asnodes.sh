# Sourced by scripts/gpu-check.sh after scripts/gpu-check-programs.sh (not run alone): the section
# asnodes. It uses gpu-check.sh's helpers (want, row, fresh, within) and variables (BUILD, OUT,
# gpus, tables), and adds rows to its summary.

# 11. As across nodes (issue 34; docs/scaling.md, "As across nodes"; only when named, ~3 min on 2
#     GPUs): scripts/as-nodes.sh gives every rank its own NCCL_HOSTID, so that NCCL takes the GPUs
#     of this host for nodes of their own and connects them with its network transport (NET/Socket:
#     no InfiniBand here). ASNODES_RANKS ranks (default 2), ASNODES_RANKS_PER_NODE to a node (default
#     1). Then, one process per rank: tests/gpu/torch/check_as_nodes.py (nodes and NET channels from
#     NCCL's log, a local pool's collectives against plain memory, a symmetric pool's windows ending
#     alike on every rank, auto pools routing no size to windows, the copy-engine vote, FSDP2 losses
#     bitwise equal to plain, teardown); again with --win-enable-off (NCCL_WIN_ENABLE=0: NCCL 2.28
#     answers a window registration with a local one, which ncclpool refuses alike on every rank);
#     and bench/coll_reference_torch.py --pool none,auto (plain memory against the auto pool over the
#     network, nccl-tests' conventions). NCCL's INFO lines go to files under $OUT/asnodes-nccl and
#     $OUT/asnodes-bench-nccl (NCCL_DEBUG_FILE), never to stdout. Not run here: the C++ suites
#     (ncclpool_nccl_tests) and `ncclpool bench coll`, which run every rank as a thread of one
#     process, while NCCL reads NCCL_HOSTID once per process: they cannot be split into nodes.
as_nodes() {  # ranks, seconds, log file, program [args]: torchrun --no-python bash scripts/as-nodes.sh ...
  local ranks=$1 seconds=$2 log=$3
  shift 3
  # The program and its arguments go through a file: torchrun's parser reads options even after the
  # script's name, so a program argument that abbreviates one of its options (bench's --max:
  # --max-restarts) would be taken by torchrun or refused as ambiguous (2x H200, 2026-11-27).
  local command_file="$OUT/asnodes-command-$$.sh"
  printf '%q ' "$@" >"$command_file"
  NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" NCCLPOOL_AGREEMENT_TIMEOUT_S=60 \
    NCCLPOOL_AS_NODES_RANKS_PER_NODE="${ASNODES_RANKS_PER_NODE:-1}" timeout "$(within "$seconds")" \
    python3 -m torch.distributed.run --nproc-per-node "$ranks" --no-python bash scripts/as-nodes.sh bash "$command_file" >"$log" 2>&1
}
as_nodes_rows() {  # log file, label: its RESULT line, then a row per CHECK line (status, then the check)
  local result
  result=$(grep -m1 '^RESULT' "$1") || result="no RESULT (timeout or crash: see $1)"
  row "as across nodes: $2" "${result:0:260}" "$(row_verdict "$2; $result")"  # the label holds the rc
  while IFS=$'\t' read -r status name; do row "  $status" "$name" "$( [[ "$status" == FAILED* ]] && echo fail || echo ok)"; done < <(
    grep '^CHECK ' "$1" | sed -E 's/^CHECK (.*): (ok|FAILED|skipped)(.*)$/\2\3\t\1/' | cut -c1-240)
}
if want asnodes; then
  if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    row "as across nodes" "not run (no torch with CUDA here)"
  else
    n=${ASNODES_RANKS:-2}
    (( n > gpus )) && n=$gpus  # one GPU: the check says it needs 2, and the rest is not run
    rm -rf "$OUT/asnodes-nccl" "$OUT/asnodes-bench-nccl"
    fresh "$OUT/asnodes-coll.json"
    mkdir -p "$OUT/asnodes-nccl" "$OUT/asnodes-bench-nccl"
    as_nodes "$n" 420 "$OUT/asnodes-check.log" python3 tests/gpu/torch/check_as_nodes.py --nccl-log-dir "$OUT/asnodes-nccl"
    rc=$?
    cat "$OUT/asnodes-check.log" >>"$LOG"
    as_nodes_rows "$OUT/asnodes-check.log" "check, $n rank(s) (rc=$rc)"
    if [ "$n" -ge 2 ]; then
      row "  NCCL log (check)" "$(python3 tests/gpu/torch/as_nodes_support.py summary "$OUT"/asnodes-nccl/nccl-as-nodes.*.log 2>&1 | cut -c1-260)"
      as_nodes "$n" 240 "$OUT/asnodes-win-off.log" python3 tests/gpu/torch/check_as_nodes.py --win-enable-off --nccl-log-dir "$OUT/asnodes-nccl"
      rc=$?
      cat "$OUT/asnodes-win-off.log" >>"$LOG"
      as_nodes_rows "$OUT/asnodes-win-off.log" "NCCL_WIN_ENABLE=0 (rc=$rc)"
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET NCCL_DEBUG_FILE="$OUT/asnodes-bench-nccl/nccl.%h.%p.log" \
        as_nodes "$n" 420 "$OUT/asnodes-bench.txt" python3 bench/coll_reference_torch.py --pool none,auto \
        --min "${ASNODES_BENCH_MIN:-64K}" --max "${ASNODES_BENCH_MAX:-64M}" --factor 4 --out "$OUT/asnodes-coll.json"
      rc=$?
      cat "$OUT/asnodes-bench.txt" >>"$LOG"
      tables+=("$(sed -n '/^op  /,/^pools:/p' "$OUT/asnodes-bench.txt")" "(as across nodes: bench/coll_reference_torch.py --pool none,auto, rc=$rc)")
      result=$(grep -m1 '^pools:' "$OUT/asnodes-bench.txt") || result="pools: no comparison (see $OUT/asnodes-bench.txt)"
      row "as across nodes: bench, auto pool vs plain" "rc=$rc; ${result:7:250}"
      row "  auto pool routes" "$(grep -m1 '^routes auto:' "$OUT/asnodes-bench.txt" | cut -c14-230)"
      row "  NCCL log (bench)" "$(python3 tests/gpu/torch/as_nodes_support.py summary "$OUT"/asnodes-bench-nccl/nccl.*.log 2>&1 | cut -c1-200)"
    else
      row "as across nodes: NCCL_WIN_ENABLE=0, bench" "not run: needs 2 GPUs, found $gpus"
    fi
  fi
fi

# shellcheck shell=bash disable=SC2154  # rows, gpus, OUT, LOG, BUILD: gpu-check.sh's
# Sourced by scripts/gpu-check.sh early (not run alone): the torch programs gpu-check runs, one
# function each, shared by its sections torch, copyengine, pdl, fsdp2, decode and sglang and by the
# section torchversions (below), which runs them again under torch 2.14.1 and 2.15.0. They use
# gpu-check.sh's helpers (row, fresh, within, want, pdl_summary) and variables (BUILD, OUT, LOG, gpus)
# when called.

# -- The programs. Each runs with this checkout's library and python/ (before the caller's PYTHONPATH),
#    and leaves its exit status in rc. TV_UNSET names variables taken out of their environment.
TV_UNSET=""
ncclpool_env() {
  env ${TV_UNSET:+-u "$TV_UNSET"} NCCLPOOL_LIBRARY="$PWD/$BUILD/src/libncclpool.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" "$@"
}
run_torch_layer() {  # ranks log nccl-log-prefix: tests/gpu/torch/check_torch_layer.py (NCCL's REG,TUNING,ENV lines in PREFIX.*.log)
  fresh "$3".*.log
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=REG,TUNING,ENV NCCL_DEBUG_FILE="$3.%h.%p.log" NCCLPOOL_AGREEMENT_TIMEOUT_S=60 \
    ncclpool_env timeout "$(within 420)" python3 -m torch.distributed.run --nproc-per-node "$1" tests/gpu/torch/check_torch_layer.py >"$2" 2>&1
  rc=$?
}
checks_text() {  # log rc: the CHECK lines counted
  echo "$(grep -c '^CHECK .*: ok' "$1") ok, $(grep -c '^CHECK .*: FAILED' "$1") failed, $(grep -c '^CHECK .*: skipped' "$1") skipped (rc=$2)"
}
result_text() {  # log [width]: its first RESULT line
  grep -m1 '^RESULT' "$1" | cut -c1-"${2:-200}" | grep . || echo "no RESULT (timeout or crash)"
}
run_copy_engine() {  # main|off ranks log nccl-log-prefix: tests/gpu/torch/check_copy_engine.py (off: rank 1 forced off)
  local args=()
  [ "$1" = off ] && args=(--off-rank 1)
  fresh "$4".*.log
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING NCCL_DEBUG_FILE="$4.%h.%p.log" NCCLPOOL_AGREEMENT_TIMEOUT_S=60 \
    ncclpool_env timeout "$(within 420)" python3 -m torch.distributed.run --nproc-per-node "$2" \
    tests/gpu/torch/check_copy_engine.py ${args[@]+"${args[@]}"} >"$3" 2>&1
  rc=$?
}
run_pdl_torch() {  # auto|on ranks json log: tests/gpu/torch/check_pdl_hazard.py with NCCLPOOL_SYMMETRIC_KERNELS set
  fresh "$3"
  NCCLPOOL_SYMMETRIC_KERNELS=$1 ncclpool_env timeout "$(within 240)" python3 -m torch.distributed.run --nproc-per-node "$2" \
    tests/gpu/torch/check_pdl_hazard.py --json "$3" >"$4" 2>&1
  rc=$?
}
FSDP2_DEFAULT_MODES=plain,torch-symm,ncclpool-local,ncclpool-symmetric,ncclpool-auto,ncclpool-symmetric+NCCLPOOL_SYM_CTAS=32
run_fsdp2() {  # outdir txt [bench args]: bench/fsdp2_bench.py with FSDP2_MODES (default above)
  local dir=$1 txt=$2
  shift 2
  fresh "$dir/fsdp2.json" "$dir/fsdp2.jsonl"
  ncclpool_env timeout "$(within 900)" python3 bench/fsdp2_bench.py --modes "${FSDP2_MODES:-$FSDP2_DEFAULT_MODES}" --out "$dir" \
    --json "$dir/fsdp2.json" "$@" >"$txt" 2>&1
  rc=$?
}
fsdp2_memory_text() {  # fsdp2.json: each mode's device memory against plain's
  python3 - "$1" <<'PY' 2>&1
import json, statistics, sys
rows = json.load(open(sys.argv[1]))
used = {}
for r in rows:
    if "device_used_gib" in r:
        used.setdefault(r["spec"], []).append(r["device_used_gib"])
plain = statistics.median(used.pop("plain"))
print(", ".join(f"{k} {(statistics.median(v) / plain - 1) * 100:+.1f}%" for k, v in used.items()))
PY
}
run_decode() {  # json txt [bench args]: bench/decode_bench.py on 2 ranks
  local json=$1 txt=$2
  shift 2
  fresh "$json"
  ncclpool_env timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node 2 bench/decode_bench.py --json "$json" "$@" >"$txt" 2>&1
  rc=$?
}
decode_text() { awk '/Ki  / {printf "%s %s, ", $1, $(NF-1)}' "$1"; }  # txt: symmetric/plain per size
run_sglang_bench() {  # json txt [bench args]: bench/sglang_bench.py (SGLang's files in .whl/sglang)
  local json=$1 txt=$2
  shift 2
  fresh "$json"
  ncclpool_env timeout "$(within 900)" python3 bench/sglang_bench.py "$@" --json "$json" >"$txt" 2>&1
  rc=$?
}
sglang_case_rows() {  # txt: a sub-row per failure case, rank 0's outcome; the pdl cases' verdict (issue 46)
  local line
  while read -r line; do row "  ${line%%:*}" "${line#*: }"; done < <(
    awk '/^case / {c=$2} /^  rank 0:/ {sub(/^  rank 0: /, ""); print c ": " substr($0, 1, 150)}' "$1")
  line=$(grep -m1 '^pdl: ' "$1") || return 0
  row "  pdl: ncclpool.sglang by default, every rank" "${line#pdl: }" "$([[ "$line" == "pdl: BROKEN"* ]] && echo fail || echo ok)"
}

# -- Section torchversions (issue 45; only when named): the torch programs above under torch 2.11 (this
#    host's, as it is), 2.14.1 (classic ProcessGroupNCCL; and its opt-in nccl2, which ncclpool.torch must
#    refuse), 2.15.0 with nccl2 (its default) and with TORCH_DIST_USE_NCCL2=0 (classic), at
#    TORCHVERSIONS_NPROC ranks (2; the first GPUs of the host). torch 2.14.1 and 2.15.0 come as parts
#    staged in /tmp by scripts/torch-versions.sh (stage, one device call per batch); this section unpacks
#    them once into /tmp/ncclpool-torch/<version> and runs each with PYTHONPATH=/tmp/ncclpool-torch/<version>
#    first: its nvidia/nccl (2.30.7, what torch and ncclpool load: NCCLPOOL_NCCL_LIBRARY), its
#    nvidia/nvshmem (3.7.2, 2.15.0), the host's CUDA 13.0 libraries. Per configuration: the torch layer
#    checks, the copy-engine check (and with a rank off), the PDL control (torch, kernels on), a short
#    FSDP2 run (the fsdp2 section's modes, 1 round), a short decode run, SGLang's failure cases (needs
#    .whl/sglang); on 2.15.0 (both) tests/gpu/torch/probe_nccl2_hook.py (nccl2's allocator hook beside
#    ncclpool's pools). Logs and JSON in $OUT/torchversions-<config>/, every row and the figures in
#    $OUT/torchversions.json, the logs in $OUT/torchversions-logs.tar.gz.
#    TORCHVERSIONS: the configurations (default "2.11 2.14.1 2.14.1-nccl2 2.15.0 2.15.0-classic");
#    TORCHVERSIONS_CHECKS: the checks (default "torch copyengine pdl fsdp2 decode sglang probe");
#    TORCHVERSIONS_PROBE: where the probe runs (default "2.15.0 2.15.0-classic"); shorter runs:
#    FSDP2_MODES (the fsdp2 section's list), TORCHVERSIONS_FSDP2_STEPS (6), TORCHVERSIONS_SGLANG_CASES
#    (oom,kind,growth,offsets), TORCHVERSIONS_PDL (on). TORCHVERSIONS_LANES: configurations side by side.
tv_want() {  # check: asked for, and time left
  [[ " ${TORCHVERSIONS_CHECKS:-torch copyengine pdl fsdp2 decode sglang probe} " == *" $1 "* ]] || return 1
  if [ "$(left)" -lt 30 ]; then row "  $1" "not run: NCCLPOOL_GPU_CHECK_BUDGET_S spent"; return 1; fi
}

tv_config() {  # config ranks [first GPU]: one configuration's row and its checks' sub-rows
  local cfg=$1 n=$2 v=${1%%-*} dir="$OUT/torchversions-$1" t0 where info mode setting cap
  local TV_UNSET=""
  local -x PYTHONPATH=${PYTHONPATH:-} NCCLPOOL_NCCL_LIBRARY=${NCCLPOOL_NCCL_LIBRARY:-} TORCH_DIST_USE_NCCL2=${TORCH_DIST_USE_NCCL2:-}
  local -x CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $(( n - 1 )))} TMPDIR="${TORCHVERSIONS_ROOT:-/tmp/ncclpool-torch}/tmp-$1"
  [ -n "${3:-}" ] && CUDA_VISIBLE_DEVICES=$(seq -s, "$3" $(( $3 + n - 1 )))  # a lane of its own (below)
  t0=$(date +%s)
  rm -rf "$dir"
  mkdir -p "$dir" "$TMPDIR"  # TMPDIR: SGLang's JIT build of its allocator, one per torch (tempfile's folder)
  case $cfg in
    2.11|host) TV_UNSET=TORCH_DIST_USE_NCCL2 v="" ;;
    *-nccl2) TORCH_DIST_USE_NCCL2=1 ;;
    *-classic) TORCH_DIST_USE_NCCL2=0 ;;
    *) TV_UNSET=TORCH_DIST_USE_NCCL2 ;;  # the version's default
  esac
  if [ -n "$v" ]; then
    if ! where=$(scripts/torch-versions.sh ready "$v" 2>&1); then
      row "torchversions $cfg" "not run: torch $v is not staged: $where"
      return
    fi
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
    local sm
    sm=$(awk '$1 == "sm" {print $2}' "${TORCH_PARTS_STAGE:-/tmp/ncclpool-torch-parts}/manifest.txt")
    if [ "$sm" != all ] && [ "${cap/./}" != "$sm" ]; then
      row "torchversions $cfg" "not run: the staged torch keeps GPU code for sm_$sm only, this GPU is compute capability $cap"
      return
    fi
    PYTHONPATH="$where${PYTHONPATH:+:$PYTHONPATH}"
    NCCLPOOL_NCCL_LIBRARY=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>&1)
    if [[ "$NCCLPOOL_NCCL_LIBRARY" != "$where/"* ]] || [ ! -f "$NCCLPOOL_NCCL_LIBRARY" ]; then
      row "torchversions $cfg" "nvidia.nccl is not torch $v's: $NCCLPOOL_NCCL_LIBRARY" fail
      return
    fi
  fi
  info=$(ncclpool_env python3 -c '
import torch, ncclpool
from ncclpool.torch import versions
loaded, made = ncclpool.features().get("nccl_version"), versions.default_implementation()
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, built with NCCL {versions._nccl_version()}), "
      f"nccl makes {made}, NCCL loaded {loaded}, {torch.cuda.device_count()} GPUs")' 2>&1 | tail -1)
  echo "$info" >"$dir/versions.txt"
  if [[ "$info" != torch\ * ]]; then
    row "torchversions $cfg" "rc=1; torch does not import: ${info:0:240}"
    return
  fi
  row "torchversions $cfg" "$info"
  if [[ "$cfg" == *-nccl2 ]]; then  # torch 2.14's opt-in nccl2: the one refusal
    tv_probe "$n" "$dir" refusal --refusal
  else
    if tv_want torch; then
      run_torch_layer "$n" "$dir/torch-layer.log" "$dir/torch-nccl"
      row "  torch layer checks" "$(checks_text "$dir/torch-layer.log" "$rc")"
    fi
    tv_want copyengine && for mode in main off; do
      run_copy_engine "$mode" "$n" "$dir/copyengine-$mode.log" "$dir/copyengine-nccl-$mode"
      row "  copy engine ($mode)" "rc=$rc; $(result_text "$dir/copyengine-$mode.log")"
    done
    tv_want pdl && for setting in ${TORCHVERSIONS_PDL:-on}; do
      run_pdl_torch "$setting" "$n" "$dir/pdl-$setting.json" "$dir/pdl-$setting.log"
      row "  PDL control (torch), kernels $setting" "rc=$rc; $(result_text "$dir/pdl-$setting.log" 100); $(pdl_summary "$dir/pdl-$setting.json")"
    done
    if tv_want fsdp2; then
      run_fsdp2 "$dir/fsdp2" "$dir/fsdp2.txt" --rounds 1 --steps "${TORCHVERSIONS_FSDP2_STEPS:-6}" --gpus "$n"
      row "  FSDP2, device memory vs plain" "rc=$rc; $(fsdp2_memory_text "$dir/fsdp2/fsdp2.json")"
      row "  FSDP2 losses" "$(grep -m1 '^losses:' "$dir/fsdp2.txt" | cut -c1-200 | grep . || echo 'no losses line')"
    fi
    if tv_want decode; then
      run_decode "$dir/decode.json" "$dir/decode.txt" --rounds 1
      row "  decode: symmetric/plain per size" "rc=$rc; $(decode_text "$dir/decode.txt")"
    fi
    if tv_want sglang; then
      if [ -f .whl/sglang/sglang/srt/distributed/device_communicators/pynccl_allocator.py ]; then
        run_sglang_bench "$dir/sglang.json" "$dir/sglang.txt" --nproc "$n" --configs "" --cases "${TORCHVERSIONS_SGLANG_CASES:-oom,kind,growth,offsets}" \
          --case-timeout 60
        row "  SGLang failure cases" "rc=$rc; $(grep -c '^case ' "$dir/sglang.txt") case(s)"
        sglang_case_rows "$dir/sglang.txt"
      else
        row "  SGLang failure cases" "not run (no .whl/sglang: scripts/sglang-inputs.sh, carry .whl/sglang)"
      fi
    fi
    [[ " ${TORCHVERSIONS_PROBE:-2.15.0 2.15.0-classic} " == *" $cfg "* ]] && tv_want probe && tv_probe "$n" "$dir" probe
  fi
  row "  time" "$(( $(date +%s) - t0 )) s" ok
  echo "gpu-check: torchversions $cfg took $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
  cat "$dir"/*.log "$dir"/*.txt >>"$LOG" 2>/dev/null
}

tv_probe() {  # ranks dir name [probe args]: tests/gpu/torch/probe_nccl2_hook.py, its RESULT and PROBE lines as rows
  local n=$1 dir=$2 name=$3 line
  shift 3
  rm -rf "${dir:?}/$name"
  fresh "$dir/$name.json"
  ncclpool_env timeout "$(within 300)" python3 -m torch.distributed.run --nproc-per-node "$n" tests/gpu/torch/probe_nccl2_hook.py \
    --json "$dir/$name.json" --log-dir "$dir/$name" "$@" >"$dir/$name.log" 2>&1
  rc=$?
  row "  nccl2 allocator hook ($name)" "rc=$rc; $(result_text "$dir/$name.log")"
  while read -r line; do row "    probe" "${line:6:300}" ok; done < <(grep '^PROBE ' "$dir/$name.log")
}

# tv_lane LANE FIRST_GPU CONFIG...: the configurations one after the other on GPUs FIRST_GPU.., in a
# subshell (torchversions_section runs lanes side by side on a host with GPUs for several): each
# configuration's rows go to $OUT/torchversions-CONFIG.rows for the section to add in order.
tv_lane() {
  local lane=$1 gpu=$2 cfg
  shift 2
  export PET_MASTER_PORT=$(( 29600 + 10 * lane ))  # torchrun's --master-port: one rendezvous port a lane
  for cfg in "$@"; do
    rows=() failed_rows=() skipped_rows=()
    tv_config "$cfg" "$n" "$gpu"
    { printf '%s\0' "${#rows[@]}" "${#failed_rows[@]}" "${#skipped_rows[@]}"
      printf '%s\0' ${rows[@]+"${rows[@]}"} ${failed_rows[@]+"${failed_rows[@]}"} ${skipped_rows[@]+"${skipped_rows[@]}"}; } >"$OUT/torchversions-$cfg.rows"
  done
}
tv_add_rows() {  # file: the rows a lane's configuration made, added to this shell's summary
  local all
  [ -f "$1" ] || { row "torchversions ${1##*/torchversions-}" "no rows came back from its lane (see the log)" fail; return; }
  mapfile -d '' all <"$1"
  local r=${all[0]} f=${all[1]} k=${all[2]}
  rows+=("${all[@]:3:r}")
  failed_rows+=("${all[@]:3+r:f}")
  skipped_rows+=("${all[@]:3+r+f:k}")
  rm -f "$1"
}

torchversions_section() {
  local n=${TORCHVERSIONS_NPROC:-2} first=${#rows[@]} cfg folders lanes i configs
  read -ra configs <<<"${TORCHVERSIONS:-2.11 2.14.1 2.14.1-nccl2 2.15.0 2.15.0-classic}"
  if (( gpus < n )); then
    row "torchversions" "not run: needs $n GPUs, found $gpus"
    return
  fi
  rm -rf "$OUT"/torchversions-*/ && fresh "$OUT/torchversions.json" "$OUT/torchversions-logs.tar.gz" "$OUT"/torchversions-*.rows
  { echo "=== torchversions: scripts/torch-versions.sh assemble"; scripts/torch-versions.sh assemble; } >>"$LOG" 2>&1
  # Lanes: TORCHVERSIONS_LANES groups of n GPUs (default: as many as the host has, at most one per
  # configuration), each running its share of the configurations (round robin) side by side.
  lanes=${TORCHVERSIONS_LANES:-$(( gpus / n ))}
  (( lanes > ${#configs[@]} )) && lanes=${#configs[@]}
  if (( lanes <= 1 )); then
    for cfg in "${configs[@]}"; do tv_config "$cfg" "$n"; done
  else
    for (( i = 0; i < lanes; i++ )); do
      local mine=()
      for (( cfg = i; cfg < ${#configs[@]}; cfg += lanes )); do mine+=("${configs[cfg]}"); done
      ( tv_lane "$i" $(( i * n )) "${mine[@]}" ) &
    done
    wait
    for cfg in "${configs[@]}"; do tv_add_rows "$OUT/torchversions-$cfg.rows"; done
  fi
  printf '%s\n' "${rows[@]:$first}" >"$OUT/torchversions-rows.txt"
  folders=$(cd "$OUT" && ls -d torchversions-*/ 2>/dev/null)
  python3 scripts/torch_versions_report.py --rows "$OUT/torchversions-rows.txt" --out "$OUT/torchversions.json" \
    ${folders:+$(printf "$OUT/%s " $folders)} >>"$LOG" 2>&1 || row "torchversions: the combined JSON" "rc=1; scripts/torch_versions_report.py failed (see the log)"
  [ -n "$folders" ] && tar czf "$OUT/torchversions-logs.tar.gz" -C "$OUT" $folders torchversions-rows.txt
}

# Sourced by scripts/gpu-check.sh (not run alone): the summary's rows and the run's verdict, apart
# from the GPU work so that tests/python/test_gpu_check_verdicts.py runs them on the CPU.
#
#   row NAME TEXT [ok|fail|skip]   a row of the summary. Without a verdict, row_verdict's of TEXT:
#                                  skip when TEXT starts with "not run"; fail when it holds an rc=N
#                                  with N not 0 (or no N), "N failed" with N > 0, "RESULT FAILED",
#                                  "no RESULT" or "no result"; else ok. Rows whose numbers need
#                                  judging (sanitizer errors, wrong results) pass their verdict.
#   not_run_rows SECTIONS ALL...   a "not run" row for each of ALL that SECTIONS (",a,b,") leaves out
#                                  (named sections: $NCCLPOOL_GPU_CHECK; unset: the default ones)
#   gpu_check_verdict              the verdict lines; returns 1 when a row failed, else 0
#
# A failed row is marked FAIL at the start of its line, a row that did not run "--"; the verdict
# names every failed row (a sub-row, indented, with the row above it) and every section not run.
declare -a rows=() failed_rows=() skipped_rows=()
last_top_row=""

row_verdict() {  # TEXT -> ok | fail | skip
  local text=$1 rc
  if [[ "$text" == "not run"* ]]; then echo skip; return; fi
  while read -r rc; do
    [ -z "$rc" ] && continue
    [ "${rc#rc=}" = 0 ] || { echo fail; return; }
  done < <(grep -oE '(^|[^A-Za-z0-9_])rc=[-0-9]*' <<<"$text" | sed 's/^[^r]*//')
  if grep -qE '(^|[^0-9])[1-9][0-9]* failed|RESULT FAILED|no RESULT|no result' <<<"$text"; then echo fail; return; fi
  echo ok
}

row() {  # NAME TEXT [ok|fail|skip]
  local name=$1 text=$2 verdict=${3:-} mark="  " full
  [ -n "$verdict" ] || verdict=$(row_verdict "$text")
  full=$name
  if [[ "$name" == " "* ]]; then full="${last_top_row}: ${name#"${name%%[! ]*}"}"; else last_top_row=$name; fi
  case "$verdict" in
    fail) mark=FAIL; failed_rows+=("$full") ;;
    skip) mark="--"; skipped_rows+=("$full: $text") ;;
    ok) ;;
    *) mark=FAIL; failed_rows+=("$full (row verdict '$verdict' is not ok, fail or skip)") ;;
  esac
  rows+=("$(printf '%-4s %-44s %s' "$mark" "$name" "$text")")
}

not_run_rows() {  # ",named,sections," then every section; a row for each one not named
  local sections=$1 s
  shift
  for s in "$@"; do
    [[ "$sections" == *",$s,"* ]] && continue
    if [ -n "${NCCLPOOL_GPU_CHECK:-}" ]; then row "$s" "not run (not in NCCLPOOL_GPU_CHECK=${sections:1:${#sections}-2})"
    else row "$s" "not run (only when named: NCCLPOOL_GPU_CHECK)"; fi
  done
}

gpu_check_verdict() {  # prints the verdict; 1 when a row failed
  local r
  if [ ${#skipped_rows[@]} -gt 0 ]; then
    echo "=== not run: ${#skipped_rows[@]} row(s)"
    for r in "${skipped_rows[@]}"; do echo "  $r"; done
  fi
  if [ ${#failed_rows[@]} -gt 0 ]; then
    echo "=== verdict: FAILED, ${#failed_rows[@]} of ${#rows[@]} row(s):"
    for r in "${failed_rows[@]}"; do echo "  $r"; done
    return 1
  fi
  echo "=== verdict: passed (${#rows[@]} rows, none failed; ${#skipped_rows[@]} not run)"
  return 0
}

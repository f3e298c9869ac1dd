#!/usr/bin/env bash
# The `ncclpool` command end to end: exit codes, text and JSON output, error messages.
set -uo pipefail
tool=$1 data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() {  # rc, command...
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/out" "$tmp/err"; fail "'$*' exited $rc, expected $want"; }
}
json_ok() { python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" || fail "not JSON: $(head -c 300 "$1")"; }

expect_rc 0 "$tool" info;                 grep -q "registration kinds" "$tmp/out" || fail "info text"
expect_rc 0 "$tool" info --json;          json_ok "$tmp/out"
expect_rc 0 "$tool" version
expect_rc 2 "$tool";                      grep -q "usage" "$tmp/err" || fail "usage on stderr"
expect_rc 2 "$tool" frobnicate;           grep -q "unknown command 'frobnicate'" "$tmp/err" || fail "unknown command"
expect_rc 2 "$tool" replay;               grep -q "exactly one TRACE" "$tmp/err" || fail "replay without trace"
expect_rc 2 "$tool" replay x --kind odd;  grep -q "symmetric or local" "$tmp/err" || fail "bad kind"
expect_rc 2 "$tool" bench memory --layers 0; grep -q "layers must be an integer in 1" "$tmp/err" || fail "bad layers"
expect_rc 2 "$tool" bench nope;           grep -q "unknown bench suite" "$tmp/err" || fail "bad suite"
expect_rc 1 "$tool" replay "$tmp/missing.csv"; grep -q "cannot open" "$tmp/err" || fail "missing file"
printf 'alloc,1,10,0,dp\nfree,2\n' >"$tmp/bad.csv"
expect_rc 1 "$tool" replay "$tmp/bad.csv"; grep -q "bad.csv:2: free of id 2" "$tmp/err" || fail "bad trace line"
expect_rc 0 "$tool" replay --help
expect_rc 0 "$tool" replay "$data/two_groups.csv" --kind local --growth-chunk-mib 4 --timeline "$tmp/t.csv" --convert "$tmp/c.csv"
grep -q "one pool per group" "$tmp/out" || fail "replay table"
[ "$(wc -l <"$tmp/t.csv")" = 9 ] || fail "timeline rows"
expect_rc 0 "$tool" replay "$tmp/c.csv" --kind local --growth-chunk-mib 4 --json; json_ok "$tmp/out"
expect_rc 0 "$tool" replay "$data/torch_snapshot_small.json" --group-by stream --json; json_ok "$tmp/out"
grep -q '"stream 7"' "$tmp/out" || fail "torch groups by stream"
expect_rc 0 "$tool" bench memory --layers 4 --steps 1 --json; json_ok "$tmp/out"
echo "tool_cli: all checks passed"

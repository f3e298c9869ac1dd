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
grep -q "auto pools route .*built-in routes" "$tmp/out" || fail "info: auto routes"
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
expect_rc 0 "$tool" replay "$data/two_groups.csv" --kind local --scale 2.5; grep -q "sizes x 2.5" "$tmp/out" || fail "replay --scale"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --scale nan; grep -q "scale must be a number" "$tmp/err" || fail "bad scale"
expect_rc 0 "$tool" bench memory --layers 4 --steps 1 --json; json_ok "$tmp/out"
# bench alloc / scope on the simulator; coll needs GPUs and says so.
expect_rc 0 "$tool" bench alloc --sim --sizes 4K,2M --repeats 1 --min-ms 1 --growth-iters 2
grep -q "ncclpool (sim)" "$tmp/out" && grep -q "cross stream" "$tmp/out" && grep -q "growth" "$tmp/out" || fail "bench alloc table"
expect_rc 0 "$tool" bench alloc --sim --sizes 4K --repeats 1 --min-ms 1 --growth-iters 2 --json; json_ok "$tmp/out"
expect_rc 0 "$tool" bench scope --sim --segments 2,64 --groups 2 --uses 100 --megatron-uses 2 --chunk-mib 2
grep -q "S = 64, G = 2 (symmetric): a use costs" "$tmp/out" || fail "bench scope target line"
[ "$(grep -cE '^ +(2|64) 2 (ncclpool|megatron|per-group) ' "$tmp/out")" = 6 ] || { cat "$tmp/out"; fail "bench scope rows"; }
expect_rc 0 "$tool" bench scope --sim --segments 1 --groups 1 --uses 10 --megatron-uses 1 --kind local --json; json_ok "$tmp/out"
grep -q '"registration":"local"' "$tmp/out" || fail "bench scope --kind local"
expect_rc 2 "$tool" bench scope --groups 0;    grep -q "groups: '0' is not an integer in 1..64" "$tmp/err" || fail "bad groups"
expect_rc 2 "$tool" bench alloc --sizes 4X;    grep -q "sizes: '4X' is not a size" "$tmp/err" || fail "bad sizes"
expect_rc 2 "$tool" bench coll --ops bcast;    grep -q "not one of all_gather" "$tmp/err" || fail "bad op"
expect_rc 0 "$tool" bench coll --help;    grep -q -- "--graph captures" "$tmp/out" || fail "coll --graph help"
grep -q -- "--auto-pool adds" "$tmp/out" || fail "coll --auto-pool help"
expect_rc 2 "$tool" bench coll --replays 0; grep -q "replays" "$tmp/err" || fail "bad replays"
expect_rc 2 "$tool" bench coll --rounds 0; grep -q "rounds" "$tmp/err" || fail "bad rounds"
expect_rc 0 "$tool" bench coll --help;    grep -q -- "--compute also runs" "$tmp/out" || fail "coll --compute help"
if "$tool" info --json | grep -q '"cuda":{"available":false'; then
  expect_rc 1 "$tool" bench coll; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll without GPUs"
  expect_rc 1 "$tool" bench coll --graph; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll --graph without GPUs"
  expect_rc 1 "$tool" bench coll --compute --rounds 2; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll --compute without GPUs"
fi
# tune: a profile from recorded bench coll runs (no GPU needed), bad arguments, no GPU.
runs="$data/../../docs/benchmarks/data/2026-11-23-coll-symctas-2xh200-237829c"
expect_rc 0 "$tool" tune --help
expect_rc 2 "$tool" tune --ctas 99;            grep -q "neither 'nccl' nor a count" "$tmp/err" || fail "bad ctas"
expect_rc 2 "$tool" tune --eager --graph;      grep -q "exclude each other" "$tmp/err" || fail "tune --eager --graph"
expect_rc 2 "$tool" tune --from "$runs/coll-nccl-1.json"; grep -q "is not CTAS=FILE" "$tmp/err" || fail "bad --from"
expect_rc 2 "$tool" tune --from "fast=$runs/coll-nccl-1.json"; grep -q "'fast' is neither 'nccl' nor a count" "$tmp/err" || fail "bad --from label"
printf '{' >"$tmp/broken.json"
expect_rc 1 "$tool" tune --from "nccl=$tmp/broken.json"; grep -q "broken.json: JSON" "$tmp/err" || fail "broken --from file"
expect_rc 1 "$tool" tune --from "nccl=$runs/coll-nccl-1.json" --out "$tmp/p.json"; grep -q "give --gpu" "$tmp/err" || fail "tune without facts"
expect_rc 0 "$tool" tune --from "nccl=$runs/coll-nccl-1.json,32=$runs/coll-ncclpool-1.json" --gpu "NVIDIA H200" --nccl-version 22809 --ranks 2 --out "$tmp/p.json"
grep -q "profile written to $tmp/p.json" "$tmp/out" && json_ok "$tmp/p.json" || fail "tune --from"
grep -q '"symmetric_ctas": 32' "$tmp/p.json" || fail "tune picked $(grep symmetric_ctas "$tmp/p.json")"
# the profile as the library reads it: an auto pool here would route as it says (info reads $NCCLPOOL_PROFILE)
NCCLPOOL_PROFILE="$tmp/p.json" "$tool" info >"$tmp/out" 2>&1 || fail "info with a profile"
grep -q "^profile .*p.json: NVIDIA H200, NCCL 22809, 2 ranks" "$tmp/out" || { cat "$tmp/out"; fail "info: profile line"; }
if "$tool" info --json | grep -q '"cuda":{"available":false'; then
  expect_rc 1 "$tool" tune --out "$tmp/q.json"; grep -q "tune needs GPUs" "$tmp/err" || fail "tune without GPUs"
fi
echo "tool_cli: all checks passed"

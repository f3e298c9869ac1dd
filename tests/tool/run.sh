#!/usr/bin/env bash
# The `ncclpool` command end to end: exit codes, text and JSON output, error messages.
# Every check can fail (issue 49): each ends in `|| fail` (or is expect_rc/json_ok, which fail), never
# `grep ... && check`, which skips the check when the grep finds nothing. tests/tool/mutants.sh proves
# it: a copy with any one expected text or exit code changed must fail.
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
# Where the built-in routes come from, as it is: never "measured" on this machine; on the simulator not measured at all.
grep -q "measured on H200" "$tmp/out" && fail "info: built-in routes said measured on H200"
"$tool" info --json >"$tmp/info.json" || fail "info --json"
python3 - "$tmp/info.json" <<'PY' || fail "info --json: simulator and the routes' origin"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["simulator"] is (not j["cuda"]["available"]), j["simulator"]
routes = j["registration"]["auto_routes"]
assert ("not measured here: no GPU" in routes) is j["simulator"], routes
PY
expect_rc 0 "$tool" info --json;          json_ok "$tmp/out"
# The symmetric kernels' decision, as info's own process and as one that declares the fence, and the fence's kind (issue 46).
expect_rc 0 env NCCLPOOL_SYMMETRIC_FENCE=memset "$tool" info --json
grep -qE '"symmetric_kernels":\{"enabled":(true|false),"hazard":(true|false),"decision":"(on|fence|guard|off)","why":' "$tmp/out" || fail "info --json: decision"
grep -qE '"declared_decision":"(on|fence|guard|off)","declared_why":".*","fence_kind":"memset"' "$tmp/out" || fail "info --json: fence"
# The CTA count as info's own process decides it and as a training process (the declaration) would.
grep -qE '"symmetric_ctas_source":"[^"]+","symmetric_ctas_training":[0-9]+,"symmetric_ctas_training_source":"[^"]+"' "$tmp/out" || fail "info --json: CTAs"
expect_rc 0 "$tool" info;                 grep -qE "^  symmetric fence +node \(NCCLPOOL_SYMMETRIC_FENCE\)" "$tmp/out" || fail "info: fence"
expect_rc 0 "$tool" version
# A misused command prints its own usage, not the top-level one (an unknown command gets that).
usage_of() {  # the usage line a usage error printed, and no list of commands
  grep -q "^usage: ncclpool $1" "$tmp/err" && ! grep -q "^commands:" "$tmp/err" || { cat "$tmp/err"; fail "usage of '$1' after: $2"; }
}
expect_rc 2 "$tool" replay;                 usage_of "replay TRACE" "replay without a trace"
expect_rc 2 "$tool" info --verbose;         grep -q "unknown option --verbose" "$tmp/err" || fail "info --verbose: the message"
usage_of "info" "info --verbose"
expect_rc 2 "$tool" info extra;             grep -q "info takes no arguments, not 'extra'" "$tmp/err" || fail "info extra: the message"
usage_of "info" "info extra"
expect_rc 0 "$tool" info --help;            grep -q "^usage: ncclpool info" "$tmp/out" || fail "info --help"
expect_rc 2 "$tool" version now;            usage_of "version" "version now"
expect_rc 2 "$tool" bench;                  usage_of "bench alloc|scope|coll|memory" "bench without a suite"
expect_rc 0 "$tool" bench --help;           grep -q "^usage: ncclpool bench" "$tmp/out" || fail "bench --help"
expect_rc 2 "$tool" bench alloc --sizes;    usage_of "bench alloc" "bench alloc --sizes"
expect_rc 2 "$tool" bench scope --nope;     usage_of "bench scope" "bench scope --nope"
expect_rc 2 "$tool" bench coll --ops bcast; usage_of "bench coll" "bench coll --ops bcast"
expect_rc 2 "$tool" bench memory --layers 0; usage_of "bench memory" "bench memory --layers 0"
expect_rc 2 "$tool" tune --ctas 99;         usage_of "tune" "tune --ctas 99"
expect_rc 2 "$tool" frobnicate;             grep -q "^commands:" "$tmp/err" || fail "unknown command: the top-level usage"
# Trace inputs: a directory, JSON that is no snapshot, a growth chunk of 0.
expect_rc 1 "$tool" replay "$tmp";          grep -q "$tmp: is a directory; give a trace file" "$tmp/err" || fail "replay DIR"
printf '[]\n' >"$tmp/list.json"
expect_rc 1 "$tool" replay "$tmp/list.json"; grep -q "list.json: JSON holding a list, not a torch memory snapshot" "$tmp/err" || fail "replay of []"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --growth-chunk-mib 0; grep -q "growth-chunk-mib must be an integer in 1\.\." "$tmp/err" || fail "growth chunk 0"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --min-segment-mib 0; grep -q "min-segment-mib must be an integer in 1\.\." "$tmp/err" || fail "min segment 0"
# The growth trade-off: --min-segment-mib, and torch's own windows (a window per segment it made) beside the pool's.
expect_rc 0 "$tool" replay "$data/torch_snapshot_small.json" --group-by stream --min-segment-mib 64 --window-ms 3.2
grep -q "min segment 64.0 MiB" "$tmp/out" || { cat "$tmp/out"; fail "replay: min segment line"; }
grep -qE "^recording allocator +20.0 MiB .* 1 +2 +6.4 ms" "$tmp/out" || { cat "$tmp/out"; fail "replay: torch's windows row"; }
grep -q "^windows per group: shared pool 1, PyTorch's register_mem_pool 1 " "$tmp/out" || { cat "$tmp/out"; fail "replay: windows line"; }
# info: NCCL's version as NCCL writes it; the environment checked on any machine (without a GPU too).
if "$tool" info --json | grep -q '"nccl":{"available":true'; then
  expect_rc 0 "$tool" info; grep -qE "^NCCL      [0-9]+\.[0-9]+\.[0-9]+ from " "$tmp/out" || { cat "$tmp/out"; fail "info: NCCL version"; }
  "$tool" info --json | grep -qE '"version":[0-9]+,"version_string":"[0-9]+\.[0-9]+\.[0-9]+"' || fail "info --json: NCCL version"
fi
expect_rc 0 "$tool" info;                   grep -q "^environment  the NCCLPOOL_ variables set here hold accepted values" "$tmp/out" || fail "info: environment ok"
expect_rc 0 env NCCLPOOL_GROWTH_CHUNK=abc NCCLPOOL_SYM_CTAS=99 NCCLPOOL_AGREEMENT_TIMEOUT_S=-1 NCCLPOOL_AGREEMENT_BUFFERS=gpu \
  NCCLPOOL_SYMMETRIC_KERNELS=maybe NCCLPOOL_MIN_SEGMENT=1G "$tool" info
grep -q "^environment  6 variable(s) hold values ncclpool does not accept" "$tmp/out" || { cat "$tmp/out"; fail "info: bad environment"; }
for line in "NCCLPOOL_GROWTH_CHUNK='abc' is not a number of bytes" "NCCLPOOL_MIN_SEGMENT='1G' is not a number of bytes" \
            "NCCLPOOL_SYM_CTAS='99' is neither 'nccl' nor a count from 1 to 64" \
            "NCCLPOOL_AGREEMENT_TIMEOUT_S='-1' is not a positive number of seconds" "NCCLPOOL_AGREEMENT_BUFFERS='gpu' is not 'host' or 'device'" \
            "NCCLPOOL_SYMMETRIC_KERNELS='maybe' is not auto, on, off or fence"; do
  grep -qF "  $line" "$tmp/out" || { cat "$tmp/out"; fail "info: no line '$line'"; }
done
expect_rc 0 env NCCLPOOL_SYM_CTAS=0 "$tool" info --json; json_ok "$tmp/out"
grep -q '"environment_problems":\[{"variable":"NCCLPOOL_SYM_CTAS","value":"0"' "$tmp/out" || fail "info --json: environment"
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
# A torch snapshot without --group-by says what the shared pool is for and how to get it; every replay states its trade-off.
expect_rc 0 "$tool" replay "$data/torch_snapshot_small.json"
grep -q "^groups: torch records none, .*--group-by stream makes one group per stream (this trace has 2)" "$tmp/out" || { cat "$tmp/out"; fail "torch replay: groups line"; }
grep -q "^trade-off: memory (peak reserved) against registration (count, and time estimated at 15 ms a window" "$tmp/out" || fail "replay: trade-off line"
expect_rc 0 "$tool" replay "$data/torch_snapshot_small.json" --group-by stream; grep -q "^groups:" "$tmp/out" && fail "groups line with --group-by stream"
expect_rc 0 "$tool" replay "$data/two_groups.csv" --kind local --scale 2.5; grep -q "sizes x 2.5" "$tmp/out" || fail "replay --scale"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --scale nan; grep -q "scale must be a finite number" "$tmp/err" || fail "bad scale"
expect_rc 0 "$tool" bench memory --layers 4 --steps 1 --json; json_ok "$tmp/out"
# bench alloc / scope on the simulator; coll needs GPUs and says so.
expect_rc 0 "$tool" bench alloc --sim --sizes 4K,2M --repeats 1 --min-ms 1 --growth-iters 2
grep -q "ncclpool (sim)" "$tmp/out" || fail "bench alloc table: ncclpool (sim)"
grep -q "cross stream" "$tmp/out" || fail "bench alloc table: cross stream"
grep -q "growth" "$tmp/out" || fail "bench alloc table: growth"
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
grep -q -- "Kind ce" "$tmp/out" || fail "coll ce help"
expect_rc 2 "$tool" bench coll --kinds none,zero; grep -q "'zero' is not one of none, local, symmetric, ce" "$tmp/err" || fail "bad kind"
expect_rc 2 "$tool" bench coll --kinds ce --auto; grep -q "auto picks the fastest of none, local and symmetric" "$tmp/err" || fail "coll --kinds ce --auto"
expect_rc 0 "$tool" info;                 grep -q "copy-engine all-gather" "$tmp/out" || fail "info copy-engine line"
expect_rc 0 "$tool" info --json;          grep -q '"copy_engine_all_gather":{"vote":false' "$tmp/out" || fail "info --json copy-engine vote"
if "$tool" info --json | grep -q '"cuda":{"available":false'; then
  expect_rc 1 "$tool" bench coll; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll without GPUs"
  expect_rc 1 "$tool" bench coll --graph; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll --graph without GPUs"
  expect_rc 1 "$tool" bench coll --compute --rounds 2; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll --compute without GPUs"
  expect_rc 1 "$tool" bench coll --kinds none,ce; grep -q "bench coll needs GPUs" "$tmp/err" || fail "coll ce without GPUs"
fi
# tune: a profile from recorded bench coll runs (no GPU needed), bad arguments, no GPU.
runs="$data/../../docs/benchmarks/data/2026-11-23-coll-symctas-2xh200-237829c"
expect_rc 0 "$tool" tune --help
expect_rc 2 "$tool" tune --ctas 99;            grep -q "neither 'nccl' nor a count" "$tmp/err" || fail "bad ctas"
expect_rc 2 "$tool" tune --eager --graph;      grep -q "exclude each other" "$tmp/err" || fail "tune --eager --graph"
expect_rc 2 "$tool" tune --copy-engine --no-copy-engine; grep -q "exclude each other" "$tmp/err" || fail "tune --copy-engine --no-copy-engine"
expect_rc 2 "$tool" tune --from "nccl=$runs/coll-nccl-1.json" --run-timeout 5; grep -q "is for measuring" "$tmp/err" || fail "tune --from --run-timeout"
expect_rc 2 "$tool" tune --from "$runs/coll-nccl-1.json"; grep -q "is not CTAS=FILE" "$tmp/err" || fail "bad --from"
expect_rc 2 "$tool" tune --from "fast=$runs/coll-nccl-1.json"; grep -q "'fast' is neither 'nccl' nor a count" "$tmp/err" || fail "bad --from label"
printf '{' >"$tmp/broken.json"
expect_rc 1 "$tool" tune --from "nccl=$tmp/broken.json"; grep -q "broken.json: JSON" "$tmp/err" || fail "broken --from file"
expect_rc 1 "$tool" tune --from "nccl=$runs/coll-nccl-1.json" --out "$tmp/p.json"; grep -q "give --gpu" "$tmp/err" || fail "tune without facts"
expect_rc 0 "$tool" tune --from "nccl=$runs/coll-nccl-1.json,32=$runs/coll-ncclpool-1.json" --gpu "NVIDIA H200" --nccl-version 22809 --ranks 2 --out "$tmp/p.json"
grep -q "profile written to $tmp/p.json" "$tmp/out" || fail "tune --from"
json_ok "$tmp/p.json"
grep -q '"symmetric_ctas": 32' "$tmp/p.json" || fail "tune picked $(grep symmetric_ctas "$tmp/p.json")"
grep -q '"copy_engine_all_gather": false' "$tmp/p.json" || fail "tune without ce runs chose copy engines"
grep -q '"measured": "unknown (the runs do not say when they were made)"' "$tmp/p.json" || fail "tune --from: $(grep '"measured"' "$tmp/p.json"), not the runs' time"
grep -q "copy-engine all-gather: not chosen" "$tmp/out" || fail "tune: the copy-engine note"
# the profile as the library reads it: an auto pool here would route as it says (info reads $NCCLPOOL_PROFILE)
NCCLPOOL_PROFILE="$tmp/p.json" "$tool" info >"$tmp/out" 2>&1 || fail "info with a profile"
grep -q "^profile .*p.json: NVIDIA H200, NCCL 2.28.9, 2 ranks" "$tmp/out" || { cat "$tmp/out"; fail "info: profile line"; }
if "$tool" info --json | grep -q '"cuda":{"available":false'; then
  expect_rc 1 "$tool" tune --out "$tmp/q.json"; grep -q "tune needs GPUs" "$tmp/err" || fail "tune without GPUs"
  expect_rc 1 "$tool" tune --no-copy-engine --out "$tmp/q.json"; grep -q "tune needs GPUs" "$tmp/err" || fail "tune --no-copy-engine without GPUs"
fi
# Issue 47: bad input is refused with its reason; never a hang, a lost trace or JSON that is not JSON.
expect_rc 2 timeout 60 "$tool" bench alloc --min-ms inf --sizes 4K --repeats 1; grep -q "min-ms must be a finite number from 0 to 60000, not 'inf'" "$tmp/err" || fail "bench alloc --min-ms inf"
expect_rc 2 timeout 60 "$tool" bench alloc --min-ms 1e300 --sizes 4K --repeats 1; grep -q "min-ms must be a finite number from 0 to 60000, not '1e300'" "$tmp/err" || fail "bench alloc --min-ms 1e300"
cp "$data/two_groups.csv" "$tmp/T.csv"
expect_rc 2 "$tool" replay "$tmp/T.csv" --convert "$tmp/T.csv"; grep -qF -- "--convert $tmp/T.csv is the trace being replayed" "$tmp/err" || fail "replay --convert onto its trace"
cmp -s "$data/two_groups.csv" "$tmp/T.csv" || fail "replay --convert: the trace was overwritten"
expect_rc 2 "$tool" replay "$tmp/T.csv" --timeline "$tmp/../$(basename "$tmp")/T.csv"; grep -q -- "--timeline .*T.csv is the trace being replayed" "$tmp/err" || fail "replay --timeline onto its trace"
cmp -s "$data/two_groups.csv" "$tmp/T.csv" || fail "replay --timeline: the trace was overwritten"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --window-ms inf --json; grep -q "window-ms must be a finite number from 0 to 1e+07, not 'inf'" "$tmp/err" || fail "replay --window-ms inf"
expect_rc 0 "$tool" replay "$data/two_groups.csv" --window-ms 0 --json; json_ok "$tmp/out"
expect_rc 0 env NCCLPOOL_CHECK=everything NCCLPOOL_SGLANG_KIND=foo "$tool" info
grep -q "^environment  2 variable(s) hold values ncclpool does not accept" "$tmp/out" || { cat "$tmp/out"; fail "info: NCCLPOOL_CHECK and NCCLPOOL_SGLANG_KIND accepted"; }
grep -qF "  NCCLPOOL_CHECK='everything' is not one of off, layout, collectives" "$tmp/out" || fail "info: NCCLPOOL_CHECK line"
grep -qF "  NCCLPOOL_SGLANG_KIND='foo' is not one of auto, symmetric, local" "$tmp/out" || fail "info: NCCLPOOL_SGLANG_KIND line"
expect_rc 2 "$tool" bench alloc extra-positional; grep -q "bench alloc takes no arguments, not 'extra-positional'" "$tmp/err" || fail "bench alloc extra-positional"
usage_of "bench alloc" "bench alloc extra-positional"
expect_rc 2 "$tool" tune extra;             grep -q "tune takes no arguments, not 'extra'" "$tmp/err" || fail "tune extra"
expect_rc 2 "$tool" info --json=no;         grep -q -- "--json takes no value, not 'no'" "$tmp/err" || fail "info --json=no"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --device 5; grep -q -- "--device applies to torch snapshots; .*two_groups.csv is an ncclpool CSV trace" "$tmp/err" || fail "CSV replay --device"
expect_rc 2 "$tool" replay "$data/two_groups.csv" --level segments; grep -q -- "--level applies to torch snapshots" "$tmp/err" || fail "CSV replay --level"
expect_rc 2 "$tool" replay "$data/torch_snapshot_small.json" --device -1; grep -q -- "--device must be an integer in 0..1023, not '-1'" "$tmp/err" || fail "snapshot replay --device -1"
expect_rc 2 "$tool" bench memory --format csv; grep -q -- "--format applies to a trace: give --trace FILE" "$tmp/err" || fail "bench memory --format without --trace"
printf '{"device_traces": [[{"action": "alloc", "addr": 4096, "size": 512, "stream": 0}, {"action": "alloc", "addr": 4096, "size": 512, "stream": 0}]]}\n' >"$tmp/dup.json"
expect_rc 1 "$tool" replay "$tmp/dup.json"; grep -q "dup.json: device 0 event 1 (alloc): address 4096 is already live" "$tmp/err" || fail "snapshot: two allocs at one address"
expect_rc 0 "$tool" version --help;         grep -q "^usage: ncclpool version" "$tmp/out" || fail "version --help"
expect_rc 1 "$tool" tune --from "32=$tmp";  grep -qF -- "--from: $tmp: is a directory; give a file" "$tmp/err" || fail "tune --from DIR"
expect_rc 1 "$tool" tune --from "32=/nonexistent.json"; grep -q -- "--from: cannot open /nonexistent.json: No such file or directory" "$tmp/err" || fail "tune --from a missing file"
NCCLPOOL_PROFILE="$tmp" "$tool" info >"$tmp/out" 2>&1 || fail "info with NCCLPOOL_PROFILE a directory"
grep -qF "profile folder $tmp: one profile per rank count in it" "$tmp/out" || { cat "$tmp/out"; fail "info: NCCLPOOL_PROFILE a directory"; }
expect_rc 1 "$tool" replay "$data/two_groups.csv" --timeline /nonexistent/dir/t.csv
grep -q "^ncclpool: /nonexistent/dir/t.csv: cannot write the timeline: No such file or directory" "$tmp/err" || fail "replay --timeline in a missing directory"
expect_rc 1 "$tool" replay "$data/two_groups.csv" --convert /nonexistent/dir/c.csv
grep -q "^ncclpool: --convert: cannot write /nonexistent/dir/c.csv: No such file or directory" "$tmp/err" || fail "replay --convert in a missing directory"
echo "tool_cli: all checks passed"

"""Figures of the auto pool against the best single kind at 2 and 4 GPUs (issue 46 item 2 and its
target: <= 1.03 of the best from 64 KiB, eager and in graphs, counting the rows whose spread over
rounds is under 3%), from `ncclpool bench coll --auto-pool` runs (docs/benchmarks/coll.md).

A row is one (collective, size): the bench's own pool / best (out-of-place + in-place time, the
pool's over the fastest single kind's) and the larger spread of its two placements (coll._points).
"""

import json
import os

from . import _ROOT, Run, data, figure, fmt, span, table
from .coll import _compare_ratios, _nt_lines, _points, op_rows, size
from .routes import _describe, any_kind_of

D4 = "2026-11-28-gpu-check-4xh200-issue46/"
RUNS = (  # (GPUs, launch, how the pool's buffers were asked for, bench JSON)
    (2, "eager", "any (one route for every op)", "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-coll.json"),
    (2, "graph", "any (one route for every op)", "2026-11-27-gpu-check-2xh200-s5/call1-wheel-toolbench/bench-coll-graph.json"),
    (4, "eager", "any (one route for every op)", D4 + "call2-decode-coll-graph-68d05f6/bench-coll.json"),
    (4, "graph", "any (one route for every op)", D4 + "call2-decode-coll-graph-68d05f6/bench-coll-graph.json"),
    (4, "eager", "for the op (`ncclpool_alloc_for`)", D4 + "call3-cuda-pdl-fsdp2-decode-nomix-coll-graph-468b5b1/bench-coll.json"),
    (4, "graph", "for the op (`ncclpool_alloc_for`)", D4 + "call3-cuda-pdl-fsdp2-decode-nomix-coll-graph-468b5b1/bench-coll-graph.json"),
)
FROM = 64 << 10
QUIET = 3.0  # % spread over rounds under which a row counts


def _rows(path):
    """[(op, bytes, pool/best, spread %, pool part)] from FROM up."""
    out = [(op, b, p["pool_vs_best"], p["spread"], p["pool_part"]) for (op, b), p in sorted(_points(path, FROM, 1 << 62).items())]
    if not out:
        raise ValueError(f"{path}: no pool rows from 64 KiB")
    return out


def _worst(rows):
    op, b, ratio, sp, part = max(rows, key=lambda r: r[2])
    return f"{fmt(ratio, 3)} ({op} {size(b)}, {part}, spread {fmt(sp, 1)}%)"


@figure("coll4.pool_table", *(r[3] for r in RUNS))
def _pool_table():
    body = []
    for gpus, launch, asked, path in RUNS:
        rows = _rows(path)
        quiet = [r for r in rows if r[3] < QUIET]
        over = [r for r in quiet if r[2] > 1.03]
        body.append([str(gpus), launch, asked, f"{len(quiet)} of {len(rows)}", _worst(quiet),
                     str(len(over)), _worst(rows)])
    return table(["GPUs", "launch", "pool buffers asked", "rows with spread < 3%", "worst pool / best there",
                  "of them > 1.03", "worst of every row"], body, [Run(p) for *_, p in RUNS])


def _worst_quiet(path):
    return max(r[2] for r in _rows(path) if r[3] < QUIET)


figure("coll4.op_eager_worst", RUNS[4][3])(lambda: fmt(_worst_quiet(RUNS[4][3]), 3))
figure("coll4.op_graph_worst", RUNS[5][3])(lambda: fmt(_worst_quiet(RUNS[5][3]), 3))
figure("coll4.any_eager_worst", RUNS[2][3])(lambda: fmt(_worst_quiet(RUNS[2][3]), 3))
figure("coll4.any_graph_worst", RUNS[3][3])(lambda: fmt(_worst_quiet(RUNS[3][3]), 3))


@figure("coll4.routes", RUNS[4][3])
def _routes():
    return data(RUNS[4][3])["facts"]["auto_pool_routes"].split(" (built-in")[0]


# ---- nccl-tests beside bench coll at 4 GPUs (scripts/nccl-tests.sh: both at NCCL's own symmetric CTA count) ----

NT4 = "2026-11-28-gpu-check-issue46-s2/call2-4xh200-megatron-nccltests-8806cb8/nccl-tests.txt"
NT4_COMPARE = {k: NT4.replace("nccl-tests.txt", f"nccl-tests/compare-{k}.txt") for k in ("none", "local", "symmetric")}
NT2 = "2026-11-27-gpu-check-2xh200-s5/call7-nccltests-nccl-ctas/nccl-tests.txt"


@figure("coll4.nccltests.table", NT2, NT4)
def _nt4_table():
    lines = {2: _nt_lines(NT2), 4: _nt_lines(NT4)}
    body = [[f"{k} ({i})"] + [f"{lines[g][k][0]} of {lines[g][k][1]}, median {lines[g][k][2]}%, largest {lines[g][k][3]}%" for g in (2, 4)]
            for i, k in enumerate(("none", "local", "symmetric"))]
    return table(["kind (nccl-tests `-R`)", "2 GPUs: within 3% (sizes >= 8 MiB)", "4 GPUs: within 3% (sizes >= 8 MiB)"], body,
                 [Run(NT2), Run(NT4)])


figure("coll4.nccltests.big_ratios", *NT4_COMPARE.values())(lambda: ", ".join(
    f"{span(_compare_ratios(p, k), 3)} ({k})" for k, p in NT4_COMPARE.items()))


# ---- The pick for buffers naming no collective: the smallest worst case (since the majority's 1.09) ----

def _builtin_any(ranks):
    """[(min_bytes, kind)]: what the built-in routes of `ranks` ranks (src/routing/builtin/, made from
    a bench coll run by scripts/builtin-routes.py, checked against it in CI) give a buffer that names
    no collective: a class's "any", else its collectives' kind (they agree there)."""
    return [(c["min_bytes"], any_kind_of(c)) for c in _builtin_classes(ranks)]


def _builtin_classes(ranks):
    with open(os.path.join(_ROOT[0], "src", "routing", "builtin", f"sm90-{ranks}ranks.json"), encoding="utf-8") as f:
        return json.load(f)["classes"]


def _any_projection(path, ranks):
    """[(op, bytes, kind's time / best kind's, spread %)] from FROM: a buffer naming no collective under
    today's built-in "any" pick, from the single kinds' times the run measured (out + in place)."""
    routes = _builtin_any(ranks)
    out = []
    for (op, b), p in sorted(_points(path, FROM, 1 << 62).items()):
        kind = [k for lo, k in routes if lo <= b][-1]
        rows = [r for r in op_rows(path, op) if r["bytes"] == b]
        times = {k: sum(r[f"{k}_us"] for r in rows) for k in ("none", "local", "symmetric")}
        out.append((op, b, times[kind] / min(times.values()), p["spread"], kind))
    return out


def _projected_worst(path, ranks):
    quiet = [r for r in _any_projection(path, ranks) if r[3] < QUIET]
    op, b, ratio, _, kind = max(quiet, key=lambda r: r[2])
    return f"{fmt(ratio, 3)} ({op.replace('_', '-')} {size(b)} on {kind})"


figure("coll4.any_new_eager_worst", RUNS[2][3])(lambda: _projected_worst(RUNS[2][3], 4))
figure("coll4.any_new_graph_worst", RUNS[3][3])(lambda: _projected_worst(RUNS[3][3], 4))
BUILTIN4_SOURCE = D4 + "call1-cuda-pdl-torch-sglang-tool-coll-9b78ee8/bench-coll.json"  # sm90-4ranks.json's "source"


figure("coll4.any_new_routes", BUILTIN4_SOURCE)(lambda: _describe(_builtin_classes(4), "any"))


@figure("coll4.any_no_single_kind", BUILTIN4_SOURCE)
def _any_no_single_kind():
    """The sizes from 64 KiB where no single kind serves all three collectives within 1.03 of each
    one's best (the routes' own run): the best any route can do there is above the target."""
    worst = {}
    for (op, b) in _points(BUILTIN4_SOURCE, FROM, 1 << 62):
        rows = [r for r in op_rows(BUILTIN4_SOURCE, op) if r["bytes"] == b]
        times = {k: sum(r[f"{k}_us"] for r in rows) for k in ("none", "local", "symmetric")}
        for k, t in times.items():
            worst[(b, k)] = max(worst.get((b, k), 0.0), t / min(times.values()))
    sizes = sorted({b for b, _ in worst})
    over = [(b, min(worst[(b, k)] for k in ("none", "local", "symmetric"))) for b in sizes]
    return ", ".join(f"{size(b)} ({fmt(w, 3)})" for b, w in over if w > 1.03)

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
from .routes import _describe

D4 = "2026-11-28-gpu-check-4xh200-issue46/"
S4 = "2026-11-28-gpu-check-issue46-s4/"
MAJORITY = "any: the majority's kind (before `any`)"
OP = "for the op (`ncclpool_alloc_for`)"
ANY = "no collective (`ncclpool_alloc`: the routes' `any`)"
RUNS = (  # (GPUs, launch, how the pool's buffers were asked for, bench JSON)
    (2, "eager", "any (one route for every op)", "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-coll.json"),
    (2, "graph", "any (one route for every op)", "2026-11-27-gpu-check-2xh200-s5/call1-wheel-toolbench/bench-coll-graph.json"),
    (4, "eager", MAJORITY, D4 + "call2-decode-coll-graph-68d05f6/bench-coll.json"),
    (4, "graph", MAJORITY, D4 + "call2-decode-coll-graph-68d05f6/bench-coll-graph.json"),
    (4, "eager", OP, S4 + "call1-4xh200-coll-graph-6e9534d/bench-coll.json"),
    (4, "graph", OP, S4 + "call1-4xh200-coll-graph-6e9534d/bench-coll-graph.json"),
    (4, "eager", OP, S4 + "call12-4xh200-coll-graph-6e9534d/bench-coll.json"),
    (4, "graph", OP, S4 + "call12-4xh200-coll-graph-6e9534d/bench-coll-graph.json"),
    (4, "eager", ANY, S4 + "call13-4xh200-coll-graph-any-becb914/bench-coll.json"),
    (4, "graph", ANY, S4 + "call13-4xh200-coll-graph-any-becb914/bench-coll-graph.json"),
    (4, "eager", ANY, S4 + "call14-4xh200-coll-graph-any-becb914/bench-coll.json"),
    (4, "graph", ANY, S4 + "call14-4xh200-coll-graph-any-becb914/bench-coll-graph.json"),
)


def _paths(asked, launch):
    return [p for g, l, a, p in RUNS if g == 4 and a == asked and l == launch]


def _check_asked(asked, path):
    """A run made with --pool-for says how its pool's buffers were asked (the fact came with the
    option; older runs have none): it must be what RUNS says."""
    said = data(path)["facts"].get("auto_pool_buffers")
    allowed = {ANY: {"any"}, OP: {"op", None}}.get(asked, {None})  # the older labels: runs before the fact
    if said not in allowed:
        raise ValueError(f"{path}: its pool's buffers were asked as {said!r}, RUNS says {asked!r}")


FROM = 64 << 10
QUIET = 3.0  # % spread over rounds under which a row counts


def _rows(path):
    """[(op, bytes, pool/best, spread %, pool part)] from FROM up."""
    for _, _, asked, p in RUNS:
        if p == path:
            _check_asked(asked, path)
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
    return max((r for r in _rows(path) if r[3] < QUIET), key=lambda r: r[2])


def _worst_quiet_span(paths):
    """'lo-hi' of the runs' worst quiet ratios, and where the worst of them was."""
    worst = [_worst_quiet(p) for p in paths]
    op, b, _, _, part = max(worst, key=lambda r: r[2])
    return f"{span([r[2] for r in worst], 3)} ({op.replace('_', '-')} {size(b)} on {part})"


for _launch in ("eager", "graph"):
    figure(f"coll4.op_{_launch}_worst", *_paths(OP, _launch))(lambda l=_launch: span([_worst_quiet(p)[2] for p in _paths(OP, l)], 3))
    figure(f"coll4.any_{_launch}_worst", *_paths(MAJORITY, _launch))(lambda l=_launch: fmt(_worst_quiet(_paths(MAJORITY, l)[0])[2], 3))
    figure(f"coll4.any_new_{_launch}_worst", *_paths(ANY, _launch))(lambda l=_launch: _worst_quiet_span(_paths(ANY, l)))


@figure("coll4.routes", _paths(OP, "eager")[-1])
def _routes():
    return data(_paths(OP, "eager")[-1])["facts"]["auto_pool_routes"].split(" (built-in")[0]


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

def _builtin_classes(ranks):
    with open(os.path.join(_ROOT[0], "src", "routing", "builtin", f"sm90-{ranks}ranks.json"), encoding="utf-8") as f:
        return json.load(f)["classes"]


def _single_kind_worst(path):
    """{(bytes, kind): the kind's worst time over the collectives, each against its fastest kind}
    from FROM up (out + in place), at the sizes where every collective's row is quiet (spread under
    QUIET): what one route for every op costs at a size, in a run."""
    worst, noisy = {}, set()
    for (op, b), p in _points(path, FROM, 1 << 62).items():
        if p["spread"] >= QUIET:
            noisy.add(b)
        rows = [r for r in op_rows(path, op) if r["bytes"] == b]
        times = {k: sum(r[f"{k}_us"] for r in rows) for k in ("none", "local", "symmetric")}
        for k, t in times.items():
            worst[(b, k)] = max(worst.get((b, k), 0.0), t / min(times.values()))
    return {key: w for key, w in worst.items() if key[0] not in noisy}


def _floor(path):
    """{bytes: (the best single kind there, its worst)}: the least any one route for every op can cost."""
    worst = _single_kind_worst(path)
    out = {}
    for b in sorted({b for b, _ in worst}):
        kind = min(("none", "local", "symmetric"), key=lambda k: worst[(b, k)])
        out[b] = (kind, worst[(b, kind)])
    return out


@figure("coll4.any_floor", *_paths(ANY, "eager"), *_paths(ANY, "graph"))
def _any_floor():
    """Each size where the floor is above 1.03 in one of the `any` runs (eager and graphs): the floor as
    a span over every one of those runs that measured the size quietly, and which kind it was."""
    floors = [_floor(p) for p in _paths(ANY, "eager") + _paths(ANY, "graph")]
    over = sorted({b for f in floors for b, (_, w) in f.items() if w > 1.03})
    out = []
    for b in over:
        found = [f[b] for f in floors if b in f]
        out.append(f"{size(b)} {span([w for _, w in found], 3)} ({'/'.join(sorted({k for k, _ in found}))})")
    return ", ".join(out)


BUILTIN4_SOURCE = D4 + "call1-cuda-pdl-torch-sglang-tool-coll-9b78ee8/bench-coll.json"  # sm90-4ranks.json's "source"


figure("coll4.any_new_routes", BUILTIN4_SOURCE)(lambda: _describe(_builtin_classes(4), "any"))


figure("coll4.any_no_single_kind", BUILTIN4_SOURCE)(lambda: ", ".join(
    f"{size(b)} ({fmt(w, 3)})" for b, (_, w) in _floor(BUILTIN4_SOURCE).items() if w > 1.03))

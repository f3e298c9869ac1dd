"""Figures of docs/benchmarks/coll.md: `ncclpool bench coll --auto --auto-pool` on 2x H200."""

import re

from . import Run, data, figure, fmt

COLL = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-coll.json"


def _pool_note():
    """(worst pool / best single kind from 64 KiB, worst pool / none from 64 KiB) from the run's notes."""
    for note in data(COLL)["notes"]:
        m = re.search(r"auto pool .*?worst ([\d.]+) \([^)]*\) from 64 KiB.*?vs none: worst ([\d.]+)", note)
        if m:
            return float(m.group(1)), float(m.group(2))
    raise KeyError("no auto-pool note in " + COLL)


@figure("coll.run", COLL)
def _run():
    return Run(COLL).label()


@figure("coll.pool_vs_best_pct", COLL)
def _vs_best():
    return fmt((_pool_note()[0] - 1) * 100, 1) + "%"


@figure("coll.pool_vs_none_pct", COLL)
def _vs_none():
    return fmt((_pool_note()[1] - 1) * 100, 1) + "%"


# ---- the rest of docs/benchmarks/coll.md ----

import statistics  # noqa: E402

from . import rows, span, table, text  # noqa: E402

CE = "2026-11-27-gpu-check-2xh200-e370088-s2/call2-cecoll-copyengine-sglang/gpu-check2/bench-coll-ce.json"
S5_GRAPH = "2026-11-27-gpu-check-2xh200-s5/call1-wheel-toolbench/bench-coll-graph.json"
S5_NT = "2026-11-27-gpu-check-2xh200-s5/call7-nccltests-nccl-ctas/nccl-tests.txt"
S5_NT32 = "2026-11-27-gpu-check-2xh200-s5/call6-nccltests-32ctas/nccl-tests.txt"
S4_COMPARE = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/coll-compare.txt"
DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call1-cuda-nccl-toolbench/"
DF7_EAGER, DF7_GRAPH, DF7_COMPARE = DF7 + "bench-coll.json", DF7 + "bench-coll-graph.json", DF7 + "coll-compare.txt"
A15, G15 = "2026-11-23-coll-autopool-2xh200-15fd538.json", "2026-11-23-coll-graph-autopool-2xh200-15fd538.json"
SYM = "2026-11-23-coll-symctas-2xh200-237829c/"
SYM_NCCL = [SYM + f"coll-nccl-{i}.json" for i in range(1, 8)]
SYM_32 = [SYM + f"coll-ncclpool-{i}.json" for i in (1, 2, 5, 6, 7)]
NT = "2026-11-23-nccl-tests-2xh200-1118caa/"
OPS = ("all_gather", "reduce_scatter", "all_reduce")
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def size(b, gib=True):
    """1024 -> '1 KiB', 1 << 30 -> '1 GiB' (or '1024 MiB' with gib=False)."""
    if b >= GIB and gib:
        return f"{b // GIB} GiB"
    if b >= MIB:
        return f"{b // MIB} MiB"
    return f"{b // KIB} KiB"


def op_rows(path, op):
    return [r for r in rows(data(path), op) if "bytes" in r]


# Copy-engine all-gather, e370088.
def _ce_rows():
    return op_rows(CE, "all_gather")


@figure("coll.ce.table", CE)
def _ce_table():
    body = []
    for r in _ce_rows():
        big = r["bytes"] >= 64 * MIB
        steps = [fmt(r[k + "_step"], 2) for k in ("ce", "symmetric", "none")]
        if big:
            steps[0] = f"**{steps[0]}**"
        body.append([f"{size(r['bytes'])} {r['placement']}",
                     " / ".join(fmt(r[k + "_us"]) for k in ("ce", "symmetric", "none")),
                     " / ".join(steps), fmt(r["spread_pct"], 1) + "%"])
    return table(["all-gather, placement", "time us: ce / symmetric (32 CTAs) / none",
                  "step: ce / symmetric / none", "spread"], body, [Run(CE)])


def _ce(kind_a, kind_b, key, where):
    return [r[f"{kind_a}_{key}"] / (r[f"{kind_b}_{key}"] if kind_b else 1) for r in _ce_rows() if where(r)]


figure("coll.ce.out_vs_sym", CE)(lambda: span(_ce("ce", "symmetric", "us", lambda r: r["placement"] == "out"), 1) + "x")
figure("coll.ce.in_1g_vs_sym", CE)(lambda: fmt(_ce("ce", "symmetric", "us", lambda r: r["placement"] == "in" and r["bytes"] == GIB)[0], 2) + "x")
for _k, _n in (("ce", "ce"), ("symmetric", "sym"), ("none", "none")):
    figure(f"coll.ce.step_{_n}_pct", CE)(lambda k=_k: span(
        [(s - 1) * 100 for s in _ce(k, None, "step", lambda r: r["bytes"] >= 64 * MIB)]) + "%")


# Fifth lease: graph replays and nccl-tests.
def _pool_notes(path):
    for note in data(path)["notes"]:
        m = re.search(r"worst ([\d.]+) \(([\w]+) (\d+ \w+)\) from 64 KiB, ([\d.]+) \(([\w]+) (\d+ \w+)\) below; "
                      r"vs none: worst ([\d.]+)", note)
        if m:
            return m
    raise KeyError("no auto-pool note in " + path)


def _spread_notes(path):
    for note in data(path)["notes"]:
        m = re.search(r"median over rows ([\d.]+)% \(max ([\d.]+)%\) below 64 KiB, ([\d.]+)% \(max ([\d.]+)%\) from 64 KiB", note)
        if m:
            return [float(x) for x in m.groups()]
    raise KeyError("no spread note in " + path)


def _peaks(path):
    peak = {(r["op"], r["kind"]): r["peak_busbw"] for r in rows(data(path), "summary")}
    return ", ".join(f"{op.replace('_', '-')} " + " / ".join(fmt(peak[(op, k)]) for k in ("none", "local", "symmetric", "pool"))
                     for op in OPS)


@figure("coll.s5.graph", S5_GRAPH)
def _s5_graph():
    m = _pool_notes(S5_GRAPH)
    sp = _spread_notes(S5_GRAPH)
    return (f"**{m.group(1)}** ({m.group(2).replace('_', '-')} {m.group(3)}) from 64 KiB and {m.group(4)} below; against none "
            f"worst {m.group(7)} (faster everywhere it routes to windows); rounds spread {fmt(sp[0], 1)}% (median; max "
            f"{fmt(sp[1], 1)}%) below 64 KiB, {fmt(sp[2], 1)}% (max {fmt(sp[3], 1)}%) from 64 KiB; every sampled result "
            f"right. Peak bus bandwidth GB/s none / local / symmetric / pool: {_peaks(S5_GRAPH)}")


def _nt_lines(path):
    out = {}
    for m in re.finditer(r"'(\w+)' vs the reference at sizes >= 8 MiB: within 3% at (\d+) of (\d+), median difference "
                         r"([\d.]+)%, largest ([\d.]+)%", text(path)):
        out[m.group(1)] = m.groups()[1:]
    if not out:
        raise KeyError("no comparison line in " + path)
    return out


@figure("coll.s5.nccltests.table", S5_NT)
def _s5_nt_table():
    lines = _nt_lines(S5_NT)
    body = [[f"{k} ({i})", f"{lines[k][0]} of {lines[k][1]}", lines[k][2] + "%", lines[k][3] + "%"]
            for i, k in enumerate(("none", "local", "symmetric"))]
    return table(["kind (nccl-tests `-R`)", "within 3%", "median difference", "largest"], body, [Run(S5_NT)])


def _compare_ratios(path, kind, lo=64 * MIB):
    """bench coll / reference ratios of column `kind` at sizes >= lo in a compare table (every op)."""
    out, cols = [], None
    for line in text(path).splitlines():
        f = line.split()
        if len(f) > 2 and f[1] == "size":
            cols = f[2:]
        elif cols and len(f) == len(cols) + 1 and f[0].isdigit() and int(f[0]) >= lo:
            out.append(float(f[1 + cols.index(kind)]))
    return out


# Fourth lease: bench coll vs the torch reference.
figure("coll.s4.compare", S4_COMPARE)(lambda: "within 3% at {} of {}, median {}%".format(*_nt_lines(S4_COMPARE)["none"][:3]))


@figure("coll.s4.peaks", COLL)
def _s4_peaks():
    return _peaks(COLL).replace(", ", ", ", 2)


# 2026-11-24 (df7cf49) and 2026-11-23 (15fd538): the auto pool per size class.
def _points(path, lo, hi):
    pts = {}
    for op in OPS:
        for r in op_rows(path, op):
            if lo <= r["bytes"] < hi:
                p = pts.setdefault((op, r["bytes"]), dict(r, spread=0.0))
                p["spread"] = max(p["spread"], r.get("spread_pct", 0.0))
    return pts


def _class_row(path, lo, hi, label_from=0, spread=True):
    pts = _points(path, lo, hi)
    best = [p["pool_vs_best"] for p in pts.values()]
    worst_at = max(pts, key=lambda k: pts[k]["pool_vs_best"])
    worst = fmt(max(best), 3) + (f" ({worst_at[0].replace('_', '-')} {size(worst_at[1])})" if lo >= label_from else "")
    out = [str(len(pts)), f"{fmt(statistics.median(best), 3)}, {worst}", fmt(max(p["pool_vs_none"] for p in pts.values()), 3)]
    if spread:
        sp = [p["spread"] for p in pts.values()]
        out.append(f"{fmt(statistics.median(sp), 1)}%, {fmt(max(sp), 1)}%")
    return out


CLASSES = [("graph replays", "16 KiB (< 64 KiB)", 0, 64 * KIB), ("graph replays", "64 KiB - 512 KiB", 64 * KIB, MIB),
           ("graph replays", "1 MiB - 1 GiB", MIB, 2 * GIB), ("eager", "1 KiB - 32 KiB", 0, 64 * KIB),
           ("eager", "64 KiB - 512 KiB", 64 * KIB, MIB), ("eager", "1 MiB - 1 GiB", MIB, 2 * GIB)]


def _class_table(eager, graph, spread):
    body = [[t, s] + _class_row(graph if t == "graph replays" else eager, lo, hi, spread=spread) for t, s, lo, hi in CLASSES]
    head = ["timing", "sizes", "points", "pool / best single kind: median, worst", "pool / none: worst"]
    return table(head + (["spread: median, max"] if spread else []), body, [Run(eager), Run(graph)])


figure("coll.df7.table", DF7_EAGER, DF7_GRAPH)(lambda: _class_table(DF7_EAGER, DF7_GRAPH, True))
figure("coll.15f.table", A15, G15)(lambda: _class_table(A15, G15, False))


def _worst(path, key, lo=64 * KIB, hi=2 * GIB):
    return max(p[key] for p in _points(path, lo, hi).values())


figure("coll.df7.worst_best", DF7_EAGER, DF7_GRAPH)(lambda: (
    f"worst {fmt(_worst(DF7_GRAPH, 'pool_vs_best'), 3)} in graph replays, {fmt(_worst(DF7_EAGER, 'pool_vs_best'), 3)} eager"))
figure("coll.df7.worst_none", DF7_EAGER, DF7_GRAPH)(lambda: (
    f"worst pool / none {fmt(_worst(DF7_GRAPH, 'pool_vs_none'), 3)} in graphs, {fmt(_worst(DF7_EAGER, 'pool_vs_none'), 3)} eager"))
figure("coll.df7.eager_spread_128k", DF7_EAGER)(lambda: fmt(_points(DF7_EAGER, 128 * KIB, 128 * KIB + 1)[("all_reduce", 128 * KIB)]["spread"]) + "%")
figure("coll.df7.graph_small_pct", DF7_GRAPH)(lambda: fmt((_worst(DF7_GRAPH, "pool_vs_best", 0, 64 * KIB) - 1) * 100, 1) + "%")
figure("coll.df7.eager_small_spread", DF7_EAGER)(lambda: fmt(statistics.median(
    p["spread"] for p in _points(DF7_EAGER, 0, 64 * KIB).values())) + "%")


@figure("coll.df7.ag2k", DF7_EAGER)
def _ag2k():
    r = next(r for r in op_rows(DF7_EAGER, "all_gather") if r["bytes"] == 2 * KIB and r["placement"] == "out")
    return (f"{fmt(r['pool_vs_best'], 2)} (all-gather 2 KiB: {fmt(r['pool_us'], 1)} against "
            f"{fmt(min(r[k + '_us'] for k in ('none', 'local', 'symmetric')), 1)} us")


@figure("coll.df7.auto_1k", DF7_EAGER)
def _auto_1k():
    r = next(r for r in op_rows(DF7_EAGER, "all_reduce") if r["bytes"] == KIB)
    return f"{fmt(r['auto_vs_best'], 3)} off at 1 KiB all-reduce eager, the library's pool {fmt(r['pool_vs_best'], 3)}"


figure("coll.df7.compare", DF7_COMPARE)(lambda: "within 3% at {} of {} points, median difference {}%".format(
    *_nt_lines(DF7_COMPARE)["none"][:3]))

figure("coll.15f.graph_worst", G15)(lambda: fmt(_worst(G15, "pool_vs_best", MIB), 3))
figure("coll.15f.graph_none", G15)(lambda: fmt(_worst(G15, "pool_vs_none", 0), 3))
figure("coll.15f.graph_none_fastest", G15)(lambda: fmt(1 / min(p["pool_vs_none"] for p in _points(G15, 0, 2 * GIB).values()), 2) + "x")


@figure("coll.15f.ag4k", A15)
def _ag4k():
    r = next(r for r in op_rows(A15, "all_gather") if r["bytes"] == 4 * KIB and r["placement"] == "out")
    return f"{fmt(r['pool_vs_best'], 3)} at 4 KiB is the same part as `symmetric`, {fmt(r['symmetric_us'], 1)} vs {fmt(r['pool_us'], 1)} us"


figure("coll.15f.eager_big_pct", A15)(lambda: fmt((_worst(A15, "pool_vs_best", MIB) - 1) * 100, 1) + "%")


# The symmetric kernels' CTA count, 237829c: 7 runs with NCCL's count, 5 with 32.
def _sym_vals(files, op, b, key):
    return [r[key] for f in files for r in op_rows(f, op) if r["bytes"] == b and r["placement"] == "out"]


def _mmm(x):
    return f"{fmt(statistics.median(x), 1)} [{fmt(min(x), 1)}-{fmt(max(x), 1)}]"


def _sym_sizes():
    return sorted({r["bytes"] for r in op_rows(SYM_NCCL[0], "all_gather")})


def _sym_point(op, b):
    both = SYM_NCCL + SYM_32
    none, local = _sym_vals(both, op, b, "none_us"), _sym_vals(both, op, b, "local_us")
    nccl, s32 = _sym_vals(SYM_NCCL, op, b, "symmetric_us"), _sym_vals(SYM_32, op, b, "symmetric_us")
    ratio = min(statistics.median(none), statistics.median(local)) / statistics.median(s32)
    return none, local, nccl, s32, ratio


@figure("coll.symctas.table", *(SYM_NCCL + SYM_32))
def _sym_table():
    body = []
    for op in OPS:
        for b in _sym_sizes():
            none, local, nccl, s32, ratio = _sym_point(op, b)
            r = fmt(ratio, 2) + "x"
            body.append([op, size(b, gib=False), _mmm(none), _mmm(local), _mmm(nccl), _mmm(s32),
                         f"**{r}**" if ratio < 1.005 else r])
    return table(["op", "size", "none", "local", "symmetric, NCCL's count", "symmetric, 32 CTAs",
                  "best other / symmetric 32"], body, [Run(SYM_NCCL[0])])


@figure("coll.symctas.range", *(SYM_NCCL + SYM_32))
def _sym_range():
    pts = {(op, b): _sym_point(op, b)[4] for op in OPS for b in _sym_sizes() if b >= 256 * KIB}
    lo, hi = min(pts, key=pts.get), max(pts, key=pts.get)
    return (f"{fmt((pts[lo] - 1) * 100)}% ({lo[0].replace('_', '-')} {size(lo[1])}) to {fmt(pts[hi], 2)}x "
            f"({hi[0].replace('_', '-')} {size(hi[1])})")


@figure("coll.symctas.lost", *(SYM_NCCL + SYM_32))
def _sym_lost():
    def med(files, op, key):
        return statistics.median(_sym_vals(files, op, GIB, key))
    both = SYM_NCCL + SYM_32
    ag = f"all-gather 1 GiB {fmt(med(SYM_NCCL, 'all_gather', 'symmetric_us'))} vs {fmt(med(both, 'all_gather', 'local_us'))} us local"
    rs = f"reduce-scatter {fmt(med(SYM_NCCL, 'reduce_scatter', 'symmetric_us'))} vs {fmt(med(both, 'reduce_scatter', 'local_us'))}"
    ar = f"all-reduce {fmt(med(SYM_NCCL, 'all_reduce', 'symmetric_us'))} vs {fmt(med(both, 'all_reduce', 'none_us'))}"
    return f"{ag}; {rs}; {ar}"


@figure("coll.symctas.small", *(SYM_NCCL + SYM_32))
def _sym_small():
    meds = [statistics.median(vals) for op in OPS for b in (16 * KIB, 64 * KIB) for vals in _sym_point(op, b)[:4]]
    ag16 = [x for vals in _sym_point("all_gather", 16 * KIB)[:4] for x in vals]
    return f"{span(meds)} us and one point's spread over the runs (all-gather 16 KiB: {fmt(min(ag16), 1)}-{fmt(max(ag16), 1)} us)"


# nccl-tests beside bench coll, 1118caa.
def _nt_table_rows(kind):
    out, op = {}, None
    for line in text(NT + f"compare-{kind}.txt").splitlines():
        f = line.split()
        if len(f) > 2 and f[1] == "size":
            op, cols = f[0], f[2:]
        elif op and len(f) == 5 and f[0].isdigit():
            out[(op, int(f[0]))] = (float(f[1]), float(f[1 + cols.index(kind)]))
    return out


@figure("coll.nt.table", *(NT + f"compare-{k}.txt" for k in ("none", "local", "symmetric")))
def _nt_table():
    t = {k: _nt_table_rows(k) for k in ("none", "local", "symmetric")}
    body = []
    for op in OPS:
        for b in (MIB, 8 * MIB, 64 * MIB, GIB):
            body.append([op.replace("_", "-"), size(b)] + [f"{fmt(t[k][(op, b)][0], 1)}, {fmt(t[k][(op, b)][1], 3)}"
                                                             for k in ("none", "local", "symmetric")])
    return table(["op", "size", "none: nccl-tests GB/s, ratio", "local (-R 1)", "symmetric (-R 2)"], body,
                 [Run(NT + "compare-none.txt")])


def _nt_summary():
    return {k: _nt_lines(NT + f"compare-{k}.txt")[k] for k in ("none", "local", "symmetric")}


figure("coll.nt.big_pct", *(NT + f"compare-{k}.txt" for k in ("none", "local", "symmetric")))(lambda: fmt(max(
    abs(r - 1) for k in ("none", "local", "symmetric") for r in _compare_ratios(NT + f"compare-{k}.txt", k)) * 100, 1) + "%")
figure("coll.nt.within", *(NT + f"compare-{k}.txt" for k in ("none", "local", "symmetric")))(lambda: (
    "within 3% at " + " / ".join(_nt_summary()[k][0] for k in ("none", "local", "symmetric")) + " of 24 points (none / "
    "local / symmetric), median difference " + " / ".join(_nt_summary()[k][2] for k in ("none", "local", "symmetric")) + "%"))
figure("coll.nt.small_pct", *(NT + f"compare-{k}.txt" for k in ("none", "local", "symmetric")))(lambda: "+" + fmt(max(
    (r - 1) * 100 for k in ("none", "local", "symmetric") for r in _compare_ratios(NT + f"compare-{k}.txt", k, 0)
    if r == r)) + "%")

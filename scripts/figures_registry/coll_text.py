"""Figures of docs/benchmarks/coll.md's prose (the tables and the first figures are in coll.py): the
nccl-tests comparisons of the fifth lease, the fourth lease's auto pool, `ncclpool tune`'s tables and
the page's targets."""

import re
import statistics

from . import data, figure, fmt, rows, span, text
from .coll import COLL, DF7, G15, GIB, KIB, MIB, NT, OPS, S5_NT, S5_NT32, _nt_lines, _points, size

S5_NT_DIR = S5_NT.rsplit("/", 1)[0] + "/nccl-tests/"
S5_NT32_DIR = S5_NT32.rsplit("/", 1)[0] + "/nccl-tests/"
KINDS = ("none", "local", "symmetric")
DF7_TUNE = DF7 + "tune.txt"
TUNE15 = "2026-11-23-tune-2xh200-15fd538/tune.txt"


def _op(op):
    return op.replace("_", "-")


def compare_points(path):
    """{(op, bytes): {column: value}} of a compare table (reference busbw and each kind's ratio)."""
    out, op, cols = {}, None, None
    for line in text(path).splitlines():
        f = line.split()
        if len(f) > 2 and f[1] == "size":
            op, cols = f[0], f[2:]
        elif cols and len(f) == len(cols) + 1 and f[0].isdigit():
            out[(op, int(f[0]))] = dict(zip(cols, (float(x) for x in f[1:])))
    if not out:
        raise KeyError("no compare table in " + path)
    return out


# ---- the fifth lease beside nccl-tests (db1dd20) ----

@figure("coll.s5.nt32", S5_NT32, S5_NT32_DIR + "compare-symmetric.txt")
def _s5_nt32():
    within, of, med = _nt_lines(S5_NT32)["symmetric"][:3]
    r = compare_points(S5_NT32_DIR + "compare-symmetric.txt")[("all_gather", GIB)]["symmetric"]
    return f"{within} of {of} points within 3%, median {fmt(float(med))}% apart (all-gather 1 GiB {fmt(r, 2)}x)"


def _s5_ratios(k, lo, hi=2 * GIB):
    return [(v[k], op, b) for (op, b), v in compare_points(S5_NT_DIR + f"compare-{k}.txt").items() if lo <= b < hi]


@figure("coll.s5.big_ratios", *(S5_NT_DIR + f"compare-{k}.txt" for k in KINDS))
def _s5_big_ratios():
    return ", ".join(f"{span([r for r, _, _ in _s5_ratios(k, 64 * MIB)], 3)} ({k})" for k in KINDS)


@figure("coll.s5.big_pct", *(S5_NT_DIR + f"compare-{k}.txt" for k in KINDS))
def _s5_big_pct():
    return fmt(max(abs(r - 1) for k in KINDS for r, _, _ in _s5_ratios(k, 64 * MIB)) * 100, 1) + "%"


@figure("coll.s5.within", S5_NT)
def _s5_within():
    n = [int(v[0]) for v in _nt_lines(S5_NT).values()]
    return f"{span(n)} of 24 points from 8 MiB within 3%"


@figure("coll.s5.mid_pct", *(S5_NT_DIR + f"compare-{k}.txt" for k in KINDS))
def _s5_mid_pct():
    r, op, b, k = max((r, op, b, k) for k in KINDS for r, op, b in _s5_ratios(k, 8 * MIB, 64 * MIB))
    return f"up to +{fmt((r - 1) * 100)}%, {k} {_op(op)} {size(b)}"


@figure("coll.s5.ag1g_32ctas", S5_NT32_DIR + "compare-symmetric.txt")
def _s5_ag1g():
    v = compare_points(S5_NT32_DIR + "compare-symmetric.txt")[("all_gather", GIB)]
    return f"{fmt(v['reference'] * v['symmetric'])} vs {fmt(v['reference'])} GB/s"


# ---- the fourth lease (7ec0c4a): the auto pool per size class ----

def _notes(path, pattern):
    for note in data(path)["notes"]:
        m = re.search(pattern, note)
        if m:
            return m
    raise KeyError(f"no note /{pattern}/ in {path}")


@figure("coll.s4.pool", COLL)
def _s4_pool():
    m = _notes(COLL, r"auto pool .*?worst ([\d.]+) \((\w+) (\d+ \w+)\) from 64 KiB, ([\d.]+) \((\w+) (\d+ \w+)\) below")
    sp = _notes(COLL, r"median over rows ([\d.]+)% \(max [\d.]+%\) below 64 KiB, ([\d.]+)% \(max [\d.]+%\) from 64 KiB")
    n, unit = m.group(3).split()
    b = int(n) * {"KiB": KIB, "MiB": MIB, "GiB": GIB}[unit]
    at = max(r["spread_pct"] for r in rows(data(COLL), m.group(2)) if r.get("bytes") == b)
    return (f"worst {m.group(1)} ({_op(m.group(2))} {m.group(3)}, whose rounds spread by {fmt(at)}%) from 64 KiB, "
            f"{m.group(4)} ({_op(m.group(5))} {m.group(6)}) below, where the rounds spread by {fmt(float(sp.group(1)))}% "
            f"(median over rows; {fmt(float(sp.group(2)), 1)}% from 64 KiB)")


# ---- `ncclpool tune`'s tables (df7cf49, 15fd538) ----

def tune_tables(path):
    """{(op, 'time' | 'step'): {bytes: {column: (median, min, max)}}} of a tune.txt."""
    out, cur, cols = {}, None, None
    for line in text(path).splitlines():
        m = re.match(r"(\w+) \(\d+ ranks\)(.*)", line)
        if m:
            cur = out.setdefault((m.group(1), "step" if "compute beside" in m.group(2) else "time"), {})
            continue
        if cur is not None and line.strip().startswith("size"):
            cols = re.findall(r"symmetric \w+|\w+", line.strip())[1:]
            continue
        m = re.match(r"\s+(\d+) (KiB|MiB|GiB) (.*)", line)
        if cur is not None and m:
            b = int(m.group(1)) * {"KiB": KIB, "MiB": MIB, "GiB": GIB}[m.group(2)]
            vals = [tuple(float(x) for x in v) for v in re.findall(r"([\d.]+) \[([\d.]+)-([\d.]+)\]", m.group(3))]
            cur[b] = dict(zip(cols, vals))
            kind = m.group(3).split()[-1]
            if not kind[0].isdigit():
                cur[b]["kind"] = kind
    return out


def _tune_kinds(path):
    t = tune_tables(path)
    kinds = {v["kind"] for op in OPS for v in t[(op, "time")].values()}
    sizes = sorted(t[(OPS[0], "time")])
    if len(kinds) != 1:
        raise ValueError(f"tune chose {kinds}, not one kind")
    return f"{kinds.pop()} for every op from {size(sizes[0])} to {size(sizes[-1])}"


@figure("coll.df7.tune", DF7_TUNE)
def _df7_tune():
    m = re.search(r"symmetric CTAs: (\w+) \(alone, geometric mean of symmetric times relative to it: nccl ([\d.]+), "
                  r"16 ([\d.]+), 32 1; over (\d+) of (\d+) points, those whose runs spread <= 5% for every setting; "
                  r"with compute beside, step time relative to \w+: nccl ([\d.]+), 16 ([\d.]+), 32 1; over (\d+) of (\d+) points",
                  text(DF7_TUNE))
    noise = re.search(r"below 256 KiB ([\d.]+)%, from 256 KiB ([\d.]+)%", text(DF7_TUNE))
    return (f"**{m.group(1)} CTAs**, alone (geometric mean of symmetric times relative to {m.group(1)} over the "
            f"{m.group(4)} of {m.group(5)} points whose runs spread <= 5% for every setting: NCCL's count {m.group(2)}, "
            f"16 {m.group(3)}) and with compute beside (step time relative to {m.group(1)} over {m.group(8)} of "
            f"{m.group(9)} such points: NCCL's {m.group(6)}, 16 {m.group(7)}); {_tune_kinds(DF7_TUNE)}; noise of the "
            f"chosen kind {noise.group(1)}% below 256 KiB, {noise.group(2)}% from")


@figure("coll.df7.tune_steps", DF7_TUNE)
def _df7_tune_steps():
    t = tune_tables(DF7_TUNE)
    s32 = [t[(op, "step")][b]["symmetric 32"][0] for op in OPS for b in t[(op, "step")] if b >= 64 * MIB]
    worst = max((t[(op, "step")][b]["symmetric nccl"][0], op, b) for op in OPS for b in t[(op, "step")])
    return (f"{span(s32, 2)}x of compute alone from 64 MiB with 32 CTAs (collective-bound there), and most with "
            f"NCCL's count (up to {fmt(worst[0], 2)}x, {_op(worst[1])} {size(worst[2])}, against "
            f"{fmt(t[(worst[1], 'step')][worst[2]]['symmetric 32'][0], 2)}x with 32)")


@figure("coll.15f.tune_gmean", TUNE15)
def _t15_gmean():
    m = re.search(r"symmetric CTAs: (\w+) \(geometric mean of symmetric times relative to it: nccl ([\d.]+), "
                  r"16 ([\d.]+), 32 ([\d.]+)\)", text(TUNE15))
    return f"16 -> {fmt(float(m.group(3)), 3).rstrip('0').rstrip('.')}, 32 -> {fmt(float(m.group(4)), 3)}, NCCL's -> {fmt(float(m.group(2)), 3)}"


@figure("coll.15f.tune_kinds", TUNE15)
def _t15_kinds():
    return _tune_kinds(TUNE15)


@figure("coll.15f.tune_rs1g", TUNE15)
def _t15_rs1g():
    t = tune_tables(TUNE15)
    slower = [(op, b) for op in OPS for b, v in t[(op, "time")].items()
              if b >= 4 * MIB and v["symmetric 32"][0] >= v["symmetric 16"][0]]
    if slower:
        raise ValueError(f"32 CTAs not faster than 16 at {slower}")
    v = t[("reduce_scatter", "time")][GIB]
    return f"1 GiB reduce-scatter {fmt(v['symmetric 32'][0])} us vs {fmt(v['symmetric 16'][0])} with 16"


@figure("coll.15f.tune_noise", TUNE15)
def _t15_noise():
    t = tune_tables(TUNE15)
    chosen = "symmetric " + re.search(r"symmetric CTAs: (\w+)", text(TUNE15)).group(1)
    worst = max((v[chosen][2] - v[chosen][1]) / v[chosen][0] for op in OPS for v in t[(op, "time")].values())
    noise = re.search(r"below 256 KiB ([\d.]+)%", text(TUNE15)).group(1)
    return f"{noise}% run-to-run noise in this run (median over sizes; up to {fmt(worst * 100)}% at one point)"


# ---- 15fd538's graph replays and 1118caa's nccl-tests: bounds read off the tables ----

@figure("coll.15f.graph_second_pct", G15)
def _g15_second():
    best = sorted((p["pool_vs_best"] for p in _points(G15, 0, 2 * GIB).values()), reverse=True)
    return fmt((best[1] - 1) * 100, 1) + "%"


@figure("coll.nt.big_but_1g_pct", *(NT + f"compare-{k}.txt" for k in KINDS))
def _nt_big_but_1g():
    dev = [abs(v[k] - 1) for k in KINDS for (op, b), v in compare_points(NT + f"compare-{k}.txt").items()
           if b >= 64 * MIB and not (b == GIB and k != "symmetric")]
    return fmt(max(dev) * 100, 1) + "%"


def _nt_gbs(k, op, b):
    return compare_points(NT + f"compare-{k}.txt")[(op, b)]["reference"]


@figure("coll.nt.sym_8m", *(NT + f"compare-{k}.txt" for k in KINDS))
def _nt_sym_8m():
    for op in OPS:  # symmetric wins every op at 8 MiB
        if _nt_gbs("symmetric", op, 8 * MIB) <= max(_nt_gbs(k, op, 8 * MIB) for k in ("none", "local")):
            raise ValueError(f"symmetric does not win {op} at 8 MiB")
    return f"{fmt(_nt_gbs('symmetric', 'all_gather', 8 * MIB), 1)} vs {fmt(_nt_gbs('none', 'all_gather', 8 * MIB), 1)} GB/s"


@figure("coll.nt.sym_1g", *(NT + f"compare-{k}.txt" for k in KINDS))
def _nt_sym_1g():
    g = {k: {op: _nt_gbs(k, op, GIB) for op in OPS} for k in KINDS}
    return (f"all-gather 1 GiB {fmt(g['symmetric']['all_gather'])} vs {fmt(g['none']['all_gather'])} none and "
            f"{fmt(g['local']['all_gather'])} local; reduce-scatter {fmt(g['symmetric']['reduce_scatter'])} vs "
            f"{fmt(g['none']['reduce_scatter'])}")


# ---- Targets: the fourth lease's `--auto` (7ec0c4a) ----

def _auto_points(path):
    pts = {}
    for op in OPS:
        for r in rows(data(path), op):
            if "bytes" in r:
                p = pts.setdefault((op, r["bytes"]), {"auto_vs_best": r["auto_vs_best"], "spread": 0.0, "us": []})
                p["spread"] = max(p["spread"], r["spread_pct"])
                p["us"].append(r["auto_us"])
    return pts


@figure("coll.s4.auto_big", COLL)
def _s4_auto_big():
    pts = {k: p for k, p in _auto_points(COLL).items() if k[1] >= 2 * MIB}
    w = max(pts, key=lambda k: pts[k]["auto_vs_best"])
    return (f"{fmt((pts[w]['auto_vs_best'] - 1) * 100, 1)}% of the best kind at all {len(pts)} size classes from 2 MiB up "
            f"(worst {_op(w[0])} {size(w[1])}, whose rounds spread by {fmt(pts[w]['spread'])}%)")


@figure("coll.s4.auto_small", COLL)
def _s4_auto_small():
    pts = {k: p for k, p in _auto_points(COLL).items() if k[1] < 2 * MIB}
    w = max(pts, key=lambda k: pts[k]["auto_vs_best"])
    us = [u for p in pts.values() for u in p["us"]]
    sp = statistics.median(p["spread"] for p in pts.values())
    return (f"({span(us)} us operations) its worst is {fmt(pts[w]['auto_vs_best'], 3)} ({_op(w[0])} {size(w[1])}), "
            f"where the rounds of one kind spread by a median {fmt(sp)}%")


@figure("coll.s4.auto_avg", COLL)
def _s4_auto_avg():
    summ = rows(data(COLL), "summary")
    short = []
    for op in OPS:
        avg = {r["kind"]: r["avg_busbw"] for r in summ if r["op"] == op}
        short.append(1 - avg["auto"] / max(avg[k] for k in KINDS))
    return f"within {fmt(max(short) * 100, 1)}%"


@figure("coll.s4.ref_1m", COLL.rsplit("/", 1)[0] + "/coll-compare.txt")
def _s4_ref_1m():
    v = compare_points(COLL.rsplit("/", 1)[0] + "/coll-compare.txt")[("all_gather", MIB)]
    return f"{fmt(v['reference'])} GB/s vs {fmt(v['reference'] * v['none'])}"



# ---- quoted from decode.md: the decode bench at the CTA run's commit (237829c), CUDA graphs ----

@figure("coll.decode_small", "2026-11-23-decode-2xh200-237829c.json")
def _decode_small():
    from .decode import C237, ratio, sizes
    return span([ratio(C237, "symmetric", sz) for sz in sizes(C237) if sz <= 64 * KIB], 2) + "x"

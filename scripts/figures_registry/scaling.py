"""Figures of docs/scaling.md: gpu-check's `asnodes` section on 2x H200 (two GPUs of one host as two
nodes over NET/Socket), its first run (deb58c4) and the re-run with both fixes (e370088)."""

import re

from . import Run, figure, fmt, span, table, text

FIRST = "2026-11-27-gpu-check-2xh200-deb58c4/call2-pdl-probe-nccl-asnodes/"
AGAIN = "2026-11-27-gpu-check-2xh200-e370088-s2/call3-sglang-asnodes/gc-a/"
BENCH = AGAIN + "asnodes-bench.txt"
OPS = [("all_gather", "all-gather"), ("reduce_scatter", "reduce-scatter"), ("all_reduce", "all-reduce")]


def _size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def teardown_s(path):
    """destroy_process_group's time on each rank of a check log (one value when they agree)."""
    t = sorted({float(x) for x in re.findall(r"destroy_process_group finished after ([\d.]+) s", text(path))})
    if not t:
        raise KeyError("no teardown time in " + path)
    return span(t, 1) + " s"


figure("scaling.first.teardown_check", FIRST + "asnodes-check.log")(lambda: teardown_s(FIRST + "asnodes-check.log"))
figure("scaling.first.teardown_win_off", FIRST + "asnodes-win-off.log")(lambda: teardown_s(FIRST + "asnodes-win-off.log"))
figure("scaling.again.teardown", AGAIN + "asnodes-check.log")(lambda: teardown_s(AGAIN + "asnodes-check.log"))


def bench():
    """{(op, bytes): (none us, auto us)} of the bench over the network."""
    out = {}
    for m in re.finditer(r"^(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$", text(BENCH), re.M):
        out[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)))
    if not out:
        raise KeyError("no bench rows in " + BENCH)
    return out


@figure("scaling.again.table", BENCH)
def _table():
    b = bench()
    sizes = sorted({s for _, s in b})
    body = [[name] + [f"{fmt(b[(op, s)][0], 1)} / {fmt(b[(op, s)][1], 1)}" for s in sizes] for op, name in OPS]
    return table(["op"] + [f"{_size(s)} none / auto" for s in sizes], body, [Run(BENCH)])


@figure("scaling.again.pools", BENCH)
def _pools():
    m = re.search(r"pools: auto/none busbw at >= 1 MiB: median ([\d.]+), lowest ([\d.]+) \((\w+) (\d+ \w+)\), (\d+) points",
                  text(BENCH))
    return f"**median {m.group(1)}, lowest {m.group(2)}** ({m.group(3).replace('_', '-')} {m.group(4)}), {m.group(5)} points"


@figure("scaling.again.at_256k", BENCH)
def _at_256k():
    b = bench()
    return span([b[(op, 256 << 10)][0] / b[(op, 256 << 10)][1] for op, _ in OPS], 2)


@figure("scaling.again.outliers", BENCH)
def _outliers():
    """The points where auto's time is more than 4% off none's, and how close the rest are."""
    b = bench()
    far = sorted(((op, s) for (op, s), (n, a) in b.items() if abs(a / n - 1) > 0.04), key=lambda k: k[1])
    near = [abs(a / n - 1) for k, (n, a) in b.items() if k not in far]
    names = dict(OPS)
    points = "; ".join(f"{names[op]} {_size(s)}, {fmt(b[(op, s)][1], 1)} against {fmt(b[(op, s)][0], 1)} us"
                       for op, s in far)
    return (f"{len(far)} points are more than 4% off none ({points}); the other {len(near)} are within "
            f"{fmt(max(near) * 100, 1)}%")

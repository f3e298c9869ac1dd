"""Figures of docs/benchmarks/core.md: the pool's hot path, `ncclpool_bench_pool` (Google Benchmark JSON) on the
simulator and on an H200, and gpu-check's summary of it."""

import re
import statistics

from . import Run, data, figure, fmt, span, table, text
from .alloc import Pair

KIB, MIB = 1 << 10, 1 << 20


def medians(path):
    """{run name: median real time} of a Google Benchmark JSON file run with repetitions (ns or the file's unit)."""
    return {b["run_name"]: b["real_time"] for b in data(path)["benchmarks"] if b.get("aggregate_name") == "median"}


def size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


# The simulator on the build machine, f78a87b (an event at every free) against 8a35932, three runs each.
SIM = "2026-11-23-bench-pool-sim-f78a87b-vs-8a35932/"
SIM_FILES = [SIM + f"simcmp-{side}-{i}.json" for side in ("old", "new") for i in (1, 2, 3)]


def _sim(side):
    out = {}
    for i in (1, 2, 3):
        for k, v in medians(SIM + f"simcmp-{side}-{i}.json").items():
            out.setdefault(k, []).append(v)
    return out


def _mr(v):
    """'median ns (min-max)' of the runs' medians."""
    return f"{fmt(statistics.median(v), 1)} ns ({fmt(min(v), 1)}-{fmt(max(v), 1)})"


@figure("core.sim.table", *SIM_FILES)
def _sim_table():
    old, new = _sim("old"), _sim("new")
    body = [[f"alloc+free, same stream, {size(b)}"] + [_mr(d[f"BM_AllocFreeSameStream/{b}"]) for d in (old, new)]
            for b in (4 * KIB, MIB)]
    body.append(["alloc+free 4 KiB with 10,000 live blocks"] + [_mr(d["BM_AllocFreeWithLiveBlocks/20000"]) for d in (old, new)])
    body.append(["1 thread / 2 threads on one pool, per pair"] + [" / ".join(
        fmt(statistics.median(d[f"BM_AllocFreeThreads/threads:{t}"]), 1 if t == 1 else 0) for t in (1, 2)) + " ns"
        for d in (old, new)])
    body.append(["cross-stream reuse"] + [_mr(d["BM_CrossStreamReuse"]) for d in (old, new)])
    return table(["benchmark", "f78a87b", "8a35932"], body, [Pair(SIM, "f78a87b", "8a35932")])


# GPU, deferred publication (8a35932): one H200, vmm and cuda sources, medians of 5.
H200 = {s: f"2026-11-23-bench-pool-h200-8a35932-{s}.json" for s in ("vmm", "cuda")}


def _h(source, name):
    return medians(H200[source])[name]


def _cells(names, unit="ns", scale=1.0, places=1):
    return [" / ".join(fmt(_h(s, n) / scale, places) for n in names) + f" {unit}" for s in ("vmm", "cuda")]


@figure("core.h200.table", *H200.values())
def _h200_table():
    same = "BM_AllocFreeSameStream/"
    body = [
        ["alloc+free, same stream, 1 KiB / 4 KiB / 64 KiB"] + _cells([same + str(b) for b in (KIB, 4 * KIB, 64 * KIB)]),
        ["alloc+free, same stream, 1 MiB / 16 MiB"] + _cells([same + str(b) for b in (MIB, 16 * MIB)]),
        ["alloc+free 4 KiB with 0 / 100 / 1,000 / 10,000 live blocks"] + _cells(
            [f"BM_AllocFreeWithLiveBlocks/{n}" for n in (0, 200, 2000, 20000)]),
        ["cross-stream hand-over (free, publish, allocate elsewhere behind cuStreamWaitEvent)"] + _cells(
            ["BM_CrossStreamReuse"], places=0),
        ["grow + trim, 2 MiB / 64 MiB segment"] + _cells(
            [f"BM_GrowAndTrim/{b}" for b in (2 * MIB, 64 * MIB)], "us", 1000, 0),
        ["1 thread / 2 threads on one pool, per pair"] + [
            f"{fmt(_h(s, 'BM_AllocFreeThreads/threads:1'), 1)} / {fmt(_h(s, 'BM_AllocFreeThreads/threads:2'))} ns"
            for s in ("vmm", "cuda")],
    ]
    return table(["benchmark", "vmm (cuMem)", "cuda (cuMemAlloc)"], body, [Run(H200["vmm"]), Run(H200["cuda"])])


def _h200_cached():
    """(value, source, benchmark) of every same-stream pair, live blocks or not, both sources."""
    return [(v, s, k) for s in ("vmm", "cuda") for k, v in medians(H200[s]).items()
            if k.startswith(("BM_AllocFreeSameStream/", "BM_AllocFreeWithLiveBlocks/"))]


@figure("core.h200.same_ns", *H200.values())
def _h200_same():
    vals = sorted(_h200_cached())
    top, rest = vals[-1], [v for v, _, _ in vals[:-1]]
    if top[0] < 1.2 * max(rest):  # no lone outlier: one range
        return span([v for v, _, _ in vals]) + " ns"
    b = int(top[2].split("/")[1])
    return f"{span(rest)} ns (and {fmt(top[0])} ns for {top[1]}'s {size(b)} pair)"


figure("core.h200.handover_vmm", H200["vmm"])(lambda: fmt(_h("vmm", "BM_CrossStreamReuse")) + " ns")
figure("core.h200.same4k", *H200.values())(lambda: span(
    [_h(s, f"BM_AllocFreeSameStream/{4 * KIB}") for s in ("vmm", "cuda")], 1) + " ns")
figure("core.h200.handover", *H200.values())(lambda: span(
    [_h(s, "BM_CrossStreamReuse") for s in ("vmm", "cuda")]) + " ns")


# GPU, 2026-11-27 re-check (7ec0c4a): gpu-check's summary rows (the JSON stayed on the host).
S4 = "2026-11-27-gpu-check-2xh200-s4/call1-cuda-nccl-bench-wheel-tool-demo-examples/stdout.txt"


def _s4(name):
    """{source: median ns} of one benchmark's summary rows."""
    out = {}
    for m in re.finditer(r"^bench (\w+) (\S+) \(median\)\s+([\d.]+) ns", text(S4), re.M):
        if m.group(2) == name:
            out[m.group(1)] = float(m.group(3))
    if not out:
        raise KeyError(f"no summary row of {name} in {S4}")
    return out


def _s4_row(name, places):
    v = _s4(name)
    return " / ".join(fmt(v[s], places if v[s] < 100 else 0) for s in ("sim", "cuda", "vmm")) + " ns"


figure("core.s4.same4k", S4)(lambda: ", ".join(
    f"{s} {fmt(_s4('BM_AllocFreeSameStream/4096')[s], 1)}" for s in ("sim", "cuda", "vmm")) + " ns")
figure("core.s4.live", S4)(lambda: _s4_row("BM_AllocFreeWithLiveBlocks/20000", 1))
figure("core.s4.handover", S4)(lambda: _s4_row("BM_CrossStreamReuse", 1))

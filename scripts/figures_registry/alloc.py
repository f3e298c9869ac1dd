"""Figures of docs/benchmarks/alloc.md: `ncclpool bench alloc` on an H200."""

from . import Run, data, figure, fmt, row, rows, span, table

ALLOC = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-alloc.json"


def _rows(pattern):
    return [r for r in rows(data(ALLOC)) if r["pattern"] == pattern]


@figure("alloc.run", ALLOC)
def _run():
    return f"H200, {Run(ALLOC).commit}, {Run(ALLOC).date}"


@figure("alloc.ncclpool_ns", ALLOC)
def _ncclpool_ns():
    """allocate + free, same stream, every size."""
    return span([r["ncclpool"] for r in _rows("same stream")]) + " ns"


@figure("alloc.driver_pool_ns", ALLOC)
def _driver_pool_ns():
    return span([r["cuMemAllocAsync pool"] for r in _rows("same stream")]) + " ns"


@figure("alloc.speedup_same", ALLOC)
def _speedup_same():
    return span([r["speedup"] for r in _rows("same stream")]) + "x"


@figure("alloc.speedup_cross", ALLOC)
def _speedup_cross():
    return span([r["speedup"] for r in _rows("cross stream")]) + "x"


@figure("alloc.table", ALLOC)
def _table():
    body = []
    for r in rows(data(ALLOC)):
        body.append([f"{r['bytes'] >> 10:,} KiB", r["pattern"], fmt(r["ncclpool"]), fmt(r["cuMemAllocAsync pool"]),
                     fmt(r["cuMemAlloc"]), fmt(r["speedup"], 1) + "x"])
    return table(["size", "pattern", "ncclpool ns", "cuMemAllocAsync pool ns", "cuMemAlloc ns",
                  "speed-up vs the driver pool"], body, [Run(ALLOC)])

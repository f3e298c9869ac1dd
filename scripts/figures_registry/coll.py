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

"""Figures of docs/benchmarks/scope.md: `ncclpool bench scope` on 2x H200 (rank 0)."""

from . import Run, data, figure, fmt, row, rows, span, table

SCOPE = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-scope.json"


def _r(segments, groups, strategy="ncclpool"):
    return row(rows(data(SCOPE)), segments=segments, groups=groups, strategy=strategy)


@figure("scope.run", SCOPE)
def _run():
    return Run(SCOPE).label()


@figure("scope.host_us_g1", SCOPE)
def _g1():
    return fmt(_r(64, 1)["host_per_use_us"], 2) + " us"


@figure("scope.host_us_g2", SCOPE)
def _g2():
    return fmt(_r(64, 2)["host_per_use_us"], 2) + " us"


@figure("scope.megatron_ms", SCOPE)
def _megatron():
    """The Megatron pattern (re-register the pool at every use), S = 64, every group count."""
    return span([_r(64, g, "megatron")["per_use_us"] / 1000 for g in (1, 2, 4)]) + " ms"


@figure("scope.table", SCOPE)
def _table():
    body = []
    for s in (1, 8, 64):
        for g in (1, 2, 4):
            n, m, p = _r(s, g), _r(s, g, "megatron"), _r(s, g, "per-group")
            body.append([s, g, fmt(n["host_per_use_us"], 2), fmt(n["commit_host_us"], 1), n["agreements_per_use"],
                         fmt(m["per_use_us"] / 1000, 1), fmt(p["host_per_use_us"], 2), fmt(n["setup_ms"], 1)])
    return table(["S", "G", "ncclpool host us/use", "commit host us", "agreements per use",
                  "Megatron pattern ms/use", "per-group host us/use", "ncclpool setup ms"], body, [Run(SCOPE)])

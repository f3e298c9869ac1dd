"""Figures of docs/registry.md: what an agreement costs (bench scope, the agreement-launch bench; before the schedule: scope.md's
scope.agree.per_group_us) and
what windows cost (the torch benchmark's first registration), all on 2x H200; the dead-rank test's
time in the NCCL suites.

The cost of one window here is torch.md's (`torch.window_ms`), computed again from the same BENCH lines
(a figure returns text; the windows' totals below need the number).
"""

import re
import statistics

from . import Run, data, figure, fmt, jsonl, rows, span, text

LAUNCH = "2026-11-23-agreement-launch-2xh200-e8d14d7.txt"
SCHEDULED = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-scope.json"
LAYOUT = "2026-11-22-scope-2xh200-a3fd605-check-layout.json"
SAME_SESSION = [f"2026-11-22-scope-2xh200-a3fd605-run{i}.json" for i in (1, 2, 3)]
TORCH = "2026-11-27-gpu-check-2xh200-s5/call2-nccltests-torch/torch.log"
DEAD_RANK_LOGS = ["2026-11-27-gpu-check-2xh200-e370088-s2/call4-ncclversions-2.30.7/gc-v/nccl-tests-2.30.7-1.log",
                  "2026-11-27-gpu-check-2xh200-e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/nccl-tests-2.29.7-1.log"]
DEAD_RANK = "NcclRegistry.ADeadRankIsATimeoutThenForgetAndAbortDoNotHang"


def _launch_us(variant):
    """Host us per launch (median over the rounds) of one variant of the agreement-launch bench."""
    for line in text(LAUNCH).splitlines():
        m = re.match(r"(.+?)\s{2,}([\d.]+) \[", line)
        if m and m.group(1).strip() == variant:
            return float(m.group(2))
    raise KeyError(f"no variant {variant!r} in {LAUNCH}")


@figure("registry.agreement_eager_us", LAUNCH)
def _eager():
    return f"{fmt(_launch_us('eager, 1 comm'), 1)} us ({Run(LAUNCH).label()})"


@figure("registry.agreement_graph_us", LAUNCH)
def _graph():
    return fmt(_launch_us("graph, 1 comm"), 1) + " us"


def _ncclpool_rows(path, segments=64):
    return [r for r in rows(data(path)) if r["strategy"] == "ncclpool" and r["segments"] == segments]


@figure("registry.agreement_scheduled_us", SCHEDULED)
def _scheduled():
    """Host us per use and group with the schedule (one agreement in 16 uses), every S and G of the run."""
    vals = [r["host_per_use_us"] / r["groups"] for r in rows(data(SCHEDULED)) if r["strategy"] == "ncclpool"]
    return f"{span(vals, 2)} us per group ({Run(SCHEDULED).label()}; 1-64 segments, 1-4 groups)"


@figure("registry.layout_cost_us", LAYOUT, *SAME_SESSION)
def _layout():
    """Per use and group (back to back): check mode layout against the same session's runs without it."""
    layout = [r["per_use_us"] / r["groups"] for r in _ncclpool_rows(LAYOUT)]
    plain = [r["per_use_us"] / r["groups"] for p in SAME_SESSION for r in _ncclpool_rows(p)]
    return f"{span(layout)} us per group instead of {span(plain)} us ({Run(LAYOUT).label()})"


def window_ms():
    """One window on 2 ranks, as torch.md's torch.window_ms: the default's first registration (64 windows
    per group, 2 groups) less plain allocation of the same tensors, per window; medians over the rounds."""
    def first(which):
        return statistics.median(b["value"] for b in jsonl(TORCH, "BENCH ")
                                 if b["name"] == "first registration, " + which)
    return (first("ncclpool default") - first("plain MemPool")) / (64 * 2)


@figure("registry.windows_64g_2mib", TORCH)
def _windows_2mib():
    """64 GiB in 2 MiB segments: 32,768 windows per group at the measured cost of a window."""
    return "~" + fmt(32768 * window_ms() / 60000, 1) + " min"


@figure("registry.windows_64g_128mib", TORCH)
def _windows_128mib():
    return "~" + fmt(128 * window_ms() / 1000, 2) + " s"


def _test_ms(path, name):
    m = re.search(r"\[\s+OK \] " + re.escape(name) + r" \((\d+) ms\)", text(path))
    if not m:
        raise KeyError(f"{name} did not pass in {path}")
    return int(m.group(1))


@figure("registry.dead_rank_extra_s", *DEAD_RANK_LOGS)
def _dead_rank():
    """How much longer the dead-rank test ran than the median NcclRegistry test of the same log."""
    extra = []
    for path in DEAD_RANK_LOGS:
        others = [int(ms) for name, ms in re.findall(r"\[\s+OK \] (NcclRegistry\.\w+) \((\d+) ms\)", text(path))
                  if name != DEAD_RANK]
        extra.append((_test_ms(path, DEAD_RANK) - statistics.median(others)) / 1000)
    return span(extra, 1) + " s"

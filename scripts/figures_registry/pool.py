"""Figures of docs/pool.md: the cost of an event, the stream hand-over bench, and figures quoted from
the benchmark pages (their own registry figures where they exist)."""

import re

from . import Run, data, figure, fmt, rows, span, text

LAUNCH = "2026-11-23-agreement-launch-2xh200-e8d14d7.txt"
HANDOFF = "2026-11-23-stream-handoff-h200-8a35932.txt"
ALLOC = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-alloc.json"


def launch_piece(name):
    """(host us, [min, max]) of a 'piece:' row of the agreement-launch bench."""
    m = re.search(r"piece: " + re.escape(name) + r"\s+([\d.]+) \[\s*([\d.]+)-\s*([\d.]+)\]", text(LAUNCH))
    if not m:
        raise KeyError(f"no piece {name!r} in {LAUNCH}")
    return float(m.group(1)), [float(m.group(2)), float(m.group(3))]


def _same_stream_ns():
    return [r["ncclpool"] for r in rows(data(ALLOC)) if r["pattern"] == "same stream"]


@figure("pool.event_ns", LAUNCH)
def _event_ns():
    us, _ = launch_piece("cuEventRecord")
    return f"{fmt(us * 1000)} ns ({Run(LAUNCH).label()})"


@figure("pool.event_vs_alloc", LAUNCH, ALLOC)
def _event_vs_alloc():
    us, _ = launch_piece("cuEventRecord")
    return span([us * 1000 / ns for ns in _same_stream_ns()], 1) + "x"


def handoff(label):
    """(median, min, max) us of a row of the stream hand-over bench."""
    m = re.search(re.escape(label) + r".*?\s([\d.]+)\s+\(([\d.]+)-([\d.]+)\)", text(HANDOFF))
    if not m:
        raise KeyError(f"no row {label!r} in {HANDOFF}")
    return [float(x) for x in m.groups()]


def _handoff_fig(label, with_range=True):
    med, lo, hi = handoff(label)
    return f"{fmt(med, 1)} us" + (f" ({fmt(lo, 1)}-{fmt(hi, 1)})" if with_range else "")


figure("pool.handoff.eager", HANDOFF)(lambda: _handoff_fig("eager (published at the free)"))
figure("pool.handoff.deferred", HANDOFF)(lambda: _handoff_fig("deferred (published after W)"))
figure("pool.handoff.idle", HANDOFF)(lambda: _handoff_fig("no work queued after the free", False))


# ---- "Growth, reserve, trim, OOM": why, in figures (memory.md's and fsdp2.md's runs) ----

@figure("pool.fsdp2_chunks_pct", "2026-11-23-fsdp2-2xh200-c9c2fc7-dim4096.json", "2026-11-23-fsdp2-2xh200-c9c2fc7-dim8192.json")
def _fsdp2_chunks():
    """FSDP2's device memory over plain with whole 1 GiB chunks (the library of 82d6a66), both model sizes."""
    from .fsdp2 import C9_4096, C9_8192, OLD_82D, pct, rel
    return " and ".join(pct(rel(p, OLD_82D, "device_used_gib")) for p in (C9_4096, C9_8192))


@figure("pool.tensors_scaled", "2026-11-24-replay-4913f08/")
def _tensors_scaled():
    """Peak reserved / live of tensors in one pool (the segment budget, 4913f08) over the seven scales,
    per trace; each below what PyTorch's own allocator needed on the recorded trace (x1)."""
    from .memory import SCALES, budget, ratio, recorded
    r = {k: [ratio(budget(k, x)) for x in SCALES] for k in ("decode", "fsdp2", "fsdp_ep", "megatron_fsdp")}
    for k in r:
        if ratio(budget(k)) >= recorded(budget(k))[1]:
            raise ValueError(f"{k}: the pool needs more than PyTorch's allocator at x1")
    return (f"{span(r['decode'], 3)} (decode), {span(r['megatron_fsdp'], 3)} (Megatron-FSDP) and "
            f"{span(r['fsdp2'] + r['fsdp_ep'], 3)} (FSDP2, FSDP+EP)")


@figure("pool.run_decode_ctas", "2026-11-23-decode-ctas-2xh200-9ed78e4.json")
def _run_decode_ctas():
    return Run("2026-11-23-decode-ctas-2xh200-9ed78e4.json").label()

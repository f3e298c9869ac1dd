"""Figures of docs/benchmarks/decode.md and fsdp2.md: gpu-check's torch section at df7cf49 (2x H200)."""

import statistics
from collections import defaultdict

from . import Run, data, figure, fmt, span

RUN = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/"
DECODE, FSDP2 = RUN + "decode.json", RUN + "fsdp2.json"


def _fsdp2(spec, key):
    return statistics.mean(r[key] for r in data(FSDP2) if r["spec"] == spec)


@figure("fsdp2.auto_faster_pct", FSDP2)
def _auto_faster():
    """How much shorter the auto pool's steady step is than plain FSDP2's (mean over the rounds)."""
    plain = _fsdp2("plain", "steady_step_ms")
    return fmt((plain - _fsdp2("ncclpool-auto", "steady_step_ms")) / plain * 100, 1) + "%"


@figure("fsdp2.auto_memory_pct", FSDP2)
def _auto_memory():
    """Device memory of the auto pool's run over plain FSDP2's."""
    plain = _fsdp2("plain", "device_used_gib")
    return "+" + fmt((_fsdp2("ncclpool-auto", "device_used_gib") - plain) / plain * 100, 1) + "%"

"""Writes a PyTorch memory snapshot as a trace for `ncclpool replay` (used by
scripts/record-torch-trace.py and bench/megatron_fsdp_bench.py)."""
from __future__ import annotations

import json


def start_recording(max_entries: int = 200000) -> None:
    """Turns on torch's allocation history (no stack frames: traces stay small)."""
    import torch

    torch.cuda.memory._record_memory_history(max_entries=max_entries, context=None, stacks="python")


def write_trace(path: str, recorded_by: str) -> int:
    """Writes this process's snapshot (device traces only, frames dropped) to `path`, stops the
    recording, and returns the number of events written."""
    import torch

    snapshot = torch.cuda.memory._snapshot()
    for trace in snapshot.get("device_traces", []):
        for event in trace:
            event.pop("frames", None)
    with open(path, "w") as f:
        json.dump({"device_traces": snapshot["device_traces"], "segments": [], "recorded_by": recorded_by}, f, default=str)
    torch.cuda.memory._record_memory_history(enabled=None)
    return sum(len(t) for t in snapshot["device_traces"])

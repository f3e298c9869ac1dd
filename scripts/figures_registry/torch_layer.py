"""Figures of docs/benchmarks/torch.md: bench/torch_bench.py's BENCH lines on 2x H200."""

import statistics

from . import Run, figure, fmt, jsonl, table

TORCH = "2026-11-27-gpu-check-2xh200-s5/call2-nccltests-torch/torch.log"
SEGMENTS, GROUPS = 64, 2  # the first-registration benchmark: 64 x 32 MiB, 2 symmetric groups


def _values(name):
    found = [b["value"] for b in jsonl(TORCH, "BENCH ") if b["name"] == name]
    if not found:
        raise KeyError(f"no BENCH line {name!r} in {TORCH}")
    return found


def _median(name):
    return statistics.median(_values(name))


def _first(which):
    return _median("first registration, " + which)


@figure("torch.run", TORCH)
def _run():
    return Run(TORCH).label()


@figure("torch.first_default_ms", TORCH)
def _first_default():
    return fmt(_first("ncclpool default"), 1) + " ms"


@figure("torch.first_torch_ms", TORCH)
def _first_torch():
    return fmt(_first("torch register_mem_pool"), 1) + " ms"


@figure("torch.first_min_segment_ms", TORCH)
def _first_min_segment():
    return fmt(_first("ncclpool min_segment 1 GiB"), 1) + " ms"


@figure("torch.min_segment_vs_torch", TORCH)
def _min_segment_vs_torch():
    return "1/" + fmt(_first("torch register_mem_pool") / _first("ncclpool min_segment 1 GiB"))


@figure("torch.window_ms", TORCH)
def _window_ms():
    """The cost of one window on 2 ranks: the default's first registration (64 windows per group) less
    plain allocation of the same tensors, per window."""
    return "~" + fmt((_first("ncclpool default") - _first("plain MemPool")) / (SEGMENTS * GROUPS), 1) + " ms"


@figure("torch.use_us", TORCH)
def _use_us():
    return fmt(_median("per use, ncclpool, G=2"), 1) + "-" + fmt(_median("per use, ncclpool, G=3"), 1) + " us"


@figure("torch.control_us", TORCH)
def _control_us():
    return fmt(_median("per use, plain use_mem_pool (control)"), 1) + " us"


@figure("torch.megatron_ms", TORCH)
def _megatron():
    return fmt(_median("per use, Megatron pattern, G=2")) + " ms"


@figure("torch.allgather_us", TORCH)
def _allgather():
    return fmt(_median("all-gather 32 MiB out, ncclpool symmetric pool")) + " us"


@figure("torch.table", TORCH)
def _table():
    def rng(name, places=1):
        v = _values(name)
        return f"{fmt(statistics.median(v), places)} ({fmt(min(v), places)}-{fmt(max(v), places)})"
    body = [
        ["first registration, 64 x 32 MiB, 2 groups: ncclpool default (3 rounds)", rng("first registration, ncclpool default") + " ms"],
        ["ncclpool `min_segment` 1 GiB", rng("first registration, ncclpool min_segment 1 GiB") + " ms"],
        ["torch `register_mem_pool` (allocation + registration)", rng("first registration, torch register_mem_pool") + " ms"],
        ["plain `MemPool`", rng("first registration, plain MemPool") + " ms"],
        ["one use, plain `torch.cuda.use_mem_pool` (control)", fmt(_median("per use, plain use_mem_pool (control)"), 1) + " us"],
        ["one use, ncclpool, G = 2 / G = 3, back to back",
         f"{fmt(_median('per use, ncclpool, G=2'), 1)} / {fmt(_median('per use, ncclpool, G=3'), 1)} us"],
        ["one use, host cost in bursts of 4, G = 2 / G = 3",
         f"{fmt(_median('per use (host), ncclpool, G=2'), 1)} / {fmt(_median('per use (host), ncclpool, G=3'), 1)} us"],
        ["Megatron pattern, G = 2", fmt(_median("per use, Megatron pattern, G=2")) + " ms"],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric",
         " / ".join(fmt(_median("all-gather 32 MiB out, " + k), 1) for k in ("plain memory", "torch symmetric pool", "ncclpool symmetric pool")) + " us"],
    ]
    return table(["figure", "value: median (range of the rounds)"], body, [Run(TORCH)])

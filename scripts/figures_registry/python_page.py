"""Figures of docs/python.md that no benchmark page's module gives in the form python.md quotes them
(the rest it quotes through the benchmark pages' figures: torch.*, decode.*, fsdp2.*, coll.*, growth.*,
megatron.ce.*, scope.*). All on 2x H200.
"""

import re
import statistics
from collections import defaultdict

from . import Run, data, figure, fmt, jsonl, rows, span, text

SCOPE = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-scope.json"
DECODE_C237 = "2026-11-23-decode-2xh200-237829c.json"          # ncclpool's CTA count (32)
DECODE_9ED = "2026-11-23-decode-2xh200-9ed78e4.json"           # NCCL's own count, before 237829c
DECODE_DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/decode.json"
FSDP2_C237 = "2026-11-23-fsdp2-2xh200-237829c.json"
FSDP2_GUARD = "2026-11-27-gpu-check-2xh200-e370088-s2/call1-pdl-fsdp2-decode-guard/gpu-check/fsdp2/fsdp2.json"
TORCH_C237 = "2026-11-23-torch-bench-2xh200-237829c-run2.jsonl"
TORCH_9ED = "2026-11-23-torch-bench-2xh200-9ed78e4.jsonl"
COPY_ENGINE = "2026-11-27-gpu-check-2xh200-e370088-s2/call2-cecoll-copyengine-sglang/gpu-check2/copyengine-main.log"
MIB = 1 << 20


@figure("python.join_us", SCOPE)
def _join():
    """An agreement a rank with nothing pending joins: bench scope's explicit commit (nothing pending), per group."""
    per_group = [r["commit_host_us"] / r["groups"] for r in rows(data(SCOPE)) if r["strategy"] == "ncclpool"]
    return f"{span(per_group)} us per group ({Run(SCOPE).label()}, `bench scope`'s commit host us)"


def _decode_us(path):
    us = defaultdict(list)
    for s in data(path)["samples"]:
        us[(s["size"], s["mode"])].append(s["us"])
    return us


def _plain_over(path, mode):
    """plain / mode of the medians over the rounds, per size."""
    us = _decode_us(path)
    sizes = sorted({z for z, _ in us})
    return [statistics.median(us[(z, "plain")]) / statistics.median(us[(z, mode)]) for z in sizes]


@figure("python.decode_c237", DECODE_C237)
def _decode_c237():
    return f"{span(_plain_over(DECODE_C237, 'symmetric'), 2)}x ({Run(DECODE_C237).label()})"


@figure("python.decode_nccl_count", DECODE_9ED)
def _decode_nccl_count():
    return f"{span(_plain_over(DECODE_9ED, 'symmetric'), 2)}x ({Run(DECODE_9ED).commit})"


@figure("python.captured_4m", DECODE_DF7)
def _captured_4m():
    us = _decode_us(DECODE_DF7)
    cap, sym = (statistics.median(us[(4 * MIB, m)]) for m in ("captured", "symmetric"))
    return f"{fmt(cap, 1)} us instead of {fmt(sym, 1)} us with a window ({Run(DECODE_DF7).label()})"


def _steady(path):
    by = defaultdict(list)
    for r in data(path):
        by[r["spec"]].append(r["steady_step_ms"])
    return {k: statistics.median(v) for k, v in by.items()}


@figure("python.guard_fsdp2", FSDP2_GUARD)
def _guard_fsdp2():
    s = _steady(FSDP2_GUARD)
    return (f"{fmt(s['ncclpool-auto+NCCLPOOL_SYMMETRIC_KERNELS=auto'], 1)} ms against {fmt(s['ncclpool-auto'], 1)} ms "
            f"with `on` and {fmt(s['plain'], 1)} ms plain")


@figure("python.c237_fsdp2", FSDP2_C237)
def _c237_fsdp2():
    s = _steady(FSDP2_C237)
    return (f"{fmt(s['ncclpool-symmetric'], 2)} ms with 32 CTAs against "
            f"{fmt(s['ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl'], 2)} with NCCL's count and {fmt(s['plain'], 2)} plain")


def _bench(path, name):
    vals = [b["value"] for b in jsonl(path) if b.get("name") == name]
    if not vals:
        raise KeyError(f"no {name!r} in {path}")
    return statistics.median(vals)


@figure("python.allgather_32m", TORCH_C237, TORCH_9ED)
def _allgather():
    row = "all-gather 32 MiB out, "
    return (f"{fmt(_bench(TORCH_C237, row + 'ncclpool symmetric pool'))} us instead of "
            f"{fmt(_bench(TORCH_9ED, row + 'ncclpool symmetric pool'))} (plain memory {fmt(_bench(TORCH_C237, row + 'plain memory'))})")


@figure("python.copy_engine_teardown_s", COPY_ENGINE)
def _teardown():
    secs = [float(s) for s in re.findall(r"rank \d+: destroy_process_group finished after ([\d.]+) s", text(COPY_ENGINE))]
    return span(secs, 1) + " s"

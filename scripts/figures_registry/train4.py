"""Figures of issue 46's training runs at 4 GPUs (4x H200, NCCL 2.28.9, data/2026-11-28-gpu-check-issue46-s2):
Megatron-FSDP in every configuration, 3 rounds (one device call each, gpu-check's `megatron` section),
with NCCL's own symmetric CTA count beside ncclpool's 32 in the configuration where they differed
(docs/benchmarks/megatron-fsdp.md), and FSDP2 with both CTA counts (fsdp2.md).
"""

import statistics

from . import Run, figure, fmt, span, table
from . import fsdp2 as _fsdp2
from . import megatron as _megatron

D = "2026-11-28-gpu-check-issue46-s2/"
ROUNDS = [D + c + "/megatron-fsdp/megatron-fsdp.jsonl" for c in
          ("call2-4xh200-megatron-nccltests-8806cb8", "call3-4xh200-megatron-8806cb8", "call4-4xh200-megatron-symctas-8806cb8")]
NCCL_CTAS = D + "call4-4xh200-megatron-symctas-8806cb8/mf-symctas-nccl/megatron-fsdp.jsonl"
FSDP2 = D + "call5-4xh200-fsdp2-8806cb8/fsdp2/fsdp2.json"


def _runs(cfg, paths=ROUNDS):
    """One configuration's results over the rounds (each call's file one or more rounds)."""
    out = [r for p in paths for r in _megatron.runs_of(p, *cfg)]
    if {r["world"] for r in out} != {4}:
        raise ValueError(f"{cfg}: not every run had 4 ranks")
    return out


def _med(cfg, key, paths=ROUNDS):
    return statistics.median(r[key] for r in _runs(cfg, paths))


def _steady(cfg, paths=ROUNDS):
    v = [r["steady_step_ms"] for r in _runs(cfg, paths)]
    return f"{fmt(statistics.median(v), 2)} ({fmt(min(v), 2)}-{fmt(max(v), 2)})"


def _ratio(key, sym, ag):
    return _med(("ncclpool", sym, ag), key) / _med(("megatron", sym, ag), key)


def _losses_equal():
    """The losses of every run of one group setting (every allocator and kind) bitwise equal, or raise."""
    for ag in (False, True):
        seen = {tuple(r["losses"]) for a, s, g in _megatron.CONFIGS if g == ag for r in _runs((a, s, g))}
        if len(seen) != 1:
            raise ValueError(f"ag_group={ag}: {len(seen)} different loss curves")


@figure("train4.megatron.table", *ROUNDS)
def _megatron_table():
    _losses_equal()
    body = []
    for a, s, ag in _megatron.CONFIGS:
        cells = [_steady((a, s, ag)), fmt(_med((a, s, ag), "setup_ms")), fmt(_med((a, s, ag), "first_step_ms")),
                 fmt(_med((a, s, ag), "device_used_gib"), 2)]
        vs = "-" if a != "ncclpool" else f"{fmt(_ratio('steady_step_ms', s, ag), 3)} / {fmt(_ratio('setup_ms', s, ag), 3)}"
        body.append([{"none": "none (no user buffers)", "megatron": "Megatron-Core"}.get(a, a), _megatron._kind(a, s),
                     "+ all-gather group" if ag else "one"] + cells + [vs])
    return table(["allocator", "registration", "groups", "steady step ms: median (min-max over 3 rounds)", "setup ms",
                  "first step ms", "device GiB", "ncclpool / Megatron-Core: steady / setup"], body, [Run(p) for p in ROUNDS])


SYMMETRIC = [(s, ag) for s in (True,) for ag in (False, True)]
WITH_BUFFERS = [(s, ag) for s in (True, False) for ag in (False, True)]
figure("train4.megatron.steady_ratio", *ROUNDS)(lambda: span([_ratio("steady_step_ms", s, ag) for s, ag in WITH_BUFFERS], 3))
figure("train4.megatron.steady_ratio_ag_sym", *ROUNDS)(lambda: fmt(_ratio("steady_step_ms", True, True), 3))
figure("train4.megatron.steady_ratio_local", *ROUNDS)(lambda: span([_ratio("steady_step_ms", False, ag) for ag in (False, True)], 3))
figure("train4.megatron.steady_ratio_sym_one", *ROUNDS)(lambda: fmt(_ratio("steady_step_ms", True, False), 3))
figure("train4.megatron.setup_ratio_symmetric", *ROUNDS)(lambda: span([_ratio("setup_ms", s, ag) for s, ag in SYMMETRIC], 3))
figure("train4.megatron.setup_ratio_local", *ROUNDS)(lambda: span([_ratio("setup_ms", False, ag) for ag in (False, True)], 3))
figure("train4.megatron.mcore_setup_s", *ROUNDS)(lambda: span([_med(("megatron", True, ag), "setup_ms") / 1000 for ag in (False, True)], 1) + " s")


@figure("train4.megatron.ctas_table", NCCL_CTAS, *ROUNDS)
def _ctas_table():
    cfgs = (("megatron", True, True), ("ncclpool", True, True))
    body = [["Megatron-Core (NCCL's count: it sets none)", _steady(cfgs[0]), _steady(cfgs[0], [NCCL_CTAS])],
            ["ncclpool", _steady(cfgs[1]), _steady(cfgs[1], [NCCL_CTAS])]]
    return table(["symmetric, + all-gather group, 4 GPUs", "ncclpool's 32 CTAs (3 rounds: the table above)",
                  "`NCCLPOOL_SYM_CTAS=nccl` (2 rounds)"], body, [Run(NCCL_CTAS)])


figure("train4.megatron.nccl_ctas_ratio", NCCL_CTAS)(
    lambda: fmt(_med(("ncclpool", True, True), "steady_step_ms", [NCCL_CTAS]) / _med(("megatron", True, True), "steady_step_ms", [NCCL_CTAS]), 3))


# ---- FSDP2 at 4 GPUs: ncclpool's 32 CTAs against NCCL's own count ----

FSDP2_MODES = (("plain", "plain"), ("ncclpool symmetric, ncclpool's 32 CTAs", "ncclpool-symmetric"),
               ("ncclpool symmetric, NCCL's count (`NCCLPOOL_SYM_CTAS=nccl`)", "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl"),
               ("torch's symmetric pool (NCCL's count)", "torch-symm"))


@figure("train4.fsdp2.table", FSDP2)
def _fsdp2_table():
    losses = {tuple(r["losses"]) for r in _fsdp2.recs(FSDP2, "plain")} | {
        tuple(r["losses"]) for _, spec in FSDP2_MODES for r in _fsdp2.recs(FSDP2, spec)}
    if len(losses) != 1:
        raise ValueError(f"{FSDP2}: {len(losses)} different loss curves")
    body = [[name, _fsdp2.steady(FSDP2, spec), _fsdp2.vs_plain(FSDP2, spec), _fsdp2.gib(FSDP2, spec)] for name, spec in FSDP2_MODES]
    return table(["FSDP2, 4 GPUs, compute-bound", "steady step ms: median (min-max over 2 rounds)", "vs plain", "device GiB"],
                 body, [Run(FSDP2)])


figure("train4.fsdp2.ctas_32_vs_nccl", FSDP2)(
    lambda: _fsdp2.pct(_fsdp2.med(FSDP2, "ncclpool-symmetric") / _fsdp2.med(FSDP2, "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl") - 1))

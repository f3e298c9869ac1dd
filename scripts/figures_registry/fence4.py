"""Figures of issue 46 at 4 GPUs (4x H200, NCCL 2.28.9, data/2026-11-28-gpu-check-4xh200-issue46): decode
in a CUDA graph with guard / fence (kernel, memset, node) / on (docs/benchmarks/decode.md), the PDL
positive control per fence kind (pdl.md), the SGLang bench at 4 ranks (docs/sglang.md), the auto pool
against the best single kind at 2 and 4 GPUs (coll.md), FSDP2 with the fence (fsdp2.md) and the torch
benchmark (torch.md); python.md's "NCCL versions" quotes them.

Speeds compare times the other way round: "node's speed / on's" is on's us over node's us.
"""

import statistics

from . import Run, data, figure, fmt, jsonl, span, table
from . import fence as _fence
from . import fsdp2 as _fsdp2

D = "2026-11-28-gpu-check-4xh200-issue46/"
C1 = D + "call1-cuda-pdl-torch-sglang-tool-coll-9b78ee8/"
C2 = D + "call2-decode-coll-graph-68d05f6/"
C3 = D + "call3-cuda-pdl-fsdp2-decode-nomix-coll-graph-468b5b1/"
MIX = C2 + "decode-guard.json"            # guard, fence (kernel), on; graph mixing on
MEMSET = C2 + "decode-guard-nomix.json"   # guard, fence (kernel), fence-memset, on; mixing off
NODE = C3 + "decode-guard-nomix.json"     # guard, fence (kernel), fence-node, on; mixing off
PDL = {g: C3 + f"pdl-torch-nccl-{g}.json" for g in ("auto", "auto-nomix")}
SGL = C1 + "sglang.json"
FSDP2 = C3 + "fsdp2/fsdp2.json"
TORCH = C1 + "torch.log"
POOLS = _fence.POOLS
med, sizes, size, _speed = _fence._med, _fence._sizes, _fence._size, _fence.speed


def _decisions(path, want):
    got = data(path)["decisions"]
    if got != want:
        raise ValueError(f"{path}: decisions {got}, not {want}")


# ---- decode in a CUDA graph at 4 GPUs ----

figure("fence4.decode.mix_table", MIX)(lambda: _fence._decode_table(MIX))
figure("fence4.decode.mix_vs_on", MIX)(lambda: span(_fence.speeds(MIX, "fence"), 2))
figure("fence4.decode.mix_vs_plain", MIX)(lambda: span(_fence.speeds(MIX, "fence", "plain"), 2) + "x")
figure("fence4.decode.mix_guard_vs_plain", MIX)(lambda: span(_fence.speeds(MIX, "guard", "plain"), 2) + "x")

NODE_DECISIONS = {"guard": ["off"], "fence": ["fence (kernel)"], "fence-node": ["fence (node)"], "on": ["on"]}


@figure("fence4.decode.nomix_table", NODE)
def _nomix_table():
    _decisions(NODE, NODE_DECISIONS)
    body = []
    for sz in sizes(NODE):
        row = [size(sz), fmt(med(NODE, "plain", sz), 2)]
        for g in ("guard", "fence", "fence-node", "on"):
            row.append(" / ".join(fmt(med(NODE, p, sz, g), 2) for p in POOLS))
        row.append(" / ".join(fmt(_speed(NODE, sz, p, "fence-node"), 2) for p in POOLS))
        row.append(" / ".join(fmt(_speed(NODE, sz, p, "fence"), 2) for p in POOLS))
        row.append(" / ".join(fmt(_speed(NODE, sz, p, "fence-node", "plain"), 2) + "x" for p in POOLS))
        body.append(row)
    return table(["size", "plain", "guard (symmetric / auto pool)", "kernel fence", "node fence (the default)", "on",
                  "node's speed / on's", "kernel's speed / on's", "node's speed / plain's"], body, [Run(NODE)])


def _nomix(setting, keep=lambda sz: True, base="on"):
    _decisions(NODE, NODE_DECISIONS)
    return _fence.speeds(NODE, setting, base, keep)


figure("fence4.decode.node_vs_on", NODE)(lambda: span(_nomix("fence-node"), 2))
figure("fence4.decode.node_vs_on_from_64k", NODE)(lambda: span(_nomix("fence-node", lambda sz: sz >= 64 << 10), 2))
figure("fence4.decode.kernel_vs_on", NODE)(lambda: span(_nomix("fence"), 2))
figure("fence4.decode.node_vs_plain", NODE)(lambda: span(_nomix("fence-node", base="plain"), 2) + "x")
figure("fence4.decode.node_cost_us", NODE)(lambda: _fence.cost_us(NODE, "fence-node"))
figure("fence4.decode.kernel_cost_us", NODE)(lambda: _fence.cost_us(NODE, "fence"))


@figure("fence4.decode.node_target_sizes", NODE)
def _node_target_sizes():
    """The sizes where, with graph mixing off, the node fence keeps >= 0.95 of on's speed in both pools."""
    ok = [sz for sz in sizes(NODE) if min(_speed(NODE, sz, p, "fence-node") for p in POOLS) >= 0.95]
    return f"{size(ok[0])} to {size(ok[-1])}" if ok and len(ok) == len([s for s in sizes(NODE) if s >= ok[0]]) else \
        ", ".join(size(s) for s in ok) or "no size"


MEMSET_DECISIONS = {"guard": ["off"], "fence": ["fence (kernel)"], "fence-memset": ["fence (memset)"], "on": ["on"]}


@figure("fence4.decode.memset_table", MEMSET)
def _memset_table():
    _decisions(MEMSET, MEMSET_DECISIONS)
    body = []
    for sz in sizes(MEMSET):
        t = {g: med(MEMSET, "symmetric", sz, g) for g in ("fence", "fence-memset", "on")}
        body.append([size(sz), fmt(med(MEMSET, "plain", sz), 2), fmt(t["fence"], 2), fmt(t["fence-memset"], 2), fmt(t["on"], 2),
                     fmt(t["on"] / t["fence"], 2), fmt(t["on"] / t["fence-memset"], 2),
                     fmt(med(MEMSET, "plain", sz) / t["fence-memset"], 2) + "x"])
    return table(["size", "plain", "kernel fence", "memset fence", "on", "kernel's speed / on's", "memset's speed / on's",
                  "memset's speed / plain's"], body, [Run(MEMSET)])


figure("fence4.decode.memset_cost_us", MEMSET)(lambda: _fence.cost_us(MEMSET, "fence-memset"))


# ---- the PDL positive control at 4 GPUs, every fence kind ----

KINDS = ("none", "kernel", "memset", "node")


@figure("fence4.pdl.table", *PDL.values())
def _pdl_table():
    body = []
    for mix, name in (("", "on (NCCL's default)"), ("-nomix", "off (`NCCL_GRAPH_MIXING_SUPPORT=0`)")):
        res = _fence._kinds(PDL["auto" + mix])
        for launch in ("eager", "graph"):
            body.append([name if launch == "eager" else "", launch] + [_fence._cpp_cell(res, k, launch) for k in KINDS])
    return table(["graph mixing", "raw `ncclAllReduce`, 4 ranks", "no fence", "kernel fence", "memset fence", "node fence"],
                 body, [Run(PDL["auto"])])


@figure("fence4.pdl.fenced_wrong", *PDL.values())
def _pdl_fenced_wrong():
    """Wrong results of the fenced rows (every kind) wherever the same run's unfenced row was wrong."""
    fenced = [f for _, fs in _fence.cpp_pairs(PDL.values(), KINDS[1:]) for f in fs]
    return f"{sum(w for w, _ in fenced)} wrong of {sum(n for _, n in fenced):,}"


# ---- the SGLang bench at 4 ranks ----

AUTO, ON = _fence.AUTO, _fence.ON


def _sgl(config, sz, mode):
    return _fence.sgl(config, sz, mode, SGL)


def _sgl_sizes():
    return _fence.sgl_sizes(SGL)


@figure("fence4.sglang.table", SGL)
def _sglang_table():
    if not _fence.rank0(AUTO, SGL)["versions"]["symmetric_kernels_why"].startswith("fence:"):
        raise ValueError(f"{SGL}: the default did not decide the fence")
    body = []
    for config, name in ((AUTO, "default (`auto`: fence)"), (ON, "`on`")):
        for i, sz in enumerate(_sgl_sizes()):
            p, n, s = (_sgl(config, sz, m) for m in ("plain", "ncclpool", "sglang"))
            body.append([name if i == 0 else "", size(sz), fmt(p, 1), fmt(n, 1), fmt(s, 1), fmt(s / n, 3), fmt(p / n, 2) + "x"])
    return table(["ncclpool.sglang, 4 ranks, NCCL 2.28.9", "size", "plain", "ncclpool.sglang", "SGLang's allocator",
                  "ncclpool's speed / SGLang's", "ncclpool's speed / plain's"], body, [Run(SGL)])


figure("fence4.sglang.default_vs_sglang", SGL)(lambda: span([_sgl(AUTO, sz, "sglang") / _sgl(AUTO, sz, "ncclpool") for sz in _sgl_sizes()], 3))
figure("fence4.sglang.on_vs_sglang", SGL)(lambda: span([_sgl(ON, sz, "sglang") / _sgl(ON, sz, "ncclpool") for sz in _sgl_sizes()], 3))
figure("fence4.sglang.default_vs_plain", SGL)(lambda: span([_sgl(AUTO, sz, "plain") / _sgl(AUTO, sz, "ncclpool") for sz in _sgl_sizes()], 2) + "x")


# ---- FSDP2 at 4 GPUs: the fence (auto) against the kernels on ----

FSDP2_MODES = (("plain", "plain"), ("ncclpool symmetric, default (`auto`: fence)", "ncclpool-symmetric+NCCLPOOL_SYMMETRIC_KERNELS=auto"),
               ("ncclpool symmetric, `on`", "ncclpool-symmetric"))


@figure("fence4.fsdp2.table", FSDP2)
def _fsdp2_table():
    body = [[name, fmt(_fsdp2.med(FSDP2, spec), 2), _fsdp2.vs_plain(FSDP2, spec), _fsdp2.gib(FSDP2, spec)] for name, spec in FSDP2_MODES]
    return table(["FSDP2, 4 GPUs, compute-bound, 1 round", "steady step ms", "vs plain", "device GiB"], body, [Run(FSDP2)])


# ---- the torch benchmark at 4 GPUs ----

def _bench(name):
    v = [b["value"] for b in jsonl(TORCH, "BENCH ") if b["name"] == name]
    if not v:
        raise KeyError(f"no BENCH line {name!r} in {TORCH}")
    return v


@figure("fence4.torch.table", TORCH)
def _torch_table():
    def rng(name):
        v = _bench(name)
        return f"{fmt(statistics.median(v), 1)} ({fmt(min(v), 1)}-{fmt(max(v), 1)})"
    body = [["first registration, 64 x 32 MiB, 2 groups: ncclpool default (3 rounds)", rng("first registration, ncclpool default") + " ms"],
            ["ncclpool `min_segment` 1 GiB", rng("first registration, ncclpool min_segment 1 GiB") + " ms"],
            ["torch `register_mem_pool` (allocation + registration)", rng("first registration, torch register_mem_pool") + " ms"],
            ["plain `MemPool`", rng("first registration, plain MemPool") + " ms"],
            ["one use, ncclpool, G = 2 / G = 3, back to back",
             f"{fmt(statistics.median(_bench('per use, ncclpool, G=2')), 1)} / {fmt(statistics.median(_bench('per use, ncclpool, G=3')), 1)} us"],
            ["Megatron pattern, G = 2", fmt(statistics.median(_bench("per use, Megatron pattern, G=2"))) + " ms"],
            ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric",
             " / ".join(fmt(statistics.median(_bench("all-gather 32 MiB out, " + k)), 1)
                        for k in ("plain memory", "torch symmetric pool", "ncclpool symmetric pool")) + " us"]]
    return table(["figure, 4 GPUs", "value: median (range of the rounds)"], body, [Run(TORCH)])

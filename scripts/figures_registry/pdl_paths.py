"""Figures of issue 46's remaining 2-GPU checks (2x H200, NCCL 2.28.9, data/2026-11-28-gpu-check-issue46-s2,
call 1): the PDL positive control through SGLang's own path (bench/sglang_cases.py's pdl cases: SGLang's
PyNccl all-reduce after a producer that triggers early, on SGLang's allocator and on ncclpool.sglang;
docs/sglang.md, pdl.md), the torch layer's check with graph mixing off (the node fence in a captured
graph; pdl.md), and the node fence's time at 2 GPUs with graph mixing off (decode.md).
"""

from . import Run, data, figure, fmt, span, table
from . import fence as _fence

C1 = "2026-11-28-gpu-check-issue46-s2/call1-2xh200-pdl-sglang-decode-8806cb8/"
SGL = C1 + "sglang.json"
TORCH = {g: C1 + f"pdl-torch-torch-nccl-{g}.json" for g in ("auto", "auto-nomix")}
NODE2 = C1 + "decode-guard-nomix.json"  # fence (node, the default kind), fence-kernel, on; mixing off


# ---- SGLang's path ----

def _case(name):
    cases = [c for c in data(SGL)["cases"] if c["name"] == name]
    if len(cases) != 1 or not cases[0]["ranks"]:
        raise KeyError(f"{SGL}: no case {name}")
    return cases[0]


def _sgl_cell(name, call, graph):
    """wrong/launches over every rank of one row of a pdl case."""
    rows = [r for rank in _case(name)["ranks"] for r in rank["pdl"] if r["call"] == call and r["graph"] == graph]
    if len(rows) != _case(name)["ranks"][0]["world"]:
        raise ValueError(f"{SGL} {name}: {call} graph={graph} on {len(rows)} rank(s)")
    return sum(r["wrong"] for r in rows), sum(r["launches"] for r in rows)


@figure("pdl_paths.sglang.table", SGL)
def _sglang_table():
    body = []
    for mix, label in (("", "on (NCCL's default)"), ("-nomix", "off (`NCCL_GRAPH_MIXING_SUPPORT=0`)")):
        ours = _case(f"pdl{mix}-ncclpool")
        if {r["decision"] for r in ours["ranks"]} != {"fence"} or {r["fence_kind"] for r in ours["ranks"]} != {"node"}:
            raise ValueError(f"{SGL}: ncclpool.sglang did not decide the node fence")
        for graph in (False, True):
            cells = [_sgl_cell(f"pdl{mix}-sglang", "as SGLang calls it", graph), _sgl_cell(f"pdl{mix}-ncclpool", "as SGLang calls it", graph),
                     _sgl_cell(f"pdl{mix}-ncclpool", "unfenced", graph)]
            body.append([label if not graph else "", "graph" if graph else "eager"] + [f"{w}/{n}" for w, n in cells])
    return table(["graph mixing", "SGLang's all-reduce, 2 ranks", "SGLang's allocator", "ncclpool.sglang (default: node fence)",
                  "ncclpool.sglang, past the fence (control)"], body, [Run(SGL)])


@figure("pdl_paths.sglang.fenced_wrong", SGL)
def _sglang_fenced_wrong():
    cells = [_sgl_cell(f"pdl{m}-ncclpool", "as SGLang calls it", g) for m in ("", "-nomix") for g in (False, True)]
    return f"{sum(w for w, _ in cells)} wrong of {sum(n for _, n in cells):,}"


@figure("pdl_paths.sglang.sglang_wrong", SGL)
def _sglang_wrong():
    """SGLang's allocator's wrong results where NCCL orders nothing (eager, and graphs with mixing off)."""
    cells = [_sgl_cell("pdl-sglang", "as SGLang calls it", False)] + [_sgl_cell("pdl-nomix-sglang", "as SGLang calls it", g) for g in (False, True)]
    return f"{sum(w for w, _ in cells):,} of {sum(n for _, n in cells):,}"


# ---- the torch layer's check, graph mixing on and off ----

MODES = (("plain", "plain memory"), ("ncclpool", "ncclpool (the torch layer's fence)"), ("ncclpool-unfenced", "ncclpool, unfenced (control)"),
         ("torch-symm", "torch's symmetric memory"))


@figure("pdl_paths.torch.table", *TORCH.values())
def _torch_table():
    body = []
    for g, label in (("auto", "on (NCCL's default)"), ("auto-nomix", "off (`NCCL_GRAPH_MIXING_SUPPORT=0`)")):
        j = data(TORCH[g])
        if j["guard"]["symmetric_fence_kind"] != "node" or j["guard"]["symmetric_kernels_decision"] != "fence":
            raise ValueError(f"{TORCH[g]}: not the node fence")
        rows = {(r["mode"], r["graph"]): r for r in j["rows"]}
        for graph in (False, True):
            body.append([label if not graph else "", "graph" if graph else "eager"] +
                        [f"{rows[(m, graph)]['wrong_all_ranks']}/{rows[(m, graph)]['launches_all_ranks']}" for m, _ in MODES])
    return table(["graph mixing", "`dist.all_reduce`, 2 ranks"] + [name for _, name in MODES], body, [Run(p) for p in TORCH.values()])


# ---- the node fence's time at 2 GPUs, graph mixing off ----

NODE2_DECISIONS = {"fence": ["fence (node)"], "fence-kernel": ["fence (kernel)"], "on": ["on"]}


def _node2(setting, base="on"):
    if data(NODE2)["decisions"] != NODE2_DECISIONS:
        raise ValueError(f"{NODE2}: decisions {data(NODE2)['decisions']}")
    return _fence.speeds(NODE2, setting, base)


@figure("pdl_paths.decode2.table", NODE2)
def _decode2_table():
    med = _fence._med
    body = []
    for sz in _fence._sizes(NODE2):
        t = {g: med(NODE2, "symmetric", sz, g) for g in ("fence", "fence-kernel", "on")}
        body.append([_fence._size(sz), fmt(med(NODE2, "plain", sz), 2), fmt(t["fence"], 2), fmt(t["fence-kernel"], 2), fmt(t["on"], 2),
                     fmt(t["on"] / t["fence"], 2), fmt(t["on"] / t["fence-kernel"], 2), fmt(med(NODE2, "plain", sz) / t["fence"], 2) + "x",
                     fmt(t["fence"] - t["on"], 2)])
    return table(["size, 2 GPUs", "plain", "node fence (the default)", "kernel fence", "on (unfenced)", "node's speed / on's",
                  "kernel's speed / on's", "node's speed / plain's", "node - on, us"], body, [Run(NODE2)])


figure("pdl_paths.decode2.node_vs_on", NODE2)(lambda: span(_node2("fence"), 2))
figure("pdl_paths.decode2.kernel_vs_on", NODE2)(lambda: span(_node2("fence-kernel"), 2))
figure("pdl_paths.decode2.node_vs_plain", NODE2)(lambda: span(_node2("fence", "plain"), 2) + "x")
figure("pdl_paths.decode2.node_cost_us", NODE2)(lambda: _fence.cost_us(NODE2, "fence"))

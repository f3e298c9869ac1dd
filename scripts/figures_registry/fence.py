"""Figures of the symmetric fence (issue 46 item 1) on 2x H200, NCCL 2.28.9: the PDL positive control per
fence kind (docs/benchmarks/pdl.md), decode in a CUDA graph with guard / fence / on, graph mixing on and
off (docs/benchmarks/decode.md), and the SGLang bench with ncclpool.sglang's default (docs/sglang.md);
python.md's "NCCL versions" quotes them.

Speeds compare times the other way round: "fence's speed / on's" is on's us over fence's us.
"""

import statistics

from . import Run, data, figure, fmt, span, table
from .pdl import _frac, cpp, torch_rows

F = "2026-11-27-fence-2xh200-2351c57/"
CPP = {g: F + f"pdl-torch-nccl-{g}.json" for g in ("auto", "auto-nomix", "on", "on-nomix")}
TORCH = {g: F + f"pdl-torch-torch-nccl-{g}.json" for g in ("auto", "on")}
MIX, NOMIX = F + "decode-guard.json", F + "decode-guard-nomix.json"
SGL = "2026-11-27-torch-versions-2xh200-a4d67eb/call4-sglang/sglang.json"
KIB, MIB = 1 << 10, 1 << 20
KINDS = ("none", "kernel", "memset")


# ---- the PDL positive control per fence kind ----

def _kinds(path):
    """{(fence kind, launch): (wrong, launches, nccl_deps, fences)} of a C++ check's window rows."""
    d = data(path)
    if d.get("errors"):
        raise ValueError(f"{path}: {d['errors']} errors")
    return {(r["fence"], r["launch"]): (r["wrong"], r["launches"], r.get("nccl_deps"), r["fences"])
            for r in d["results"] if r["mode"] == "window"}


def _cpp_cell(res, kind, launch):
    if (kind, launch) not in res:
        return "-"
    w, n, deps, fences = res[(kind, launch)]
    notes = ([f"{fences} fences per rank" if launch == "eager" else
              (f"{fences} fence node" if fences else "no fence node")] if kind != "none" else [])
    notes += [f"`{deps}`"] if deps and launch != "eager" else []
    return _frac(w, n) + (f" ({'; '.join(notes)})" if notes else "")


def _same_as_on(auto, on):
    """Whether the `on` run's unfenced rows gave what the `auto` run's unfenced rows gave."""
    return all(on[k][:3] == auto[k][:3] for k in on if k[0] == "none")


@figure("fence.pdl.cpp_table", *CPP.values())
def _cpp_table():
    c = {g: _kinds(p) for g, p in CPP.items()}
    for mix in ("", "-nomix"):
        if not _same_as_on(c["auto" + mix], c["on" + mix]):
            raise ValueError(f"the `on{mix}` run's unfenced rows differ from `auto{mix}`'s")
    body = []
    for mix, name in (("", "on (NCCL's default)"), ("-nomix", "off (`NCCL_GRAPH_MIXING_SUPPORT=0`)")):
        res = c["auto" + mix]
        for launch, what in (("eager", "eager"), ("graph", "graph as captured"),
                             ("graph-forced", "graph-forced (one programmatic edge from the producer)")):
            body.append([name if launch == "eager" else "", what] + [_cpp_cell(res, k, launch) for k in KINDS])
    return table(["graph mixing", "C++ raw `ncclAllReduce` on a window with the symmetric flag",
                  "no fence", "kernel fence", "memset fence"], body, [Run(CPP["auto"])])


def _torch_cell(rows, mode):
    return " / ".join(_frac(*rows[(mode, launch)]) for launch in ("eager", "graph"))


@figure("fence.pdl.torch_table", *TORCH.values())
def _torch_table():
    auto, on = torch_rows(TORCH["auto"]), torch_rows(TORCH["on"])
    g = data(TORCH["auto"])["guard"]
    if g["symmetric_kernels_decision"] != "fence":
        raise ValueError(f"{TORCH['auto']}: decision {g['symmetric_kernels_decision']}, not fence")
    body = [["plain memory", _torch_cell(auto, "plain"), _torch_cell(on, "plain")],
            [f"`ncclpool.torch` symmetric pool, fenced ({g['symmetric_fence_kind']})", _torch_cell(auto, "ncclpool"), "-"],
            ["`ncclpool.torch` symmetric pool, unfenced", _torch_cell(auto, "ncclpool-unfenced"), _torch_cell(on, "ncclpool")],
            ["torch's own symmetric memory (never fenced)", _torch_cell(auto, "torch-symm"), _torch_cell(on, "torch-symm")]]
    return table(["torch `dist.all_reduce`, eager / graph (graph mixing on)", "`auto` (decision: fence)", "`on`"],
                 body, [Run(TORCH["auto"])])


def cpp_pairs(paths, kinds):
    """Per C++ check run of `paths` and launch where the unfenced row was wrong: (unfenced (wrong,
    launches), [the rows' of each fence kind of `kinds` (wrong, launches)])."""
    out = []
    for path in paths:
        res = _kinds(path)
        for launch in ("eager", "graph"):
            if res[("none", launch)][0]:
                out.append((res[("none", launch)][:2], [res[(k, launch)][:2] for k in kinds if (k, launch) in res]))
    return out


def _pdl_pairs():
    """Per check, launch and graph mixing where the unfenced row was wrong: (unfenced (wrong, launches),
    [the fenced rows' (wrong, launches)]) (C++: kernel and memset; torch: the torch layer's kernel)."""
    out = cpp_pairs((CPP["auto"], CPP["auto-nomix"]), KINDS[1:])
    t = torch_rows(TORCH["auto"])
    for launch in ("eager", "graph"):
        if t[("ncclpool-unfenced", launch)][0]:
            out.append((t[("ncclpool-unfenced", launch)], [t[("ncclpool", launch)]]))
    return out


@figure("fence.pdl.fenced_wrong", CPP["auto"], CPP["auto-nomix"], TORCH["auto"])
def _fenced_wrong():
    """Wrong results of the fenced rows wherever the same run's unfenced row was wrong."""
    fenced = [f for _, fs in _pdl_pairs() for f in fs]
    return f"{sum(w for w, _ in fenced)} wrong of {sum(n for _, n in fenced):,}"


@figure("fence.pdl.unfenced_wrong", CPP["auto"], CPP["auto-nomix"], TORCH["auto"])
def _unfenced_wrong():
    """The unfenced rows' wrong results in those cases: wrong/launches, every such row alike."""
    wrong = {u for u, _ in _pdl_pairs()}
    if len(wrong) != 1:
        raise ValueError(f"unfenced rows differ: {wrong}")
    w, n = wrong.pop()
    return f"{w}/{n}"


# ---- decode in a CUDA graph: guard / fence / on, graph mixing on and off ----

def _samples(path, mode, sz, guard=None):
    v = [s["us"] for s in data(path)["samples"]
         if s["mode"] == mode and s["size"] == sz and (guard is None or s["guard"] == guard)]
    if not v:
        raise KeyError(f"no {mode} {guard} at {sz} in {path}")
    return v


def _med(path, mode, sz, guard=None):
    return statistics.median(_samples(path, mode, sz, guard))


def _sizes(path):
    return sorted({s["size"] for s in data(path)["samples"]})


def _size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def _check_decisions(path):
    dec = data(path)["decisions"]
    if dec != {"guard": ["off"], "fence": ["fence (kernel)"], "on": ["on"]}:
        raise ValueError(f"{path}: decisions {dec}")


POOLS = ("symmetric", "auto")


def speed(path, sz, pool, setting, base="on"):
    """base's time over setting's: setting's speed relative to base's (plain: the plain runs)."""
    b = _med(path, "plain", sz) if base == "plain" else _med(path, pool, sz, base)
    return b / _med(path, pool, sz, setting)


def speeds(path, setting, base="on", keep=lambda sz: True):
    """setting's speed relative to base's (speed()) at every size `keep` admits, in both pools."""
    return [speed(path, sz, p, setting, base) for sz in _sizes(path) if keep(sz) for p in POOLS]


def cost_us(path, setting, pool="symmetric"):
    """What `setting` adds per all-reduce over the unfenced kernels: its median minus on's, every size."""
    return span([_med(path, pool, sz, setting) - _med(path, pool, sz, "on") for sz in _sizes(path)], 2) + " us"


def _vs_on(path, sz, pool):
    return speed(path, sz, pool, "fence")


def _vs_plain(path, sz, pool):
    return speed(path, sz, pool, "fence", "plain")


def _decode_table(path):
    _check_decisions(path)
    body = []
    for sz in _sizes(path):
        row = [_size(sz), fmt(_med(path, "plain", sz), 2)]
        for g in ("guard", "fence", "on"):
            row.append(" / ".join(fmt(_med(path, p, sz, g), 2) for p in POOLS))
        row.append(" / ".join(fmt(_vs_on(path, sz, p), 2) for p in POOLS))
        row.append(" / ".join(fmt(_vs_plain(path, sz, p), 2) + "x" for p in POOLS))
        row.append(fmt(_med(path, "symmetric", sz, "fence") - _med(path, "symmetric", sz, "on"), 2))
        body.append(row)
    return table(["size", "plain", "guard (symmetric / auto pool)", "fence", "on", "fence's speed / on's",
                  "fence's speed / plain's", "fence - on, us (symmetric pool)"], body, [Run(path)])


figure("fence.decode.mix_table", MIX)(lambda: _decode_table(MIX))
figure("fence.decode.nomix_table", NOMIX)(lambda: _decode_table(NOMIX))


figure("fence.decode.mix_vs_on", MIX)(lambda: span(speeds(MIX, "fence"), 2))
figure("fence.decode.nomix_vs_on", NOMIX)(lambda: span(speeds(NOMIX, "fence"), 2))
figure("fence.decode.nomix_vs_on_small", NOMIX)(lambda: span(speeds(NOMIX, "fence", keep=lambda sz: sz <= MIB), 2))
figure("fence.decode.nomix_vs_on_big", NOMIX)(lambda: span(speeds(NOMIX, "fence", keep=lambda sz: sz > MIB), 2))


# What the fence adds per all-reduce with graph mixing off.
figure("fence.decode.nomix_cost_us", NOMIX)(lambda: cost_us(NOMIX, "fence"))
figure("fence.decode.nomix_cost_auto_us", NOMIX)(lambda: cost_us(NOMIX, "fence", "auto"))


@figure("fence.decode.vs_plain", MIX, NOMIX)
def _fence_vs_plain():
    return span(speeds(MIX, "fence", "plain") + speeds(NOMIX, "fence", "plain"), 2) + "x"


@figure("fence.decode.nomix_target_sizes", NOMIX)
def _nomix_target_sizes():
    """The sizes where, with graph mixing off, the fence keeps >= 0.95 of on's speed in both pools."""
    ok = [sz for sz in _sizes(NOMIX) if min(_vs_on(NOMIX, sz, p) for p in POOLS) >= 0.95]
    return " and ".join(_size(sz) for sz in ok) if ok else "no size"


# ---- the SGLang bench: ncclpool.sglang's default (fence) against SGLang's allocator ----

AUTO, ON, NCCL_CTAS = ("NCCLPOOL_SYMMETRIC_KERNELS=auto", "NCCLPOOL_SYMMETRIC_KERNELS=on",
                       "NCCLPOOL_SYMMETRIC_KERNELS=on,NCCLPOOL_SYM_CTAS=nccl")


def rank0(config, path=SGL):
    """Rank 0's part of the SGLang bench's perf run of `config` in `path`."""
    for part in data(path)["perf"]:
        if part["config"] == config:
            return part["ranks"][0]
    raise KeyError(f"no perf run {config!r} in {path}")


def sgl(config, sz, mode, path=SGL):
    """The median us per step of `mode` at `sz` in that run."""
    return statistics.median([s["us"] for s in rank0(config, path)["samples"] if s["size"] == sz and s["mode"] == mode])


def sgl_sizes(path=SGL):
    return sorted({s["size"] for s in rank0(AUTO, path)["samples"]})


@figure("fence.sglang.table", SGL)
def _sglang_table():
    why = rank0(AUTO)["versions"]["symmetric_kernels_why"]
    if not why.startswith("fence:"):
        raise ValueError(f"{SGL}: the default decided {why[:40]!r}, not the fence")
    names = {AUTO: "default (`auto`: fence)", ON: "`on`, 32 CTAs (ncclpool's)", NCCL_CTAS: "`on`, NCCL's CTA count"}
    body = []
    for config in (AUTO, ON, NCCL_CTAS):
        for i, sz in enumerate(sgl_sizes()):
            p, n, s = (sgl(config, sz, m) for m in ("plain", "ncclpool", "sglang"))
            body.append([names[config] if i == 0 else "", _size(sz), fmt(p, 1), fmt(n, 1), fmt(s, 1),
                         fmt(s / n, 3), fmt(p / n, 2) + "x"])
    return table(["ncclpool.sglang, NCCL 2.28.9", "size", "plain", "ncclpool.sglang", "SGLang's allocator",
                  "ncclpool's speed / SGLang's", "ncclpool's speed / plain's"], body, [Run(SGL)])


def _sgl_ratios(config, base):
    return [sgl(config, sz, base) / sgl(config, sz, "ncclpool") for sz in sgl_sizes()]


figure("fence.sglang.default_vs_sglang", SGL)(lambda: span(_sgl_ratios(AUTO, "sglang"), 3))
figure("fence.sglang.default_vs_plain", SGL)(lambda: span(_sgl_ratios(AUTO, "plain"), 2) + "x")


@figure("fence.decode.guard_vs_plain", MIX, NOMIX)
def _guard_vs_plain():
    return span([_med(path, "plain", sz) / _med(path, p, sz, "guard")
                 for path in (MIX, NOMIX) for sz in _sizes(path) for p in POOLS], 2) + "x"


from . import sglang as _sglang  # noqa: E402  (the guard's run, e370088: docs/sglang.md's first table)


@figure("fence.sglang.guard_vs_sglang", _sglang.BENCH)
def _guard_vs_sglang():
    return span(_sglang._ratios(_sglang.GUARD, "sglang", "ncclpool"), 2)

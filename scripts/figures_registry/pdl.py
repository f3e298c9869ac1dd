"""Figures of docs/benchmarks/pdl.md: the PDL hazard checks (tests/gpu/pdl_hazard.cpp's JSON: results
{mode, launch or graph, wrong, launches, nccl_deps}; tests/gpu/torch/check_pdl_hazard.py's JSON: rows
{mode, graph, wrong_all_ranks, launches_all_ranks} or {unavailable}; the torch check's printed blocks
where only gpu-check's log kept them), and what the guard costs (decode_bench's and fsdp2_bench's JSON).
"""

import re
import statistics

from . import Run, data, figure, fmt, table, text

H1 = "2026-11-25-gpu-check-1xh100-d05f0d8/"
H1_LOG1, H1_LOG2 = H1 + "call1-cuda-pdl-nccl2.29.7/gpu-check.log", H1 + "call2-ncclversions/gpu-check.log"
H1_CPP = {v: {g: H1 + f"call2-ncclversions/pdl-nccl-{v}-1-{g}.json" for g in gs}
          for v, gs in (("2.29.7", ("auto", "on")), ("2.30.7", ("auto",)))}  # 2.30.7 with `on`: no JSON came back
RERUN = "2026-11-25-gpu-check-1xh100-44846c3/"
H1_CPP["2.28.9"] = {g: RERUN + f"pdl-torch-nccl-{g}.json" for g in ("auto", "on")}  # this run's C++ output not kept
DEB = "2026-11-27-gpu-check-2xh200-deb58c4/"
DEB1, DEB2 = DEB + "call1-nccl-pdl-torch-scope/", DEB + "call2-pdl-probe-nccl-asnodes/"
E37 = "2026-11-27-gpu-check-2xh200-e370088-s2/"
S2 = E37 + "call1-pdl-fsdp2-decode-guard/gpu-check/"
V30, V29 = E37 + "call4-ncclversions-2.30.7/gc-v/", E37 + "call5-ncclversions-2.29.7-torch-megatron/gc-w/"
GUARD, FSDP2 = S2 + "decode-guard.json", S2 + "fsdp2/fsdp2.json"
KIB, MIB = 1 << 10, 1 << 20


def _frac(w, n, bold=True):
    return f"**{w}/{n} wrong**" if w and bold else f"{w}/{n}"


def cpp(path):
    """{(mode, launch): (wrong, launches, nccl_deps, symmetric_flag)} of a C++ check's JSON."""
    d = data(path)
    if d.get("errors"):
        raise ValueError(f"{path}: {d['errors']} errors")
    return {(r["mode"], r.get("launch") or ("graph" if r["graph"] else "eager")):
            (r["wrong"], r["launches"], r.get("nccl_deps"), r["symmetric_flag"]) for r in d["results"]}


def torch_rows(path):
    """{(mode, 'eager'|'graph'): (wrong, launches) or 'refused: ...'} of the torch check's JSON."""
    out = {}
    for r in data(path)["rows"]:
        key = (r["mode"], "graph" if r["graph"] else "eager")
        if "unavailable" in r:
            u = r["unavailable"]
            out[key] = "refused: `ncclDevCommCreate failed ... invalid usage`" if (
                "ncclDevCommCreate failed" in u and "invalid usage" in u) else "refused: " + u.splitlines()[0][:60]
        else:
            out[key] = (r["wrong_all_ranks"], r["launches_all_ranks"])
    return out


_BLOCK = re.compile(r"^NCCL (\d+), \d+ rank\(s\); symmetric kernels: (on|off)(?::\s*(NCCLPOOL_SYMMETRIC_KERNELS=on))?")


def torch_log(path):
    """The torch check's printed blocks: [(version, kernels on?, forced by the variable?, {(mode, launch): value})]."""
    out, cur = [], None
    for line in text(path).splitlines():
        m = _BLOCK.match(line)
        if m:
            cur = (int(m.group(1)), m.group(2) == "on", bool(m.group(3)), {})
            out.append(cur)
            continue
        m = re.match(r"^\s+(plain|ncclpool|torch-symm)\s+(eager|graph)\s+(?:wrong (\d+) of (\d+)|(.*))$", line)
        if m and cur:
            if m.group(3) is not None:
                cur[3][(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
            else:
                cur[3][(m.group(1), m.group(2))] = ("refused: `ncclDevCommCreate failed ... invalid usage`"
                                                    if "invalid usage" in m.group(5) else "refused")
    return out


def _uniform(vals, what):
    """'0/400 in all four' when every (wrong, launches) is the same and right; else None."""
    if all(isinstance(v, tuple) for v in vals) and len(set(vals)) == 1 and vals[0][0] == 0:
        return f"0/{vals[0][1]} in all {what}"
    return None


WORDS = {2: "two", 4: "four", 6: "six"}


# ---- 2026-11-25, 1x H100 ----

def _built(version):
    for path in (H1_LOG1, H1_LOG2):
        m = re.search(r"build-nccl: \S+ \(" + re.escape(version) + r"-1, (\d+) s, (\d+)M\)", text(path))
        if m:
            return int(m.group(1)), int(m.group(2))
    raise KeyError(f"no build line of {version}")


def _guard_cell(path):
    sk = data(path)["symmetric_kernels"]
    return "**on**: no hazard" if sk["enabled"] and not sk["hazard"] else ("off: hazard" if sk["hazard"] else "off")


def _h1_torch(version_code):
    blocks = [b for path in (H1_LOG2, H1_LOG1) for b in torch_log(path) if b[0] == version_code]
    guards = {b[1] or b[2] for b in blocks}
    cells = []
    for mode in ("plain", "ncclpool", "torch-symm"):
        vals = {b[3][(mode, launch)] for b in blocks for launch in ("eager", "graph")}
        cells.append(" / ".join(v if isinstance(v, str) else _frac(*v) for v in sorted(vals, key=str)))
    tail = ", with `auto` and `on`" if guards == {True, False} or len(blocks) > 1 else ""
    cell = " / ".join(cells)
    return cell.replace("refused: `ncclDevCommCreate failed ... invalid usage`",
                        "torch-symm refused: `ncclDevCommCreate failed ... invalid usage` (1 rank)") + tail


def _h1_cpp(version):
    guards = list(H1_CPP[version])
    vals = [v[:2] for g in guards for v in cpp(H1_CPP[version][g]).values()]
    return ((_uniform(vals, "four") or " / ".join(_frac(*v) for v in vals)) + ", "
            + " and ".join(f"`{g}`" for g in guards))


@figure("pdl.h100.table", H1_LOG1, H1_LOG2, *[p for v in H1_CPP.values() for p in v.values()])
def _h100_table():
    body = []
    for version, code, how in (("2.28.9", 22809, "as shipped"), ("2.29.7", 22907, None), ("2.30.7", 23007, None)):
        if how is None:
            s, mb = _built(version)
            how = f"built from source on the host ({s} s, {mb} MB)"
        cpp_cell = _h1_cpp(version)
        if version == "2.28.9":
            cpp_cell += " (at 44846c3, the re-run below: this run kept no C++ output)"
        body.append([version + (" (torch's)" if version == "2.28.9" else ""), how,
                     _guard_cell(H1_CPP[version]["auto"]), cpp_cell, _h1_torch(code)])
    return table(["NCCL", "how", "guard (`auto`)", "C++ plain / window, eager and graph",
                  "torch plain / ncclpool / torch-symm"], body, [Run(H1_LOG1), Run(RERUN + "pdl-torch-nccl-auto.json")])


# ---- 2026-11-27, deb58c4: the first control ----

def _probe():
    lines = re.findall(r"PROBE (.*?) rc=0 symmetric-lines=(\d+)", text(DEB2 + "pdl-probe.txt"))
    runs = [data(DEB2 + f) for f in ("pdl-probe-kib1024.json", "pdl-probe-kib16delayus2000.json")]
    if len(lines) != len(runs):
        raise KeyError("probe lines and JSON files differ in number")
    wrong = sum(r["wrong"] for d in runs for r in d["results"])
    sym = sorted({int(n) for _, n in lines})
    launches = sorted({d["launches"] for d in runs})
    what = " and ".join(f"{fmt(d['bytes'] / MIB) + ' MiB' if d['bytes'] >= MIB else fmt(d['bytes'] / KIB) + ' KiB'} "
                        f"({fmt(d['delay_us'])} us)" for d in runs)
    kind = "one `[Symmetric]` kernel line per all-reduce" if all(n >= launches[-1] for n in sym) else "`[Symmetric]` lines"
    return what, (f"{wrong} wrong; NCCL logged {kind} ({'/'.join(map(str, sym))} for "
                  f"{'/'.join(map(str, launches))} launches)")


@figure("pdl.deb.table", DEB1 + "pdl-torch-nccl-auto.json", DEB1 + "pdl-torch-nccl-on.json",
        DEB2 + "pdl-probe.txt", DEB2 + "pdl-probe-kib1024.json", DEB2 + "pdl-probe-kib16delayus2000.json")
def _deb_table():
    row_cpp, row_torch = ["C++, raw `ncclAllReduce`, plain / window, eager and graph"], [
        "torch `dist.all_reduce`, plain / ncclpool / torch's symmetric memory, eager and graph"]
    for g in ("auto", "on"):
        vals = [v[:2] for v in cpp(DEB1 + f"pdl-torch-nccl-{g}.json").values()]
        row_cpp.append(_uniform(vals, WORDS[len(vals)]) or " / ".join(_frac(*v) for v in vals))
        tv = list(torch_rows(DEB1 + f"pdl-torch-torch-nccl-{g}.json").values())
        row_torch.append(_uniform(tv, WORDS[len(tv)]) or " / ".join(_frac(*v) for v in tv))
    what, probe = _probe()
    return table(["check", "kernels `auto` (the guard: off)", "kernels `on` (the positive control)"],
                 [row_cpp, row_torch, [f"probe, window, {what}", "-", probe]], [Run(DEB1 + "pdl-torch-nccl-auto.json")])


# ---- 2026-11-27, e370088: the control since d423c3e, on 2.28.9 ----

def _pair(res, mode, a="eager", b="graph"):
    return f"{_frac(*res[(mode, a)][:2])} / {_frac(*res[(mode, b)][:2])}"


def _deps(res, key, flag_note=True):
    w, n, deps, flag = res[key]
    note = f"`{deps}`" if deps else ("no symmetric flag" if not flag and flag_note else "")
    return _frac(w, n) + (f" ({note})" if note else "")


def _forced(res):
    return _frac(*res[("window", "graph-forced")][:2], bold=False)


@figure("pdl.e37.table", *(S2 + f"pdl-torch-nccl-{g}.json" for g in ("auto", "on", "on-nomix")),
        *(S2 + f"pdl-torch-torch-nccl-{g}.json" for g in ("auto", "on")))
def _e37_table():
    c = {g: cpp(S2 + f"pdl-torch-nccl-{g}.json") for g in ("auto", "on", "on-nomix")}
    t = {g: torch_rows(S2 + f"pdl-torch-torch-nccl-{g}.json") for g in ("auto", "on")}
    body = [
        ["C++ raw `ncclAllReduce`, plain memory, eager / graph", _pair(c["auto"], "plain"), _pair(c["on"], "plain"), "-"],
        ["C++, ncclpool window, eager"] + [_deps(c[g], ("window", "eager")) for g in ("auto", "on", "on-nomix")],
        ["C++, ncclpool window, graph as captured"] + [_deps(c[g], ("window", "graph")) for g in ("auto", "on", "on-nomix")],
        ["C++, window, graph-forced (NCCL's edges replaced by one programmatic edge)"] + [
            _forced(c[g]) for g in ("auto", "on", "on-nomix")],
    ]
    for mode, name in (("plain", "torch `dist.all_reduce`, plain, eager / graph"),
                       ("ncclpool", "torch, `ncclpool.torch` symmetric pool, eager / graph"),
                       ("torch-symm", "torch, torch's own symmetric memory, eager / graph")):
        body.append([name, _pair(t["auto"], mode), _pair(t["on"], mode), "-"])
    return table(["check", "guard's default (`auto`: off on 2.28.9)", "kernels `on`",
                  "`on`, `NCCL_GRAPH_MIXING_SUPPORT=0`"], body, [Run(S2 + "pdl-torch-nccl-auto.json")])


# ---- e370088: NCCL 2.30.7 and 2.29.7 built from source ----

def _version_table(folder, version):
    direct = {g: cpp(folder + f"pdl-nccl-{version}-1-{g}.json") for g in ("auto", "on", "on-nomix")}
    swapped = {g: cpp(folder + f"pdl-torch-on-nccl-{version}-1-{g}.json") for g in ("auto", "on", "on-nomix")}
    t = {g: torch_rows(folder + f"pdl-torch-torch-on-nccl-{version}-1-{g}.json") for g in ("auto", "on")}
    sk = data(folder + f"pdl-nccl-{version}-1-auto.json")["symmetric_kernels"]
    head = "**on** here, \"no known hazard\"" if sk["enabled"] and not sk["hazard"] else "**off** here"

    def same(g):
        if swapped[g] != direct[g]:
            return "; ".join(f"{m} {l} {_frac(*v[:2])}" for (m, l), v in swapped[g].items())
        return "as above" + (", 0 wrong in every row" if g == "auto" and all(v[0] == 0 for v in swapped[g].values()) else "")

    def torch_cell(g):
        vals = [t[g][(m, l)] for m in ("plain", "ncclpool") for l in ("eager", "graph")]
        return _uniform(vals, "four") or "; ".join(f"{m} {_pair(t[g], m)}" for m in ("plain", "ncclpool"))

    symm = {g: {v for (m, _), v in t[g].items() if m == "torch-symm"} for g in ("auto", "on")}
    symm_auto = " / ".join(sorted(v if isinstance(v, str) else _frac(*v) for v in symm["auto"]))
    body = [
        ["C++ raw `ncclAllReduce`, plain, eager / graph", _pair(direct["auto"], "plain"), _pair(direct["on"], "plain"), "-"],
        ["C++, ncclpool window" + (" (symmetric flag)" if direct["auto"][("window", "eager")][3] else "") + ", eager / graph"]
        + [_pair(direct[g], "window") for g in ("auto", "on", "on-nomix")],
        ["C++, window, graph-forced (one programmatic edge)"] + [_forced(direct[g]) for g in ("auto", "on", "on-nomix")],
        ["same, torch's `libnccl.so.2` swapped"] + [same(g) for g in ("auto", "on", "on-nomix")],
        ["torch `dist.all_reduce`, plain / ncclpool symmetric pool, eager and graph", torch_cell("auto"), torch_cell("on"), "-"],
        ["torch's own symmetric memory", symm_auto, "the same" if symm["on"] == symm["auto"] else " / ".join(
            sorted(map(str, symm["on"]))), "-"],
    ]
    return table([f"check, NCCL {version}", f"guard's default (`auto`: {head})", "kernels `on`", "`on`, graph mixing off"],
                 body, [Run(folder + f"pdl-nccl-{version}-1-auto.json")])


def _version_sources(folder, version):
    return ([folder + f"pdl-{k}-{version}-1-{g}.json" for k in ("nccl", "torch-on-nccl") for g in ("auto", "on", "on-nomix")]
            + [folder + f"pdl-torch-torch-on-nccl-{version}-1-{g}.json" for g in ("auto", "on")])


figure("pdl.v2307.table", *_version_sources(V30, "2.30.7"))(lambda: _version_table(V30, "2.30.7"))
figure("pdl.v2297.table", *_version_sources(V29, "2.29.7"))(lambda: _version_table(V29, "2.29.7"))


# ---- what the guard costs: decode in a CUDA graph and an FSDP2 step (e370088) ----

def _decode(mode, size, guard=None):
    return [s["us"] for s in data(GUARD)["samples"]
            if s["mode"] == mode and s["size"] == size and (guard is None or s["guard"] == guard)]


def _mmm(vals, places=2):
    return f"{fmt(statistics.median(vals), places)} ({fmt(min(vals), places)}-{fmt(max(vals), places)})"


def _fsdp2(spec):
    vals = [r["steady_step_ms"] for r in data(FSDP2) if r["spec"] == spec]
    if not vals:
        raise KeyError(f"no {spec} run in {FSDP2}")
    return vals


FSDP2_SPECS = {"plain": "plain", "auto": "ncclpool-auto+NCCLPOOL_SYMMETRIC_KERNELS=auto", "on": "ncclpool-auto"}


@figure("pdl.cost.table", GUARD, FSDP2)
def _cost_table():
    body = []
    for i, size in enumerate((16 * KIB, MIB, 4 * MIB, 16 * MIB)):
        label = f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"
        if i == 0:
            label = ("decode all-reduce in a CUDA graph (`decode_bench.py --guard auto,on --rounds 3`), "
                     f"{label}, us: symmetric pool / auto pool")
        cells = [f"{_mmm(_decode('symmetric', size, g))} / {fmt(statistics.median(_decode('auto', size, g)), 2)}"
                 for g in ("auto", "on")]
        body.append([label, fmt(statistics.median(_decode("plain", size)), 2)] + cells)
    first = data(FSDP2)[0]
    body.append([f"FSDP2 step, {first['layers']} blocks of dim {first['dim']}, 4 x {first['tokens'] // 4:,} tokens "
                 "(`fsdp2_bench.py`, 3 rounds), ms, auto pool"] + [_mmm(_fsdp2(FSDP2_SPECS[k])) for k in ("plain", "auto", "on")])
    return table(["measurement", "plain", "guard's default (`auto`)", "kernels `on`"], body, [Run(GUARD)])


def _fsdp2_faster(spec, than):
    a, b = statistics.median(_fsdp2(FSDP2_SPECS[spec])), statistics.median(_fsdp2(FSDP2_SPECS[than]))
    return fmt((b - a) / b * 100, 1) + "%"


figure("pdl.cost.fsdp2_vs_plain_pct", FSDP2)(lambda: _fsdp2_faster("auto", "plain"))
figure("pdl.cost.fsdp2_vs_on_pct", FSDP2)(lambda: _fsdp2_faster("auto", "on"))


# ---- the device calls' wall time: gpu-check's start (its log) to its summary's time stamp ----

from .gpu_check import call_s  # noqa: E402

figure("pdl.e37.call1_s", S2 + "gpu-check.log")(lambda: fmt(call_s(S2)) + " s")

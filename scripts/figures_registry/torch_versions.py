"""Figures of the torch versions (issue 45): gpu-check's `torchversions` section under torch 2.11 (2x H200)
and 2.14.1 and 2.15.0 (nccl2 and classic; first on 2x H200 at a4d67eb, the current rows run again at
6e9534d on a 4x H200 host, two ranks a configuration), and tests/gpu/torch/probe_nccl2_hook.py on 2.15's nccl2.
Quoted by README.md, docs/python.md ("Torch versions") and docs/gpu-check.md.
"""

import re
import statistics
from collections import defaultdict

from . import Run, data, figure, fmt, span, table

TV = "2026-11-27-torch-versions-2xh200-a4d67eb"
CALL2 = f"{TV}/call2-three-versions"
CALL3 = f"{TV}/call3-nccl2-refusal-2.11"
CALL4 = "2026-11-28-gpu-check-issue46-s4/call10-4xh200-torchversions-6e9534d"  # every change of the torch layer since
J2, J3, J4 = f"{CALL2}/torchversions.json", f"{CALL3}/torchversions.json", f"{CALL4}/torchversions.json"
# Each configuration: the call whose run of it stands, the latest (2.11's: the host's torch, which every other
# GPU check runs too).
CONFIGS = [("2.11", J3), ("2.14.1", J4), ("2.14.1-nccl2", J4), ("2.15.0", J4), ("2.15.0-classic", J4)]
SOURCES = sorted({p for _, p in CONFIGS})
LABEL = {"2.11": "2.11.0", "2.14.1": "2.14.1", "2.14.1-nccl2": "2.14.1, `TORCH_DIST_USE_NCCL2=1`",
         "2.15.0": "2.15.0 (its default)", "2.15.0-classic": "2.15.0, `TORCH_DIST_USE_NCCL2=0`"}
NCCL_230 = ("2.14.1", "2.15.0", "2.15.0-classic")  # the configurations on NCCL 2.30.7 with a decode run
MIB = 1 << 20


def _file(cfg, name):
    """A file of the configuration's own folder, beside the torchversions.json its row comes from."""
    return f"{dict(CONFIGS)[cfg].rsplit('/', 1)[0]}/torchversions-{cfg}/{name}"


def _decode(cfg):
    return _file(cfg, "decode.json")


PROBE = _file("2.15.0", "probe.json")  # nccl2's
PROBED = ("2.15.0", "2.15.0-classic")  # the configurations with a hook probe


def _config(cfg):
    path = dict(CONFIGS)[cfg]
    found = [c for c in data(path)["configs"] if c["config"] == cfg]
    if len(found) != 1:
        raise KeyError(f"{len(found)} configs {cfg} in {path}")
    return found[0]


def _versions(cfg):
    """torch, its CUDA build, NCCL built/loaded and the class "nccl" made, from the config's versions line."""
    v = _config(cfg)["versions"]
    m = re.match(r"torch (\S+) \(CUDA ([\d.]+), built with NCCL ([\d.]+)\), nccl makes (\w+), NCCL loaded (\d+), (\d+) GPUs", v)
    if not m:
        raise ValueError(f"versions line of {cfg}: {v!r}")
    loaded = int(m.group(5))
    return {"torch": m.group(1), "cuda": m.group(2), "built": m.group(3), "made": m.group(4),
            "loaded": f"{loaded // 10000}.{loaded // 100 % 100}.{loaded % 100}", "code": loaded, "gpus": int(m.group(6))}


def _kernels_default(code):
    """What NCCLPOOL_SYMMETRIC_KERNELS=auto gives on that NCCL (docs/python.md, "NCCL versions"); the runs
    themselves set `on`."""
    if 22800 <= code < 23007:
        return "**on, fenced** under ncclpool.torch (it declares the fence); off (guard) where nothing declares it"
    return "on (no fence needed)"


def _ratio(cfg, mode="symmetric"):
    """plain / mode per size, of the run's one round."""
    us = defaultdict(list)
    for s in data(_decode(cfg))["samples"]:
        us[(s["size"], s["mode"])].append(s["us"])
    sizes = sorted({z for z, _ in us})
    return {z: statistics.median(us[(z, "plain")]) / statistics.median(us[(z, mode)]) for z in sizes}


def _size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // 1024} KiB"


def _pdl(c):
    w = c["pdl"].get("on", {}).get("wrong_per_launches", {})
    if not w:
        return "-"
    def one(k):
        v = w.get(k, "-")
        return v if "/" in v and len(v) < 12 else "error: " + v.split(":")[0]
    return (f"ncclpool eager {one('ncclpool eager')}, graph {one('ncclpool graph')}; "
            f"torch's symmetric memory eager {one('torch-symm eager')}")


def _cell(cfg, what):
    c = _config(cfg)
    if what == "torch_layer":
        t = c["torch_layer"]
        return "-" if t is None else f"{t['ok']} ok, {len(t['failed'])} failed"
    if what == "copy_engine":
        ce = c["copy_engine"]
        if not ce["main"]:
            return "-"
        ok = lambda s: "ok" if s and s.startswith("RESULT ok") else (s or "-")
        return f"{ok(ce['main'])}; rank 1 off: {ok(ce['off'])}"
    if what == "pdl":
        return _pdl(c)
    if what == "fsdp2":
        f = c["fsdp2"]
        if not f:
            return "-"
        p, a = f["modes"]["plain"], f["modes"]["ncclpool-auto"]
        return (f"auto pool {fmt(a['steady_step_ms'], 1)} ms vs plain {fmt(p['steady_step_ms'], 1)} ms, "
                f"memory +{fmt(a['memory_vs_plain_pct'], 1)}%")
    if what == "decode":
        if not c["decode"]:
            return "-"
        r = _ratio(cfg)
        return f"{span(r.values(), 2)}x (1 MiB {fmt(r[MIB], 2)}x, 16 MiB {fmt(r[16 * MIB], 2)}x)"
    if what == "sglang":
        s = c["sglang"]
        if not s:
            return "-"
        cases = s["cases"]
        right = sum(1 for v in cases.values() if v["rc"] == 0 and v["rank0"].endswith("next all-reduce right"))
        return f"{right} of {len(cases)} ({', '.join(k.split('-')[0] for k in cases)}): error raised, next all-reduce right"
    if what == "nccl2":
        if c["refusal"]:
            ranks = c["refusal"]["ranks"]
            named = all(r["refused"] and "TORCH_DIST_USE_NCCL2=0" in r["message"] for r in ranks)
            return f"refused on {sum(r['refused'] for r in ranks)} of {len(ranks)} ranks" + (
                ", naming `TORCH_DIST_USE_NCCL2=0`" if named else "")
        if c["probe"]:
            ok = "hook probe: " + ("ok" if c["probe"]["result"] == "RESULT ok" else c["probe"]["result"])
            hook = data(_file(cfg, "probe.json"))["summary"]["hook_registrations_on_ncclpool_segments"]
            return ok + ("; torch registered none of ncclpool's segments" if not any(hook.values()) else " (below)")
        return "-"
    if what == "seconds":
        return f"{c['seconds']} s"
    raise KeyError(what)


@figure("torchversions.matrix", *SOURCES, *[_decode(c) for c, _ in CONFIGS if c != "2.14.1-nccl2"], *[_file(c, "probe.json") for c in PROBED])
def _matrix():
    cfgs = [c for c, _ in CONFIGS]
    v = {c: _versions(c) for c in cfgs}
    body = [
        ["CUDA build / NCCL loaded"] + [f"{v[c]['cuda']} / {v[c]['loaded']}" for c in cfgs],
        ['`init_process_group("nccl")` made'] + [f"`{v[c]['made']}`" for c in cfgs],
        ["symmetric kernels by default (`auto`)"] + [_kernels_default(v[c]["code"]) for c in cfgs],
        ["torch layer checks"] + [_cell(c, "torch_layer") for c in cfgs],
        ["copy-engine all-gather"] + [_cell(c, "copy_engine") for c in cfgs],
        ["PDL control, kernels `on`: wrong of launches"] + [_cell(c, "pdl") for c in cfgs],
        ["FSDP2 (one round): steady step, device memory vs plain"] + [_cell(c, "fsdp2") for c in cfgs],
        ["decode graph, kernels `on` (one round): symmetric pool / plain, 16 KiB-16 MiB"] + [_cell(c, "decode") for c in cfgs],
        ["SGLang failure cases"] + [_cell(c, "sglang") for c in cfgs],
        ["nccl2"] + [_cell(c, "nccl2") for c in cfgs],
        ["time"] + [_cell(c, "seconds") for c in cfgs],
        ["call"] + [dict(CONFIGS)[c].split("/")[1] for c in cfgs],
    ]
    return table(["torch"] + [LABEL[c] for c in cfgs], body, [Run(p) for p in SOURCES])


def _ran(cfg):
    """One configuration's checks in a few words: what ran and whether it passed."""
    c = _config(cfg)
    if c["refusal"]:
        return _cell(cfg, "nccl2")
    t = c["torch_layer"]
    ok = (t and not t["failed"] and c["copy_engine"]["main"].startswith("RESULT ok")
          and c["pdl"]["on"]["result"] == "RESULT ok" and c["fsdp2"] and c["decode"] and not c["sglang"]["failures"])
    return (f"torch checks {t['ok']}/{t['ok'] + len(t['failed'])}, copy engine, PDL control, FSDP2, decode, "
            f"SGLang failure cases: {'all ok' if ok else 'see the matrix'}")


def _where(cfg):
    """The run a configuration's row comes from and on how many of its GPUs."""
    return f"{Run(dict(CONFIGS)[cfg]).label()}, {_versions(cfg)['gpus']} GPUs"


@figure("torchversions.support", *SOURCES)
def _support():
    v = {c: _versions(c) for c, _ in CONFIGS}
    body = [
        ["2.11.0", v["2.11"]["loaded"], "classic", "yes", _kernels_default(v["2.11"]["code"]),
         f"every GPU test and figure of the project (H100, H200); {_where('2.11')}: {_ran('2.11')}; the CPU matrix"],
        ["2.12.1, 2.13.0", "2.29.7", "classic", "yes", _kernels_default(22907), "the CPU matrix only"],
        ["2.14.1", v["2.14.1"]["loaded"], "classic", "yes", _kernels_default(v["2.14.1"]["code"]),
         f"{_where('2.14.1')}: {_ran('2.14.1')}; the CPU matrix"],
        ["2.14.1, `TORCH_DIST_USE_NCCL2=1`", v["2.14.1-nccl2"]["loaded"], "nccl2 (no `_comm_ptr`)",
         "**refused** (`Unsupported` naming `TORCH_DIST_USE_NCCL2=0`)", "-", f"{_where('2.14.1-nccl2')}: {_ran('2.14.1-nccl2')}"],
        ["2.15.0", v["2.15.0"]["loaded"], "**nccl2**", "yes (its hook registers ncclpool's segments too)",
         _kernels_default(v["2.15.0"]["code"]), f"{_where('2.15.0')}: {_ran('2.15.0')}; the nccl2 {_cell('2.15.0', 'nccl2').replace(' (below)', '')}; the CPU matrix"],
        ["2.15.0, `TORCH_DIST_USE_NCCL2=0`", v["2.15.0-classic"]["loaded"], "classic", "yes",
         _kernels_default(v["2.15.0-classic"]["code"]), f"{_where('2.15.0-classic')}: {_ran('2.15.0-classic')}"],
    ]
    return table(["torch", "NCCL", '`init_process_group("nccl")` makes', "ncclpool.torch",
                  "symmetric kernels by default", "ran where"], body, [Run(p) for p in SOURCES])


@figure("torchversions.calls", J2, J3, J4)
def _calls():
    body = []
    for path in (J2, J3, J4):
        d = data(path)
        cfgs = ", ".join(f"{c['config']} {c['seconds']} s" for c in d["configs"])
        fails = d["failed_rows"]
        failed = []
        for f in fails:  # "FAIL   <check>   <detail>": the configuration is the row above it
            parts = [x.strip() for x in re.split(r"\s{2,}", f) if x.strip()]
            cfg = next(c["config"] for c in d["configs"] if not c["torch_layer"] and not c["refusal"] and not c["probe"])
            failed.append(f"{cfg} {parts[1]}: {parts[2]} after {dict((c['config'], c['seconds']) for c in d['configs'])[cfg]} s "
                          "(cut by the call's budget, the data's README says; run again in call3)")
        cfg, skipped = None, []
        for r in d["rows"]:
            m = re.match(r"\s+torchversions (\S+)", r)
            if m:
                cfg = m.group(1)
            elif r.startswith("--"):
                parts = [x.strip() for x in re.split(r"\s{2,}", r[2:]) if x.strip()]
                skipped.append(f"{cfg} {parts[0]}: {parts[1]}")
        body.append([f"`{path.split('/')[1]}`", cfgs, "; ".join(failed + skipped) or "all rows ok"])
    return table(["call", "configurations (time each)", "rows failed or not run (every other row ok)"], body,
                 [Run(J2), Run(J3), Run(J4)])


# ---- the decode observation under NCCL 2.30.7 ----

@figure("torchversions.decode_1m", *[_decode(c) for c in NCCL_230])
def _decode_1m():
    return span([_ratio(c)[MIB] for c in NCCL_230], 2) + "x"


@figure("torchversions.decode_16m", *[_decode(c) for c in NCCL_230])
def _decode_16m():
    return span([_ratio(c)[16 * MIB] for c in NCCL_230], 2) + "x"


@figure("torchversions.decode_230", *[_decode(c) for c in NCCL_230])
def _decode_230():
    return span([r for c in NCCL_230 for r in _ratio(c).values()], 2) + "x"


@figure("torchversions.decode_211", _decode("2.11"))
def _decode_211():
    return span(_ratio("2.11").values(), 2) + "x"


# ---- the nccl2 hook probe (torch 2.15.0, nccl2) ----

def _probe():
    return data(PROBE)


def _per_rank(key):
    """Per rank, the count of `key` registrations per group over the probe's steps."""
    out = []
    for r in _probe()["rank_results"]:
        n = defaultdict(int)
        for s in r["steps"]:
            for g, v in s["groups"].items():
                n[g] += v.get(key, 0)
        out.append(dict(n))
    return out


@figure("torchversions.hook_counts", PROBE)
def _hook_counts():
    s = _probe()["summary"]
    hook, own, dflt = (s["hook_registrations_on_ncclpool_segments"], s["ncclpool_registrations"],
                       s["hook_registrations_on_default_pool"])
    per = _per_rank("hook_ncclpool_mempool")
    if any(sorted(set(p.values())) != sorted(set(per[0].values())) for p in per):
        raise ValueError("ranks differ")
    ranks = len(per)
    each = span([n for p in per for n in p.values()])
    groups = sorted(hook)
    if len({hook[g] for g in groups} | {own[g] for g in groups}) != 1:
        return "; ".join(f"{g}: hook {hook[g]}, ncclpool {own[g]}" for g in groups)
    return (f"{hook[groups[0]]} registrations of ncclpool's segments by torch's hook on each of the {len(groups)} groups "
            f"({each} per rank, {ranks} ranks), as many as ncclpool's own ({own[groups[0]]}); "
            f"torch's default pool: {span(dflt.values())}")


@figure("torchversions.hook_when", PROBE)
def _hook_when():
    """When the hook registered ncclpool's segments: at which steps (every rank, every group)."""
    at_alloc, at_coll = defaultdict(int), 0
    for r in _probe()["rank_results"]:
        for s in r["steps"]:
            for g, v in s["groups"].items():
                n = v.get("hook_ncclpool_mempool", 0)
                if "all-reduce" in s["step"] and "allocated" not in s["step"]:
                    at_coll += n
                else:
                    at_alloc[g] += n
    return f"{span(at_alloc.values())} per group at the segment's allocation, {at_coll} at a collective"


@figure("torchversions.probe_first", PROBE)
def _probe_first():
    c = _probe()["summary"]["collectives_ms"]
    pools = ["plain", "local pool", "symmetric pool", "live pool"]
    first = ", ".join(f"{p} {fmt(c[f'{p}, mid, world']['first'], 2)}" for p in pools)
    second = span([c[f"{p}, mid, world"]["second"] for p in pools], 2)
    r0 = _probe()["rank_results"][0]
    mid = next(s["address"] for s in r0["steps"] if s["step"] == "local pool: mid allocated")
    seg = next(g["bytes"] for g in r0["segments"] if g["address"] == mid)
    tensor = next(x["bytes"] for x in r0["collectives"] if x["tensor"] == "mid")
    return (f"a {_size(tensor)} tensor in a fresh {_size(seg)} segment on the default group (the slower rank, one "
            f"sample each): {first} ms; the second {second} ms")


@figure("torchversions.probe_table", PROBE)
def _probe_table():
    c = _probe()["summary"]["collectives_ms"]
    sizes = {}
    for r in _probe()["rank_results"][0]["collectives"]:
        sizes[r["tensor"]] = r["bytes"]
    body = []
    for key in c:
        pool, tensor, group = key.split(", ")
        if group != "world":
            continue
        sec = c.get(f"{pool}, {tensor}, second")
        row = [pool, f"{tensor} ({_size(sizes[tensor])})",
               f"{fmt(c[key]['first'], 2)} / {fmt(c[key]['second'], 2)}",
               f"{fmt(sec['first'], 2)} / {fmt(sec['second'], 2)}" if sec else "-"]
        body.append(row)
    return table(["memory", "tensor", "world: first / second all-reduce ms", "second group: first / second ms"],
                 body, [Run(PROBE)])


@figure("torchversions.probe_results", PROBE)
def _probe_results():
    s = _probe()["summary"]
    return (f"{s['wrong']} wrong results, {s['nccl_warnings']} NCCL WARN lines, {s['torch_warnings']} torch "
            f"warnings, {len(s['errors'])} errors")


@figure("torchversions.probe_trim", PROBE)
def _probe_trim():
    steps = {s["step"]: s for s in _probe()["rank_results"][0]["steps"]}
    out = []
    for pool in ("local pool", "symmetric pool"):
        held = steps[f"{pool}: trimmed while torch holds its segments"]["trimmed_bytes"]
        left = steps[f"{pool}: the user's MemPool reference dropped, empty_cache"]["torch_segments_left"]
        after = steps[f"{pool}: trimmed"]["trimmed_bytes"]
        out.append((held, left, after))
    held = span([o[0] / MIB for o in out])
    left = span([o[1] for o in out])
    after = span([o[2] / MIB for o in out])
    return (f"a trim while torch held the pool's segments returned {held} MiB; with the user's MemPool "
            f"reference dropped torch still held {left} segments (ncclpool.torch's own reference); once that "
            f"was dropped too, the trim returned {after} MiB")


@figure("torchversions.run", J4)
def _run():
    return Run(J4).label()

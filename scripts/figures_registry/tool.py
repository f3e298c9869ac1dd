"""Figures of docs/tool.md: what the replay reports at a pool's peak, bench coll's noise and compute
load, and `ncclpool tune`'s runs (2x H200), read from the raw files the benchmark pages cite."""

import math
import re
import statistics

from . import Run, data, listdir, figure, fmt, rows, span, text
from .coll import CE, COLL, DF7, OPS, S5_GRAPH, size
from .coll_text import tune_tables

MIB = 1 << 20

# ---- `ncclpool replay`: where the shared pool's bytes were at its peak (FSDP2, 1 GiB chunks) ----

PEAK_NOW = "2026-11-25-growth-sim-4c07312/fsdp2-tensors-min0.json"       # the default growth
PEAK_C9 = "2026-11-23-replay-c9c2fc7/fsdp2_2gpu-tensors-1024.json"        # every request its own size
PEAK_442 = "2026-11-23-replay-4422052/fsdp2_2gpu-tensors-1024.json"       # whole chunks


def _find(o, key):
    if isinstance(o, dict):
        if key in o:
            return o[key]
        for v in o.values():
            found = _find(v, key)
            if found is not None:
                return found
    return None


def at_peak(path):
    """The shared pool's `at_peak` breakdown of a replay's --json, in MiB."""
    found = _find(data(path), "at_peak")
    if found is None:
        raise KeyError("no at_peak in " + path)
    return {k: v / MIB for k, v in found.items()}


def _mib(v, places=0):
    return fmt(v, places) + " MiB"


@figure("tool.replay.peak_now", PEAK_NOW)
def _peak_now():
    p = at_peak(PEAK_NOW)
    return (f"{_mib(p['reserved'])} reserved at the peak, {_mib(p['requested'], 1)} live, {_mib(p['free_in_used_segments'], 1)} "
            f"free in used segments of which {_mib(p['never_used'], 1)} never used, {_mib(p['empty_segments'])} in empty "
            f"segments ({Run(PEAK_NOW).label()})")


@figure("tool.replay.peak_before", PEAK_C9, PEAK_442)
def _peak_before():
    c9, old = at_peak(PEAK_C9), at_peak(PEAK_442)
    if c9["empty_segments"] or old["empty_segments"]:
        raise ValueError("an empty segment at the peak")
    return (f"{_mib(c9['requested'])} live, {_mib(c9['free_in_used_segments'])} free of which {_mib(c9['never_used'])} never "
            f"used, no empty segment; before that (4422052), {_mib(old['requested'])} live, "
            f"{_mib(old['free_in_used_segments'])} free of which {_mib(old['never_used'])} never used")


# ---- `ncclpool bench coll`: run-to-run noise, the compute load ----

def _spreads(path, lo, hi):
    return [r["spread_pct"] for op in OPS for r in rows(data(path), op) if "bytes" in r and lo <= r["bytes"] < hi]


@figure("tool.coll.eager_small", COLL)
def _eager_small():
    us = [r[k + "_us"] for op in OPS for r in rows(data(COLL), op) if "bytes" in r and r["bytes"] < 64 * 1024
          for k in ("none", "local", "symmetric")]
    return (f"{span(us)} us with a median {fmt(statistics.median(_spreads(COLL, 0, 64 * 1024)))}% run-to-run spread on "
            f"2x H200 ({Run(COLL).commit})")


@figure("tool.coll.spreads", COLL, S5_GRAPH)
def _spreads_fig():
    g, small, big = _spreads(S5_GRAPH, 0, 1 << 40), _spreads(COLL, 0, MIB), _spreads(COLL, MIB, 1 << 40)
    return (f"graph replays spread a median {fmt(statistics.median(g), 1)}% (max {fmt(max(g), 1)}%; {Run(S5_GRAPH).commit}), "
            f"eager launches below 1 MiB {fmt(statistics.median(small))}% ({span(small)}%), from 1 MiB "
            f"{fmt(statistics.median(big), 1)}% (max {fmt(max(big))}%; {Run(COLL).commit})")


@figure("tool.coll.compute_vs_coll", COLL)
def _compute_vs_coll():
    """The compute chunk over the collective at large sizes: the symmetric peak bus bandwidth / 300 GB/s."""
    peak = {(r["op"], r["kind"]): r["peak_busbw"] for r in rows(data(COLL), "summary")}
    return span([peak[(op, "symmetric")] / 300 for op in OPS], 1) + "x"


TUNE_RUNS = DF7 + "tune-runs/"


def _run_files(folder):
    return listdir(folder, "coll-ctas-*-round-*.json")


@figure("tool.coll.beside", TUNE_RUNS)
def _beside():
    r_ = []
    for f in _run_files(TUNE_RUNS):
        rel = f
        for op in OPS:
            for r in rows(data(rel), op):
                if r.get("bytes", 0) >= 4 * MIB:
                    r_ += [r[k + "_beside_us"] / r[k + "_us"] for k in ("none", "local", "symmetric")]
    return (f"a median {fmt(statistics.median(r_), 1)}x its time alone ({span(r_, 1)}x over every kind and CTA count "
            f"from 4 MiB; tune's runs, {Run(TUNE_RUNS).label()})")


# ---- `ncclpool tune` ----

S5 = "2026-11-27-gpu-check-2xh200-s5/"
S5_TUNE, S5_TUNECE = S5 + "call5-tune-nccl-2.30.7/tune.txt", S5 + "call5-tune-nccl-2.30.7/tunece.txt"
DF7_TUNE = DF7 + "tune.txt"
CECOLL_TUNE = "2026-11-27-gpu-check-2xh200-s3/tune-from-cecoll/tune.txt"


def cta_note(path):
    m = re.search(r"symmetric CTAs: (\w+) \(alone, geometric mean of symmetric times relative to it: nccl ([\d.]+), "
                  r"16 ([\d.]+), 32 1;.*?step time relative to \w+: nccl ([\d.]+), 16 ([\d.]+), 32 1;", text(path))
    if not m:
        raise KeyError("no CTA note in " + path)
    return m.groups()


def _ctas(path, again=""):
    c, nccl, c16, nccl_step, c16_step = cta_note(path)
    return (f"{c} CTAs{again} (NCCL's count {nccl}x slower alone and its steps {nccl_step}x longer; 16 CTAs {c16}x "
            f"and {c16_step}x)")


def _kinds(path):
    """'symmetric for every op from 16 KiB to 1 GiB', or the sizes where another kind was chosen."""
    t = tune_tables(path)
    other = {}
    for op in OPS:
        for b, v in t[(op, "time")].items():
            if v["kind"] != "symmetric":
                other.setdefault((b, v["kind"]), []).append(op.replace("_", "-"))
    sizes = sorted(t[(OPS[0], "time")])
    if not other:
        return f"symmetric for every op from {size(sizes[0])} to {size(sizes[-1])}"
    return "symmetric at every size but " + "; ".join(
        f"{size(b)} of {' and '.join(ops)} ({kind} there)" for (b, kind), ops in sorted(other.items()))


figure("tool.tune.df7", DF7_TUNE)(lambda: f"{_ctas(DF7_TUNE, ' both ways')} and {_kinds(DF7_TUNE)}")
figure("tool.tune.s5", S5_TUNE)(lambda: f"{_ctas(S5_TUNE, ' again')}, {_kinds(S5_TUNE)}")


def _ce_note(path):
    m = re.search(r"copy-engine all-gather: chosen, step with compute beside ([\d.]+) of the chosen kind's "
                  r"\(geometric mean over (\d+) in-place all-gather sizes from 1 MiB\)", text(path))
    if not m:
        raise KeyError("no chosen copy-engine note in " + path)
    return float(m.group(1))


@figure("tool.tune.s5_ce", S5_TUNECE)
def _s5_ce():
    r = _ce_note(S5_TUNECE)
    return f"{fmt(r, 3)} of the chosen kind's from 1 MiB, in place: {fmt((1 - r) * 100, 1)}% shorter"


figure("tool.tune.cecoll_inplace", CECOLL_TUNE)(lambda: fmt(_ce_note(CECOLL_TUNE), 3))


@figure("tool.tune.cecoll_outplace", CE)
def _cecoll_outplace():
    """ce's step over the symmetric kernels', geometric mean over the out-of-place sizes from 1 MiB."""
    r = [row["ce_step"] / row["symmetric_step"] for row in rows(data(CE), "all_gather")
         if row.get("placement") == "out" and row["bytes"] >= MIB]
    return fmt(math.exp(statistics.mean(math.log(x) for x in r)), 3)


# The hung runs: nvidia-smi utilization per GPU at 50 s of a run still going.
SMI4 = [f"2026-11-27-gpu-check-2xh200-s4/diag-tune-hang/call6-child-{c}.smi" for c in ("32-1", "32-2", "nccl-1")]
SMI5 = S5 + "call3-diag-hang/A3.smi"


def _smi(path):
    return sorted(int(m) for m in re.findall(r"^\d+, (\d+) %", text(path), re.M))


@figure("tool.tune.hang_smi", *SMI4)
def _hang_smi():
    u = {tuple(_smi(p)) for p in SMI4}
    if len(u) != 1:
        raise ValueError(f"the hung runs differ: {u}")
    lo, hi = u.pop()
    return f"one GPU sat at {lo}% while the other spun at {hi}%"


figure("tool.tune.hang_smi5", SMI5)(lambda: " / ".join(f"{v}%" for v in _smi(SMI5)))


@figure("tool.tune.run_s", S5_TUNE.replace(".txt", ".err"), S5_TUNECE.replace(".txt", ".err"), S5 + "call3-diag-hang/summary.txt")
def _run_s():
    """How long one bench coll child of tune takes: tune's progress lines, and the finished diagnosis runs."""
    secs = []
    for p in (S5_TUNE, S5_TUNECE):
        t = [int(x) for x in re.findall(r"(\d+) s so far", text(p.replace(".txt", ".err")))]
        secs += [b - a for a, b in zip(t, t[1:])]
    secs += [int(x) for x in re.findall(r"rc=0\s+(\d+)s", text(S5 + "call3-diag-hang/summary.txt"))]
    return span(secs) + " s"


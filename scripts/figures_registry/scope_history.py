"""Figures of docs/benchmarks/scope.md, its earlier sections (2026-11-22 to 2026-11-25): the scope.py module
holds the latest runs."""

import re
import statistics

from . import Run, data, figure, fmt, rows, span, table, text
from .alloc import Pair

# Lockstep by construction: c7ebd93 (base) against 16784cd (new) on the simulator, six rounds each.
LOCK = "2026-11-25-scope-sim-lockstep-16784cd/"
LOCK_FILES = [LOCK + f"{side}-run{i}.json" for side in ("base", "new") for i in range(1, 7)]


def _lock(side, col):
    out = {}
    for i in range(1, 7):
        for r in rows(data(LOCK + f"{side}-run{i}.json")):
            if r["strategy"] == "ncclpool":
                out.setdefault((r["segments"], r["groups"]), []).append(r[col])
    return out


def _mmm(v, places):
    return f"{fmt(statistics.median(v), places)} [{fmt(min(v), places)}-{fmt(max(v), places)}]"


@figure("scope.lock.table", *LOCK_FILES)
def _lock_table():
    h = {s: _lock(s, "host_per_use_us") for s in ("base", "new")}
    c = {s: _lock(s, "commit_host_us") for s in ("base", "new")}
    body = [[k[0], k[1], _mmm(h["base"][k], 3), _mmm(h["new"][k], 3), _mmm(c["base"][k], 2), _mmm(c["new"][k], 2)]
            for k in sorted(h["base"])]
    return table(["S", "G", "host us/use, before", "after", "commit host us (nothing pending), before", "after"], body,
                 [Pair(LOCK, "c7ebd93", "16784cd")])


figure("scope.lock.commit_g1_before", *LOCK_FILES)(lambda: span(
    [statistics.median(v) for k, v in _lock("base", "commit_host_us").items() if k[1] == 1], 1) + " us")


# Scope ends agree on a schedule: d65e0d2, three runs on 2x H200 (two JSON, one text), S = 64.
SCHED = [f"2026-11-23-scope-2xh200-d65e0d2-run{i}.json" for i in (1, 2)]
SCHED_TXT = "2026-11-23-scope-2xh200-d65e0d2-run3.txt"


def _text_rows(path):
    """The rows of the tool's text table (the third run was kept as text)."""
    out = []
    for line in text(path).splitlines():
        f = line.split()
        if len(f) == 12 and f[0].isdigit() and f[10] == "GiB":
            out.append({"segments": int(f[0]), "groups": int(f[1]), "strategy": f[2], "setup_ms": float(f[3]),
                        "per_use_us": float(f[4]), "host_per_use_us": float(f[5]), "agreements_per_use": float(f[6]),
                        "commit_host_us": float(f[7]), "reserved_bytes": int(f[9]) << 30, "ratio": float(f[11])})
    return out


def _sched(g, strategy):
    """The three runs' rows of (S = 64, G = g, strategy)."""
    runs = [rows(data(p)) for p in SCHED] + [_text_rows(SCHED_TXT)]
    return [next(r for r in rs if r["segments"] == 64 and r["groups"] == g and r["strategy"] == strategy) for rs in runs]


def _sched_vals(g, strategy, col):
    return [r[col] for r in _sched(g, strategy)]


@figure("scope.sched.table", *SCHED, SCHED_TXT)
def _sched_table():
    body = []
    for strategy in ("ncclpool", "per-group", "megatron"):
        for g in (1, 2):
            first = _sched(g, strategy)[0]
            per_use = _sched_vals(g, strategy, "per_use_us")
            if strategy == "megatron":
                cells = [_mmm(per_use, 0), "(same)", fmt(first["agreements_per_use"], 0), "-"]
            else:
                cells = [_mmm(per_use, 2), _mmm(_sched_vals(g, strategy, "host_per_use_us"), 2),
                         str(first["agreements_per_use"]), _mmm(_sched_vals(g, strategy, "commit_host_us"), 2)]
                if strategy == "ncclpool":
                    cells[1] = "**" + cells[1].replace(" [", "** [", 1)
            body.append([g, strategy] + cells + [f"{first['reserved_bytes'] >> 30} GiB"])
    body.sort(key=lambda r: ({"ncclpool": 0, "per-group": 1, "megatron": 2}[r[1]] // 2, r[0]))
    return table(["G", "strategy", "per use us (back to back)", "host us/use", "agreements/use", "commit host us",
                  "reserved"], body, [Run(p) for p in SCHED] + [Run(SCHED_TXT)])


def _med(g, strategy, col):
    return statistics.median(_sched_vals(g, strategy, col))


figure("scope.sched.host_us_g1", *SCHED, SCHED_TXT)(lambda: fmt(_med(1, "ncclpool", "host_per_use_us"), 2) + " us")
figure("scope.sched.host_us_g2", *SCHED, SCHED_TXT)(lambda: fmt(_med(2, "ncclpool", "host_per_use_us"), 2) + " us")
figure("scope.sched.back_to_back", *SCHED, SCHED_TXT)(lambda: fmt(max(
    r["per_use_us"] / r["host_per_use_us"] for g in (1, 2) for r in _sched(g, "ncclpool")), 1) + "x")
figure("scope.sched.commit", *SCHED, SCHED_TXT)(lambda: (
    f"{fmt(_med(1, 'ncclpool', 'commit_host_us'))} us at G = 1, {fmt(_med(2, 'ncclpool', 'commit_host_us'))} us at G = 2"))
figure("scope.sched.ratio_g2", *SCHED, SCHED_TXT)(lambda: (
    f"{fmt(statistics.median(_sched_vals(2, 'megatron', 'ratio')))}x (median of the runs; "
    f"{span(_sched_vals(2, 'megatron', 'ratio'))}x)"))
figure("scope.sched.agree", *SCHED, SCHED_TXT)(lambda: (
    f"{span(_sched_vals(1, 'ncclpool', 'commit_host_us'))} us (G = 1), "
    f"{span(_sched_vals(2, 'ncclpool', 'commit_host_us'))} us (G = 2)"))


# Launching the agreement from a CUDA graph: e8d14d7's bench, 2x H200.
LAUNCH = "2026-11-23-agreement-launch-2xh200-e8d14d7.txt"
LAUNCH_NAMES = {
    "eager, 1 comm": "eager ncclAllGather + event, 1 communicator (what ncclpool does)",
    "eager, 2 comms": "eager, 2 communicators",
    "grouped, 2 comms": "ncclGroupStart/End around both",
    "graph, 1 comm": "captured graph launch + event, 1 communicator",
    "graph, 2 comms": "captured graphs, 2 communicators",
    "graph-all, 2 comms": "one graph capturing both",
    "piece: cuEventRecord": "cuEventRecord alone",
    "piece: cuEventQuery (done)": "cuEventQuery of a completed event",
    "piece: context switch + back": "context switch and back",
}


def _launch():
    """{variant: (host median, min, max, back-to-back median, min, max)} of the bench's text output."""
    out = {}
    num = r"([\d.]+) \[\s*([\d.]+)-\s*([\d.]+)\]"
    for line in text(LAUNCH).splitlines():
        m = re.match(r"(.+?)\s{2,}" + num + r"\s+" + num + r"\s*$", line)
        if m:
            out[m.group(1)] = tuple(float(x) for x in m.groups()[1:])
    return out


@figure("scope.launch.table", LAUNCH)
def _launch_table():
    body = []
    for name, v in _launch().items():
        body.append([LAUNCH_NAMES[name], f"{fmt(v[0], 2)} [{fmt(v[1], 2)}-{fmt(v[2], 2)}]",
                     f"{fmt(v[3], 2)} [{fmt(v[4], 2)}-{fmt(v[5], 2)}]"])
    return table(["variant (rank 0)", "host us per launch", "back to back us"], body, [Run(LAUNCH)])


figure("scope.launch.host_gain", LAUNCH)(lambda: fmt(_launch()["eager, 1 comm"][0] / _launch()["graph, 1 comm"][0], 1) + "x")
figure("scope.launch.device", LAUNCH)(lambda: (
    f"{fmt(_launch()['graph, 1 comm'][3], 1)} against {fmt(_launch()['eager, 1 comm'][3], 1)} us"))
figure("scope.launch.query_us", LAUNCH)(lambda: fmt(_launch()["piece: cuEventQuery (done)"][0], 2) + " us")


# Every agreement point collective: 32b2253, three runs; a3fd605 (mapped, staged, check mode); f9aedb0 staged.
AGREE = [f"2026-11-22-scope-2xh200-32b2253-run{i}.json" for i in (1, 2, 3)]
A3 = [f"2026-11-22-scope-2xh200-a3fd605-run{i}.json" for i in (1, 2, 3)]
STAGED = "2026-11-22-scope-2xh200-a3fd605-staged-buffers.json"
FIRST = "2026-11-22-scope-2xh200-f9aedb0-staged-first.json"
LAYOUT = "2026-11-22-scope-2xh200-a3fd605-check-layout.json"


def _vals(paths, g, strategy, col, segments=64):
    return [r[col] for p in paths for r in rows(data(p))
            if r["segments"] == segments and r["groups"] == g and r["strategy"] == strategy]


@figure("scope.agree.table", *AGREE)
def _agree_table():
    body = []
    for g, strategy in ((1, "ncclpool"), (1, "per-group"), (2, "ncclpool"), (2, "per-group"), (1, "megatron"),
                        (2, "megatron")):
        per_use = _vals(AGREE, g, strategy, "per_use_us")
        host = "(same)" if strategy == "megatron" else _mmm(_vals(AGREE, g, strategy, "host_per_use_us"), 1)
        reserved = _vals(AGREE, g, strategy, "reserved_bytes")[0] >> 30
        body.append([g, strategy, _mmm(per_use, 0 if strategy == "megatron" else 1), host, f"{reserved} GiB"])
    return table(["G", "strategy", "per use us", "host us/use", "reserved"], body, [Run(p) for p in AGREE])


def _agree_med(g, col, paths=AGREE, strategy="ncclpool"):
    return statistics.median(_vals(paths, g, strategy, col))


figure("scope.agree.host_us_g1", *AGREE)(lambda: fmt(_agree_med(1, "host_per_use_us"), 1) + " us")
figure("scope.agree.host_us_g2", *AGREE)(lambda: fmt(_agree_med(2, "host_per_use_us"), 1) + " us")
figure("scope.agree.per_group_us", *AGREE)(lambda: span(
    [_agree_med(g, "host_per_use_us") / g for g in (1, 2)], 1) + " us")
figure("scope.agree.ratio_g2", *AGREE)(lambda: span(_vals(AGREE, 2, "megatron", "ratio")) + "x")
figure("scope.agree.megatron_ms", *AGREE)(lambda: span(
    [v / 1000 for g in (1, 2) for v in _vals(AGREE, g, "megatron", "per_use_us")]) + " ms")
figure("scope.agree.back_to_back_pct", *AGREE)(lambda: fmt(max(
    _agree_med(g, "per_use_us") / _agree_med(g, "host_per_use_us") - 1 for g in (1, 2)) * 100) + "%")
figure("scope.agree.staged", STAGED)(lambda: (
    f"{fmt(_vals([STAGED], 1, 'ncclpool', 'per_use_us')[0], 1)} us back to back and "
    f"{fmt(_vals([STAGED], 1, 'ncclpool', 'host_per_use_us')[0], 1)} us host"))
figure("scope.agree.mapped", *A3)(lambda: (
    f"{fmt(_agree_med(1, 'per_use_us', A3), 1)} / {fmt(_agree_med(1, 'host_per_use_us', A3), 1)} us"))
figure("scope.agree.mapped_range", *A3)(lambda: (
    f"{span(_vals(A3, 1, 'ncclpool', 'per_use_us'), 1)} / {span(_vals(A3, 1, 'ncclpool', 'host_per_use_us'), 1)} us"))
figure("scope.agree.first_staged", FIRST)(lambda: span(
    [v for s in (1, 64) for v in _vals([FIRST], 1, "ncclpool", "per_use_us", s)], 1) + " us")
figure("scope.agree.layout", LAYOUT)(lambda: (
    f"{fmt(_vals([LAYOUT], 1, 'ncclpool', 'per_use_us')[0], 1)} us per use at G = 1, "
    f"{fmt(_vals([LAYOUT], 2, 'ncclpool', 'per_use_us')[0])} us at G = 2"))

"""Figures of docs/benchmarks/scope.md: `ncclpool bench scope` on 2x H200 (rank 0)."""

from . import Run, data, figure, fmt, row, rows, span, table

SCOPE = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-scope.json"


def _r(segments, groups, strategy="ncclpool"):
    return row(rows(data(SCOPE)), segments=segments, groups=groups, strategy=strategy)


@figure("scope.run", SCOPE)
def _run():
    return Run(SCOPE).label()


@figure("scope.host_us_g1", SCOPE)
def _g1():
    return fmt(_r(64, 1)["host_per_use_us"], 2) + " us"


@figure("scope.host_us_g2", SCOPE)
def _g2():
    return fmt(_r(64, 2)["host_per_use_us"], 2) + " us"


@figure("scope.megatron_ms", SCOPE)
def _megatron():
    """The Megatron pattern (re-register the pool at every use), S = 64, every group count."""
    return span([_r(64, g, "megatron")["per_use_us"] / 1000 for g in (1, 2, 4)]) + " ms"


@figure("scope.table", SCOPE)
def _table():
    body = []
    for s in (1, 8, 64):
        for g in (1, 2, 4):
            n, m, p = _r(s, g), _r(s, g, "megatron"), _r(s, g, "per-group")
            body.append([s, g, fmt(n["host_per_use_us"], 2), fmt(n["commit_host_us"], 1), n["agreements_per_use"],
                         fmt(m["per_use_us"] / 1000, 1), fmt(p["host_per_use_us"], 2), fmt(n["setup_ms"], 1)])
    return table(["S", "G", "ncclpool host us/use", "commit host us", "agreements per use",
                  "Megatron pattern ms/use", "per-group host us/use", "ncclpool setup ms"], body, [Run(SCOPE)])


# ---- 2x H200 after the lockstep and house changes (deb58c4), against df7cf49 ----

import statistics  # noqa: E402

from . import jsonl  # noqa: E402

DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call1-cuda-nccl-toolbench/bench-scope.json"
DEB = "2026-11-27-gpu-check-2xh200-deb58c4/call1-nccl-pdl-torch-scope/bench-scope.json"
DF7_TORCH = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/torch.log"
DEB_TORCH = "2026-11-27-gpu-check-2xh200-deb58c4/call1-nccl-pdl-torch-scope/torch.log"
GROUPS = (1, 2, 4)


def sr(path, segments, groups, strategy="ncclpool"):
    """The row of a bench-scope JSON file (every table)."""
    return row(rows(data(path)), segments=segments, groups=groups, strategy=strategy)


@figure("scope.deb.table", DF7, DEB)
def _deb_table():
    body = []
    for g in GROUPS:
        a, b = sr(DF7, 64, g), sr(DEB, 64, g)
        body.append([g, fmt(a["host_per_use_us"], 2), fmt(b["host_per_use_us"], 2), fmt(a["commit_host_us"], 1),
                     fmt(b["commit_host_us"], 1), b["agreements_per_use"]])
    return table(["G", "host us/use, df7cf49", "deb58c4", "commit host us, df7cf49", "deb58c4", "agreements per use"],
                 body, [Run(DF7), Run(DEB)])


figure("scope.deb.host_us_g1", DEB)(lambda: fmt(sr(DEB, 64, 1)["host_per_use_us"], 2) + " us")
figure("scope.deb.host_us_g2", DEB)(lambda: fmt(sr(DEB, 64, 2)["host_per_use_us"], 2) + " us")
figure("scope.deb.megatron_ms", DEB)(lambda: span([sr(DEB, 64, g, "megatron")["per_use_us"] / 1000 for g in GROUPS]) + " ms")
figure("scope.deb.ratio_g2", DEB)(lambda: fmt(sr(DEB, 64, 2, "megatron")["ratio"]) + "x")


@figure("scope.deb.model_us", DF7, DEB)
def _deb_model():
    """How far host us/use is from agreements per use x the commit cost per group, both runs, S = 64."""
    return fmt(max(abs(r["host_per_use_us"] - r["agreements_per_use"] * r["commit_host_us"] / g)
                   for p in (DF7, DEB) for g in GROUPS for r in [sr(p, 64, g)]), 2) + " us"


figure("scope.deb.per_gather_us", DF7, DEB)(lambda: " -> ".join(
    span([sr(p, 64, g)["commit_host_us"] / g for g in GROUPS]) for p in (DF7, DEB)) + " us")


def _deb_ratio(strategy, col):
    """deb58c4 / df7cf49 of col for every S and G of the strategy."""
    return [sr(DEB, s, g, strategy)[col] / sr(DF7, s, g, strategy)[col] for s in (1, 8, 64) for g in GROUPS]


figure("scope.deb.megatron_pct", DF7, DEB)(lambda: span([(x - 1) * 100 for x in _deb_ratio("megatron", "per_use_us")]) + "%")


@figure("scope.deb.pergroup_commit", DF7, DEB)
def _deb_pergroup():
    r = _deb_ratio("per-group", "commit_host_us")
    up = [x for x in r if x > 1.25]
    return (f"{span(r, 2)}x in commit cost over the {len(r)} rows ({len(up)} of them above 1.25x; ncclpool's "
            f"{span(_deb_ratio('ncclpool', 'commit_host_us'), 2)}x)")


def _torch_reg(path):
    return next(b["value"] for b in jsonl(path, "BENCH ") if b["name"] == "first registration, torch register_mem_pool")


figure("scope.deb.torch_ms", DF7_TORCH, DEB_TORCH)(lambda: f"{fmt(_torch_reg(DF7_TORCH))} -> {fmt(_torch_reg(DEB_TORCH))} ms")


# Same-run A/B on the simulator, df7cf49 against 141b614 (the summaries in the folder: paired.py over these files).
AB = "2026-11-27-scope-sim-df7cf49-vs-141b614/"
AB_R1 = [AB + f"r1-{side}-run{i}.json" for side in ("old", "new") for i in range(1, 31)]
AB_2R = [AB + f"ab{t}-{side}-run{i}.json" for t in (2, 3) for side in ("old", "new") for i in range(1, 21)]


def _paired(tags, exclude=()):
    """paired.py: {(S, G, col): (old values, new values, sorted new / old ratios)} over the tags' rounds."""
    out = {}
    for tag, n in tags:
        for i in range(1, n + 1):
            if f"{tag}:{i}" in exclude:
                continue
            pair = [{(r["segments"], r["groups"]): r for r in rows(data(AB + f"{tag}-{side}-run{i}.json"))
                     if r["strategy"] == "ncclpool"} for side in ("old", "new")]
            for k in pair[0]:
                for col in ("host_per_use_us", "commit_host_us"):
                    o, w, _ = out.setdefault(k + (col,), ([], [], []))
                    o.append(pair[0][k][col])
                    w.append(pair[1][k][col])
    return {k: (o, w, sorted(y / x for x, y in zip(o, w))) for k, (o, w, _) in out.items()}


def _r1_ratios(col):
    return {k[:2]: statistics.median(v[2]) for k, v in _paired([("r1", 30)]).items() if k[2] == col}


def _rows_text(keys):
    return ", ".join(f"S = {s}, G = {g}" for s, g in keys)


@figure("scope.ab.commit", *AB_R1)
def _ab_commit():
    r = _r1_ratios("commit_host_us")
    slower = sorted(k for k, v in r.items() if v > 1)
    kept = [v for k, v in r.items() if k not in slower]
    return (f"{span(kept, 2)}x of before in {len(kept)} of {len(r)} rows ("
            + ", ".join(f"{fmt(r[k], 2)}x at S = {k[0]}, G = {k[1]}" for k in slower) + ")")


@figure("scope.ab.host", *AB_R1)
def _ab_host():
    r = _r1_ratios("host_per_use_us")
    odd = sorted(k for k, v in r.items() if v > 1.5)  # far outside the others: the simulator's call log (below)
    return (f"{span([v for k, v in r.items() if k not in odd], 2)}x, except "
            + ", ".join(f"S = {k[0]}, G = {k[1]} at {fmt(r[k], 2)}x" for k in odd))


@figure("scope.ab.two_rank_iqr", *AB_2R)
def _ab_iqr():
    qs = [statistics.quantiles(v[2], n=4) for v in _paired([("ab2", 20), ("ab3", 20)], {"ab2:1"}).values()]
    return span([q[0] for q in qs] + [q[2] for q in qs], 2)


# The simulator's call log: strings (base) against (operation, argument) pairs (new), 6 rounds, --ranks 1.
CALLLOG = "2026-11-27-scope-sim-calllog/"
CALLLOG_FILES = [CALLLOG + f"{side}-run{i}.json" for side in ("base", "new") for i in range(1, 7)]


def _calllog(side):
    out = {}
    for i in range(1, 7):
        for r in rows(data(CALLLOG + f"{side}-run{i}.json")):
            if r["strategy"] == "ncclpool":
                out.setdefault((r["segments"], r["groups"]), []).append(r["host_per_use_us"])
    return out


def _m3(v):
    return f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"


@figure("scope.calllog.s8g4", *CALLLOG_FILES, AB + "r1-old-run1.json")
def _calllog_s8g4():
    old = statistics.median(_paired([("r1", 30)])[(8, 4, "host_per_use_us")][0])
    return f"{_m3(_calllog('base')[(8, 4)])} -> {_m3(_calllog('new')[(8, 4)])} us (df7cf49: {old:.3f})"


@figure("scope.calllog.others", *CALLLOG_FILES)
def _calllog_others():
    a, b = _calllog("base"), _calllog("new")
    apart = [k for k in a if k != (8, 4) and (max(a[k]) < min(b[k]) or max(b[k]) < min(a[k]))]
    return ("the other rows' ranges overlapping" if not apart else
            f"the ranges apart at {_rows_text(apart)}")

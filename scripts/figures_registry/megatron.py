"""Figures of docs/benchmarks/megatron-fsdp.md (and the README's Megatron-FSDP line): the runs of
bench/megatron_fsdp_bench.py through scripts/megatron-fsdp.sh on 2x H200, one JSON line per run.

Each line is {"round": N, "result": {allocator, symmetric, ag_group, ag_cta_policy, steady_step_ms,
setup_ms, first_step_ms, peak_reserved_gib, device_used_gib, losses, ...}}. The copy-engine tables
are in megatron_ce.py.
"""

import re
import statistics

from . import Run, figure, fmt, jsonl, span, table

D23 = "2026-11-23-megatron-fsdp-2xh200-"
AC5 = D23 + "ac5b222.jsonl"  # two interleaved rounds, ncclpool at 1118caa
C9C = D23 + "c9c2fc7.jsonl"
ONE_ROUND = {k: D23 + f"{k}-gpu-check.jsonl" for k in ("8a35932", "d65e0d2", "9ed78e4", "237829c", "15fd538", "47ee55b")}
DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/megatron-fsdp.jsonl"
E37 = "2026-11-27-gpu-check-2xh200-e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/megatron-fsdp/megatron-fsdp.jsonl"

# The configurations of a full round, in the order the script runs them: (allocator, symmetric, ag_group).
CONFIGS = [("none", None, False), ("megatron", True, False), ("ncclpool", True, False), ("megatron", False, False),
           ("ncclpool", False, False), ("none", None, True), ("megatron", True, True), ("ncclpool", True, True),
           ("megatron", False, True), ("ncclpool", False, True)]
WITH_BUFFERS = [(a, s) for a in ("megatron", "ncclpool") for s in (True, False)]


def results(path):
    """The results of a run file, each with its round."""
    return [dict(r["result"], round=r.get("round", 1)) for r in jsonl(path)]


def runs_of(path, allocator, symmetric=None, ag_group=False, policy=None, rnd=None):
    """The results of one configuration (symmetric ignored for none; policy None: any but 'zero')."""
    out = []
    for r in results(path):
        if (r["allocator"], bool(r["ag_group"])) != (allocator, ag_group):
            continue
        if allocator != "none" and bool(r["symmetric"]) != symmetric:
            continue
        if (r.get("ag_cta_policy") or "default") != (policy or "default"):
            continue
        if rnd is not None and r["round"] != rnd:
            continue
        out.append(r)
    if not out:
        raise KeyError(f"no run of {allocator} symmetric={symmetric} ag_group={ag_group} policy={policy} in {path}")
    return out


def med(path, key, *cfg, **kw):
    """The median over the rounds of one configuration's key."""
    return statistics.median(r[key] for r in runs_of(path, *cfg, **kw))


def _kind(alloc, sym):
    return "-" if alloc == "none" else ("symmetric" if sym else "local")


# ---- e370088 (2026-11-27, second lease): 6 of the 8 configurations ----

@figure("megatron.e37.table", E37)
def _e37_table():
    body = []
    for r in results(E37):
        setup = fmt(r["setup_ms"], 1)
        if r["allocator"] != "none" and r["symmetric"] and not r["ag_group"]:
            setup = f"**{setup}**"
        body.append([{"megatron": "Megatron-Core"}.get(r["allocator"], r["allocator"]),
                      "no user buffers" if r["allocator"] == "none" else _kind(r["allocator"], r["symmetric"]),
                      "ag group" if r["ag_group"] else "one group", fmt(r["steady_step_ms"], 2), setup,
                      fmt(r["first_step_ms"], 1), fmt(r["peak_reserved_gib"], 2), fmt(r["device_used_gib"], 2)])
    return table(["allocator", "buffers", "groups", "steady ms", "setup ms", "first step ms", "peak reserved GiB",
                  "device GiB"], body, [Run(E37)])


@figure("megatron.e37.vs_none_pct", E37)
def _e37_vs_none():
    none = med(E37, "steady_step_ms", "none")
    return span([(none - med(E37, "steady_step_ms", a, s)) / none * 100 for a, s in WITH_BUFFERS], 1) + "%"


@figure("megatron.e37.memory_less", E37)
def _e37_memory_less():
    none = med(E37, "device_used_gib", "none")
    return span([none - med(E37, "device_used_gib", a, s) for a, s in WITH_BUFFERS], 1) + " GiB"


@figure("megatron.e37.setup_s", E37)
def _e37_setup():
    return (f"{fmt(med(E37, 'setup_ms', 'ncclpool', True) / 1000, 1)} s against "
            f"{fmt(med(E37, 'setup_ms', 'megatron', True) / 1000, 1)} s")


# ---- df7cf49 (2026-11-24): all ten configurations, one round ----

@figure("megatron.df7.table", DF7)
def _df7_table():
    body = []
    for a, s, ag in CONFIGS:
        r = runs_of(DF7, a, s, ag)[0]
        body.append(["none (no user buffers)" if a == "none" else {"megatron": "Megatron-Core"}.get(a, a), _kind(a, s),
                     "ag group" if ag else "one group", fmt(r["steady_step_ms"], 2), fmt(r["setup_ms"]),
                     fmt(r["peak_reserved_gib"], 2), fmt(r["device_used_gib"], 2)])
    return table(["allocator", "kind", "groups", "steady ms", "setup ms", "peak reserved GiB", "device GiB"], body,
                 [Run(DF7)])


figure("megatron.df7.mcore_setup_s", DF7)(lambda: fmt(med(DF7, "setup_ms", "megatron", True) / 1000, 1) + " s")
figure("megatron.df7.ncclpool_setup_ms", DF7)(lambda: fmt(med(DF7, "setup_ms", "ncclpool", True)) + " ms")


# ---- ac5b222 (2026-11-23): ten configurations, two interleaved rounds ----

def _mmr(path, key, *cfg):
    vals = [r[key] for r in runs_of(path, *cfg)]
    return statistics.median(vals), min(vals), max(vals)


@figure("megatron.ac5.table", AC5)
def _ac5_table():
    body = []
    for a, s, ag in CONFIGS:
        m, lo, hi = _mmr(AC5, "steady_step_ms", a, s, ag)
        cells = [f"{fmt(m, 2)} ({fmt(lo, 2)}-{fmt(hi, 2)})", fmt(med(AC5, "setup_ms", a, s, ag)),
                 fmt(med(AC5, "first_step_ms", a, s, ag))]
        if a == "ncclpool":  # bold where ncclpool's figure is below Megatron-Core's in the same configuration
            ref = [med(AC5, k, "megatron", s, ag) for k in ("steady_step_ms", "setup_ms", "first_step_ms")]
            mine = [m, med(AC5, "setup_ms", a, s, ag), med(AC5, "first_step_ms", a, s, ag)]
            cells = [re.sub(r"^([\d,.]+)", r"**\1**", c) if x < y else c for c, x, y in zip(cells, mine, ref)]
        name = {"none": "none (no user buffers)", "megatron": "Megatron-Core", "ncclpool": "**ncclpool**"}[a]
        body.append([name, _kind(a, s), "+ all-gather group" if ag else "one"] + cells +
                    [fmt(med(AC5, "device_used_gib", a, s, ag), 2)])
    return table(["allocator", "registration", "groups", "steady step, ms (median of 2 rounds; range)",
                  "setup (fully_shard), ms", "first step, ms", "device memory, GiB"], body, [Run(AC5)])


def _peak(with_buffers):
    return span([r["peak_reserved_gib"] for r in results(AC5) if (r["allocator"] != "none") == with_buffers], 2) + " GiB"


figure("megatron.ac5.peak_buffers", AC5)(lambda: _peak(True))
figure("megatron.ac5.peak_none", AC5)(lambda: _peak(False))
figure("megatron.ac5.ncclpool_setup_sym", AC5)(lambda: fmt(med(AC5, "setup_ms", "ncclpool", True)) + " ms")
figure("megatron.ac5.mcore_setup_sym", AC5)(lambda: fmt(med(AC5, "setup_ms", "megatron", True)) + " ms")
figure("megatron.ac5.setup_sym_ag", AC5)(lambda: (
    f"{fmt(med(AC5, 'setup_ms', 'megatron', True, True))} -> {fmt(med(AC5, 'setup_ms', 'ncclpool', True, True))} ms"))


def _diffs(path=AC5):
    """ncclpool's median steady step less Megatron-Core's, ms, per (symmetric, ag_group)."""
    return {(s, ag): med(path, "steady_step_ms", "ncclpool", s, ag) - med(path, "steady_step_ms", "megatron", s, ag)
            for s in (True, False) for ag in (False, True)}


@figure("megatron.ac5.steady_diff_ms", AC5)
def _steady_diff():
    """ncclpool less Megatron-Core, steady step, every configuration with user buffers (signed: - is faster)."""
    d = _diffs().values()
    lo, hi = min(d), max(d)
    sign = lambda v: ("+" if v > 0 else "") + fmt(v, 1)  # noqa: E731
    return f"{sign(lo)} to {sign(hi)} ms"


@figure("megatron.ac5.faster_ms", AC5)
def _faster_ms():
    return span([-v for v in _diffs().values() if v < 0], 1) + " ms"


@figure("megatron.ac5.faster_pct", AC5)
def _faster_pct():
    return span([-v / med(AC5, "steady_step_ms", "megatron", s, ag) * 100
                 for (s, ag), v in _diffs().items() if v < 0], 1) + "%"


@figure("megatron.ac5.slower", AC5)
def _slower():
    """The configurations where ncclpool's median step is not below Megatron-Core's."""
    out = [("symmetric" if s else "local registration") + (" with the all-gather group" if ag else ", one group")
           + f" (+{fmt(v, 1)} ms)" for (s, ag), v in _diffs().items() if v >= 0]
    return "; ".join(out) or "none"


@figure("megatron.ac5.local_ag", AC5)
def _local_ag():
    return (f"{fmt(med(AC5, 'steady_step_ms', 'ncclpool', False, True), 2)} against "
            f"{fmt(med(AC5, 'steady_step_ms', 'megatron', False, True), 2)} ms")


@figure("megatron.ac5.vs_none_ms", AC5)
def _vs_none():
    return span([med(AC5, "steady_step_ms", "none", None, ag) - med(AC5, "steady_step_ms", a, s, ag)
                 for a, s in WITH_BUFFERS for ag in (False, True)], 1) + " ms"


@figure("megatron.ac5.held_ms", AC5, ONE_ROUND["8a35932"])
def _held():
    """ncclpool's lead in the configurations where its median is ahead, in each round of ac5b222 and in 8a35932."""
    ahead = [k for k, v in _diffs().items() if v < 0]
    out = []
    for path, rounds in ((AC5, (1, 2)), (ONE_ROUND["8a35932"], (1,))):
        for rnd in rounds:
            for s, ag in ahead:
                out.append(runs_of(path, "megatron", s, ag, rnd=rnd)[0]["steady_step_ms"]
                           - runs_of(path, "ncclpool", s, ag, rnd=rnd)[0]["steady_step_ms"])
    if min(out) <= 0:
        return "not in every round: " + span(out, 2) + " ms"
    return span(out, 2) + " ms"


@figure("megatron.noise_pct", AC5, C9C, *ONE_ROUND.values())
def _noise():
    """How far the configurations ncclpool takes no part in (none, Megatron-Core) moved between the 2026-11-23
    runs: the largest (max - min) / min of one configuration's steady step."""
    worst = 0
    for a, s, ag in CONFIGS:
        if a == "ncclpool":
            continue
        vals = [r["steady_step_ms"] for p in [AC5, C9C] + list(ONE_ROUND.values())
                for r in results(p) if (r["allocator"], bool(r["ag_group"])) == (a, ag)
                and (a == "none" or bool(r["symmetric"]) == s)]
        worst = max(worst, (max(vals) - min(vals)) / min(vals) * 100)
    return fmt(worst, 1) + "%"


@figure("megatron.first_setup_s", C9C, *ONE_ROUND.values())
def _first_setup():
    """Megatron-Core's symmetric one-group setup in the one-round runs, where it was the first Megatron-Core run."""
    return span([med(p, "setup_ms", "megatron", True) / 1000 for p in [C9C] + list(ONE_ROUND.values())], 1) + " s"


@figure("megatron.ac5.memory_more", AC5)
def _memory_more():
    return span([med(AC5, "device_used_gib", "ncclpool", True, ag) - med(AC5, "device_used_gib", "megatron", True, ag)
                 for ag in (False, True)], 2) + " GiB"


@figure("megatron.ac5.memory_pairs", AC5)
def _memory_pairs():
    one, ag = [[fmt(med(AC5, "device_used_gib", a, True, g), 2) for a in ("ncclpool", "megatron")] for g in (False, True)]
    return f"{one[0]} vs {one[1]} GiB; {ag[0]} vs {ag[1]}"


figure("megatron.ac5.first_ncclpool", AC5)(lambda: span([med(AC5, "first_step_ms", "ncclpool", True, g)
                                                         for g in (False, True)]) + " ms")
figure("megatron.ac5.first_mcore", AC5)(lambda: span([med(AC5, "first_step_ms", "megatron", True, g)
                                                      for g in (False, True)]) + " ms")


# ---- c9c2fc7: one group, ncclpool's pool sized by its requests ----

@figure("megatron.c9c.memory", C9C)
def _c9c_memory():
    return fmt(med(C9C, "device_used_gib", "ncclpool", True), 2) + " GiB"


@figure("megatron.c9c.memory_others", C9C)
def _c9c_others():
    return f"{fmt(med(C9C, 'device_used_gib', 'megatron', True), 2)}; none {fmt(med(C9C, 'device_used_gib', 'none'), 2)}"


@figure("megatron.c9c.windows", C9C)
def _c9c_windows():
    pool = runs_of(C9C, "ncclpool", True)[0]["ncclpool"]
    sym = [c for c in pool["communicators"] if c["kind"] == "symmetric"]
    wins = sum(c["registered_segments"] for c in sym)
    ms = sum(c["registration_seconds"] for c in sym) * 1000
    return f"{pool['segments']} segments, so {wins} windows, {fmt(ms)} ms of window registration"


@figure("megatron.c9c.steady", C9C)
def _c9c_steady():
    return (f"{fmt(med(C9C, 'steady_step_ms', 'ncclpool', True), 2)} vs {fmt(med(C9C, 'steady_step_ms', 'megatron', True), 2)}"
            f" ms (none {fmt(med(C9C, 'steady_step_ms', 'none'), 2)})")


figure("megatron.c9c.setup_ncclpool", C9C)(lambda: fmt(med(C9C, "setup_ms", "ncclpool", True)) + " ms")
figure("megatron.c9c.setup_mcore", C9C)(lambda: fmt(med(C9C, "setup_ms", "megatron", True)) + " ms")


# ---- the one-round runs of gpu-check's megatron section, 2026-11-23 ----

def _one(key, k):
    path = ONE_ROUND[k]
    return lambda *cfg: med(path, key, *cfg)


def _register_one_round(k):
    path = ONE_ROUND[k]

    @figure(f"megatron.{k}.steady", path)
    def _steady():
        st = _one("steady_step_ms", k)
        pair = lambda s, ag: f"{fmt(st('ncclpool', s, ag), 2)} / {fmt(st('megatron', s, ag), 2)}"  # noqa: E731
        return (f"symmetric {pair(True, False)} ms (one group), {pair(True, True)} (all-gather group), local "
                f"{pair(False, False)} and {pair(False, True)} (none: {fmt(st('none', None, False), 2)} / "
                f"{fmt(st('none', None, True), 2)})")

    @figure(f"megatron.{k}.memory", path)
    def _memory():
        dev = _one("device_used_gib", k)
        pairs = {(s, ag): (fmt(dev("ncclpool", s, ag), 2), fmt(dev("megatron", s, ag), 2))
                 for s in (True, False) for ag in (False, True)}
        head = ("ncclpool = Megatron-Core in every configuration" if all(a == b for a, b in pairs.values())
                else "ncclpool / Megatron-Core")
        p = {k_: " / ".join(v) for k_, v in pairs.items()}
        return (f"{head} (symmetric {p[(True, False)]} GiB one group, {p[(True, True)]} all-gather group; local "
                f"{p[(False, False)]}, {p[(False, True)]})")

    @figure(f"megatron.{k}.setup", path)
    def _setup():
        su = _one("setup_ms", k)
        return f"{fmt(su('ncclpool', True, False))} vs {fmt(su('megatron', True, False))} ms"

    @figure(f"megatron.{k}.setup_ag", path)
    def _setup_ag():
        su = _one("setup_ms", k)
        return f"{fmt(su('ncclpool', True, True))} vs {fmt(su('megatron', True, True))} ms"

    @figure(f"megatron.{k}.first", path)
    def _first():
        fs = _one("first_step_ms", k)
        return (f"{fmt(fs('ncclpool', True, False))} / {fmt(fs('megatron', True, False))} ms and "
                f"{fmt(fs('ncclpool', True, True))} / {fmt(fs('megatron', True, True))} ms")

    @figure(f"megatron.{k}.ag_sym_pct", path)
    def _ag_sym_pct():
        st = _one("steady_step_ms", k)
        v = (st("ncclpool", True, True) / st("megatron", True, True) - 1) * 100
        return ("+" if v > 0 else "") + fmt(v, 1) + "%"

    @figure(f"megatron.{k}.ag_sym", path)
    def _ag_sym():
        st = _one("steady_step_ms", k)
        return f"{fmt(st('ncclpool', True, True), 2)} / {fmt(st('megatron', True, True), 2)}"


for _k in ONE_ROUND:
    _register_one_round(_k)

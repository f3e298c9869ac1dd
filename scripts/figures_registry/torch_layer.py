"""Figures of docs/benchmarks/torch.md: bench/torch_bench.py's BENCH lines on 2x H200."""

import re
import statistics

from . import Run, figure, fmt, jsonl, span, table, text

TORCH = "2026-11-27-gpu-check-2xh200-s5/call2-nccltests-torch/torch.log"
SEGMENTS, GROUPS = 64, 2  # the first-registration benchmark: 64 x 32 MiB, 2 symmetric groups


def _values(name):
    found = [b["value"] for b in jsonl(TORCH, "BENCH ") if b["name"] == name]
    if not found:
        raise KeyError(f"no BENCH line {name!r} in {TORCH}")
    return found


def _median(name):
    return statistics.median(_values(name))


def _first(which):
    return _median("first registration, " + which)


@figure("torch.run", TORCH)
def _run():
    return Run(TORCH).label()


@figure("torch.first_default_ms", TORCH)
def _first_default():
    return fmt(_first("ncclpool default"), 1) + " ms"


@figure("torch.first_torch_ms", TORCH)
def _first_torch():
    return fmt(_first("torch register_mem_pool"), 1) + " ms"


@figure("torch.first_min_segment_ms", TORCH)
def _first_min_segment():
    return fmt(_first("ncclpool min_segment 1 GiB"), 1) + " ms"


@figure("torch.min_segment_vs_torch", TORCH)
def _min_segment_vs_torch():
    return "1/" + fmt(_first("torch register_mem_pool") / _first("ncclpool min_segment 1 GiB"))


@figure("torch.window_ms", TORCH)
def _window_ms():
    """The cost of one window on 2 ranks: the default's first registration (64 windows per group) less
    plain allocation of the same tensors, per window."""
    return "~" + fmt((_first("ncclpool default") - _first("plain MemPool")) / (SEGMENTS * GROUPS), 1) + " ms"


@figure("torch.use_us", TORCH)
def _use_us():
    return fmt(_median("per use, ncclpool, G=2"), 1) + "-" + fmt(_median("per use, ncclpool, G=3"), 1) + " us"


@figure("torch.control_us", TORCH)
def _control_us():
    return fmt(_median("per use, plain use_mem_pool (control)"), 1) + " us"


@figure("torch.megatron_ms", TORCH)
def _megatron():
    return fmt(_median("per use, Megatron pattern, G=2")) + " ms"


@figure("torch.allgather_us", TORCH)
def _allgather():
    return fmt(_median("all-gather 32 MiB out, ncclpool symmetric pool")) + " us"


@figure("torch.table", TORCH)
def _table():
    def rng(name, places=1):
        v = _values(name)
        return f"{fmt(statistics.median(v), places)} ({fmt(min(v), places)}-{fmt(max(v), places)})"
    body = [
        ["first registration, 64 x 32 MiB, 2 groups: ncclpool default (3 rounds)", rng("first registration, ncclpool default") + " ms"],
        ["ncclpool `min_segment` 1 GiB", rng("first registration, ncclpool min_segment 1 GiB") + " ms"],
        ["torch `register_mem_pool` (allocation + registration)", rng("first registration, torch register_mem_pool") + " ms"],
        ["plain `MemPool`", rng("first registration, plain MemPool") + " ms"],
        ["one use, plain `torch.cuda.use_mem_pool` (control)", fmt(_median("per use, plain use_mem_pool (control)"), 1) + " us"],
        ["one use, ncclpool, G = 2 / G = 3, back to back",
         f"{fmt(_median('per use, ncclpool, G=2'), 1)} / {fmt(_median('per use, ncclpool, G=3'), 1)} us"],
        ["one use, host cost in bursts of 4, G = 2 / G = 3",
         f"{fmt(_median('per use (host), ncclpool, G=2'), 1)} / {fmt(_median('per use (host), ncclpool, G=3'), 1)} us"],
        ["Megatron pattern, G = 2", fmt(_median("per use, Megatron pattern, G=2")) + " ms"],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric",
         " / ".join(fmt(_median("all-gather 32 MiB out, " + k), 1) for k in ("plain memory", "torch symmetric pool", "ncclpool symmetric pool")) + " us"],
    ]
    return table(["figure", "value: median (range of the rounds)"], body, [Run(TORCH)])


# ---- the earlier runs of docs/benchmarks/torch.md (one module per page: all of torch.md here) ----

S3 = "2026-11-27-gpu-check-2xh200-s3/call3-torch-cetrain-compute-bound/torch.log"
DEB = "2026-11-27-gpu-check-2xh200-deb58c4/call1-nccl-pdl-torch-scope/torch.log"
E37 = "2026-11-27-gpu-check-2xh200-e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/torch.log"
DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/torch.log"
R9E = "2026-11-23-torch-bench-2xh200-9ed78e4.jsonl"
R23 = "2026-11-23-torch-bench-2xh200-237829c-run2.jsonl"
R51 = "2026-11-23-torch-bench-2xh200-51dac2e.jsonl"
RB3 = "2026-11-23-torch-bench-2xh200-b3f5b78.jsonl"
R32 = "2026-11-22-torch-bench-2xh200-32b2253-3runs.jsonl"
RA3 = "2026-11-22-torch-bench-2xh200-a3fd605-3runs.jsonl"
OVH = "2026-11-23-torch-layer-overhead-cpu-2501de9-vs-b3f5b78.txt"

FR, TR = "first registration, ncclpool", "first registration, torch register_mem_pool"
FRD, FRM, FRP = ("first registration, ncclpool default", "first registration, ncclpool min_segment 1 GiB",
                 "first registration, plain MemPool")
U2, H2, U3, H3 = ("per use, ncclpool, G=2", "per use (host), ncclpool, G=2", "per use, ncclpool, G=3",
                  "per use (host), ncclpool, G=3")
CTRL, MEG = "per use, plain use_mem_pool (control)", "per use, Megatron pattern, G=2"
AGP, AGT, AGN = ("all-gather 32 MiB out, plain memory", "all-gather 32 MiB out, torch symmetric pool",
                 "all-gather 32 MiB out, ncclpool symmetric pool")


def _recs(path, name):
    """The BENCH records `name` of a run (a gpu-check torch.log, or torch_bench's JSON lines)."""
    prefix = "BENCH " if path.endswith(".log") else ""
    found = [b for b in jsonl(path, prefix) if b["name"] == name]
    if not found:
        raise KeyError(f"no BENCH line {name!r} in {path}")
    return found


def v(path, name):
    """Every value of BENCH `name` in a run (one per round)."""
    return [b["value"] for b in _recs(path, name)]


def m(path, name):
    """The median of BENCH `name` over a run's rounds."""
    return statistics.median(v(path, name))


def _fig(name, sources, fn, tol=None):
    kw = {} if tol is None else {"tol": tol}
    figure(name, *sources, **kw)(fn)


def _num(name, path, bench, places=1, unit=" ms", stat=m):
    _fig(name, [path], lambda: fmt(stat(path, bench), places) + unit)


def _cols(path):
    """The per-run columns of torch.md's multi-run tables, from one run's BENCH lines."""
    fr = FR if _has(path, FR) else FRD
    fr_, tr = m(path, fr), m(path, TR)
    return {
        "first": (fr_, tr),
        "use2": f"{fmt(m(path, U2), 1)} / {fmt(m(path, H2), 1)} us",
        "use3": f"{fmt(m(path, U3), 1)} / {fmt(m(path, H3), 1)} us",
        "meg": f"{fmt(m(path, MEG))} ms ({fmt(m(path, MEG) * 1000 / m(path, U2))}x a use)",
        "ag": " / ".join(fmt(m(path, k), 1) for k in (AGP, AGT, AGN)) + " us",
    }


def _has(path, name):
    try:
        _recs(path, name)
        return True
    except KeyError:
        return False


# Fifth lease (s5): the prose under its table.
_fig("torch.s5.use_g2_us", [TORCH], lambda: fmt(m(TORCH, U2), 1) + " us")
_fig("torch.s5.over_control_us", [TORCH], lambda: fmt(m(TORCH, U2) - m(TORCH, CTRL), 1) + " us")
_fig("torch.s5.default_vs_torch_pct", [TORCH],
     lambda: fmt((m(TORCH, TR) - m(TORCH, FRD)) / m(TORCH, TR) * 100, 1) + "%")
_fig("torch.s5.min_segment_vs_default", [TORCH], lambda: fmt(m(TORCH, FRD) / m(TORCH, FRM)) + "x")


# Third lease (s3): first registration, four ways, 3 rounds.
def _rng(path, name, places=1):
    vals = v(path, name)
    return f"{fmt(statistics.median(vals), places)} ({fmt(min(vals), places)}-{fmt(max(vals), places)})"


def _windows(path, name):
    return span([w for b in _recs(path, name) for w in b["windows_per_group"]])


def _mib(path, name):
    return span([b["device_mib"] for b in _recs(path, name)])


@figure("torch.s3.table", S3)
def _s3_table():
    reg_alone = statistics.median(b["register_ms"] for b in _recs(S3, TR))
    body = [
        ["ncclpool, default growth", _rng(S3, FRD), _windows(S3, FRD), _mib(S3, FRD)],
        ["**ncclpool, `min_segment` 1 GiB**", f"**{_rng(S3, FRM)}**", f"**{_windows(S3, FRM)}**", _mib(S3, FRM)],
        ["torch `register_mem_pool` (allocation + registration)",
         f"{_rng(S3, TR)}; registration alone {fmt(reg_alone, 1)}", _windows(S3, TR), _mib(S3, TR)],
        ["plain `MemPool` (allocation only)", _rng(S3, FRP), _windows(S3, FRP), _mib(S3, FRP)],
    ]
    return table(["64 x 32 MiB, 2 groups, symmetric", "ms: median (range of 3 rounds)", "windows per group",
                  "device MiB"], body, [Run(S3)])


_fig("torch.s3.default_vs_torch_pct", [S3], lambda: fmt((m(S3, TR) - m(S3, FRD)) / m(S3, TR) * 100, 1) + "%")
_fig("torch.s3.default_vs_register_pct", [S3], lambda: fmt(
    (m(S3, FRD) / statistics.median(b["register_ms"] for b in _recs(S3, TR)) - 1) * 100, 1) + "%")
_fig("torch.s3.min_segment_vs_default", [S3], lambda: fmt(m(S3, FRD) / m(S3, FRM)) + "x")
_fig("torch.s3.min_segment_vs_torch", [S3], lambda: fmt(m(S3, TR) / m(S3, FRM)) + "x")
_fig("torch.s3.min_segment_over_plain_ms", [S3], lambda: fmt(m(S3, FRM) - m(S3, FRP)) + " ms")
_fig("torch.s3.default_round1_ms", [S3], lambda: fmt(_recs(S3, FRD)[0]["value"]) + " ms")
_fig("torch.s3.default_round1_mib", [S3], lambda: fmt(
    _recs(S3, FRD)[0]["device_mib"] - min(b["device_mib"] for b in _recs(S3, FRD))) + " MiB")
_fig("torch.s3.min_segment_round1_ms", [S3], lambda: fmt(_recs(S3, FRM)[0]["value"], 1) + " ms")
_fig("torch.s3.per_use", [S3], lambda: (
    f"G = 2 {fmt(m(S3, U2), 1)} us back to back, {fmt(m(S3, H2), 1)} us host; Megatron pattern {fmt(m(S3, MEG))} ms; "
    f"all-gather 32 MiB out plain {fmt(m(S3, AGP), 1)}, torch symmetric {fmt(m(S3, AGT), 1)}, "
    f"ncclpool symmetric {fmt(m(S3, AGN), 1)} us"))


# After the lockstep and house changes: df7cf49, deb58c4, e370088 side by side.
def _multi(columns):
    cols = [_cols(p) for p, _ in columns]
    body = [
        ["first registration, 64 x 32 MiB, 2 groups: ncclpool / torch `register_mem_pool`"]
        + [f"{fmt(c['first'][0], 1)} / {fmt(c['first'][1], 1)} ms ({fmt(c['first'][0] / c['first'][1], 2)}x)" for c in cols],
        ["one use, G = 2, back to back / host cost (bursts of 4)"] + [c["use2"] for c in cols],
        ["one use, G = 3, back to back / host"] + [c["use3"] for c in cols],
        ["Megatron pattern, G = 2"] + [c["meg"] for c in cols],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric"] + [c["ag"] for c in cols],
    ]
    return table(["figure"] + [h for _, h in columns], body, [Run(p) for p, _ in columns])


figure("torch.lockstep.table", DF7, DEB, E37)(lambda: _multi(
    [(DF7, "df7cf49 (2026-11-24)"), (DEB, "deb58c4 (2026-11-27)"), (E37, "e370088 (2026-11-27, second lease)")]))


def _use_rise(a, b, keys):
    return [m(b, k) - m(a, k) for k in keys]


_fig("torch.lockstep.e370_vs_df7_g2_us", [DF7, E37], lambda: span(_use_rise(DF7, E37, (U2, H2))) + " us")
_fig("torch.lockstep.e370_vs_df7_g3_us", [DF7, E37], lambda: span(_use_rise(DF7, E37, (U3, H3))) + " us")
_fig("torch.lockstep.first_vs_torch_pct", [DEB, E37],
     lambda: span([(m(p, FR) / m(p, TR) - 1) * 100 for p in (DEB, E37)]) + "%")
_fig("torch.lockstep.deb_vs_df7_us", [DF7, DEB], lambda: span(_use_rise(DF7, DEB, (U2, H2, U3, H3))) + " us")
_fig("torch.lockstep.torch_rise_pct", [DF7, DEB],
     lambda: span([(m(DEB, k) / m(DF7, k) - 1) * 100 for k in (TR, MEG)]) + "%")
_fig("torch.lockstep.pool_vs_plain", [DEB], lambda: fmt(m(DEB, AGP) / m(DEB, AGN), 2) + "x")


# After the growth changes, df7cf49 alone.
@figure("torch.df7.table", DF7)
def _df7_table():
    c = _cols(DF7)
    chunks = _recs(DF7, FR)[0]["chunks"]
    body = [
        ["first registration, 64 x 32 MiB, 2 groups: ncclpool / torch `register_mem_pool`",
         f"**{fmt(c['first'][0], 1)}** / {fmt(c['first'][1], 1)} ms (ncclpool {fmt(c['first'][0] / c['first'][1], 2)}x "
         f"torch's time; the benchmark reports `\"chunks\": {chunks}`)"],
        ["one use, G = 2, back to back / host cost (bursts of 4)", c["use2"]],
        ["one use, G = 3, back to back / host", c["use3"]],
        ["Megatron pattern, G = 2", c["meg"]],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric", c["ag"]],
    ]
    return table(["figure", "df7cf49"], body, [Run(DF7)])


_fig("torch.df7.first_ms", [DF7], lambda: fmt(m(DF7, FR)) + " ms")
_fig("torch.df7.six_segments_ms", [R9E, R23], lambda: span([m(R9E, FR), m(R23, FR)], 1) + " ms")
_fig("torch.df7.two_chunks_ms", [R32, RA3], lambda: span(v(R32, FR) + v(RA3, FR), 1) + " ms")
_fig("torch.df7.per_use_before", [R9E, R23], lambda: f"{fmt(m(R9E, U2), 1)} and {fmt(m(R23, U2), 1)} us")


# Per use under 25 us: 9ed78e4, and 237829c's second run.
@figure("torch.9ed.table", R9E)
def _9ed_table():
    body = [
        ["one use, G = 2, back to back", f"**{fmt(m(R9E, U2), 1)} us**"],
        ["one use, G = 2, host cost (bursts of 4)", fmt(m(R9E, H2), 1) + " us"],
        ["one use, G = 3, back to back / host", f"{fmt(m(R9E, U3), 1)} / {fmt(m(R9E, H3), 1)} us"],
        ["first registration, 2 groups: ncclpool / torch `register_mem_pool`",
         f"{fmt(m(R9E, FR), 1)} / {fmt(m(R9E, TR), 1)} ms ({fmt(m(R9E, TR) / m(R9E, FR), 1)}x)"],
        ["Megatron pattern, G = 2", _cols(R9E)["meg"]],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric", _cols(R9E)["ag"]],
    ]
    return table(["figure", "9ed78e4"], body, [Run(R9E)])


_fig("torch.237.run2", [R23], lambda: (
    f"per use G = 2 **{fmt(m(R23, U2), 1)} us** back to back, {fmt(m(R23, H2), 1)} us host in bursts; "
    f"G = 3 {fmt(m(R23, U3), 1)} / {fmt(m(R23, H3), 1)} us; first registration {fmt(m(R23, FR), 1)} vs "
    f"{fmt(m(R23, TR), 1)} ms; Megatron pattern {fmt(m(R23, MEG))} ms. Its all-gather 32 MiB row: plain "
    f"{fmt(m(R23, AGP), 1)}, torch symmetric {fmt(m(R23, AGT), 1)}, ncclpool symmetric {fmt(m(R23, AGN), 1)} us"))
_num("torch.9ed.before_us", R9E, AGN, 0, " us")
_fig("torch.9ed.target_runs", [R9E, R23], lambda: f"{fmt(m(R9E, U2), 1)} and {fmt(m(R23, U2), 1)} us")
_num("torch.b3f.use_g2_us", RB3, U2, 1, " us")
_fig("torch.9ed.bursts", [R9E, R23], lambda: (
    f"{fmt(m(R9E, H2), 1)} and {fmt(m(R23, H2), 1)} us; at G = 3 {fmt(m(R9E, H3), 1)} and {fmt(m(R23, H3), 1)}"))
_fig("torch.32b.spread_us", [R32], lambda: span(v(R32, U2), 1) + " us")
_fig("torch.9ed.margin_us", [R9E], lambda: fmt(25 - m(R9E, U2), 1) + " us")


# Scope ends agree on a schedule: 51dac2e and b3f5b78.
def _two_col(path):
    c = _cols(path)
    return [f"{fmt(m(path, U2), 1)} us", f"{fmt(m(path, H2), 1)} us", c["use3"],
            f"{fmt(m(path, FR), 1)} / {fmt(m(path, TR), 1)} ms", c["meg"], c["ag"]]


@figure("torch.schedule.table", R51, RB3)
def _schedule_table():
    a, b = _two_col(R51), _two_col(RB3)
    b[0] = f"**{b[0]}**"
    labels = ["one use, G = 2, back to back", "one use, G = 2, host cost (bursts of 4)",
              "one use, G = 3, back to back / host",
              "first registration, 2 groups: ncclpool / torch `register_mem_pool`", "Megatron pattern, G = 2",
              "all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric"]
    return table(["figure", "51dac2e", "b3f5b78"], [[l, x, y] for l, x, y in zip(labels, a, b)], [Run(R51), Run(RB3)])


def _ovh(which):
    """{G: [median of each block]} of the CPU overhead file's 'before' or 'after' blocks."""
    out, cur = {}, None
    for line in text(OVH).splitlines():
        if line.strip() and not line.startswith(" "):
            cur = line.split()[0]
        g = re.match(r"\s+G=(\d+):\s+([\d.]+)", line)
        if g and cur == which:
            out.setdefault(int(g.group(1)), []).append(float(g.group(2)))
    if not out:
        raise KeyError(f"no {which!r} block in {OVH}")
    return out


_fig("torch.overhead", [OVH], lambda: ", ".join(
    f"G = {g} {span(_ovh('before')[g], 1)} -> {span(_ovh('after')[g], 1)} us" for g in (1, 2, 3)))


# Since every agreement point is collective: 32b2253, 3 runs (a3fd605: the earlier build).
@figure("torch.collective.table", R32)
def _collective_table():
    def mmm(name, places=1):
        x = v(R32, name)
        return f"{fmt(statistics.median(x), places)} [{fmt(min(x), places)}-{fmt(max(x), places)}]"
    body = [
        ["first registration, 2 groups: ncclpool / torch `register_mem_pool(symm=True)`",
         f"{mmm(FR)} ms / {mmm(TR)} ms ({fmt(m(R32, TR) / m(R32, FR), 1)}x)"],
        ["one use, G = 2, back to back", mmm(U2) + " us"],
        ["one use, G = 2, host cost (bursts of 4, device caught up between)", mmm(H2) + " us"],
        ["one use, G = 3, back to back / host", f"{mmm(U3)} / {mmm(H3)} us"],
        ["Megatron pattern, G = 2", f"{mmm(MEG)} ms (~{fmt(m(R32, MEG) * 1000 / m(R32, U2))}x)"],
        ["all-gather 32 MiB out: plain / torch symmetric / ncclpool symmetric",
         " / ".join(fmt(m(R32, k), 1) for k in (AGP, AGT, AGN)) + " us"],
    ]
    return table(["figure", "value"], body, [Run(R32)])


_fig("torch.a3f.use_g2", [RA3], lambda: f"{span(v(RA3, U2), 1)} us (median {fmt(m(RA3, U2), 1)})")

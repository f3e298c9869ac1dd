"""Figures of issue 46's training runs at 4 GPUs (4x H200, NCCL 2.28.9): Megatron-FSDP in every
configuration, 3 rounds each (one device call per round, gpu-check's `megatron` section), and FSDP2.
Two sessions: data/2026-11-28-gpu-check-issue46-s2 (8806cb8, ncclpool's 32 symmetric CTAs, and NCCL's
own count beside it where they differed) and -s3 (22b8592, where `install()` and the FSDP2 helper
declare the overlap and get NCCL's count), in docs/benchmarks/megatron-fsdp.md and fsdp2.md; the
decode CTA sweep at 4 GPUs of -s3 in decode.md.
"""

import re
import statistics

from . import Run, figure, fmt, span, table, text
from . import fsdp2 as _fsdp2
from . import megatron as _megatron

D = "2026-11-28-gpu-check-issue46-s2/"
ROUNDS = [D + c + "/megatron-fsdp/megatron-fsdp.jsonl" for c in
          ("call2-4xh200-megatron-nccltests-8806cb8", "call3-4xh200-megatron-8806cb8", "call4-4xh200-megatron-symctas-8806cb8")]
NCCL_CTAS = D + "call4-4xh200-megatron-symctas-8806cb8/mf-symctas-nccl/megatron-fsdp.jsonl"
FSDP2 = D + "call5-4xh200-fsdp2-8806cb8/fsdp2/fsdp2.json"


def _runs(cfg, paths=ROUNDS):
    """One configuration's results over the rounds (each call's file one or more rounds)."""
    out = [r for p in paths for r in _megatron.runs_of(p, *cfg)]
    if {r["world"] for r in out} != {4}:
        raise ValueError(f"{cfg}: not every run had 4 ranks")
    return out


def _med(cfg, key, paths=ROUNDS):
    return statistics.median(r[key] for r in _runs(cfg, paths))


def _steady(cfg, paths=ROUNDS):
    v = [r["steady_step_ms"] for r in _runs(cfg, paths)]
    return f"{fmt(statistics.median(v), 2)} ({fmt(min(v), 2)}-{fmt(max(v), 2)})"


def _ratio(key, sym, ag, paths=ROUNDS):
    return _med(("ncclpool", sym, ag), key, paths) / _med(("megatron", sym, ag), key, paths)


def _losses_equal(paths):
    """The losses of every run of one group setting (every allocator and kind) bitwise equal, or raise."""
    for ag in (False, True):
        seen = {tuple(r["losses"]) for a, s, g in _megatron.CONFIGS if g == ag for r in _runs((a, s, g), paths)}
        if len(seen) != 1:
            raise ValueError(f"ag_group={ag}: {len(seen)} different loss curves")


def _megatron_table(paths):
    _losses_equal(paths)
    body = []
    for a, s, ag in _megatron.CONFIGS:
        cfg = (a, s, ag)
        cells = [_steady(cfg, paths), fmt(_med(cfg, "setup_ms", paths)), fmt(_med(cfg, "first_step_ms", paths)),
                 fmt(_med(cfg, "device_used_gib", paths), 2)]
        vs = "-" if a != "ncclpool" else f"{fmt(_ratio('steady_step_ms', s, ag, paths), 3)} / {fmt(_ratio('setup_ms', s, ag, paths), 3)}"
        body.append([{"none": "none (no user buffers)", "megatron": "Megatron-Core"}.get(a, a), _megatron._kind(a, s),
                     "+ all-gather group" if ag else "one"] + cells + [vs])
    return table(["allocator", "registration", "groups", "steady step ms: median (min-max over 3 rounds)", "setup ms",
                  "first step ms", "device GiB", "ncclpool / Megatron-Core: steady / setup"], body, [Run(p) for p in paths])


SYMMETRIC = [(s, ag) for s in (True,) for ag in (False, True)]
WITH_BUFFERS = [(s, ag) for s in (True, False) for ag in (False, True)]


def _megatron_figures(prefix, paths):
    """The table and the target figures of one session's three rounds."""
    figure(prefix + "table", *paths)(lambda: _megatron_table(paths))
    steady = lambda s, ag: _ratio("steady_step_ms", s, ag, paths)  # noqa: E731
    setup = lambda s, ag: _ratio("setup_ms", s, ag, paths)  # noqa: E731
    figure(prefix + "steady_ratio", *paths)(lambda: span([steady(s, ag) for s, ag in WITH_BUFFERS], 3))
    figure(prefix + "steady_ratio_ag_sym", *paths)(lambda: fmt(steady(True, True), 3))
    figure(prefix + "steady_ratio_local", *paths)(lambda: span([steady(False, ag) for ag in (False, True)], 3))
    figure(prefix + "steady_ratio_symmetric", *paths)(lambda: span([steady(True, ag) for ag in (False, True)], 3))
    figure(prefix + "steady_ratio_sym_one", *paths)(lambda: fmt(steady(True, False), 3))
    figure(prefix + "setup_ratio_symmetric", *paths)(lambda: span([setup(s, ag) for s, ag in SYMMETRIC], 3))
    figure(prefix + "setup_ratio_local", *paths)(lambda: span([setup(False, ag) for ag in (False, True)], 3))
    figure(prefix + "mcore_setup_s", *paths)(lambda: span([_med(("megatron", True, ag), "setup_ms", paths) / 1000 for ag in (False, True)], 1) + " s")


_megatron_figures("train4.megatron.", ROUNDS)


@figure("train4.megatron.ctas_table", NCCL_CTAS, *ROUNDS)
def _ctas_table():
    cfgs = (("megatron", True, True), ("ncclpool", True, True))
    body = [["Megatron-Core (NCCL's count: it sets none)", _steady(cfgs[0]), _steady(cfgs[0], [NCCL_CTAS])],
            ["ncclpool", _steady(cfgs[1]), _steady(cfgs[1], [NCCL_CTAS])]]
    return table(["symmetric, + all-gather group, 4 GPUs", "ncclpool's 32 CTAs (3 rounds: the table above)",
                  "`NCCLPOOL_SYM_CTAS=nccl` (2 rounds)"], body, [Run(NCCL_CTAS)])


figure("train4.megatron.nccl_ctas_ratio", NCCL_CTAS)(
    lambda: fmt(_med(("ncclpool", True, True), "steady_step_ms", [NCCL_CTAS]) / _med(("megatron", True, True), "steady_step_ms", [NCCL_CTAS]), 3))


# ---- FSDP2 at 4 GPUs: ncclpool's 32 CTAs against NCCL's own count ----

FSDP2_MODES = (("plain", "plain"), ("ncclpool symmetric, ncclpool's 32 CTAs", "ncclpool-symmetric"),
               ("ncclpool symmetric, NCCL's count (`NCCLPOOL_SYM_CTAS=nccl`)", "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl"),
               ("torch's symmetric pool (NCCL's count)", "torch-symm"))


@figure("train4.fsdp2.table", FSDP2)
def _fsdp2_table():
    losses = {tuple(r["losses"]) for r in _fsdp2.recs(FSDP2, "plain")} | {
        tuple(r["losses"]) for _, spec in FSDP2_MODES for r in _fsdp2.recs(FSDP2, spec)}
    if len(losses) != 1:
        raise ValueError(f"{FSDP2}: {len(losses)} different loss curves")
    body = [[name, _fsdp2.steady(FSDP2, spec), _fsdp2.vs_plain(FSDP2, spec), _fsdp2.gib(FSDP2, spec)] for name, spec in FSDP2_MODES]
    return table(["FSDP2, 4 GPUs, compute-bound", "steady step ms: median (min-max over 2 rounds)", "vs plain", "device GiB"],
                 body, [Run(FSDP2)])


figure("train4.fsdp2.ctas_32_vs_nccl", FSDP2)(
    lambda: _fsdp2.pct(_fsdp2.med(FSDP2, "ncclpool-symmetric") / _fsdp2.med(FSDP2, "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl") - 1))


# ---- -s3 (22b8592): the CTA declaration (install(), the FSDP2 helper) at 4 GPUs ----

S3 = "2026-11-28-gpu-check-issue46-s3/"
DECL_ROUNDS = [S3 + c + "/megatron-fsdp/megatron-fsdp.jsonl" for c in
               ("call1-4xh200-megatron-decodectas-22b8592", "call2-4xh200-megatron-22b8592", "call3-4xh200-megatron-22b8592")]
_megatron_figures("train4.decl.megatron.", DECL_ROUNDS)


def _round_ratios(sym, ag, paths):
    """ncclpool's steady step over Megatron-Core's, per round (each file one interleaved round)."""
    return [_med(("ncclpool", sym, ag), "steady_step_ms", [p]) / _med(("megatron", sym, ag), "steady_step_ms", [p]) for p in paths]


@figure("train4.decl.megatron.local_ag_rounds", *DECL_ROUNDS)
def _local_ag_rounds():
    return ", ".join(fmt(x, 3) for x in _round_ratios(False, True, DECL_ROUNDS))


@figure("train4.decl.megatron.local_ag_six_rounds", *ROUNDS, *DECL_ROUNDS)
def _local_ag_six():
    """Local registration does not read the CTA count: both sessions' rounds measure the same path."""
    r = _round_ratios(False, True, ROUNDS + DECL_ROUNDS)
    return f"{fmt(statistics.median(r), 3)} ({fmt(min(r), 3)}-{fmt(max(r), 3)})"


DECL_FSDP2 = S3 + "call4-4xh200-fsdp2-22b8592/fsdp2/fsdp2.json"
DECL_FSDP2_MODES = (("plain", "plain"), ("torch's symmetric pool (NCCL's count)", "torch-symm"),
                    ("ncclpool local", "ncclpool-local"),
                    ("ncclpool symmetric (declared: NCCL's count)", "ncclpool-symmetric"),
                    ("ncclpool auto (declared: NCCL's count)", "ncclpool-auto"),
                    ("ncclpool symmetric, `NCCLPOOL_SYM_CTAS=32`", "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=32"))


def _cta_source(spec):
    """The CTA count the run's ncclpool reported, as a cell ('-' without ncclpool's symmetric windows)."""
    found = {(r.get("ncclpool") or {}).get("symmetric_ctas_source") for r in _fsdp2.recs(DECL_FSDP2, spec)}
    if len(found) != 1:
        raise ValueError(f"{spec}: rounds disagree on the CTA count: {found}")
    source = found.pop()
    if source is None or spec in ("ncclpool-local",):
        return "-"
    return "NCCL's (declared)" if source.startswith("NCCL's own choice (overlap declared") else source


@figure("train4.decl.fsdp2.table", DECL_FSDP2)
def _decl_fsdp2_table():
    losses = {tuple(r["losses"]) for _, spec in DECL_FSDP2_MODES for r in _fsdp2.recs(DECL_FSDP2, spec)}
    if len(losses) != 1:
        raise ValueError(f"{DECL_FSDP2}: {len(losses)} different loss curves")
    body = [[name, _fsdp2.steady(DECL_FSDP2, spec), _fsdp2.vs_plain(DECL_FSDP2, spec), _fsdp2.gib(DECL_FSDP2, spec), _cta_source(spec)]
            for name, spec in DECL_FSDP2_MODES]
    return table(["FSDP2, 4 GPUs, compute-bound", "steady step ms: median (min-max over 3 rounds)", "vs plain", "device GiB",
                  "symmetric CTAs (the run's report)"], body, [Run(DECL_FSDP2)])


figure("train4.decl.fsdp2.declared_vs_32", DECL_FSDP2)(
    lambda: _fsdp2.pct(_fsdp2.med(DECL_FSDP2, "ncclpool-symmetric") / _fsdp2.med(DECL_FSDP2, "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=32") - 1))
figure("train4.decl.fsdp2.declared_vs_torch", DECL_FSDP2)(
    lambda: _fsdp2.pct(_fsdp2.med(DECL_FSDP2, "ncclpool-symmetric") / _fsdp2.med(DECL_FSDP2, "torch-symm") - 1))


@figure("train4.decl.megatron.mcore_local_ag_spread", *DECL_ROUNDS)
def _mcore_local_ag_spread():
    """How far Megatron-Core's own step moved between rounds (local, all-gather group): (max - min) / median."""
    v = [r["steady_step_ms"] for r in _runs(("megatron", False, True), DECL_ROUNDS)]
    return fmt((max(v) - min(v)) / statistics.median(v) * 100, 1) + "%"
figure("train4.decl.fsdp2.pool_memory", DECL_FSDP2)(
    lambda: span([_fsdp2.rel(DECL_FSDP2, spec, "device_used_gib") * 100 for spec in ("ncclpool-symmetric", "ncclpool-auto")], 1) + "%")


# ---- -s3, call 5: the registry tests at 4 GPUs (docs/gpu-check.md) ----

NCCL_SUMMARY = S3 + "call5-4xh200-nccl-22b8592/summary.txt"


def _summary_row(label):
    """'N passed, M failed' of one summary row, e.g. 'nccl registry tests, 4 GPUs'."""
    for line in text(NCCL_SUMMARY).splitlines():
        if line.strip().startswith(label):
            m = re.search(r"(\d+) passed, (\d+) failed", line)
            if m:
                return int(m.group(1)), int(m.group(2))
    raise KeyError(f"{NCCL_SUMMARY}: no row {label!r}")


@figure("train4.nccl.registry_tests", NCCL_SUMMARY)
def _registry_tests():
    rows = [_summary_row(f"nccl registry tests, {n} GPUs") for n in (2, 4)]
    if any(failed for _, failed in rows) or len({p for p, _ in rows}) != 1:
        raise ValueError(f"{NCCL_SUMMARY}: {rows}")
    return f"{rows[0][0]}/{rows[0][0]}"


@figure("train4.nccl.sanitizer", NCCL_SUMMARY)
def _sanitizer():
    passed, failed = _summary_row("compute-sanitizer, nccl tests")
    errors = re.search(r"; (\d+) error\(s\)", [l for l in text(NCCL_SUMMARY).splitlines() if "compute-sanitizer" in l][0]).group(1)
    return f"{passed}/{passed + failed}, {errors} errors"

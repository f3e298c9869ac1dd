"""Figures of docs/benchmarks/fsdp2.md (its tables; the figures of its text: fsdp2_text.py):
bench/fsdp2_bench.py's JSON, a list of one record per run (round, spec, steady_step_ms, first_step_ms,
setup_ms, device_used_gib, ncclpool{reserved_gib, segments, windows_per_group, registration_ms}).

A mode's cell is the median over its rounds (and the range: min-max of the rounds' steady steps);
"vs plain" compares medians; spread = (max - min) / median of the rounds' steady steps.
"""

import statistics

from . import Run, data, figure, fmt, table

S3 = "2026-11-27-gpu-check-2xh200-s3/"
CE_HEAVY = S3 + "call1-cetrain-comm-heavy/cetrain-comm-heavy/fsdp2.json"
CE_BOUND = S3 + "call3-torch-cetrain-compute-bound/cetrain-compute-bound/fsdp2.json"
CE_CALL2 = S3 + "call2-cetrain-compute-bound-megatron/b1.txt"
GUARD = "2026-11-27-gpu-check-2xh200-e370088-s2/call1-pdl-fsdp2-decode-guard/gpu-check/fsdp2/fsdp2.json"
DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/fsdp2.json"
H100 = "2026-11-24-fsdp2-1xh100-b21ce3d/fsdp2.json"
A15_1, A15_2 = "2026-11-23-fsdp2-2xh200-15fd538-run1.json", "2026-11-23-fsdp2-2xh200-15fd538-run2.json"
C9_4096, C9_8192 = "2026-11-23-fsdp2-2xh200-c9c2fc7-dim4096.json", "2026-11-23-fsdp2-2xh200-c9c2fc7-dim8192.json"
G51, G9E = "2026-11-23-fsdp2-2xh200-51dac2e-gpu-check.json", "2026-11-23-fsdp2-2xh200-9ed78e4-gpu-check.json"
BISECT = "2026-11-23-fsdp2-bisect-2xh200-9ed78e4/driver-stdout.txt"
C237 = "2026-11-23-fsdp2-2xh200-237829c.json"
AUTO_GUARD = "ncclpool-auto+NCCLPOOL_SYMMETRIC_KERNELS=auto"
SHARE = "ncclpool-ce+NCCL_COMM_SPLIT_SHARE_RESOURCES=1"
OLD_82D, OLD_6B0 = "ncclpool-symmetric@scratch/lib-82d6a66/", "ncclpool-symmetric@build/gpu/old-6b0e280/"


def recs(path, spec):
    """The runs of one mode: spec exactly, or every spec starting with it when it ends in '/'."""
    found = [r for r in data(path) if r["spec"] == spec or (spec.endswith("/") and r["spec"].startswith(spec))]
    if not found:
        raise KeyError(f"no run of {spec} in {path}")
    return found


def vals(path, spec, key):
    return [r[key] for r in recs(path, spec)]


def pool_vals(path, spec, key):
    return [r["ncclpool"][key] for r in recs(path, spec)]


def med(path, spec, key="steady_step_ms"):
    return statistics.median(vals(path, spec, key))


def steady(path, spec, bold=False):
    """'median (min-max)' of a mode's steady steps over the rounds."""
    v = vals(path, spec, "steady_step_ms")
    return b(f"{fmt(statistics.median(v), 2)} ({fmt(min(v), 2)}-{fmt(max(v), 2)})", bold)


def rel(path, spec, key="steady_step_ms", base="plain", base_path=None):
    """A mode's median over the base's, less 1."""
    return med(path, spec, key) / med(base_path or path, base, key) - 1


def pct(x, places=1):
    """A signed percentage: +0.3%, -3.9%, +0.0% (a tiny negative shows as -0.0%, as the bench prints)."""
    return ("-" if x < 0 else "+") + fmt(abs(x) * 100, places) + "%"


def spread(path, spec):
    v = vals(path, spec, "steady_step_ms")
    return (max(v) - min(v)) / statistics.median(v)


def vs_plain(path, spec, key="steady_step_ms"):
    return "-" if spec == "plain" else pct(rel(path, spec, key))


def gib(path, spec):
    return fmt(med(path, spec, "device_used_gib"), 2)


def ms0(path, spec, key):
    """A whole-ms median (first step, setup)."""
    return fmt(med(path, spec, key))


def pool_gib(path, spec):
    return "-" if not spec.startswith("ncclpool") else fmt(statistics.median(pool_vals(path, spec, "reserved_gib")), 2)


def windows(path, spec):
    if not spec.startswith("ncclpool"):
        return "-"
    w = {tuple(r["ncclpool"].get("windows_per_group") or [r["ncclpool"]["segments"]]) for r in recs(path, spec)}
    if len(w) != 1:
        raise ValueError(f"windows per group differ between rounds of {spec} in {path}: {w}")
    return ", ".join(str(x) for x in w.pop())


def b(text, on):
    return f"**{text}**" if on else text


# ---- the copy-engine tables (third lease of 2026-11-27) ----

CE_HEAVY_ROWS = [("plain", "plain", ""), ("torch-ce (torch's ZERO route)", "torch-ce", ""),
                 ("ncclpool-symmetric", "ncclpool-symmetric", ""), ("ncclpool-ce", "ncclpool-ce", "lv"),
                 ("ncclpool-local", "ncclpool-local", ""), ("ncclpool today (auto, guard default)", AUTO_GUARD, "")]
CE_BOUND_ROWS = [("plain", "plain", ""), ("torch-ce (torch's ZERO route)", "torch-ce", ""),
                 ("ncclpool-symmetric", "ncclpool-symmetric", ""), ("ncclpool-ce", "ncclpool-ce", "lsvm"),
                 ("ncclpool today (auto, guard default)", AUTO_GUARD, ""),
                 ("ncclpool-ce, `NCCL_COMM_SPLIT_SHARE_RESOURCES=1`", SHARE, "m")]


def _ce_table(path, rows_):
    """bold: l the label, s the steady step, v its vs plain, m the memory's vs plain."""
    body = []
    for label, spec, bold in rows_:
        body.append([b(label, "l" in bold), steady(path, spec, "s" in bold), b(vs_plain(path, spec), "v" in bold),
                     fmt(spread(path, spec) * 100, 1) + "%", gib(path, spec),
                     b(vs_plain(path, spec, "device_used_gib"), "m" in bold)])
    return table(["mode", "steady ms: median (range)", "vs plain", "spread", "device GiB", "vs plain"], body, [Run(path)])


figure("fsdp2.ce.heavy_table", CE_HEAVY)(lambda: _ce_table(CE_HEAVY, CE_HEAVY_ROWS))
figure("fsdp2.ce.bound_table", CE_BOUND)(lambda: _ce_table(CE_BOUND, CE_BOUND_ROWS))


# ---- the NCCL-version guard's default against `on` (e370088) ----

@figure("fsdp2.guard.table", GUARD)
def _guard_table():
    body = []
    for label, spec, bold in (("plain", "plain", False), ("ncclpool-auto, kernels `on`", "ncclpool-auto", False),
                              ("ncclpool-auto, the guard's default", AUTO_GUARD, True)):
        body.append([label, steady(GUARD, spec, bold),
                     vs_plain(GUARD, spec, "device_used_gib"), "-" if spec == "plain" else _losses(GUARD, spec)])
    return table(["mode", "steady ms: median (min-max over 3 rounds)", "device memory vs plain", "losses"], body, [Run(GUARD)])


def _losses(path, spec):
    """'bitwise equal to plain' when every run's losses equal plain's of the same round."""
    plain = {r["round"]: r["losses"] for r in recs(path, "plain")}
    if all(r["losses"] == plain[r["round"]] for r in recs(path, spec)):
        return "bitwise equal to plain"
    raise ValueError(f"losses of {spec} differ from plain's in {path}")


# ---- after the growth changes (df7cf49, 2x H200; b21ce3d, 1x H100) ----

def _growth_table(path, rows_, windows_head):
    body = []
    for label, spec, bold in rows_:
        body.append([b(label, bold), b(steady(path, spec), bold), ms0(path, spec, "first_step_ms"),
                     ms0(path, spec, "setup_ms"), gib(path, spec), b(vs_plain(path, spec, "device_used_gib"), bold),
                     pool_gib(path, spec), windows(path, spec)])
    return table(["mode", "steady ms, 2 rounds: median (range)", "first step ms", "setup ms", "device GiB", "vs plain",
                  "pool GiB", windows_head], body, [Run(path)])


figure("fsdp2.df7.table", DF7)(lambda: _growth_table(DF7, [
    ("plain FSDP2", "plain", False), ("ncclpool symmetric", "ncclpool-symmetric", False),
    ("ncclpool auto", "ncclpool-auto", True)], "windows per group"))
figure("fsdp2.h100.table", H100)(lambda: _growth_table(H100, [
    ("plain FSDP2", "plain", False), ("ncclpool symmetric (b21ce3d)", "ncclpool-symmetric", False),
    ("ncclpool symmetric (6b0e280, before)", OLD_6B0, False), ("ncclpool auto", "ncclpool-auto", False),
    ("ncclpool local", "ncclpool-local", False)], "windows"))


# The README's figures (df7cf49).
@figure("fsdp2.auto_faster_pct", DF7)
def _auto_faster():
    """How much shorter the auto pool's steady step is than plain FSDP2's (median of the rounds)."""
    return fmt(-rel(DF7, "ncclpool-auto") * 100, 1) + "%"


@figure("fsdp2.auto_memory_pct", DF7)
def _auto_memory():
    """Device memory of the auto pool's run over plain FSDP2's."""
    return pct(rel(DF7, "ncclpool-auto", "device_used_gib"))


# ---- auto pools (15fd538): a two-round call (run2) and a one-round call of every mode (run1) ----

A15_ROWS = [("plain FSDP2", "plain", False), ("torch's route", "torch-symm", False),
            ("ncclpool local", "ncclpool-local", False), ("ncclpool symmetric", "ncclpool-symmetric", False),
            ("ncclpool auto", "ncclpool-auto", True),
            ("ncclpool symmetric, NCCL's CTA count", "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl", False)]


def _range0(path, spec, key):
    v = vals(path, spec, key)
    lo, hi = fmt(min(v)), fmt(max(v))
    return lo if lo == hi else f"{lo}-{hi}"


@figure("fsdp2.a15.table", A15_1, A15_2)
def _a15_table():
    body = []
    for label, spec, bold in A15_ROWS:
        two = any(r["spec"] == spec for r in data(A15_2))
        where = A15_2 if two else A15_1
        body.append([b(label, bold), b(steady(A15_2, spec), bold) if two else "-",
                     b(fmt(med(A15_1, spec), 2), bold), _range0(where, spec, "first_step_ms"),
                     _range0(where, spec, "setup_ms"), gib(where, spec),
                     b(vs_plain(A15_1, spec, "device_used_gib"), bold)])
    return table(["mode", "steady ms, 2 rounds: median (range)", "steady ms, 1-round call", "first step ms", "setup ms",
                  "device GiB", "vs plain"], body, [Run(A15_2), Run(A15_1)])


# ---- earlier runs (c9c2fc7): the growth of symmetric pools before and after ----

def _c9_table(path, rows_):
    body = []
    for label, spec, bold in rows_:
        if spec.startswith("ncclpool"):
            reg = pool_vals(path, spec, "registration_ms")
            kind = "local" if spec == "ncclpool-local" else f"({fmt(min(reg))}-{fmt(max(reg))})"
            win = f"{windows(path, spec)} {kind}"
        else:
            win = "-"
        body.append([b(label, "l" in bold), steady(path, spec), ms0(path, spec, "first_step_ms"), ms0(path, spec, "setup_ms"),
                     b(gib(path, spec), "g" in bold), b(vs_plain(path, spec, "device_used_gib"), "v" in bold),
                     pool_gib(path, spec), win])
    return table(["mode", "steady step, ms (median of 2 rounds; range)", "first step, ms", "setup, ms",
                  "device memory, GiB", "vs plain", "pool reserved, GiB", "windows per group (registration, ms)"],
                 body, [Run(path)])


figure("fsdp2.c9.dim4096_table", C9_4096)(lambda: _c9_table(C9_4096, [
    ("plain FSDP2", "plain", ""), ("torch's route", "torch-symm", ""), ("ncclpool local", "ncclpool-local", ""),
    ("ncclpool symmetric, before (82d6a66)", OLD_82D, "v"), ("ncclpool symmetric, now", "ncclpool-symmetric", "lgv")]))
figure("fsdp2.c9.dim8192_table", C9_8192)(lambda: _c9_table(C9_8192, [
    ("plain FSDP2", "plain", ""), ("ncclpool symmetric, before (82d6a66)", OLD_82D, "v"),
    ("ncclpool symmetric, now", "ncclpool-symmetric", "lgv")]))


# ---- the bisect of the one slow run (9ed78e4) ----

BISECT_ROWS = [("plain FSDP2", "plain"), ("ncclpool symmetric, 9ed78e4", "head"),
               ("9ed78e4 without ramped chunks", "noramp"), ("7e69c69 (scope schedule, before the ramp)", "sched"),
               ("e8d14d7 (before the scope schedule)", "pre")]


def bisect():
    """{(round, variant): steady ms} from the driver's stdout ('1 plain 100.92 (100.92-100.92)')."""
    from . import text
    out = {}
    for line in text(BISECT).splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit():
            out[(int(parts[0]), parts[1])] = float(parts[2])
    return out


@figure("fsdp2.bisect.table", BISECT)
def _bisect_table():
    got = bisect()
    rounds = sorted({r for r, _ in got})
    body = [[label] + [fmt(got[(r, v)], 2) for r in rounds] for label, v in BISECT_ROWS]
    return table(["variant"] + [f"round {r} ms" for r in rounds], body, [Run(BISECT)])


# ---- the symmetric kernels' CTA count (237829c) ----

@figure("fsdp2.c237.table", C237)
def _c237_table():
    body = []
    for label, spec in (("plain", "plain"), ("ncclpool symmetric, ncclpool's count (32)", "ncclpool-symmetric"),
                        ("ncclpool symmetric, NCCL's count", "ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl")):
        body.append([label, steady(C237, spec), gib(C237, spec), pct(rel(C237, spec, "device_used_gib"))])
    return table(["mode", "steady ms", "device GiB", "vs plain"], body, [Run(C237)])

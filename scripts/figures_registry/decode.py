"""Figures of docs/benchmarks/decode.md: bench/decode_bench.py's JSON (a bf16 all-reduce captured 32
times in a CUDA graph, replayed 20 times; us per all-reduce) on 2x H200.

Each file's samples are {round, size, mode, us} (and the swept variable: guard, ctas); a cell is the
median (min-max) of a mode's samples over the rounds, a ratio plain's median over the mode's.
"""

import statistics
from collections import defaultdict

from . import Run, data, figure, fmt, span, table

DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/decode.json"
GUARD_DIR = "2026-11-27-gpu-check-2xh200-e370088-s2/call1-pdl-fsdp2-decode-guard/gpu-check/"
GUARD, GUARD_PLAIN = GUARD_DIR + "decode-guard.json", GUARD_DIR + "decode.json"
A15 = "2026-11-23-decode-2xh200-15fd538.json"
C237 = "2026-11-23-decode-2xh200-237829c.json"
CTAS, CTAS_PLAIN = "2026-11-23-decode-ctas-2xh200-9ed78e4.json", "2026-11-23-decode-2xh200-9ed78e4.json"
R697 = [f"2026-11-23-decode-2xh200-697a171-run{i}.json" for i in (1, 2, 3)]
DECODE = DF7  # the README's decode figures
KIB, MIB = 1 << 10, 1 << 20


def size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def us(paths, mode, sz=None, **where):
    """The samples (us) of mode, at size sz (or a dict size -> samples), in the files paths."""
    paths = [paths] if isinstance(paths, str) else paths
    out = defaultdict(list)
    for p in paths:
        for s in data(p)["samples"]:
            if s["mode"] == mode and all(s.get(k) == v for k, v in where.items()):
                out[s["size"]].append(s["us"])
    if not out:
        raise KeyError(f"no samples of {mode} {where} in {paths}")
    return out[sz] if sz is not None else out


def sizes(path):
    return sorted({s["size"] for s in data(path)["samples"]})


def med(paths, mode, sz, **where):
    return statistics.median(us(paths, mode, sz, **where))


def cell(paths, mode, sz, left="(", right=")", **where):
    """'median (min-max)' of a mode at one size."""
    v = us(paths, mode, sz, **where)
    return f"{fmt(statistics.median(v), 2)} {left}{fmt(min(v), 2)}-{fmt(max(v), 2)}{right}"


def ratio(paths, mode, sz, base="plain", base_where=None, **where):
    """base's median over mode's (above 1: mode faster)."""
    return med(paths, base, sz, **(base_where if base_where is not None else where)) / med(paths, mode, sz, **where)


def ratios(paths, mode, keep=lambda sz: True, **kw):
    path = paths if isinstance(paths, str) else paths[0]
    return [ratio(paths, mode, sz, **kw) for sz in sizes(path) if keep(sz)]


# ---- the README's figures (df7cf49) ----

@figure("decode.run", DECODE)
def _run():
    return Run(DECODE).label()


@figure("decode.auto_speedup", DECODE)
def _auto_speedup():
    """Plain memory's time over the auto pool's, per size (medians over the rounds), every size."""
    return span(ratios(DECODE, "auto"), 2) + "x"


# ---- e370088: the NCCL-version guard's default against `on` ----

GUARD_COLS = [("symmetric", "auto"), ("auto", "auto"), ("symmetric", "on"), ("auto", "on")]


def _plain_all(sz):
    """plain's median over every run of the guard file (both settings)."""
    return statistics.median(us(GUARD, "plain", sz))


@figure("decode.guard.table", GUARD)
def _guard_table():
    body = []
    for sz in sizes(GUARD):
        body.append([size(sz), fmt(_plain_all(sz), 2)] + [cell(GUARD, m, sz, guard=g) for m, g in GUARD_COLS])
    return table(["size", "plain", "symmetric pool, `auto`", "auto pool, `auto`", "symmetric pool, `on`",
                  "auto pool, `on`"], body, [Run(GUARD)])


def _guard_ratios(guard, keep, base_same_runs=False):
    out = []
    for sz in sizes(GUARD):
        if keep(sz):
            for mode in ("symmetric", "auto"):
                base = med(GUARD, "plain", sz, guard=guard) if base_same_runs else _plain_all(sz)
                out.append(base / med(GUARD, mode, sz, guard=guard))
    return out


@figure("decode.guard.auto_small", GUARD)
def _guard_auto_small():
    return span(_guard_ratios("auto", lambda sz: sz <= MIB), 2) + "x"


@figure("decode.guard.auto_big", GUARD)
def _guard_auto_big():
    return span(_guard_ratios("auto", lambda sz: sz > MIB), 2) + "x"


@figure("decode.guard.auto_same_runs", GUARD)
def _guard_auto_same_runs():
    """Against plain of the same torchruns only (the guard's default)."""
    return span(_guard_ratios("auto", lambda sz: True, base_same_runs=True), 2) + "x"


@figure("decode.guard.on", GUARD)
def _guard_on():
    return span(_guard_ratios("on", lambda sz: True), 2) + "x"


@figure("decode.guard.on_same_runs", GUARD)
def _guard_on_same_runs():
    return span(_guard_ratios("on", lambda sz: True, base_same_runs=True), 2) + "x"


@figure("decode.guard.plain_run", GUARD_PLAIN)
def _guard_plain_run():
    return span(ratios(GUARD_PLAIN, "symmetric"), 2) + "x"


# ---- df7cf49: after the growth changes ----

@figure("decode.df7.table", DF7)
def _df7_table():
    body = []
    for sz in sizes(DF7):
        body.append([size(sz)] + [cell(DF7, m, sz) for m in ("plain", "symmetric", "auto")]
                    + [fmt(med(DF7, "captured", sz), 2)]
                    + [fmt(ratio(DF7, m, sz), 2) + "x" for m in ("symmetric", "auto")]
                    + [fmt(ratio(DF7, "auto", sz, base="symmetric"), 3)])
    return table(["size", "plain", "symmetric", "auto", "captured (no reserve)", "symmetric / plain",
                  "auto / plain", "auto vs symmetric"], body, [Run(DF7)])


@figure("decode.df7.auto_slower_pct", DF7)
def _df7_auto_slower_pct():
    """How much longer the auto pool's median is than the symmetric pool's, at worst."""
    return fmt((1 / min(ratios(DF7, "auto", base="symmetric")) - 1) * 100, 1) + "%"


@figure("decode.df7.auto_vs_sym_min", DF7)
def _df7_auto_vs_sym_min():
    return fmt(min(ratios(DF7, "auto", base="symmetric")), 3) + "x"


@figure("decode.df7.captured", DF7)
def _df7_captured():
    return span(ratios(DF7, "captured"), 2) + "x"


# ---- 15fd538: auto pools ----

MODES4 = ("plain", "symmetric", "auto", "captured")


def _best_over_auto(path, sz):
    return min(med(path, m, sz) for m in MODES4) / med(path, "auto", sz)


@figure("decode.a15.table", A15)
def _a15_table():
    body = []
    for sz in sizes(A15):
        body.append([size(sz)] + [cell(A15, m, sz, "[", "]") for m in ("plain", "symmetric", "auto")]
                    + [fmt(med(A15, "captured", sz), 2), fmt(ratio(A15, "symmetric", sz), 2) + "x",
                       "**" + fmt(ratio(A15, "auto", sz), 2) + "x**", fmt(_best_over_auto(A15, sz), 3)])
    return table(["size", "plain", "symmetric", "auto", "captured", "plain / symmetric", "plain / auto",
                  "auto / best"], body, [Run(A15)])


@figure("decode.a15.auto_speedup", A15)
def _a15_auto_speedup():
    return span(ratios(A15, "auto"), 2) + "x"


@figure("decode.a15.auto_vs_best_pct", A15)
def _a15_auto_vs_best():
    return fmt((1 - min(_best_over_auto(A15, sz) for sz in sizes(A15))) * 100, 1) + "%"


# ---- 237829c: ncclpool's CTA count ----

@figure("decode.c237.table", C237)
def _c237_table():
    body = []
    for sz in sizes(C237):
        body.append([size(sz)] + [cell(C237, m, sz, "[", "]") for m in ("plain", "symmetric", "captured")]
                    + ["**" + fmt(ratio(C237, "symmetric", sz), 2) + "x**"])
    return table(["size", "plain", "symmetric", "captured", "plain / symmetric"], body, [Run(C237)])


# ---- 9ed78e4: the symmetric kernels' CTA count ----

CTA_COLS = [("default", "NCCL's"), ("16", "16"), ("32", "32")]


def _cta_med(sz, ctas):
    return med(CTAS, "symmetric", sz, ctas=ctas)


def _cta_best(sz):
    return min(CTA_COLS, key=lambda c: _cta_med(sz, c[0]))


def _cta_table(path, cols, best_of, head):
    """Per size: plain, symmetric at each CTA setting of cols ([(value, label)], the best in bold), and
    plain / best; best_of(sz) gives the best (value, label)."""
    body = []
    for sz in sizes(path):
        best = best_of(sz)
        row = [size(sz), cell(path, "plain", sz, "[", "]")]
        for ctas, _ in cols:
            c = cell(path, "symmetric", sz, "[", "]", ctas=ctas)
            row.append("**" + c.replace(" [", "** [", 1) if ctas == best[0] else c)
        row.append(f"{fmt(med(path, 'plain', sz) / med(path, 'symmetric', sz, ctas=best[0]), 2)}x ({best[1]})")
        body.append(row)
    return table(head, body, [Run(path)])


@figure("decode.ctas.table", CTAS)
def _ctas_table():
    return _cta_table(CTAS, CTA_COLS, _cta_best, ["size", "plain", "symmetric, NCCL's count", "symmetric, 16 CTAs",
                                                   "symmetric, 32 CTAs", "plain / best"])


def _cta_ratios(ctas):
    return [med(CTAS, "plain", sz) / _cta_med(sz, ctas) for sz in sizes(CTAS)]


for _c in ("16", "32", "default"):
    figure(f"decode.ctas.speedup_{_c}", CTAS)(lambda c=_c: span(_cta_ratios(c), 2) + "x")


@figure("decode.ctas.default_1m", CTAS)
def _ctas_default_1m():
    return fmt(med(CTAS, "plain", MIB) / _cta_med(MIB, "default"), 2) + "x"


@figure("decode.ctas.plain_run", CTAS_PLAIN)
def _ctas_plain_run():
    return ", ".join(fmt(r, 2) + "x" for r in ratios(CTAS_PLAIN, "symmetric"))


@figure("decode.ctas.plain_run_1m", CTAS_PLAIN)
def _ctas_plain_run_1m():
    return fmt(ratio(CTAS_PLAIN, "symmetric", MIB), 2) + "x"


def _fastest_32():
    return [sz for sz in sizes(CTAS) if _cta_best(sz)[0] == "32"]


@figure("decode.ctas.fastest_32", CTAS)
def _ctas_fastest_32():
    """At how many sizes 32 CTAs (what the 15fd538 run used) are the fastest count."""
    return f"{len(_fastest_32())} of {len(sizes(CTAS))}"


@figure("decode.ctas.off_32_pct", CTAS)
def _ctas_off_32():
    """Elsewhere, how much slower 32 CTAs are than the fastest count, at worst."""
    return fmt(max(_cta_med(sz, "32") / _cta_med(sz, _cta_best(sz)[0]) - 1
                   for sz in sizes(CTAS) if sz not in _fastest_32()) * 100, 1) + "%"


# ---- 697a171: three runs, NCCL's CTA count ----

@figure("decode.r697.table", *R697)
def _r697_table():
    body = []
    for sz in sizes(R697[0]):
        per_run = ", ".join(fmt(ratio(p, "symmetric", sz), 2) for p in R697)
        sym = ratio(R697, "symmetric", sz)
        sym_s = fmt(sym, 2) + "x"
        body.append([size(sz)] + [cell(R697, m, sz, "[", "]") for m in ("plain", "symmetric", "captured")]
                    + [f"**{sym_s}**" if sym < 1 else sym_s, fmt(ratio(R697, "captured", sz), 2) + "x", per_run])
    return table(["size", "plain us", "symmetric us", "captured us", "plain / symmetric", "plain / captured",
                  "plain / symmetric per run"], body, [Run(p) for p in R697])


def _r697_pct(sz):
    """The symmetric pool's median time against plain's at one size, as a signed percentage."""
    return "{:+.0f}%".format((1 / ratio(R697, "symmetric", sz) - 1) * 100)


for _sz, _n in ((16 * KIB, "16k"), (64 * KIB, "64k"), (MIB, "1m"), (4 * MIB, "4m")):
    figure(f"decode.r697.sym_{_n}_pct", *R697)(lambda sz=_sz: _r697_pct(sz))


@figure("decode.r697.captured", *R697)
def _r697_captured():
    """plain / captured of each run's medians, every size."""
    return span([ratio(p, "captured", sz) for p in R697 for sz in sizes(p)], 2) + "x"


# ---- 22b8592: the CTA count at 4 GPUs (issue 46, data/2026-11-28-gpu-check-issue46-s3) ----

CTAS4 = "2026-11-28-gpu-check-issue46-s3/call1-4xh200-megatron-decodectas-22b8592/decode-ctas.json"
CTA4_COLS = [("nccl", "NCCL's"), ("ncclpool", "ncclpool's")]


def _cta4_best(sz):
    if data(CTAS4)["nproc"] != 4:
        raise ValueError(f"{CTAS4}: {data(CTAS4)['nproc']} ranks, not 4")
    return min(CTA4_COLS, key=lambda c: med(CTAS4, "symmetric", sz, ctas=c[0]))


@figure("decode.ctas4.table", CTAS4)
def _ctas4_table():
    return _cta_table(CTAS4, CTA4_COLS, _cta4_best, ["size, 4 GPUs", "plain", "symmetric, NCCL's count",
                                                     "symmetric, ncclpool's default (32 on Hopper)", "plain / best"])


@figure("decode.ctas4.ncclpool_speed", CTAS4)
def _ctas4_speed():
    """ncclpool's count's speed over NCCL's count's, per size."""
    return span([med(CTAS4, "symmetric", sz, ctas="nccl") / med(CTAS4, "symmetric", sz, ctas="ncclpool") for sz in sizes(CTAS4)], 2)


figure("decode.ctas4.fastest_ncclpool", CTAS4)(
    lambda: f"{sum(_cta4_best(sz)[0] == 'ncclpool' for sz in sizes(CTAS4))} of {len(sizes(CTAS4))}")
figure("decode.ctas4.nccl_vs_plain", CTAS4)(
    lambda: span([med(CTAS4, "plain", sz) / med(CTAS4, "symmetric", sz, ctas="nccl") for sz in sizes(CTAS4)], 2) + "x")
figure("decode.ctas4.nccl_slower_sizes", CTAS4)(
    lambda: ", ".join(size(sz) for sz in sizes(CTAS4) if med(CTAS4, "symmetric", sz, ctas="nccl") > med(CTAS4, "plain", sz)))

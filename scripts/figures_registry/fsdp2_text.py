"""Figures of docs/benchmarks/fsdp2.md's text (its tables: fsdp2.py), from the same runs."""

import re
import statistics

from . import data, figure, fmt, rows, span, text
from .fsdp2 import (A15_1, A15_2, AUTO_GUARD, BISECT, C9_4096, C9_8192, CE_BOUND, CE_CALL2, CE_HEAVY, DF7, G51,
                    G9E, GUARD, H100, OLD_82D, SHARE, bisect, med, pct, pool_vals, recs, rel, spread, vals)

CE_COLL = "2026-11-27-gpu-check-2xh200-e370088-s2/call2-cecoll-copyengine-sglang/gpu-check2/bench-coll-ce.json"
MIB, GIB = 1 << 20, 1 << 30


def faster(path, spec, base="plain", key="steady_step_ms"):
    """How much shorter spec's median step is than base's, as a percentage."""
    return fmt(-rel(path, spec, key, base) * 100, 1) + "%"


def gib_more(path, spec):
    return med(path, spec, "device_used_gib") - med(path, "plain", "device_used_gib")


# ---- copy engines, compute-bound (call3) and comm-heavy (call1) ----

figure("fsdp2.ce.bound_faster_pct", CE_BOUND)(lambda: faster(CE_BOUND, "ncclpool-ce"))
figure("fsdp2.ce.bound_mem_pct", CE_BOUND)(lambda: pct(rel(CE_BOUND, "ncclpool-ce", "device_used_gib")))
figure("fsdp2.ce.bound_vs_today_pct", CE_BOUND)(lambda: faster(CE_BOUND, "ncclpool-ce", AUTO_GUARD))
figure("fsdp2.ce.bound_zero_gib", CE_BOUND)(
    lambda: "+" + span([gib_more(CE_BOUND, s) for s in ("torch-ce", "ncclpool-ce")], 1) + " GiB")
figure("fsdp2.ce.bound_zero_pct", CE_BOUND)(
    lambda: "+" + span([rel(CE_BOUND, s, "device_used_gib") * 100 for s in ("torch-ce", "ncclpool-ce")], 1) + "%")
figure("fsdp2.ce.share_gib", CE_BOUND)(lambda: "+" + fmt(gib_more(CE_BOUND, SHARE), 1) + " GiB")
figure("fsdp2.ce.share_mem_pct", CE_BOUND)(lambda: pct(rel(CE_BOUND, SHARE, "device_used_gib")))
figure("fsdp2.ce.share_faster_pct", CE_BOUND)(lambda: faster(CE_BOUND, SHARE))

figure("fsdp2.ce.heavy_faster_pct", CE_HEAVY)(lambda: faster(CE_HEAVY, "ncclpool-ce"))
figure("fsdp2.ce.heavy_spread_pct", CE_HEAVY)(
    lambda: span([spread(CE_HEAVY, s) * 100 for s in ("ncclpool-ce", "plain")]) + "%")


@figure("fsdp2.ce.heavy_within_run_pct", CE_HEAVY)
def _heavy_within_run():
    """The largest move of single steady steps within one run: (slowest - fastest) / fastest."""
    return fmt(max((r["steady_max_ms"] - r["steady_min_ms"]) / r["steady_min_ms"] for r in data(CE_HEAVY)) * 100) + "%"


@figure("fsdp2.ce.heavy_steps_ms", CE_HEAVY)
def _heavy_steps():
    return span([r["steady_min_ms"] for r in data(CE_HEAVY)] + [r["steady_max_ms"] for r in data(CE_HEAVY)]) + " ms"


figure("fsdp2.ce.local_vs_plain_pct", CE_HEAVY)(lambda: pct(rel(CE_HEAVY, "ncclpool-local")))
figure("fsdp2.ce.local_spread_pct", CE_HEAVY)(lambda: fmt(spread(CE_HEAVY, "ncclpool-local") * 100, 1) + "%")
figure("fsdp2.ce.local_fastest_ms", CE_HEAVY)(lambda: span(vals(CE_HEAVY, "ncclpool-local", "steady_min_ms")) + " ms")
figure("fsdp2.ce.plain_fastest_ms", CE_HEAVY)(lambda: span(vals(CE_HEAVY, "plain", "steady_min_ms")))
figure("fsdp2.ce.today_vs_plain_pct", CE_HEAVY)(lambda: pct(rel(CE_HEAVY, AUTO_GUARD)))
figure("fsdp2.ce.today_spread_pct", CE_HEAVY)(lambda: fmt(spread(CE_HEAVY, AUTO_GUARD) * 100) + "%")


def _call2():
    """{mode: (median, min, max, device GiB, memory vs plain)} from the stdout table of call2 (b1.txt)."""
    out = {}
    pat = re.compile(r"^(\S+)\s+([\d.]+) \(([\d.]+)-([\d.]+)\)\s+[\d.]+\s+\d+\s+([\d.]+)\s+([+-][\d.]+)%")
    for line in text(CE_CALL2).splitlines():
        m = pat.match(line)
        if m:
            out[m.group(1)] = tuple(float(x) for x in m.groups()[1:])
    if "plain" not in out:
        raise KeyError("no FSDP2 table in " + CE_CALL2)
    return out


@figure("fsdp2.ce.call2", CE_CALL2)
def _call2_text():
    t = _call2()
    p = t["plain"][0]
    d = lambda mode: pct(t[mode][0] / p - 1)  # noqa: E731
    return (f"plain {fmt(p, 2)} ({fmt(t['plain'][1], 2)}-{fmt(t['plain'][2], 2)}), torch-ce {fmt(t['torch-ce'][0], 2)} "
            f"({d('torch-ce')}), ncclpool-symmetric {fmt(t['ncclpool-symmetric'][0], 2)} ({d('ncclpool-symmetric')}), "
            f"ncclpool-ce {fmt(t['ncclpool-ce'][0], 2)} ({fmt(t['ncclpool-ce'][1], 2)}-{fmt(t['ncclpool-ce'][2], 2)}; "
            f"{d('ncclpool-ce')}), memory " + " / ".join(
                "+" + fmt(t[m][4], 1) + "%" for m in ("torch-ce", "ncclpool-symmetric", "ncclpool-ce")))


@figure("fsdp2.ce.call2_faster_pct", CE_CALL2)
def _call2_faster():
    t = _call2()
    return fmt((1 - t["ncclpool-ce"][0] / t["plain"][0]) * 100, 1) + "%"


# bench coll's copy-engine all-gather (coll.md), alone and beside a matmul.
def _coll(size, placement):
    found = [r for r in rows(data(CE_COLL), "all_gather") if r.get("bytes") == size and r["placement"] == placement]
    if len(found) != 1:
        raise KeyError(f"{len(found)} all-gather rows of {size} {placement} in {CE_COLL}")
    return found[0]


@figure("fsdp2.ce.coll_1g", CE_COLL)
def _coll_1g():
    i, o = _coll(GIB, "in"), _coll(GIB, "out")
    return (f"1 GiB in place {fmt(i['ce_us'])} vs {fmt(i['symmetric_us'])} us; out of place {fmt(o['ce_us'])} vs "
            f"{fmt(o['symmetric_us'])}")


def _coll_steps(kind):
    return [r[kind + "_step"] for r in rows(data(CE_COLL), "all_gather")
            if r.get("bytes", 0) >= 64 * MIB and r["placement"] == "in"]


figure("fsdp2.ce.coll_step_sym_pct", CE_COLL)(lambda: span([(s - 1) * 100 for s in _coll_steps("symmetric")]) + "%")
figure("fsdp2.ce.coll_step_ce_pct", CE_COLL)(lambda: span([(s - 1) * 100 for s in _coll_steps("ce")]) + "%")


# ---- local registration elsewhere: one rank (b21ce3d), compute-bound 2 GPUs on 2026-11-23 ----

figure("fsdp2.h100.local_vs_plain_pct", H100)(lambda: pct(rel(H100, "ncclpool-local")))
LOCAL_2GPU = (C9_4096, A15_1, A15_2, G51, G9E)  # every compute-bound 2-GPU run of 2026-11-23 with local registration
figure("fsdp2.local_2gpu_faster_pct", *LOCAL_2GPU)(
    lambda: span([-rel(p, "ncclpool-local") * 100 for p in LOCAL_2GPU], 1) + "%")


# ---- the guard's default (e370088) ----

figure("fsdp2.guard.vs_plain_pct", GUARD)(lambda: faster(GUARD, AUTO_GUARD))
figure("fsdp2.guard.vs_on_pct", GUARD)(lambda: faster(GUARD, AUTO_GUARD, "ncclpool-auto"))


# ---- df7cf49 (the README's: fsdp2.auto_faster_pct, fsdp2.auto_memory_pct in fsdp2.py) ----

figure("fsdp2.df7.auto_vs_fastest", DF7)(
    lambda: fmt(med(DF7, "ncclpool-auto") / min(med(DF7, s) for s in ("plain", "ncclpool-symmetric")), 3) + "x")


# ---- b21ce3d, one rank ----

@figure("fsdp2.h100.mem_within_pct", H100)
def _h100_mem():
    specs = {r["spec"] for r in data(H100)} - {"plain"}
    return fmt(max(abs(rel(H100, s, "device_used_gib")) for s in specs) * 100, 1) + "%"


# ---- 15fd538, auto pools ----

def _a15_call(path):
    modes = ("plain", "ncclpool-local", "ncclpool-symmetric", "ncclpool-auto")
    return {m: med(path, m) for m in modes}


@figure("fsdp2.a15.target", A15_1, A15_2)
def _a15_target():
    two, one = _a15_call(A15_2), _a15_call(A15_1)
    best2 = min(two.values())
    best1 = min(one.values())
    who = min(two, key=two.get)
    return (f"{fmt(two['ncclpool-auto'], 2)} ms against the fastest median {fmt(best2, 2)} "
            f"({'auto itself' if who == 'ncclpool-auto' else who}; local {fmt(two['ncclpool-local'], 2)}, symmetric "
            f"{fmt(two['ncclpool-symmetric'], 2)}) in the two-round call, {fmt(one['ncclpool-auto'], 2)} against "
            f"{fmt(best1, 2)} ({fmt(one['ncclpool-auto'] / best1, 3)}x) in the other")


figure("fsdp2.a15.vs_plain_pct", A15_1, A15_2)(
    lambda: " and ".join(faster(p, "ncclpool-auto") for p in (A15_2, A15_1)))
figure("fsdp2.a15.mem_pct", A15_1)(lambda: pct(rel(A15_1, "ncclpool-auto", "device_used_gib")))
figure("fsdp2.a15.sym_rounds_ms", A15_2)(lambda: span(vals(A15_2, "ncclpool-symmetric", "steady_step_ms"), 2) + " ms")


# ---- c9c2fc7, the growth before and after ----

figure("fsdp2.c9.mem_pct", C9_4096, C9_8192)(
    lambda: ", ".join(pct(rel(p, "ncclpool-symmetric", "device_used_gib")) for p in (C9_4096, C9_8192)))
figure("fsdp2.c9.faster_ms", C9_4096, C9_8192)(
    lambda: span([med(p, "plain") - med(p, "ncclpool-symmetric") for p in (C9_4096, C9_8192)], 1) + " ms")
figure("fsdp2.c9.before_rounds_ms", C9_4096)(
    lambda: " and ".join(fmt(v, 1) for v in sorted(vals(C9_4096, OLD_82D, "steady_step_ms"))) + " ms")
figure("fsdp2.c9.registration_s", C9_4096)(
    lambda: fmt(statistics.median(pool_vals(C9_4096, "ncclpool-symmetric", "registration_ms")) / 1000, 1) + " s")
figure("fsdp2.c9.first_step", C9_4096)(
    lambda: f"{fmt(med(C9_4096, 'ncclpool-symmetric', 'first_step_ms'))} ms against plain "
            f"{fmt(med(C9_4096, 'plain', 'first_step_ms'))}")


# ---- the one-round re-runs by gpu-check (51dac2e, 9ed78e4) ----

RERUN = ("plain", "torch-symm", "ncclpool-local", "ncclpool-symmetric")


def _memory(path):
    v = [fmt(med(path, s, "device_used_gib"), 2) for s in RERUN]
    return f"plain {v[0]} GiB, torch's route {v[1]}, ncclpool local {v[2]}, ncclpool symmetric {v[3]}"


figure("fsdp2.g51.memory", G51)(lambda: _memory(G51))
figure("fsdp2.g51.steady", G51)(lambda: " / ".join(fmt(med(G51, s), 2) for s in RERUN) + " ms")
figure("fsdp2.g9e.memory", G9E)(lambda: _memory(G9E))
for _p, _n in ((G51, "g51"), (G9E, "g9e")):
    figure(f"fsdp2.{_n}.sym_mem_pct", _p)(lambda p=_p: pct(rel(p, "ncclpool-symmetric", "device_used_gib")))
figure("fsdp2.g9e.pool_gib", G9E)(
    lambda: fmt(statistics.median(pool_vals(G9E, "ncclpool-symmetric", "reserved_gib")), 2) + " GiB")
figure("fsdp2.g9e.steady", G9E)(
    lambda: f"plain {fmt(med(G9E, 'plain'), 2)}, torch's route {fmt(med(G9E, 'torch-symm'), 2)}, local "
            f"{fmt(med(G9E, 'ncclpool-local'), 2)} and **symmetric {fmt(med(G9E, 'ncclpool-symmetric'), 2)} ms**")
figure("fsdp2.g9e.sym_steps_ms", G9E)(
    lambda: fmt(recs(G9E, "ncclpool-symmetric")[0]["steady_min_ms"], 1) + "-"
    + fmt(recs(G9E, "ncclpool-symmetric")[0]["steady_max_ms"], 1) + " ms")
figure("fsdp2.g9e.slow_ms", G9E)(lambda: fmt(med(G9E, "ncclpool-symmetric"), 1) + " ms")


# ---- the bisect ----

@figure("fsdp2.bisect.vs_plain_pct", BISECT)
def _bisect_vs_plain():
    got = bisect()
    return fmt(max(abs(v / got[(r, "plain")] - 1) for (r, _), v in got.items()) * 100, 1) + "%"


@figure("fsdp2.bisect.between_pct", BISECT)
def _bisect_between():
    got = bisect()
    rounds = {r for r, _ in got}
    return fmt(max(max(v for (q, _), v in got.items() if q == r) / min(v for (q, _), v in got.items() if q == r) - 1
                   for r in rounds) * 100, 1) + "%"


figure("fsdp2.bisect.head_ms", BISECT)(
    lambda: span([v for (_, k), v in bisect().items() if k == "head"], 1) + " ms")

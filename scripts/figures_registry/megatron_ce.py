"""Figures of docs/benchmarks/megatron-fsdp.md, the copy-engine all-gather (the all-gather group with
NCCL's ZERO CTA policy against its default): 2x H200, 2026-11-27, third lease (call2 at 23d90ef, whose
JSON was lost: its printed table b2.txt; call4 at 1a4ee3c) and fourth lease (3 rounds, 7ec0c4a)."""

import re
import statistics

from . import Run, figure, fmt, span, table, text
from .megatron import runs_of

S4 = "2026-11-27-gpu-check-2xh200-s4/call2-cetrain-megatron-3-rounds/runs/megatron-fsdp.jsonl"
S3C4 = "2026-11-27-gpu-check-2xh200-s3/call4-cetrain-megatron/cetrain-megatron/megatron-fsdp.jsonl"
S3C2 = "2026-11-27-gpu-check-2xh200-s3/call2-cetrain-compute-bound-megatron/b2.txt"
S3C2_COMMIT = "23d90ef"  # the s3 README: call2 ran at 23d90ef (the folder's other calls at 1a4ee3c)
ALLOCS = (("megatron", "Megatron-Core"), ("ncclpool", "ncclpool"))
POLICIES = (("default", "default policy"), ("zero", "ZERO (copy engines)"))


def _run_s3c2():
    r = Run(S3C2)
    r.commit = S3C2_COMMIT
    return r


_ROW = re.compile(r"^(megatron|ncclpool|none)\s+(symmetric|local|no user buffers)\s+(one group|ag group)(, zero CTAs)?\s+"
                  r"([\d.]+) \([\d.]+-[\d.]+\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def _s3c2():
    """The runs of call2's printed table, as results: {allocator, symmetric, ag_group, ag_cta_policy, ...}."""
    out = []
    for line in text(S3C2).splitlines():
        m = _ROW.match(line)
        if m:
            out.append({"allocator": m.group(1), "symmetric": m.group(2) == "symmetric", "ag_group": m.group(3) == "ag group",
                        "ag_cta_policy": "zero" if m.group(4) else "default", "steady_step_ms": float(m.group(5)),
                        "setup_ms": float(m.group(6)), "first_step_ms": float(m.group(7)),
                        "peak_reserved_gib": float(m.group(8)), "device_used_gib": float(m.group(9))})
    if not out:
        raise KeyError("no table rows in " + S3C2)
    return out


def _ce(src, alloc, policy):
    """The runs of one allocator and policy (symmetric, all-gather group) of a run file or call2's table."""
    if src == S3C2:
        return [r for r in _s3c2() if r["allocator"] == alloc and r["ag_cta_policy"] == policy]
    return runs_of(src, alloc, True, True, policy=policy)


def _m(src, alloc, policy, key="steady_step_ms"):
    return statistics.median(r[key] for r in _ce(src, alloc, policy))


def _gain(src, alloc):
    """zero / default - 1, steady step, %."""
    return (_m(src, alloc, "zero") / _m(src, alloc, "default") - 1) * 100


def _pct(v):
    return fmt(v, 1) + "%"


def _device(src, alloc, policy):
    return span([r["device_used_gib"] for r in _ce(src, alloc, policy)], 2)


# ---- fourth lease: 3 interleaved rounds ----

@figure("megatron.ce.s4.table", S4)
def _s4_table():
    body = []
    for alloc, name in ALLOCS:
        for pol, pname in POLICIES:
            runs = sorted(_ce(S4, alloc, pol), key=lambda r: r["round"])
            st = [r["steady_step_ms"] for r in runs]
            su = [r["setup_ms"] for r in runs]
            gain = "-" if pol == "default" else f"**{_pct(_gain(S4, alloc))}**"
            body.append([name, pname, f"{fmt(statistics.median(st), 2)} ({fmt(min(st), 2)}-{fmt(max(st), 2)})", gain,
                         f"{fmt(statistics.median(su))} ({' / '.join(fmt(x) for x in su)})", _device(S4, alloc, pol)])
    return table(["allocator", "all-gather group", "steady ms, median (min-max of 3)", "zero vs default",
                  "setup ms, median (per round)", "device GiB"], body, [Run(S4)])


figure("megatron.ce.s4.zero_gain", S4)(lambda: span([-_gain(S4, a) for a, _ in ALLOCS], 1) + "%")
figure("megatron.ce.s4.vs_baseline", S4)(lambda: _pct((1 - _m(S4, "ncclpool", "zero") / _m(S4, "megatron", "default")) * 100))
figure("megatron.ce.s4.mcore_later_setup", S4)(lambda: span(
    [r["setup_ms"] / 1000 for r in _ce(S4, "megatron", "default") if r["round"] > 1], 1) + " s")
figure("megatron.ce.s4.ncclpool_setup", S4)(lambda: span(
    [r["setup_ms"] / 1000 for p, _ in POLICIES for r in _ce(S4, "ncclpool", p)], 1) + " s")


@figure("megatron.ce.first_run_setup", S4, S3C4, S3C2)
def _first_run_setup():
    """Megatron-Core's setup in the first Megatron-Core run of each device call (the default-policy run there)."""
    firsts = [next(r for r in _ce(S4, "megatron", "default") if r["round"] == 1)["setup_ms"],
              _m(S3C4, "megatron", "default", "setup_ms"), _m(S3C2, "megatron", "default", "setup_ms")]
    return span([v / 1000 for v in firsts], 1) + " s"


# ---- third lease: one round in each of two calls ----

@figure("megatron.ce.s3.table", S3C2, S3C4)
def _s3_table():
    body = []
    for alloc, name in ALLOCS:
        for pol, pname in POLICIES:
            st = " / ".join(fmt(_m(s, alloc, pol), 2) for s in (S3C2, S3C4))
            gain = "-" if pol == "default" else "**" + " / ".join(_pct(_gain(s, alloc)) for s in (S3C2, S3C4)) + "**"
            su = " / ".join(fmt(_m(s, alloc, pol, "setup_ms"), 1) for s in (S3C2, S3C4))
            dev = span([r["device_used_gib"] for s in (S3C2, S3C4) for r in _ce(s, alloc, pol)], 2)
            body.append([name, pname, st, gain, su, dev])
    return table(["allocator", "all-gather group", "steady ms, call2 / call4", "zero vs default", "setup ms, call2 / call4",
                  "device GiB"], body, [_run_s3c2(), Run(S3C4)])


def _s3(alloc, pol, key):
    return [_m(s, alloc, pol, key) for s in (S3C2, S3C4)]


figure("megatron.ce.s3.zero_gain", S3C2, S3C4)(lambda: span([-_gain(s, a) for s in (S3C2, S3C4) for a, _ in ALLOCS], 1) + "%")
figure("megatron.ce.s3.mcore_setup_default", S3C2, S3C4)(lambda: span([v / 1000 for v in _s3("megatron", "default", "setup_ms")]) + " s")
figure("megatron.ce.s3.mcore_setup_zero", S3C2, S3C4)(lambda: span([v / 1000 for v in _s3("megatron", "zero", "setup_ms")], 1) + " s")
figure("megatron.ce.s3.ncclpool_setup", S3C2, S3C4)(lambda: span(
    [v / 1000 for p, _ in POLICIES for v in _s3("ncclpool", p, "setup_ms")], 1) + " s")


@figure("megatron.ce.s3.default_rows", S3C2, S3C4)
def _s3_default_rows():
    """The default-policy rows (the two configurations e370088's lease did not reach): setup, steady, memory."""
    mc = span([v / 1000 for v in _s3("megatron", "default", "setup_ms")], 1)
    nc = span([v / 1000 for v in _s3("ncclpool", "default", "setup_ms")], 2)
    st = span([v for a, _ in ALLOCS for v in _s3(a, "default", "steady_step_ms")], 1)
    dev = span([v for a, _ in ALLOCS for v in _s3(a, "default", "device_used_gib")], 2)
    return f"Megatron-Core setup {mc} s against ncclpool's {nc} s, steady {st} ms, device memory {dev} GiB, for both"

"""Figures of docs/benchmarks/registration.md: the registry benchmark on the simulator (c8ad8d7 against
51dac2e), the registration bench of gpu-check on 2x H200 (7ec0c4a), and a real agreement's host cost
(scope bench, 32b2253)."""

import re
import statistics

from . import Run, data, figure, fmt, row, rows, span, table, text

SCHED = "2026-11-23-bench-registry-sim-c8ad8d7-vs-51dac2e.txt"
OLD, NEW = "51dac2e", "c8ad8d7"  # /tmp/old/build/default, /work/main/build/default
REG = "2026-11-27-gpu-check-2xh200-s4/call1-cuda-nccl-bench-wheel-tool-demo-examples/stdout.txt"
SCOPE = [f"2026-11-22-scope-2xh200-32b2253-run{i}.json" for i in (1, 2, 3)]


def _sched():
    """{commit: {benchmark name: [real-time ns of each run's median]}} from the registry bench's output."""
    out, commit = {OLD: {}, NEW: {}}, None
    for line in text(SCHED).splitlines():
        head = re.match(r"== (\S+) run \d+", line)
        if head:
            commit = OLD if head.group(1).startswith("/tmp/old") else NEW
            continue
        m = re.match(r"BM_(\w+/\d+/\d+)_median\s+([\d.]+) ns", line)
        if m and commit:
            out[commit].setdefault(m.group(1), []).append(float(m.group(2)))
    if not out[OLD] or not out[NEW]:
        raise KeyError("no benchmark lines in " + SCHED)
    return out


def _cell(vals, scale=1, places=0):
    return span([v / scale for v in vals], places)


@figure("registration.sched.table", SCHED)
def _sched_table():
    s = _sched()
    body = []
    for label, bench in (("scope enter + close, S = 64, G = 3 (symmetric)", "ScopeUseNothingNew/64/3"),
                         ("scope enter + close, S = 64, G = 2", "ScopeUseNothingNew/64/2"),
                         ("scope enter + close, S = 1024, G = 3", "ScopeUseNothingNew/1024/3")):
        body.append([label] + [_cell(s[c][bench]) + " ns" for c in (OLD, NEW)])
    body.append(["the Megatron pattern on loopback, S = 64, G = 2 / 3"] + [
        " / ".join(_cell(s[c][f"ScopeUseReregisterAll/64/{g}"], 1000) for g in (2, 3)) + " us" for c in (OLD, NEW)])
    return table(["benchmark", OLD, NEW], body, [Run(SCHED)])


def _per_group(commit_a, commit_b=None):
    """Per group and use, ns: commit_a's time (less commit_b's, run by run) divided by G, each benchmark."""
    s, out = _sched(), []
    for bench, vals in s[commit_a].items():
        if not bench.startswith("ScopeUseNothingNew/"):
            continue
        g = int(bench.split("/")[2])
        for i, v in enumerate(vals):
            out.append((v - (s[commit_b][bench][i] if commit_b else 0)) / g)
    return out


@figure("registration.sched.agreement_us", SCHED)
def _agreement_us():
    """What every scope end's loopback agreement added per group: 51dac2e less c8ad8d7, run by run."""
    return span([v / 1000 for v in _per_group(OLD, NEW)], 1) + " us"


@figure("registration.sched.per_group_ns", SCHED)
def _per_group_ns():
    """c8ad8d7's use (agreeing at every 16th scope end) per group."""
    return span(_per_group(NEW)) + " ns"


@figure("registration.real_agreement_us", *SCOPE)
def _real_agreement():
    """A real agreement's host cost: ncclpool's host us per use at G = 1, median of the three runs."""
    vals = [row(rows(data(p)), segments=64, groups=1, strategy="ncclpool")["host_per_use_us"] for p in SCOPE]
    r = Run(SCOPE[0])
    return f"{fmt(statistics.median(vals), 1)} us at G = 1 ({r.device}, {r.commit}, {r.date})"


# The registration bench of gpu-check, 2x H200, 7ec0c4a (its table in stdout.txt).
def _reg():
    """{(segments, kind): (attach ms, per segment ms, use ncclpool us or None, use re-register ms or None)}."""
    out = {}
    for line in text(REG).splitlines():
        m = re.match(r"(\d+)\s+(local|symmetric)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+) us\s+([\d.]+) ms)?\s*$", line)
        if m:
            use = (float(m.group(5)), float(m.group(6))) if m.group(5) else (None, None)
            out[(int(m.group(1)), m.group(2))] = (float(m.group(3)), float(m.group(4))) + use
    if not out:
        raise KeyError("no registration table in " + REG)
    return out


SEGS = (1, 8, 64)


def _ms(v):
    return fmt(v, 0 if v >= 100 else 1)


figure("registration.s4.sym_attach", REG)(lambda: " / ".join(_ms(_reg()[(s, "symmetric")][0]) for s in SEGS) + " ms")
figure("registration.s4.per_window_64", REG)(lambda: fmt(_reg()[(64, "symmetric")][1], 1) + " ms")
figure("registration.s4.local_attach", REG)(lambda: span([_reg()[(s, "local")][0] for s in SEGS], 2) + " ms")
figure("registration.s4.use_us", REG)(lambda: span([_reg()[(s, "symmetric")][2] for s in SEGS], 1) + " us")
figure("registration.s4.rereg", REG)(lambda: " / ".join(_ms(_reg()[(s, "symmetric")][3]) for s in SEGS) + " ms")
# Past the first window: each further window's share (per segment at S = 8 and 64).
figure("registration.s4.window_ms", REG)(lambda: span([_reg()[(s, "symmetric")][1] for s in (8, 64)], 1) + " ms")
figure("registration.s4.first_window_ms", REG)(lambda: fmt(_reg()[(1, "symmetric")][0], 1) + " ms")
figure("registration.s4.local_per_segment_us", REG)(
    lambda: span([_reg()[(s, "local")][1] * 1000 for s in SEGS]) + " us")

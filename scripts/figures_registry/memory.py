"""Figures of docs/benchmarks/memory.md, its first part (2026-11-24: segments of the requests' own
sizes, the segment budget): `ncclpool replay TRACE --group-by stream --json` on the simulator (the
2-core build machine), the growth test programs of growth-sim 3603517, and the GPU checks of then.
The History section's figures are in memory_history.py."""

import math
import re

from . import Run, data, figure, fmt, jsonl, span, table, text

MIB = 1 << 20
WINDOW_S = 0.015  # the replays' estimate of one window then (15 ms, 4 ranks), a setting
TRACES = [("decode", "decode"), ("fsdp2", "FSDP2"), ("fsdp_ep", "FSDP+EP"), ("megatron_fsdp", "Megatron-FSDP")]
SCALES = ["0.5", "0.75", "1", "1.25", "1.5", "2", "3"]

R4913 = "2026-11-24-replay-4913f08/"
R11DC = "2026-11-24-replay-11dc88f/"
SCALED = "2026-11-24-replay-scaled-762a435/"
SEG_OLD = "2026-11-24-replay-segments-6b0e280/"
SEG_NEW = "2026-11-24-replay-segments-55a2e40/"
R4422 = "2026-11-23-replay-4422052/"
RC9C = "2026-11-23-replay-c9c2fc7/"
RAMP = "2026-11-23-replay-ramp/"
SIM64 = "2026-11-24-growth-sim-3603517/README.md"
B21 = "2026-11-24-fsdp2-1xh100-b21ce3d/fsdp2.txt"
DF7_FSDP2 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/fsdp2.txt"
C9C_FSDP2 = ["2026-11-23-fsdp2-2xh200-c9c2fc7-dim4096.json", "2026-11-23-fsdp2-2xh200-c9c2fc7-dim8192.json"]
AC5_MEG = "2026-11-23-megatron-fsdp-2xh200-ac5b222.jsonl"


# ---- reading one replay's --json ----
def ratio(j):
    """Peak reserved over peak live of the shared pool."""
    return j["shared"]["peak_reserved_bytes"] / j["shared"]["peak_live_bytes"]


def segs(j):
    return j["shared"]["segments"]


def cell(j, bold=False):
    r = fmt(ratio(j), 3)
    return f"**{r}** ({segs(j)})" if bold else f"{r} ({segs(j)})"


def recorded(j):
    """PyTorch's reserve as the replay counts it: (MiB, over peak live, a lower bound?)."""
    b = j["recorded_peak_reserved_bytes"]
    return b / MIB, b / j["shared"]["peak_live_bytes"], j.get("recorded_older_segment_bytes", 0) > 0


def mib(b):
    return fmt(b / MIB)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# Where the files of each rule are (tensors level, symmetric 1 GiB chunks, at scale x).
def old_chunks(key, x="1"):  # 844d423: whole chunks
    return data(f"{SCALED}{key}-x{x}-844d423.json")


def first_chunk(key, x="1"):  # 11dc88f: own sizes within the first chunk's worth
    return data(f"{SCALED}{key}-x{x}-new.json")


def budget(key, x="1"):  # 4913f08: own sizes within the segment budget
    return data(f"{R4913}{key}-tensors-symmetric.json" if x == "1" else f"{R4913}{key}-x{x}-tensors-symmetric.json")


def seg_key(key):
    return key.replace("_", "-")


def seg_old(key, x="1"):  # 6b0e280: the torch layer's ramped chunks below the budget
    return data(f"{SEG_OLD}{seg_key(key)}-x{x}-segments.json")


def seg_new(key, x="1"):  # 55a2e40: own sizes within the budget
    return data(f"{SEG_NEW}{seg_key(key)}-x{x}-segments.json")


def was_reported(key):
    """The reserve the replay reported for PyTorch before the correction (11dc88f), over peak live."""
    j = data(f"{RAMP}decode_2gpu-blocks.json") if key == "decode" else data(f"{R4422}{key}_2gpu-tensors-1024.json")
    return recorded(j)[1]


# ---- where it stands (2026-11-24) ----
STANDS_SOURCES = [R4913 + "*-tensors-{symmetric,local}.json", R11DC + "*-tensors-symmetric.json",
                  SCALED + "*-x1-844d423.json", SEG_OLD + "*-x1-segments.json", SEG_NEW + "*-x1-segments.json",
                  R4422 + "*-tensors-1024.json"]


@figure("memory.stands.table", R4913, R11DC, SCALED, SEG_OLD, SEG_NEW, R4422, RAMP)
def _stands_table():
    body = []
    for key, name in TRACES:
        b = budget(key)
        m, r, lower = recorded(b)
        ge = ">= " if lower else ""
        body.append([name, f"{ge}{fmt(m)} MiB = **{ge}{fmt(r, 3)}**", fmt(was_reported(key), 3),
                     f"{cell(old_chunks(key))} -> {cell(data(R11DC + key + '-tensors-symmetric.json'))} -> {cell(b, True)}",
                     cell(data(f"{R4913}{key}-tensors-local.json")),
                     f"{cell(seg_old(key))} -> {cell(seg_new(key), True)}"])
    return table(["trace", "PyTorch's allocator on the trace (corrected)", "was reported",
                  "tensors, symmetric 1 GiB chunks (default): 844d423 -> 11dc88f -> **4913f08** (segments)",
                  "tensors, local 2 MiB chunks", "segments (torch layer)"], body,
                 [Run(p) for p in STANDS_SOURCES])


def _bench_rows(path):
    """{mode: (vs plain, windows per group)} of an fsdp2_bench summary table (its text output)."""
    out = {}
    for line in text(path).splitlines():
        m = re.match(r"(\S+)\s+[\d.]+ \([\d.-]+\)\s+[\d.]+\s+\d+\s+[\d.]+\s+([+-][\d.]+%)\s+[\d.]+\s+(\S+)\s+(\S+)", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(4))
    if not out:
        raise KeyError("no summary rows in " + path)
    return out


@figure("memory.gpu.b21", B21)
def _gpu_b21():
    rows = _bench_rows(B21)
    sym = [v for k, v in rows.items() if k.startswith("ncclpool-symmetric")]
    pct, win = {v[0] for v in sym}, {v[1] for v in sym}
    if len(pct) != 1 or len(win) != 1:
        raise ValueError("the two libraries differ in " + B21)
    return f"device memory {pct.pop()} over plain FSDP2 with either, the same {win.pop().strip('[]')} segments"


@figure("memory.gpu.df7", DF7_FSDP2)
def _gpu_df7():
    rows = _bench_rows(DF7_FSDP2)
    pct = {rows[k][0] for k in ("ncclpool-symmetric", "ncclpool-auto")}
    win = {rows[k][1] for k in ("ncclpool-symmetric", "ncclpool-auto")}
    if len(pct) != 1 or len(win) != 1:
        raise ValueError("symmetric and auto differ in " + DF7_FSDP2)
    return f"{pct.pop()} over plain FSDP2 with symmetric and auto pools, {win.pop().strip('[]')} windows per group"


# ---- PyTorch's figure, corrected ----
def _older_mib(key):
    return fmt(budget(key)["recorded_older_segment_bytes"] / MIB)


figure("memory.older.fsdp2_mib", R4913 + "fsdp2-tensors-symmetric.json")(lambda: _older_mib("fsdp2") + " MiB")
figure("memory.older.fsdp_ep_mib", R4913 + "fsdp_ep-tensors-symmetric.json")(lambda: _older_mib("fsdp_ep") + " MiB")


# ---- segments of the requests' own sizes ----
figure("memory.decode_live_mib", R4913 + "decode-tensors-symmetric.json")(
    lambda: fmt(budget("decode")["shared"]["peak_live_bytes"] / MIB) + " MiB")


@figure("memory.variants.table", SCALED, R11DC, R4913)
def _variants_table():
    rows_ = [("844d423: own size from max(chunk / 16, reserved / 64), else a whole chunk", old_chunks, False),
             ("11dc88f: within the first chunk's worth: own size, floor chunk / 128",
              lambda k: data(R11DC + k + "-tensors-symmetric.json"), False),
             ("**4913f08: own size within the segment budget, floor chunk / 128**", budget, True)]
    body = [[label] + [cell(get(k), bold) if not bold else f"**{fmt(ratio(get(k)), 3)} ({segs(get(k))})**"
                       for k, _ in TRACES] for label, get, bold in rows_]
    return table(["growth (rules committed)"] + [n for _, n in TRACES], body,
                 [Run(SCALED + "*-x1-844d423.json"), Run(R11DC + "*-tensors-symmetric.json"),
                  Run(R4913 + "*-tensors-symmetric.json")])


# ---- beyond one size mix: the 28 scaled variants ----
RULES = [("whole chunks (844d423)", old_chunks), ("first chunk's worth (11dc88f)", first_chunk),
         ("**segment budget (4913f08)**", budget)]


@figure("memory.scaled.table", SCALED, R4913)
def _scaled_table():
    body = []
    for key, name in TRACES:
        for i, (label, get) in enumerate(RULES):
            if key != "decode":
                label = label.split(" (")[0] + ("**" if label.startswith("**") else "")
            bold = i == 2
            body.append([name, label] + [f"**{fmt(ratio(get(key, x)), 3)}** ({segs(get(key, x))})" if bold else
                                         cell(get(key, x)) for x in SCALES])
    return table(["trace", "rule"] + [f"x{x}" for x in SCALES], body,
                 [Run(SCALED + "*-x*-{844d423,new}.json"), Run(R4913 + "*-tensors-symmetric.json")])


def _all(get):
    return [get(k, x) for k, _ in TRACES for x in SCALES]


@figure("memory.scaled.summary", SCALED, R4913)
def _scaled_summary():
    g = [fmt(geomean([ratio(j) for j in _all(get)]), 3) for _, get in RULES]
    w = [max(ratio(j) for j in _all(get)) for _, get in RULES]
    return (f"geometric mean {g[0]} (whole chunks) -> {g[1]} (first chunk's worth) -> **{g[2]}** (segment "
            f"budget), worst {fmt(w[0], 2)} -> {fmt(w[1], 3)} -> **{fmt(w[2], 3)}**")


@figure("memory.scaled.swing", SCALED)
def _scaled_swing():
    def swing(get, keys):
        return max(abs(ratio(get(k, a)) - ratio(get(k, b))) for k in keys for a, b in zip(SCALES, SCALES[1:]))
    train = [k for k, _ in TRACES if k != "decode"]
    return (f"moves by up to {fmt(max(swing(old_chunks, train), swing(first_chunk, train)), 2)} between neighbouring "
            f"scales on the training traces (decode with whole chunks: {fmt(swing(old_chunks, ['decode']), 2)})")


@figure("memory.scaled.budget_spread", R4913)
def _budget_spread():
    spread = {name: max(ratio(budget(k, x)) for x in SCALES) - min(ratio(budget(k, x)) for x in SCALES)
              for k, name in TRACES}
    train = max(v for n, v in spread.items() if n != "decode")
    d = [ratio(budget("decode", x)) for x in SCALES]
    return (f"the training traces' figures stay within {fmt(train, 3)} of each other over the seven scales (decode's "
            f"{span(d, 3)})")


@figure("memory.scaled.windows", SCALED, R4913)
def _scaled_windows():
    return f"{fmt(sum(segs(j) for j in _all(budget)))} segments over the 28 variants against " \
           f"{fmt(sum(segs(j) for j in _all(old_chunks)))} with whole chunks"


def _unit_ms(j):
    """The replay's registration estimate per window (ms): its registration time over its windows."""
    return j["shared_registration_ms"] / j["shared"]["registrations"]


@figure("memory.scaled.fsdp2_windows", SCALED, R4913)
def _fsdp2_windows():
    new, old = budget("fsdp2"), old_chunks("fsdp2")
    extra = (segs(new) - segs(old)) * _unit_ms(new) / 1000
    return (f"FSDP2's tensors {segs(new)} windows per group instead of {segs(old)}: ~{fmt(extra, 2)} s more window "
            f"registration per group at {fmt(_unit_ms(new))} ms a window")


def _sim64():
    """{(ramp, request MiB): segments} of segments_at_64gib.cpp's output, and small_tensors.cpp's lines."""
    t = text(SIM64)
    seg = {(int(m.group(1)), int(m.group(2))): int(m.group(3))
           for m in re.finditer(r"ramp=(\d) req=(\d+) MiB: segments (\d+)", t)}
    small = {int(m.group(1)): (float(m.group(2)), int(m.group(3)))
             for m in re.finditer(r"ramp=(\d): live .*? worst reserved/live past 256 MiB ([\d.]+) at (\d+) MiB live", t)}
    if not seg or not small:
        raise KeyError("no program output in " + SIM64)
    return seg, small


def _sim64_ramp(ramp):
    seg, _ = _sim64()
    return {q: v for (r, q), v in seg.items() if r == ramp}


@figure("memory.sim64.fixed", SIM64)
def _sim64_fixed():
    """Plain pools at 4913f08 (whole chunks past the budget): 64 GiB grown by one request size."""
    fixed = _sim64_ramp(0)
    return (f"{span(fixed.values())} at 64 GiB for requests of one size from {min(fixed)} MiB to {max(fixed)} MiB, "
            f"~{fmt(min(fixed.values()) * WINDOW_S, 1)} s per group")


@figure("memory.sim64.ramped", SIM64)
def _sim64_ramped():
    r1 = _sim64_ramp(1)
    top = max(r1.values())
    small = sorted(q for q in r1 if r1[q] == top)
    mid = [(q, v) for q, v in sorted(r1.items()) if small[-1] < q < 64]
    return (f"{top} segments for " + " or ".join(f"{q} MiB" for q in small) + " torch segments, "
            + ", ".join(f"{v} for {q} MiB" for q, v in mid) + f", {span([v for q, v in r1.items() if q >= 64])} from 64 MiB")


figure("memory.sim64.fixed_span", SIM64)(lambda: span(_sim64_ramp(0).values()))
figure("memory.sim64.ramped_s", SIM64)(lambda: "~" + fmt(max(_sim64_ramp(1).values()) * WINDOW_S, 1) + " s")


@figure("memory.sim64.small", SIM64)
def _sim64_small():
    _, small = _sim64()
    return (f"whole chunks reserved {fmt(small[0][0], 1)}x the live bytes at {small[0][1]} MiB live (the 65th "
            f"segment, a 1 GiB chunk), ramped chunks at most {fmt(small[1][0], 2)} past 256 MiB live")


@figure("memory.scaled.max_segments", R4913)
def _max_segments():
    return str(max(segs(j) for j in _all(budget)))


@figure("memory.decode_fail", R4913, SCALED)
def _decode_fail():
    return fmt(ratio(old_chunks("decode")) / recorded(budget("decode"))[1], 1) + "x"


# ---- the torch layer's pools too (55a2e40) ----
@figure("memory.seg.before", SEG_OLD)
def _seg_before():
    worst = max(ratio(seg_old(k, x)) for k, _ in TRACES for x in SCALES)
    return (f"decode at {fmt(ratio(seg_old('decode')), 3)} at x1 and {fmt(ratio(seg_old('decode', '1.25')), 3)} at "
            f"x1.25: a user of `ncclpool.torch` got up to {fmt((worst - 1) * 100)}% more")


@figure("memory.seg.table", SEG_OLD, SEG_NEW)
def _seg_table():
    body = []
    for key, name in TRACES:
        body.append([name, "ramped chunks below the budget (6b0e280)"] + [cell(seg_old(key, x)) for x in SCALES])
        body.append([name, "**own sizes within the budget (55a2e40)**"] +
                    [f"**{fmt(ratio(seg_new(key, x)), 3)}** ({segs(seg_new(key, x))})" for x in SCALES])
    return table(["trace", "rule"] + [f"x{x}" for x in SCALES], body,
                 [Run(SEG_OLD + "*-segments.json"), Run(SEG_NEW + "*-segments.json")])


@figure("memory.seg.summary", SEG_OLD, SEG_NEW)
def _seg_summary():
    old, new = _all(seg_old), _all(seg_new)
    worst = max(((k, x) for k, _ in TRACES for x in SCALES), key=lambda kx: ratio(seg_new(*kx)))
    j = seg_new(*worst)
    name = dict(TRACES)[worst[0]]
    return (f"geometric mean {fmt(geomean([ratio(j) for j in old]), 3)} -> **{fmt(geomean([ratio(j) for j in new]), 3)}**, "
            f"worst {fmt(max(ratio(j) for j in old), 3)} -> **{fmt(ratio(j), 3)}** ({name} x{worst[1]}, whose "
            f"{segs(j)}th segment fell past the budget: a ramped chunk, {mib(j['shared']['at_peak']['never_used'])} MiB "
            "of the pool never used at the peak)")


@figure("memory.seg.windows", SEG_OLD, SEG_NEW)
def _seg_windows():
    old, new = _all(seg_old), _all(seg_new)
    per = ", ".join(f"{n} {segs(seg_old(k))} -> {segs(seg_new(k))}" for k, n in TRACES)
    most = max(segs(seg_new(k)) for k, _ in TRACES)
    return (f"{fmt(sum(segs(j) for j in old))} -> {fmt(sum(segs(j) for j in new))} segments over the 28 variants; at "
            f"x1 {per} per group (~{fmt(most * _unit_ms(seg_new('megatron_fsdp')) / 1000, 2)} s of window registration "
            f"at {fmt(_unit_ms(seg_new('megatron_fsdp')))} ms)")


# ---- before that (c9c2fc7) ----
C9C_COLS = [("tensors", 1024), ("tensors", 256), ("tensors", 64), ("segments", 1024), ("segments", 256)]


def c9c(key, level, chunk):
    return data(f"{RC9C}{key}_2gpu-{level}-{chunk}.json")


def r4422(key, level, chunk):
    return data(f"{R4422}{key}_2gpu-{level}-{chunk}.json")


@figure("memory.c9c.table", RC9C, R4422)
def _c9c_table():
    body = []
    for key, name in (TRACES[2], TRACES[1], TRACES[3]):
        row = [name]
        for i, (level, chunk) in enumerate(C9C_COLS):
            new, old = c9c(key, level, chunk), r4422(key, level, chunk)
            n, o = fmt(ratio(new), 3), fmt(ratio(old), 3)
            if chunk == 1024:
                better = level == "segments" or ratio(new) < recorded(old)[1]
                row.append(f"{'**' + n + '**' if better else n} (was {o}; {segs(new)}{' segments' if i == 0 and key == 'fsdp_ep' else ''})")
            else:
                row.append(f"{n} ({'was ' if key == 'fsdp_ep' and i == 1 else ''}{o})")
        body.append(row)
    return table(["trace", "tensors, 1 GiB chunks (symmetric default)", "tensors, 256 MiB", "tensors, 64 MiB",
                  "segments (torch layer), 1 GiB", "segments, 256 MiB"], body,
                 [Run(RC9C + "*.json"), Run(R4422 + "*.json")])


def _used_pct(path, mode_match):
    """Device memory of each matching run over plain's, in %, from an fsdp2_bench JSON."""
    rows_ = data(path)
    plain = next(r["device_used_gib"] for r in rows_ if r["mode"] == "plain")
    return [(r["device_used_gib"] / plain - 1) * 100 for r in rows_ if mode_match(r)]


@figure("memory.c9c.fsdp2_gpu", *C9C_FSDP2)
def _c9c_fsdp2_gpu():
    new = [_used_pct(p, lambda r: r["mode"] == "ncclpool-symmetric" and "82d6a66" not in r["library"]) for p in C9C_FSDP2]
    old = [_used_pct(p, lambda r: "82d6a66" in r["library"]) for p in C9C_FSDP2]
    return (f"+{fmt(max(new[0]), 1)}% and +{fmt(max(new[1]), 1)}% device memory over plain FSDP2 (was "
            f"+{fmt(max(old[0]), 1)}% and +{fmt(max(old[1]), 1)}%")


@figure("memory.c9c.fsdp2_before_pct", C9C_FSDP2[0])
def _c9c_fsdp2_before():
    return "+" + fmt(max(_used_pct(C9C_FSDP2[0], lambda r: "82d6a66" in r["library"])), 1) + "%"


@figure("memory.megatron_before_gib", AC5_MEG)
def _megatron_before():
    """ncclpool's symmetric registration over Megatron-Core's allocator in device memory, ac5b222."""
    res = [r["result"] for r in jsonl(AC5_MEG)]
    diffs = []
    for r in res:
        if r["allocator"] == "ncclpool" and r["symmetric"]:
            meg = next(m for m in res if m["allocator"] == "megatron" and m["symmetric"] and m["ag_group"] == r["ag_group"])
            diffs.append(r["device_used_gib"] - meg["device_used_gib"])
    return "+" + span(diffs, 2) + " GiB"


@figure("memory.c9c.segments_vs_torch", RC9C)
def _c9c_segments():
    r = {name: ratio(c9c(k, "segments", 1024)) for k, name in TRACES[1:]}
    j = c9c("fsdp_ep", "segments", 1024)
    return (f"within {fmt((max(r['FSDP2'], r['Megatron-FSDP']) - 1) * 100, 1)}% of what PyTorch reserved on FSDP2 and "
            f"Megatron-FSDP, {fmt((r['FSDP+EP'] - 1) * 100, 1)}% on FSDP+EP (a 1 GiB chunk grown just before the peak "
            f"holds {mib(j['shared']['at_peak']['never_used'])} MiB never used)")


figure("memory.c9c.megatron_never_mib", RC9C)(
    lambda: fmt(c9c("megatron_fsdp", "tensors", 1024)["shared"]["at_peak"]["never_used"] / MIB) + " MiB")


@figure("memory.c9c.per_group", RC9C)
def _c9c_per_group():
    js = [c9c(k, "tensors", 1024) for k, _ in (TRACES[2], TRACES[1], TRACES[3])]
    pg = [j["per_group_peak_reserved_bytes"] / j["per_group_peak_live_bytes"] for j in js]
    saves = [(1 - j["shared"]["peak_reserved_bytes"] / j["per_group_peak_reserved_bytes"]) * 100 for j in js]
    return " / ".join(fmt(x, 3) for x in pg) + f", so sharing still saves {span(saves)}%"

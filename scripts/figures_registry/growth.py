"""Figures of docs/benchmarks/growth.md: the growth trade-off replayed on the simulator (growth-sim
4c07312: `ncclpool replay ... --window-ms 3.2 --json` and bench/growth_sim.py, made by the folder's
run.sh), the torch benchmark's first registrations on 2x H200, and the window-span probe."""

import statistics

from . import Run, data, figure, fmt, jsonl, span, table

MIB = 1 << 20
SIM = "2026-11-25-growth-sim-4c07312/"
SIM090 = "2026-11-25-growth-sim-090fa8a/"
TORCH64 = SIM + "torch-layer-64x32MiB-2groups.jsonl"
SETTINGS = [0, 2, 64, 256, 1024, 2048]
TRACES = [("decode", "decode"), ("fsdp2", "FSDP2"), ("fsdp_ep", "FSDP+EP"), ("megatron_fsdp", "Megatron-FSDP")]

# The torch benchmark's first registration (64 x 32 MiB, 2 groups) on 2x H200, by the windows it made.
BENCH = ["2026-11-22-torch-bench-2xh200-32b2253-3runs.jsonl", "2026-11-22-torch-bench-2xh200-a3fd605-3runs.jsonl",
         "2026-11-23-torch-bench-2xh200-51dac2e.jsonl", "2026-11-23-torch-bench-2xh200-b3f5b78.jsonl",
         "2026-11-23-torch-bench-2xh200-9ed78e4.jsonl", "2026-11-23-torch-bench-2xh200-237829c-run2.jsonl"]
DF7 = "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/torch.log"
S3 = "2026-11-27-gpu-check-2xh200-s3/call3-torch-cetrain-compute-bound/torch.log"
FR, TR = "first registration, ncclpool", "first registration, torch register_mem_pool"
FRD, FRM = "first registration, ncclpool default", "first registration, ncclpool min_segment 1 GiB"

SPAN1 = "2026-11-25-gpu-check-1xh100-9a410ed/window-span-torch-nccl-1rank.json"
SPAN307 = ("2026-11-27-gpu-check-2xh200-e370088-s2/call4-ncclversions-2.30.7/gc-v/"
           "window-span-nccl-2.30.7-1-2rank.json")
SPAN297 = ("2026-11-27-gpu-check-2xh200-e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/"
           "window-span-nccl-2.29.7-1-2rank.json")


def seg(key, m):
    return data(f"{SIM}{key}-segments-min{m}.json")


def windows(j):
    return j["shared_registrations_per_group"][0]


def vs_torch(j):
    """Peak reserved over what PyTorch held (the segments level: its recorded reserve)."""
    return j["shared"]["peak_reserved_bytes"] / j["recorded_peak_reserved_bytes"]


def vs_live(j):
    return j["shared"]["peak_reserved_bytes"] / j["shared"]["peak_live_bytes"]


def label(m):
    return "min_segment " + (f"{m} MiB" if m < 1024 else f"{m // 1024} GiB")


def _sources(*kinds):
    return [f"{SIM}{k}-{kind}.json" for k, _ in TRACES for kind in kinds]


SEG_FILES = _sources(*(f"segments-min{m}" for m in SETTINGS))


@figure("growth.segments.table", *SEG_FILES)
def _segments_table():
    body = []
    for key, name in TRACES:
        base = seg(key, 0)
        tw, tb, unit = base["recorded_segments"], base["recorded_peak_reserved_bytes"], base["registration_unit_ms"]
        body.append([name, "PyTorch, `register_mem_pool(symm=True)`", tw, 1, fmt(tw * unit, 1), fmt(tb / MIB), "1.000"])
        for m in SETTINGS:
            j = seg(key, m)
            w, r = windows(j), j["shared"]["peak_reserved_bytes"]
            bold = m in (0, 1024)
            growth = ("**default**" + (" (own sizes, >= 8 MiB)" if key == "decode" else "")) if m == 0 else (
                f"**{label(m)}**" if bold else label(m))
            b = (lambda s: f"**{s}**") if bold else str
            body.append(["", growth, b(w), fmt(w / tw, 3), fmt(w * unit, 1), fmt(r / MIB), b(fmt(r / tb, 3))])
    return table(["trace", "growth", "windows / group", "vs torch", "est. ms / group", "peak reserved MiB",
                  "vs PyTorch"], body, [Run(SIM + "*-segments-min*.json")])


SMALL = [f"{SIM}{f}-min{m}.json" for f in ("torch_snapshot_small-segments", "two_groups") for m in (0, 2, 1024)]


@figure("growth.small_files", *SMALL)
def _small_files():
    def w_mib(f, m):
        j = data(f"{SIM}{f}-min{m}.json")
        return windows(j), fmt(j["shared"]["peak_reserved_bytes"] / MIB)
    t = {m: w_mib("torch_snapshot_small-segments", m) for m in (0, 2, 1024)}
    g = {m: w_mib("two_groups", m) for m in (0, 2, 1024)}
    same = len({t[m][0] for m in t}) == 1
    return (f"`torch_snapshot_small.json` (one {t[0][1]} MiB torch segment) "
            + (f"{t[0][0]} window whatever the setting" if same else f"{t[0][0]} / {t[2][0]} / {t[1024][0]} windows")
            + (f", {t[0][1]} MiB reserved by default and with 2 MiB" if t[0][1] == t[2][1] else
               f", {t[0][1]} MiB reserved by default and {t[2][1]} MiB with 2 MiB")
            + f", {t[1024][1]} MiB with 1 GiB; "
            f"`two_groups.csv` (hand-written, no torch segments) {g[0][0]} window and {g[0][1]} MiB by default, "
            f"{g[2][0]} and {g[2][1]} MiB with 2 MiB, {g[1024][0]} and {g[1024][1]} MiB with 1 GiB")


@figure("growth.torch64.table", TORCH64)
def _torch64_table():
    body = []
    for r in jsonl(TORCH64):
        m = r["min_segment"] // MIB
        bold = m in (0, 1024)
        name = "**default**" if m == 0 else (f"**{label(m)}**" if bold else label(m))
        w = r["windows_per_group"][0]
        ratio = fmt(r["first_registration_ms"] / r["torch_first_registration_ms"], 3)
        body.append([name, r["pool_segments"], f"**{w}**" if bold else w, fmt(r["reserved_bytes"] / MIB),
                     fmt(r["first_registration_ms"], 1), fmt(r["torch_first_registration_ms"], 1),
                     f"**{ratio}**" if bold else ratio])
    return table(["growth", "segments", "windows / group", "reserved MiB", "first registration, est. ms",
                  "torch's, est. ms", "ratio"], body, [Run(TORCH64)])


TEN_FILES = _sources(*(f"tensors-min{m}" for m in SETTINGS))


@figure("growth.tensors.table", *TEN_FILES)
def _tensors_table():
    body = []
    for key, name in TRACES:
        body.append([name] + [f"{windows(j)} / {fmt(vs_live(j), 3)}"
                              for j in (data(f"{SIM}{key}-tensors-min{m}.json") for m in SETTINGS)])
    return table(["trace", "default", "min_segment 2 MiB", "64 MiB", "256 MiB", "1 GiB", "2 GiB"], body,
                 [Run(SIM + "*-tensors-min*.json")])


CHUNKS = [("chunk64", "growth_chunk 64 MiB"), ("min0", "1 GiB (default)"), ("chunk8192", "8 GiB")]
CHUNK_FILES = _sources(*(f"segments-{c}" for c, _ in CHUNKS))


@figure("growth.chunk.table", *CHUNK_FILES)
def _chunk_table():
    body = [[name] + [f"{windows(j)} / {fmt(vs_torch(j), 3)}" for j in
                      (data(f"{SIM}{key}-segments-{c}.json") for c, _ in CHUNKS)] for key, name in TRACES]
    return table(["trace"] + [h for _, h in CHUNKS], body, [Run(SIM + "*-segments-{chunk64,min0,chunk8192}.json")])


@figure("growth.chunk_change", *CHUNK_FILES)
def _chunk_change():
    """How far 64 MiB or 8 GiB moves the windows per group from the default's, and the default's range."""
    change = max(abs(windows(data(f"{SIM}{k}-segments-{c}.json")) - windows(seg(k, 0)))
                 for k, _ in TRACES for c in ("chunk64", "chunk8192"))
    return f"at most {change} of {span([windows(seg(k, 0)) for k, _ in TRACES])}"


@figure("growth.default_vs_torch", *SEG_FILES)
def _default_vs_torch():
    return span([vs_torch(seg(k, 0)) for k, _ in TRACES], 3)


def _torch_windows(key):
    return seg(key, 0)["recorded_segments"]


@figure("growth.min1g_windows", *SEG_FILES)
def _min1g_windows():
    frac = {name: (windows(seg(k, 1024)), _torch_windows(k)) for k, name in TRACES}
    lo = min(frac, key=lambda n: frac[n][1] / frac[n][0])
    hi = max(frac, key=lambda n: frac[n][1] / frac[n][0])
    return (f"1/{fmt(frac[lo][1] / frac[lo][0], 2).rstrip('0').rstrip('.')} ({lo}: {frac[lo][0]} of {frac[lo][1]}) "
            f"to 1/{fmt(frac[hi][1] / frac[hi][0], 2).rstrip('0').rstrip('.')}")


@figure("growth.min1g_cost", *SEG_FILES)
def _min1g_cost():
    train = max(vs_torch(seg(k, 1024)) for k, _ in TRACES if k != "decode")
    d = seg("decode", 1024)
    return (f"up to +{fmt((train - 1) * 100)}% on the training traces, {fmt(vs_torch(d), 1)}x on a "
            f"{fmt(d['recorded_peak_reserved_bytes'] / MIB)} MiB decode pool")


@figure("growth.decode_torch_mib", SIM + "decode-segments-min0.json")
def _decode_torch_mib():
    return fmt(seg("decode", 0)["recorded_peak_reserved_bytes"] / MIB) + " MiB"


@figure("growth.target_memory", *SEG_FILES)
def _target_memory():
    d = seg("decode", 0)
    rest = [name for k, name in TRACES if k != "decode"]
    vals = {fmt(vs_torch(seg(k, 0)), 3) for k, _ in TRACES if k != "decode"}
    rest_text = (", ".join(rest[:-1]) + " and " + rest[-1] + " " + vals.pop()) if len(vals) == 1 else ", ".join(
        f"{name} {fmt(vs_torch(seg(k, 0)), 3)}" for k, name in TRACES if k != "decode")
    return (f"decode {fmt(vs_torch(d), 3)}: {fmt(d['shared']['peak_reserved_bytes'] / MIB)} MiB against "
            f"{fmt(d['recorded_peak_reserved_bytes'] / MIB)} MiB; {rest_text}")


@figure("growth.decode_090", SIM090 + "decode-segments-min0.json")
def _decode_090():
    return fmt(vs_torch(data(SIM090 + "decode-segments-min0.json")), 3)


@figure("growth.target_windows", TORCH64, *SEG_FILES)
def _target_windows():
    r0 = next(r for r in jsonl(TORCH64) if r["min_segment"] == 0)
    return (", ".join(f"{windows(seg(k, 0))} of {_torch_windows(k)}" for k, _ in TRACES)
            + f" windows per group; {r0['windows_per_group'][0]} of {r0['torch_windows_per_group']} for 64 x 32 MiB")


@figure("growth.target_min1g", TORCH64, *SEG_FILES)
def _target_min1g():
    r = next(r for r in jsonl(TORCH64) if r["min_segment"] == 1024 * MIB)
    items = [("64 x 32 MiB", r["windows_per_group"][0] / r["torch_windows_per_group"], r["reserved_bytes"] / r["live_bytes"], None)]
    for k, name in TRACES:
        j = seg(k, 1024)
        items.append((name, windows(j) / _torch_windows(k), vs_torch(j), (windows(j), _torch_windows(k))))
    items.sort(key=lambda i: i[1])
    parts = []
    for name, frac, _, wt in items:
        p = f"{fmt(frac, 3)} ({name})"
        if frac > 0.1:
            p = f"**{fmt(frac, 3)} ({name}: {wt[0]} windows for {wt[1]}, just short)**"
        parts.append(p)
    return (", ".join(parts[:-1]) + " and " + parts[-1] + " of torch's windows, at "
            + ", ".join(fmt(i[2], 3) for i in items[:-1]) + " and " + fmt(items[-1][2], 3) + " of PyTorch's reserve")


@figure("growth.target_min2g", *SEG_FILES)
def _target_min2g():
    fr = {name: windows(seg(k, 2048)) / _torch_windows(k) for k, name in TRACES}
    mem = {name: vs_torch(seg(k, 2048)) for k, name in TRACES}
    worst_train = max((n for n in mem if n != "decode"), key=mem.get)
    return (f"at most {fmt(max(fr.values()), 3)} on every trace, at up to {fmt(mem[worst_train], 3)} ({worst_train}) "
            f"and {fmt(mem['decode'], 1)}x on decode")


# The torch benchmark on 2x H200: first registrations by windows per group, and a line fitted to them.
def _recs(path, name):
    prefix = "BENCH " if path.endswith(".log") else ""
    return [b for b in jsonl(path, prefix) if b["name"] == name]


def _points():
    """(windows over both groups, ncclpool ms, torch ms, path) of every run that registered first."""
    out = []
    for path in BENCH + [DF7]:
        for a, t in zip(_recs(path, FR), _recs(path, TR)):
            out.append((a["chunks"] * a["groups"], a["value"], t["value"], path))
    return out


def _fit():
    pts = _points()
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


@figure("growth.fit_points", *BENCH, DF7)
def _fit_points():
    by = {}
    for w, ms, _, _ in _points():
        by.setdefault(w, []).append(ms)
    parts = []
    for i, w in enumerate(sorted(by)):
        v = by[w]
        rng = f"{span(v, 1)} ms" + (f" in {len(v)} runs" if len(v) > 1 else "")
        parts.append((f"{w} windows: " if i == 0 else f"{w}: ") + rng)
    return ", ".join(parts)


figure("growth.fit_window_ms", *BENCH, DF7)(lambda: fmt(_fit()[0], 2) + " ms")
figure("growth.fit_fixed_ms", *BENCH, DF7)(lambda: "~" + fmt(_fit()[1]) + " ms")


@figure("growth.df7_first", DF7)
def _df7_first():
    a, t = _recs(DF7, FR)[0], _recs(DF7, TR)[0]
    return f"{a['chunks'] * a['groups']} windows in {fmt(a['value'], 1)} ms against torch's {fmt(t['value'], 1)} ms"


@figure("growth.df7_first_short", DF7)
def _df7_first_short():
    return f"{fmt(_recs(DF7, FR)[0]['value'], 1)} against {fmt(_recs(DF7, TR)[0]['value'], 1)} ms"


@figure("growth.two_chunks", *BENCH)
def _two_chunks():
    pts = [p for p in _points() if p[0] == 4]
    commits = sorted({Run(p[3]).commit for p in pts}, key=lambda c: min(i for i, p in enumerate(pts) if Run(p[3]).commit == c))
    ratios = [p[2] / p[1] for p in pts]
    return (f"4 windows in {span([p[1] for p in pts], 1)} ms against torch's {span([p[2] for p in pts], 1)} ms "
            f"({len(pts)} runs, commits {commits[0]} to {commits[-1]}), 1/{fmt(min(ratios), 1)} to "
            f"1/{fmt(max(ratios), 1)} of torch's time")


def _s3(name):
    return [b["value"] for b in _recs(S3, name)]


def _rng(vals, places=1):
    return f"{fmt(statistics.median(vals), places)} ({span(vals, places)})"


@figure("growth.s3_min_later_ms", S3)
def _s3_min_later():
    """min_segment 1 GiB's rounds that were not the process's first registrations (rounds 2 on)."""
    return span([b["value"] for b in _recs(S3, FRM) if b["round"] > 1], 1) + " ms"


@figure("growth.s3_min", S3)
def _s3_min():
    reg = statistics.median(b["register_ms"] for b in _recs(S3, TR))
    plain = statistics.median(_s3("first registration, plain MemPool"))
    mins, tr, dflt = statistics.median(_s3(FRM)), statistics.median(_s3(TR)), statistics.median(_s3(FRD))
    wd = _recs(S3, FRD)[0]["windows_per_group"]
    return (f"4 windows in **{fmt(mins, 1)} ms ({span(_s3(FRM), 1)})** against torch's {fmt(tr, 1)} ms (allocation "
            f"and registration; {fmt(reg, 1)} registration alone) and ncclpool's default {fmt(dflt, 1)} ms "
            f"({sum(wd)} windows): 1/{fmt(tr / mins)} of torch's time, {fmt(mins - plain)} ms over a plain "
            f"`MemPool`'s allocation ({fmt(plain, 1)} ms)")


@figure("growth.s3_default_vs_torch", S3)
def _s3_default_vs_torch():
    reg = statistics.median(b["register_ms"] for b in _recs(S3, TR))
    d, t = statistics.median(_s3(FRD)), statistics.median(_s3(TR))
    return (f"{fmt(d, 1)} ms against torch's {fmt(t, 1)} (allocation and registration, {fmt(d / t, 2)}x) or "
            f"{fmt(reg, 1)} (registration alone, {fmt(d / reg, 2)}x)")


@figure("growth.s3_time", S3)
def _s3_time():
    m, t = statistics.median(_s3(FRM)), statistics.median(_s3(TR))
    return f"{fmt(m, 1)} ms against torch's {fmt(t, 1)} ms, 1/{fmt(t / m)}"


# The window-span probe: one window over N allocations against N windows.
def _span_rows(path):
    doc = jsonl(path)[0]  # the 1-rank file starts with NCCL's version line
    return doc, doc["rows"]


@figure("growth.span1", SPAN1)
def _span1():
    doc, rows = _span_rows(SPAN1)
    return (f"registering the span took {span([r['span']['register_ms'] for r in rows], 2)} ms against "
            f"{span([r['each']['register_ms'] for r in rows], 2)} ms for N windows (first window of the process: "
            f"{fmt(doc['first_window_ms'], 1)} ms)")


@figure("growth.span307", SPAN307)
def _span307():
    doc, rows = _span_rows(SPAN307)
    return (" / ".join(fmt(r["span"]["register_ms"], 1) for r in rows) + " ms for the span against "
            + " / ".join(fmt(r["each"]["register_ms"], 1) for r in rows) + " ms for N windows (first window of the "
            f"process {fmt(doc['first_window_ms'], 1)} ms; medians of {doc['repeats']})")


@figure("growth.span307_saves", SPAN307)
def _span307_saves():
    _, rows = _span_rows(SPAN307)
    return span([(1 - r["span"]["register_ms"] / r["each"]["register_ms"]) * 100 for r in rows]) + "%"


@figure("growth.span297_one_ms", SPAN297)
def _span297_one():
    _, rows = _span_rows(SPAN297)
    return fmt(next(r for r in rows if r["allocations"] == 1)["each"]["register_ms"], 1) + " ms"


@figure("growth.span297_each", SPAN297)
def _span297_each():
    _, rows = _span_rows(SPAN297)
    return " / ".join(fmt(r["each"]["register_ms"], 1) for r in rows if r["allocations"] > 1) + " ms"


"""Figures of docs/benchmarks/memory.md, its History section: `ncclpool replay TRACE --group-by stream
[--level segments] [--growth-chunk-mib N] --json` on the simulator, 2026-11-23 (4422052: the code
before segments of their own size; c9c2fc7: with them; the torch layer's ramped chunks)."""

from . import data, figure, fmt, span, table
from .memory import MIB, R4422, RAMP, RC9C, TRACES, Run, c9c, cell, r4422, ratio, recorded, segs

RAMP8 = "2026-11-23-replay-ramp8/"
HIST_ROWS = [("fsdp_ep", 1024), ("fsdp_ep", 256), ("fsdp_ep", 64), ("fsdp2", 1024), ("fsdp2", 256)]


def _pg(j):
    return j["per_group_peak_reserved_bytes"], j["per_group_peak_live_bytes"]


def _windows(j):
    return sum(j["shared_registrations_per_group"]), sum(g["registrations"] for g in j["per_group"])


def _chunk(c):
    return "1 GiB" if c == 1024 else f"{c} MiB"


def _name(key, j, first):
    n = dict(TRACES)[key]
    return f"{n}, 2 GPUs (rank 0, {fmt(j['events'])} events)" if first else n


@figure("memory.hist.table", R4422)
def _hist_table():
    body, seen = [], set()
    for key, c in HIST_ROWS:
        j = r4422(key, "tensors", c)
        live = j["shared"]["peak_live_bytes"]
        pr, pl = _pg(j)
        ws, wp = _windows(j)
        rm, rr, _ = recorded(j)
        best = c == 1024 or (key == "fsdp_ep" and c == 256)
        sh = f"{fmt(j['shared']['peak_reserved_bytes'] / MIB)} / {fmt(live / MIB)} MiB = " + (
            f"**{fmt(ratio(j), 3)}**" if best else fmt(ratio(j), 3))
        body.append([_name(key, j, key not in seen), _chunk(c), sh, f"{fmt(pr / MIB)} / {fmt(pl / MIB)} MiB = {fmt(pr / pl, 3)}",
                     fmt(j["shared"]["peak_reserved_bytes"] / pr, 3), f"{ws} / {wp}",
                     f"{fmt(rm)} MiB = {fmt(rr, 3)}" if key not in seen else fmt(rr, 3)])
        seen.add(key)
    return table(["trace", "chunk", "shared: peak reserved / live", "per group: peak reserved / live", "shared / per-group",
                  "windows shared (3 groups) / per group", "PyTorch's allocator on the same trace (as then reported)"],
                 body, [Run(R4422 + "*-tensors-*.json")])


@figure("memory.hist.peak.table", R4422)
def _peak_table():
    body = []
    for key, c in HIST_ROWS:
        if c == 64:
            continue
        a = r4422(key, "tensors", c)["shared"]["at_peak"]
        res = a["reserved"]
        body.append([f"{dict(TRACES)[key]}, {_chunk(c)}", f"{fmt(res / MIB)} MiB",
                     f"{fmt(a['requested'] / MIB)} ({fmt(a['requested'] / res * 100)}%)",
                     f"{fmt(a['free_in_used_segments'] / MIB)} ({fmt(a['free_in_used_segments'] / res * 100)}%)",
                     fmt(a["never_used"] / MIB), fmt(a["other_streams_only"] / MIB), fmt(a["empty_segments"] / MIB)])
    return table(["trace, chunk", "reserved", "live", "free in used segments", "of which never used (chunk tail)",
                  "of which one stream only", "empty segments"], body, [Run(R4422 + "*-tensors-{1024,256}.json")])


def _peak(key, c=1024):
    return r4422(key, "tensors", c)["shared"]["at_peak"]


figure("memory.hist.never_used_mib", R4422)(lambda: span(
    [_peak(k)["never_used"] / MIB for k in ("fsdp_ep", "fsdp2")]) + " MiB")
figure("memory.hist.frag_mib", R4422)(lambda: span(
    [(_peak(k)["free_in_used_segments"] - _peak(k)["never_used"] - _peak(k)["other_streams_only"]) / MIB
     for k in ("fsdp_ep", "fsdp2")]) + " MiB")


@figure("memory.hist.megatron.table", R4422)
def _megatron_table():
    body = []
    for c in (1024, 256, 64):
        j = r4422("megatron_fsdp", "tensors", c)
        a = j["shared"]["at_peak"]
        pr, pl = _pg(j)
        rm, rr, _ = recorded(j)
        first = c == 1024
        sh = fmt(ratio(j), 3)
        body.append([_chunk(c), (f"{fmt(j['shared']['peak_reserved_bytes'] / MIB)} / {fmt(j['shared']['peak_live_bytes'] / MIB)}"
                                 f" MiB = **{sh}**") if first else
                     f"{fmt(j['shared']['peak_reserved_bytes'] / MIB)} / {fmt(j['shared']['peak_live_bytes'] / MIB)} MiB = {sh}",
                     fmt(pr / pl, 3), f"{fmt(rm)} MiB = **{fmt(rr, 3)}**" if first else fmt(rr, 3),
                     f"{fmt(a['never_used'] / MIB)} / {fmt((a['free_in_used_segments'] - a['never_used']) / MIB)} MiB"])
    return table(["chunk", "shared: peak reserved / live", "per group", "PyTorch's allocator on the trace (as then reported)",
                  "at the peak: never used / free between live"], body, [Run(R4422 + "megatron_fsdp_2gpu-tensors-*.json")])


def _ramp(key, level):
    return data(f"{RAMP}{key}_2gpu-{level}.json")


def _decode_extra():
    """(live, reserved beyond PyTorch's) of the decode trace in one 1 GiB-chunk pool."""
    j = _ramp("decode", "blocks")
    return (f"{fmt(j['shared']['peak_live_bytes'] / MIB)} MiB live", f"{fmt((j['shared']['peak_reserved_bytes'] - j['recorded_peak_reserved_bytes']) / MIB)} MiB more")


figure("memory.hist.decode_live_mib", RAMP + "decode_2gpu-blocks.json")(lambda: _decode_extra()[0])
figure("memory.hist.decode_more_mib", RAMP + "decode_2gpu-blocks.json")(lambda: _decode_extra()[1])


@figure("memory.hist.fixed_mib", RAMP)
def _fixed_mib():
    order = [("fsdp2", "FSDP2"), ("fsdp_ep", "FSDP+EP"), ("megatron_fsdp", "Megatron-FSDP"), ("decode", "decode")]
    return ", ".join(f"{n} {fmt(_ramp(k, 'blocks')['shared']['peak_reserved_bytes'] / MIB)}" for k, n in order) + " MiB"


@figure("memory.hist.segments.table", R4422)
def _segments_table():
    body = []
    for key, name in (TRACES[2], TRACES[1], TRACES[3]):
        g, q = r4422(key, "segments", 1024), r4422(key, "segments", 256)
        body.append([name, f"{fmt(g['shared']['peak_reserved_bytes'] / MIB)} / {fmt(g['shared']['peak_live_bytes'] / MIB)} "
                           f"MiB = **{fmt(ratio(g), 3)}** ({segs(g)}{' segments' if key == 'fsdp_ep' else ''})", cell(q)])
    return table(["trace (segments)", "1 GiB chunks (default for symmetric torch pools)", "256 MiB"], body,
                 [Run(R4422 + "*-segments-*.json")])


figure("memory.hist.segments_pct", R4422)(lambda: "+" + span(
    [(ratio(r4422(k, "segments", 1024)) - 1) * 100 for k, _ in TRACES[1:]]) + "%")


@figure("memory.hist.rule.table", R4422, RC9C)
def _rule_table():
    body = []
    for key, name in (TRACES[2], TRACES[1], TRACES[3]):
        cols = []
        for level in ("segments", "tensors"):
            o, n = r4422(key, level, 1024), c9c(key, level, 1024)
            better = ratio(n) < recorded(o)[1] or level == "segments"
            nn = f"**{fmt(ratio(n), 3)}**" if better else fmt(ratio(n), 3)
            cols.append(f"{fmt(ratio(o), 3)} -> {nn} ({segs(o)} -> {segs(n)})")
        body.append([name] + cols)
    return table(["trace", "segments level: now -> rule (segments)", "tensors level: now -> rule (segments)"], body,
                 [Run(R4422 + "*-1024.json"), Run(RC9C + "*-1024.json")])


@figure("memory.hist.ramp.table", RC9C, RAMP)
def _ramp_table():
    body = []
    for key, name in TRACES:
        r = _ramp(key, "segments")
        fixed = "-" if key == "decode" else cell(c9c(key, "segments", 1024))
        ramped = cell(r, key == "decode")
        if key == "decode":
            ramped = (f"{fmt(r['shared']['peak_reserved_bytes'] / MIB)} / {fmt(r['shared']['peak_live_bytes'] / MIB)} MiB "
                      f"= **{fmt(ratio(r), 3)}** ({segs(r)})")
        body.append([name, fixed, ramped, cell(_ramp(key, "blocks"))])
    return table(["trace", "segments level: fixed 1 GiB chunks (c9c2fc7)", "ramped chunks (landed)",
                  "tensors level, fixed chunks"], body, [Run(RC9C + "*-segments-1024.json"), Run(RAMP + "*.json")])


@figure("memory.hist.ramp8.table", RAMP, RAMP8)
def _ramp8_table():
    keys = [("decode", "decode"), ("fsdp2", "FSDP2"), ("fsdp_ep", "FSDP+EP"), ("megatron_fsdp", "Megatron-FSDP")]
    body = [["1 (doubling, before)"] + [cell(_ramp(k, "segments")) for k, _ in keys],
            ["**8 (landed)**"] + [f"**{cell(data(f'{RAMP8}{k}-segments.json'))}**" for k, _ in keys]]
    return table(["divisor", "decode", "FSDP2", "FSDP+EP", "Megatron-FSDP"], body,
                 [Run(RAMP + "*-segments.json"), Run(RAMP8 + "*-segments.json")])


# Reading (the first history table).
def _share(key, c):
    j = r4422(key, "tensors", c)
    return (1 - j["shared"]["peak_reserved_bytes"] / j["per_group_peak_reserved_bytes"]) * 100


figure("memory.hist.share_1g_pct", R4422)(lambda: span([_share(k, 1024) for k in ("fsdp_ep", "fsdp2")]) + "%")
figure("memory.hist.share_256_pct", R4422)(lambda: span([_share(k, 256) for k in ("fsdp_ep", "fsdp2")]) + "%")
figure("memory.hist.pytorch_x", R4422)(lambda: fmt(recorded(r4422("fsdp_ep", "tensors", 1024))[1], 2) + "x")
figure("memory.hist.within_pct", R4422)(lambda: fmt(
    (ratio(r4422("fsdp_ep", "tensors", 256)) / recorded(r4422("fsdp_ep", "tensors", 256))[1] - 1) * 100, 1) + "%")
figure("memory.hist.live_gib", R4422)(lambda: fmt(
    r4422("fsdp_ep", "tensors", 1024)["shared"]["peak_live_bytes"] / (1 << 30), 1) + " GiB")


FSDP2_9ED = "2026-11-23-fsdp2-2xh200-9ed78e4-gpu-check.json"


@figure("memory.hist.ramp_gpu_pct", FSDP2_9ED)
def _ramp_gpu_pct():
    """FSDP2 on 2x H200 with the ramp (9ed78e4: after aff232b): symmetric pool's device memory over plain."""
    rows = data(FSDP2_9ED)
    plain = next(r["device_used_gib"] for r in rows if r["mode"] == "plain")
    sym = [r["device_used_gib"] for r in rows if r["mode"] == "ncclpool-symmetric"]
    return "+" + span([(s / plain - 1) * 100 for s in sym], 1) + "%"


figure("memory.hist.decode_ramp_x", RAMP + "decode_2gpu-segments.json")(
    lambda: fmt(ratio(_ramp("decode", "segments")), 1) + "x")
figure("memory.hist.decode_ramp_live_mib", RAMP + "decode_2gpu-segments.json")(
    lambda: fmt(_ramp("decode", "segments")["shared"]["peak_live_bytes"] / MIB) + " MiB")

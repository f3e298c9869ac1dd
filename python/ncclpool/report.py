"""memory_summary(): a text report of pools and their registrations, in the spirit of
torch.cuda.memory_summary()."""
from __future__ import annotations


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, as the reports write them: ``'512 B'``, ``'1.5 MiB'``, ``'2.0 TiB'``.

    Args:
        n: a byte count (int or float; negative values keep their sign).

    Returns:
        str: the count with one decimal from KiB up, TiB the largest unit.
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _breakdown_lines(b) -> list[str]:
    """Why reserved exceeds what was asked for (Pool::memory_breakdown)."""
    if not b or not b["reserved"]:
        return []
    return [
        f"    {'rounding in blocks':20}{format_bytes(b['rounding']):>14}",
        f"    {'free in used segments':20}{format_bytes(b['free_in_used_segments']):>14}  (never used {format_bytes(b['never_used'])}, "
        f"one stream only {format_bytes(b['other_streams_only'])})",
        f"    {'empty segments':20}{format_bytes(b['empty_segments']):>14}  (trim releases them)",
    ]


def _symmetric_ctas(c) -> str:
    """The process's CTA count for NCCL's symmetric kernels (decided at its first symmetric attach)."""
    if not c["decided"]:
        return c["source"]
    return f"{c['ctas'] if c['ctas'] > 0 else 'NCCL choice'} ({c['source']})"


def _routes_lines(r) -> list[str]:
    """An auto pool: which sizes go to which part, why, and what each part holds."""
    if not r:
        return []
    lines = [f"  auto routes: {r['description']}{'' if r['fixed'] else ' (not fixed yet: the first attach may take a profile)'}",
             f"    from {r['source']}"]
    for part in r["parts"]:
        ps = part["stats"]
        if ps["segments_created"]:
            lines.append(f"    part {part['placement']:10}allocated {format_bytes(ps['allocated_bytes']):>10}, reserved "
                         f"{format_bytes(ps['reserved_bytes']):>10}, segments {ps['segment_count']}, "
                         f"chunk {format_bytes(part['growth_chunk'])}")
    return lines


def _pool_lines(pool) -> list[str]:
    if pool.closed:
        return [f"pool '{pool.name}': closed"]
    j = pool.stats_json()
    s = j["stats"]
    live, reserved = s["allocated_bytes"], s["reserved_bytes"]
    frag = 0.0 if reserved == 0 else 1.0 - live / reserved
    lines = [
        f"pool '{j['name']}'  device {j['device']}  source: {j['source']}",
        (f"  growth chunk per part (below)" if j.get("routes") else f"  growth chunk {format_bytes(j['growth_chunk'])}")
        + f"{'' if j.get('routes') else ' (past the segment budget, chunks ramp up to it)'}, "
        + (f"min segment {format_bytes(j['min_segment'])}, " if j.get("min_segment") else "")
        + f"{'deterministic' if j['deterministic'] else 'adaptive'} placement",
        f"  {'':22}{'now':>14}{'peak':>14}",
        f"  {'allocated':22}{format_bytes(live):>14}{format_bytes(s['peak_allocated_bytes']):>14}",
        f"  {'reserved':22}{format_bytes(reserved):>14}{format_bytes(s['peak_reserved_bytes']):>14}",
        f"  {'requested':22}{format_bytes(s['requested_bytes']):>14}",
        f"  {'unused in segments':22}{format_bytes(reserved - live):>14}  ({frag:.0%} of reserved)",
        *_breakdown_lines(j.get("breakdown")),
        f"  segments {s['segment_count']} (created {s['segments_created']}, released {s['segments_released']}), "
        f"live blocks {s['active_allocations']}, allocations {s['allocation_count']}, frees {s['deallocation_count']}",
        f"  out of memory {s['oom_count']} (recovered {s['oom_recoveries']}), cross-stream reuses {s['cross_stream_reuses']}",
    ]
    lines += _routes_lines(j.get("routes"))
    comms = j["communicators"]
    lines.append(f"  communicators {len(comms)}, pending registrations {j['pending_registrations']}")
    if "scope_ends" in j and any(c["kind"] in ("symmetric", "auto") for c in comms):
        waiting = " (pending windows wait for it, or for commit())" if j["pending_registrations"] else ""
        period = j["scope_period"]
        rule = "every one commits" if period == 1 else f"the first {period} commit, then every {period}th"
        lines.append(f"  scope ends {j['scope_ends']} ({rule}); the next that commits: #{j['next_committing_scope_end']}{waiting}")
        if "symmetric_kernels" in j:  # whether windows carry NCCL's symmetric flag, and why
            k = j["symmetric_kernels"]
            lines.append(f"  symmetric kernels: {k['why']}" + ("" if k["decided"] else " (not decided yet: at the first symmetric attach)"))
        if "symmetric_ctas" in j:  # a library before the field has no line
            lines.append(f"  symmetric kernels' CTAs: {_symmetric_ctas(j['symmetric_ctas'])}")
    if comms:  # the name column is as wide as the longest name: a name is never cut short (issue 47)
        width = max(44, *(len(c["communicator"]) + 1 for c in comms))
        lines.append(f"    {'communicator':{width}}{'kind':>10}{'segments':>10}{'registered':>13}{'time':>11}{'pending':>9}")
        for c in comms:
            lines.append(f"    {c['communicator']:{width}}{c['kind']:>10}{c['registered_segments']:>10}"
                         f"{format_bytes(c['bytes_registered']):>13}{c['registration_seconds'] * 1e3:>9.1f}ms{c['pending']:>9}"
                         + (f"  errors {c['errors']}" if c["errors"] else ""))
    return lines


def memory_summary(pools, extra_lines=None) -> str:
    """Text report of one pool or an iterable of pools, in the spirit of ``torch.cuda.memory_summary()``.

    Args:
        pools: a :class:`Pool` or an iterable of them (a closed pool gets one line saying so).
        extra_lines: ``extra_lines(pool) -> list[str]``: lines a layer above adds at the end of a
            pool's part (ncclpool.torch: its copy-engine decisions); None: none.

    Returns:
        str: per pool its source, growth settings, allocated / reserved / requested bytes (now and
        peak), where the reserve goes, segments, out-of-memory counts, an auto pool's routes, the scope
        schedule, the symmetric-kernel decision, and one row per attached communicator (its full name,
        kind, segments and bytes registered, registration time, pending registrations, errors).

    Raises:
        ncclpool.Error: reading a pool's statistics failed.
    """
    if hasattr(pools, "stats_json") or hasattr(pools, "closed"):
        pools = [pools]
    out = ["ncclpool memory summary", "=" * 23]
    for pool in pools:
        out += _pool_lines(pool)
        if extra_lines is not None:
            out += extra_lines(pool)
        out.append("")
    return "\n".join(out).rstrip() + "\n"

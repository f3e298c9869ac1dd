"""Figures of docs/benchmarks/alloc.md: `ncclpool bench alloc` on an H200."""

from . import Run, data, figure, fmt, rows, span, table

ALLOC = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-alloc.json"


def _rows(pattern):
    return [r for r in rows(data(ALLOC)) if r["pattern"] == pattern]


@figure("alloc.run", ALLOC)
def _run():
    return f"H200, {Run(ALLOC).commit}, {Run(ALLOC).date}"


@figure("alloc.ncclpool_ns", ALLOC)
def _ncclpool_ns():
    """allocate + free, same stream, every size."""
    return span([r["ncclpool"] for r in _rows("same stream")]) + " ns"


@figure("alloc.driver_pool_ns", ALLOC)
def _driver_pool_ns():
    return span([r["cuMemAllocAsync pool"] for r in _rows("same stream")]) + " ns"


@figure("alloc.speedup_same", ALLOC)
def _speedup_same():
    return span([r["speedup"] for r in _rows("same stream")]) + "x"


@figure("alloc.speedup_cross", ALLOC)
def _speedup_cross():
    return span([r["speedup"] for r in _rows("cross stream")]) + "x"


@figure("alloc.table", ALLOC)
def _table():
    body = []
    for r in rows(data(ALLOC)):
        body.append([f"{r['bytes'] >> 10:,} KiB", r["pattern"], fmt(r["ncclpool"]), fmt(r["cuMemAllocAsync pool"]),
                     fmt(r["cuMemAlloc"]), fmt(r["speedup"], 1) + "x"])
    return table(["size", "pattern", "ncclpool ns", "cuMemAllocAsync pool ns", "cuMemAlloc ns",
                  "speed-up vs the driver pool"], body, [Run(ALLOC)])


# ---- the earlier sections of docs/benchmarks/alloc.md ----

import statistics  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20


class Pair(Run):
    """A folder of two builds' runs side by side: both commits in its label ('646ef61 vs b53990c')."""

    def __init__(self, path, old, new):
        super().__init__(path)
        self.commit = f"{old} vs {new}"


def size(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def g4(v):
    """Four significant digits, as the A/B summaries print them (79.84, 0.7138, 1696)."""
    return f"{v:.4g}"


def mmm(vals, f=g4):
    """'median [min-max]' of vals."""
    return f"{f(statistics.median(vals))} [{f(min(vals))}-{f(max(vals))}]"


def by_row(paths, col, key=lambda r: (r["bytes"], r["pattern"]), where=lambda r: True):
    """{row key: [the value of col in each file]}, rows in the files' order."""
    out = {}
    for p in paths:
        for r in rows(data(p)):
            if where(r):
                out.setdefault(key(r), []).append(r[col] if isinstance(col, str) else col(r))
    return out


# One layer per concept (issue 29): 646ef61 against b53990c on the simulator, six rounds each.
HOUSE = "2026-11-25-house-sim-646ef61-vs-b53990c/"
HOUSE_FILES = [HOUSE + f"{side}-{bench}-run{i}.json" for side in ("base", "new") for bench in ("alloc", "scope")
               for i in range(1, 7)]
SCOPE_COLS = ("setup_ms", "per_use_us", "host_per_use_us", "commit_host_us")


def _house(side, bench):
    return [HOUSE + f"{side}-{bench}-run{i}.json" for i in range(1, 7)]


def _house_alloc(side):
    return by_row(_house(side, "alloc"), "ncclpool (sim)")


def _house_scope(side):
    out = {}
    for col in SCOPE_COLS:
        for k, v in by_row(_house(side, "scope"), col, lambda r: (r["segments"], r["groups"]),
                           lambda r: r["strategy"] == "ncclpool").items():
            out[k + (col,)] = v
    return out


def _house_ratio(old, new):
    return statistics.median(new) / statistics.median(old)


@figure("alloc.house.table", *HOUSE_FILES)
def _house_table():
    body = []
    old, new = _house_alloc("base"), _house_alloc("new")
    for (b, pattern), v in old.items():
        body.append(["alloc", f"bytes={b}, pattern={pattern}", "ncclpool (sim)", mmm(v), mmm(new[(b, pattern)]),
                     fmt(_house_ratio(v, new[(b, pattern)]), 3)])
    old, new = _house_scope("base"), _house_scope("new")
    for (s, g, col) in sorted(old, key=lambda k: (k[0], k[1], SCOPE_COLS.index(k[2]))):
        v, w = old[(s, g, col)], new[(s, g, col)]
        body.append(["scope", f"segments={s}, groups={g}, strategy=ncclpool", col, mmm(v), mmm(w),
                     fmt(_house_ratio(v, w), 3)])
    return table(["bench", "row", "measure", "646ef61 median [min-max]", "b53990c median [min-max]", "new / old"],
                 body, [Pair(HOUSE, "646ef61", "b53990c")])


def _house_faster(pattern, b=None):
    old, new = _house_alloc("base"), _house_alloc("new")
    return [(1 - _house_ratio(v, new[k])) * 100 for k, v in old.items() if k[1] == pattern and b in (None, k[0])]


figure("alloc.house.cross_pct", *HOUSE_FILES)(lambda: span(_house_faster("cross stream")) + "%")
figure("alloc.house.same4k_pct", *HOUSE_FILES)(lambda: span(_house_faster("same stream", 4 * KIB)) + "%")
figure("alloc.house.mib_pct", *HOUSE_FILES)(lambda: span([-x for x in _house_faster("same stream", MIB)]) + "%")


@figure("alloc.house.mib_ns", *HOUSE_FILES)
def _house_mib_ns():
    k = (MIB, "same stream")
    return f"{fmt(statistics.median(_house_alloc('base')[k]))} to {fmt(statistics.median(_house_alloc('new')[k]))} ns"


@figure("alloc.house.scope_ratio", *HOUSE_FILES)
def _house_scope_ratio():
    """new / old of every per-use and commit cost, and whether the two builds' rounds overlap in each row."""
    old, new = _house_scope("base"), _house_scope("new")
    keys = [k for k in old if k[2] != "setup_ms"]
    apart = [k for k in keys if max(old[k]) < min(new[k]) or max(new[k]) < min(old[k])]
    return (f"new / old {span([_house_ratio(old[k], new[k]) for k in keys], 2)}, the two builds' rounds "
            + ("overlapping in every row" if not apart else f"apart in {len(apart)} of {len(keys)} rows"))


@figure("alloc.house.setup_ms", *HOUSE_FILES)
def _house_setup():
    old, new = _house_scope("base"), _house_scope("new")
    keys = [k for k in old if k[2] == "setup_ms"]
    meds = [statistics.median(d[k]) for d in (old, new) for k in keys]
    return span(meds, 2) + " ms"


@figure("alloc.house.setup_moves_ms", *HOUSE_FILES)
def _house_setup_moves():
    old, new = _house_scope("base"), _house_scope("new")
    return fmt(max(max(d[k]) - min(d[k]) for d in (old, new) for k in d if k[2] == "setup_ms"), 2) + " ms"


# Deferred publication, 6d54a79 (and the earlier run of the same commands at 1118caa), GPU 0 of 2x H200.
def _defer(commit, which):
    return f"2026-11-23-alloc-h200-{commit}-" + {"comms8": "comms8.json", "live": "comms1-live100000.json"}[which]


DEFER = [_defer(c, w) for c in ("6d54a79", "1118caa") for w in ("comms8", "live")]
POOL_COLS = (("comms8", "ncclpool"), ("comms8", "ncclpool, 8 comms"), ("live", "ncclpool"), ("live", "ncclpool, 1 comm"))


def _defer_rows(commit, which):
    return {(r["bytes"], r["pattern"]): r for r in rows(data(_defer(commit, which)))}


def _defer_pool(commit, pattern):
    """Every ncclpool column's value of the pattern's rows (8 comms, 100k live, 1 comm), every size."""
    return [r[col] for which, col in POOL_COLS for (b, p), r in _defer_rows(commit, which).items() if p == pattern]


@figure("alloc.defer.table", *DEFER[:2])
def _defer_table():
    c8, live = _defer_rows("6d54a79", "comms8"), _defer_rows("6d54a79", "live")
    order = [k for k in c8 if k[1] != "growth"] + [k for k in c8 if k[1] == "growth"]
    body = []
    for k in order:
        places = 0 if k[1] == "growth" else 1
        pool = [fmt(c8[k]["ncclpool"], places), fmt(c8[k]["ncclpool, 8 comms"], places)]
        if k[1] == "growth" and live[k]["ncclpool"] < 1000:  # the population's free blocks served it: no growth
            pool += ["(no growth)", ""]
        else:
            pool += [fmt(live[k]["ncclpool"], places), fmt(live[k]["ncclpool, 1 comm"], places)]
        body.append([size(k[0]), k[1]] + pool + [fmt(c8[k]["cuMemAllocAsync pool"]), fmt(c8[k]["cuMemAlloc"])])
    return table(["size", "pattern", "ncclpool", "ncclpool, 8 comms", "ncclpool, 100k live + 100k free", "same, 1 comm",
                  "cuMemAllocAsync pool", "cuMemAlloc"], body, [Run(DEFER[0]), Run(DEFER[1])])


figure("alloc.defer.same_ns", *DEFER[:2])(lambda: span(_defer_pool("6d54a79", "same stream")) + " ns")
figure("alloc.defer.cross_ns", *DEFER[:2])(lambda: span(_defer_pool("6d54a79", "cross stream")) + " ns")
figure("alloc.defer.driver_same_ns", *DEFER[:2])(lambda: span(
    [r["cuMemAllocAsync pool"] for w in ("comms8", "live") for k, r in _defer_rows("6d54a79", w).items()
     if k[1] == "same stream"]) + " ns")
figure("alloc.defer.growth_ms", DEFER[1])(lambda: span(
    [r[c] / 1e6 for k, r in _defer_rows("6d54a79", "live").items() if k[1] == "growth" and k[0] >= MIB
     for c in ("ncclpool", "ncclpool, 1 comm")], 1) + " ms")
figure("alloc.defer.early_same_ns", *DEFER[2:])(lambda: span(_defer_pool("1118caa", "same stream")) + " ns")
figure("alloc.defer.early_cross_ns", *DEFER[2:])(lambda: span(_defer_pool("1118caa", "cross stream")) + " ns")


def _defer_early():
    """The largest difference between the two commits' ncclpool figures, every row and ncclpool column."""
    new = {w: _defer_rows("6d54a79", w) for w in ("comms8", "live")}
    old = {w: _defer_rows("1118caa", w) for w in ("comms8", "live")}
    w, c, k = max(((w, c, k) for w, c in POOL_COLS for k in new[w]),
                  key=lambda x: abs(old[x[0]][x[2]][x[1]] / new[x[0]][x[2]][x[1]] - 1))
    return k, c, new[w][k][c], old[w][k][c]


figure("alloc.defer.early_pct", *DEFER)(lambda: fmt(abs(_defer_early()[3] / _defer_early()[2] - 1) * 100) + "%")


@figure("alloc.defer.early_worst", *DEFER)
def _defer_early_worst():
    k, c, a, b = _defer_early()
    return f"{size(k[0])} {k[1]}, column {c}: {fmt(a, 1)} ns here, {fmt(b, 1)} ns there"


# The growth walk skips small segments (d6c2f16) against fba1408: simulator, 100k live + 100k free blocks.
WALK = "2026-11-23-alloc-sim-live100000-fba1408-vs-d6c2f16/"
WALK_FILES = [WALK + f"{c}-run{i}.json" for c in ("fba1408", "d6c2f16") for i in (1, 2)]


def _walk(commit, b):
    return by_row([WALK + f"{commit}-run{i}.json" for i in (1, 2)], "ncclpool (sim)")[(b, "growth")]


figure("alloc.walk.before_us", *WALK_FILES)(lambda: span([v / 1000 for v in _walk("fba1408", 64 * MIB)]) + " us")
figure("alloc.walk.after_us", *WALK_FILES)(lambda: span([v / 1000 for v in _walk("d6c2f16", 64 * MIB)], 1) + " us")
figure("alloc.walk.mib_us", *WALK_FILES)(lambda: span(
    [v / 1000 for c in ("fba1408", "d6c2f16") for v in _walk(c, MIB)]) + " us")


# Simulator, f78a87b (an event at every free) against f76e68a, three alternating runs each.
SIMAB = "2026-11-23-alloc-sim-f78a87b-vs-f76e68a/"
SIMAB_FILES = [SIMAB + f"{c}-run{i}.json" for c in ("f78a87b", "f76e68a") for i in (1, 2, 3)]


def _simab(commit):
    return by_row([SIMAB + f"{commit}-run{i}.json" for i in (1, 2, 3)], "ncclpool (sim)")


@figure("alloc.simab.table", *SIMAB_FILES)
def _simab_table():
    old, new = _simab("f78a87b"), _simab("f76e68a")

    def cell(v):
        return f"{fmt(statistics.median(v), 1)} ({fmt(min(v), 1)}-{fmt(max(v), 1)})"
    body = [[size(k[0]), k[1], cell(old[k]), cell(new[k])] for k in old if k[1] != "growth"]
    growth = [k for k in old if k[1] == "growth"]
    body.append([" / ".join(size(k[0]) for k in growth), "growth"] +
                [" / ".join(fmt(statistics.median(d[k])) for k in growth) for d in (old, new)])
    return table(["size", "pattern", "f78a87b", "f76e68a"], body, [Pair(SIMAB, "f78a87b", "f76e68a")])


@figure("alloc.simab.growth_pct", *SIMAB_FILES)
def _simab_growth_pct():
    old, new = _simab("f78a87b"), _simab("f76e68a")
    return span([(_house_ratio(old[k], new[k]) - 1) * 100 for k in old if k[1] == "growth"]) + "%"


@figure("alloc.simab.growth_spread", *SIMAB_FILES)
def _simab_growth_spread():
    def rng(d):
        v = [x for k in d if k[1] == "growth" for x in d[k]]
        return span(v)
    return f"old {rng(_simab('f78a87b'))}, new {rng(_simab('f76e68a'))}"


@figure("alloc.house.setup_ratio", *HOUSE_FILES)
def _house_setup_ratio():
    old, new = _house_scope("base"), _house_scope("new")
    keys = [k for k in old if k[2] == "setup_ms"]
    apart = max(abs(statistics.median(new[k]) - statistics.median(old[k])) for k in keys)
    return f"{span([_house_ratio(old[k], new[k]) for k in keys], 2)} (medians at most {fmt(apart, 2)} ms apart)"

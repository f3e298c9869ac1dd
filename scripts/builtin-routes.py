#!/usr/bin/env python3
"""The built-in routes of auto pools, born from measurements: one `ncclpool bench coll --json` run
(its `auto` column: per size, the cheapest kind to hold unless a costlier one was >= 2% faster,
measured live) becomes one file of src/routing/builtin/, read into the library at build time
(src/routing/builtin_routes.cpp). A file is keyed by what changes the answer: the GPU's compute
capability and the ranks of the communicator (one node: across nodes auto pools route no size to
windows anyway).

  scripts/builtin-routes.py BENCH_COLL_JSON [--out FILE]   write the file (default: stdout)
  scripts/builtin-routes.py --check                        every committed file equals what its
                                                           named source gives (CI: check-tree)

Noise: below 64 KiB the hosts' rounds spread by tens of percent (bench coll's notes say how much),
so one size whose pick differs from both neighbours, where the neighbours' kind is within that
row's spread of the best, takes the neighbours' kind (an island is noise, not a route).
Standard library only.
"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILTIN = os.path.join(ROOT, "src", "routing", "builtin")
DATA = os.path.join(ROOT, "docs", "benchmarks", "data")
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
KINDS = ("none", "local", "symmetric")


def picks(table):
    """[(bytes, kind)] ascending for one collective's table: its auto column, islands smoothed."""
    by_size = {}
    for r in table["rows"]:
        by_size.setdefault(r["bytes"], []).append(r)
    sizes = sorted(by_size)
    kind = [by_size[b][0]["auto_kind"] for b in sizes]
    out = list(kind)
    for i in range(1, len(sizes) - 1):
        left, right = out[i - 1], kind[i + 1]
        if kind[i] == left or left != right:
            continue
        rows = by_size[sizes[i]]
        best = sum(r[f"{kind[i]}_us"] for r in rows)
        neighbour = sum(r[f"{left}_us"] for r in rows)
        spread = max(r.get("spread_pct", 0.0) for r in rows) / 100.0
        if neighbour <= best * (1.0 + spread):
            out[i] = left
    return list(zip(sizes, out))


def _at_or_below(series, b):
    """The entry of [(bytes, x)] (ascending) at the largest size <= b, else the first."""
    at = [x for size, x in series if size <= b]
    return at[-1] if at else series[0][1]


def any_picks(tables, per):
    """[(bytes, kind or None)] over every collective's sizes: the kind for buffers that name no
    collective, where the collectives' picks differ (None where they agree: the library takes theirs).
    The kind whose worst time over the collectives, each against that collective's fastest kind, is
    the smallest, a tie going to the cheaper kind (tune's rule, tools/ncclpool/tune_profile.cpp). No 2%
    margin for the cheaper kind here: it would keep a worst case up to 2% above the smallest, which is
    what this pick is for. At rank counts that are no power of two all-gather's and reduce-scatter's
    sizes (multiples of 4 x ranks) fall between all-reduce's: each collective counts at its nearest
    size at or below. A kind with a missing or null time at that size is not a candidate."""
    times = {}
    for c in COLLECTIVES:
        by_size = {}
        for r in tables[c]["rows"]:
            by_size.setdefault(r["bytes"], []).append(r)
        times[c] = [(b, {k: sum(r[f"{k}_us"] for r in rows) for k in KINDS
                         if all(isinstance(r.get(f"{k}_us"), (int, float)) for r in rows)})
                    for b, rows in sorted(by_size.items())]
    out = []
    for b in sorted({size for c in COLLECTIVES for size, _ in per[c]}):
        if len({_at_or_below(per[c], b) for c in COLLECTIVES}) == 1:
            out.append((b, None))
            continue
        chosen, chosen_worst = None, float("inf")
        for kind in KINDS:
            worst = 0.0
            for c in COLLECTIVES:
                t = _at_or_below(times[c], b)
                worst = max(worst, t[kind] / min(t.values()) if kind in t else float("inf"))
            if worst < chosen_worst:
                chosen, chosen_worst = kind, worst
        out.append((b, chosen))
    return out


def profile_from(doc, source):
    facts = doc.get("facts", {})
    tables = {}
    for t in doc["tables"]:
        m = re.match(r"(\w+) \((\d+) ranks\)", t.get("title", ""))
        if m and m.group(1) in COLLECTIVES:
            tables[m.group(1)] = t
    missing = [c for c in COLLECTIVES if c not in tables]
    if missing:
        raise SystemExit(f"builtin-routes: {source}: no table for {', '.join(missing)}")
    per = {c: picks(tables[c]) for c in COLLECTIVES}
    anys = any_picks(tables, per)
    # One class per size where any collective's pick, or the pick for no collective, changes; the
    # first class covers everything below.
    series = list(per.values()) + [anys]
    changes = sorted({b for s in series for i, (b, k) in enumerate(s) if i == 0 or s[i - 1][1] != k})
    classes = []
    for b in changes:
        cls = {"min_bytes": 0 if not classes else b, "kind": {c: _at_or_below(per[c], b) for c in COLLECTIVES}}
        if _at_or_below(anys, b) is not None:
            cls["any"] = _at_or_below(anys, b)
        classes.append(cls)
    ranks = int(facts.get("rank_count") or re.search(r"\((\d+) ranks\)", doc["tables"][0]["title"]).group(1))
    cc = facts.get("compute_capability", "")
    if not cc:
        cc = {"NVIDIA H200": "9.0", "NVIDIA H100 80GB HBM3": "9.0", "NVIDIA H100": "9.0"}.get(facts.get("gpu", ""), "")
    if not cc:
        raise SystemExit(f"builtin-routes: {source}: no compute capability in its facts and GPU {facts.get('gpu')!r} unknown")
    major, minor = (int(x) for x in cc.split("."))
    return {
        "ncclpool_profile": 1,
        "gpu": facts.get("gpu", "?"),
        "nccl_version": int(facts.get("nccl_version", 0)),
        "ranks": ranks,
        "symmetric_ctas": int(facts.get("symmetric_ctas", 0) or 0),
        "measured": source,
        "builtin": {"compute_capability": major * 10 + minor, "ranks": ranks, "source": source},
        "classes": classes,
    }


def render(profile):
    lines = ["{"]
    keys = [k for k in profile if k != "classes"]
    for k in keys:
        lines.append(f" {json.dumps(k)}: {json.dumps(profile[k])},")
    lines.append(' "classes": [')
    for i, c in enumerate(profile["classes"]):
        comma = "," if i + 1 < len(profile["classes"]) else ""
        lines.append(f"  {json.dumps(c)}{comma}")
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def name_of(profile):
    return f"sm{profile['builtin']['compute_capability']}-{profile['ranks']}ranks.json"


def build(path):
    rel = os.path.relpath(os.path.abspath(path), DATA).replace(os.sep, "/")
    source = "data/" + rel if not rel.startswith("..") else path
    with open(path, encoding="utf-8") as f:
        return profile_from(json.load(f), source)


def check():
    problems = []
    for name in sorted(os.listdir(BUILTIN)) if os.path.isdir(BUILTIN) else []:
        if not name.endswith(".json"):
            continue
        with open(os.path.join(BUILTIN, name), encoding="utf-8") as f:
            text = f.read()
        source = json.loads(text).get("builtin", {}).get("source", "")
        if not source.startswith("data/"):
            problems.append(f"src/routing/builtin/{name}: its source {source!r} is no file under docs/benchmarks/data/")
            continue
        want = build(os.path.join(DATA, source[len("data/"):]))
        if render(want) != text:
            problems.append(f"src/routing/builtin/{name}: differs from what {source} gives (scripts/builtin-routes.py {source} --out ...)")
        elif name_of(want) != name:
            problems.append(f"src/routing/builtin/{name}: should be named {name_of(want)}")
    for p in problems:
        print(f"builtin-routes: {p}")
    return 1 if problems else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("bench_coll_json", nargs="?", help="a `ncclpool bench coll --json` output")
    parser.add_argument("--out", help="write here (default: stdout); a folder: its file named by the key")
    parser.add_argument("--check", action="store_true", help="committed files equal what their sources give")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    if not args.bench_coll_json:
        parser.error("a bench coll JSON file, or --check")
    profile = build(args.bench_coll_json)
    text = render(profile)
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = os.path.join(args.out, name_of(profile)) if os.path.isdir(args.out) else args.out
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"builtin-routes: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

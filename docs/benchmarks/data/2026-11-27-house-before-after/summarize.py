#!/usr/bin/env python3
"""Medians over the rounds of each row's times, before and after, and after/before; paired over rounds
(the geometric mean of the per-round ratios, with its min-max). Reads the JSON files run.sh wrote."""
import glob, json, math, statistics, sys, os

# usage: summarize.py [SUBDIR]  (a folder of runs; default: this one, scope and alloc)
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), *sys.argv[1:2])

def rows(suite, which):
    runs = {}
    for path in glob.glob(os.path.join(here, f"{suite}-{which}-run*.json")):
        n = int(path.rsplit("run", 1)[1].split(".")[0])
        doc = json.load(open(path))
        out = {}
        for t in doc["tables"]:
            for r in t["rows"]:
                key = tuple((k, v) for k, v in r.items() if isinstance(v, str) or k in ("bytes", "segments", "groups"))
                for k, v in r.items():
                    if isinstance(v, (int, float)) and k not in ("bytes", "segments", "groups") and not isinstance(v, bool):
                        out[(key, k)] = float(v)
        runs[n] = out
    return runs

def summarize(suite, metrics):
    b, a = rows(suite, "before"), rows(suite, "after")
    rounds = sorted(set(b) & set(a))
    print(f"## {suite}: {len(rounds)} rounds, medians (before -> after), after/before: paired geometric mean [min-max]")
    for key in sorted(b[rounds[0]], key=str):
        if key[1] not in metrics:
            continue
        bv = [b[r][key] for r in rounds if key in b[r]]
        av = [a[r][key] for r in rounds if key in a[r]]
        ratios = [a[r][key] / b[r][key] for r in rounds if key in a[r] and b[r][key] > 0]
        if not ratios:
            continue
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        label = ", ".join(f"{k}={v}" for k, v in key[0])
        print(f"{label} | {key[1]}: {statistics.median(bv):.4g} -> {statistics.median(av):.4g}  x{gm:.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
    print()

if glob.glob(os.path.join(here, "scope-*.json")):
    summarize("scope", {"per_use_us", "host_per_use_us", "commit_host_us", "setup_ms"})
summarize("alloc", {"ncclpool (sim)"})

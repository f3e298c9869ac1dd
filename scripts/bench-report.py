#!/usr/bin/env python3
"""Reads what `ncclpool bench SUITE --json` and `ncclpool replay --timeline` write.

  scripts/bench-report.py summary BENCH.json           one line of key figures (gpu-check's table)
  scripts/bench-report.py plot BENCH.json OUT.png      coll: bus bandwidth vs size per kind, one panel per op
                                                       alloc: ns per allocate+free per strategy
                                                       scope: per-use cost vs segments per strategy
  scripts/bench-report.py plot TIMELINE.csv OUT.png    replay: live and reserved memory over the events
  scripts/bench-report.py compare COLL.json REF.json   coll's kinds vs a reference measurement of plain memory
                                                       (bench/coll_reference_torch.py, or nccl-tests below), sizes >= 1 MiB
  scripts/bench-report.py scope-ab DIR                 bench scope runs of two builds, alternated in one lease:
                                                       DIR/base-run*.json against DIR/new-run*.json, ncclpool
                                                       strategy, median [min-max] per (S, G) and the paired ratio
  scripts/bench-report.py from-nccl-tests [--kind K] OUT.txt...
                                                       nccl-tests' text output (all_gather_perf, ...) as a
                                                       reference JSON on stdout (out-of-place columns); K =
                                                       none|local|symmetric, the -R it ran with (default none)

Plots need matplotlib (not a dependency of ncclpool: `pip install matplotlib`); summary needs nothing.
"""
import csv
import json
import sys


def fail(message):
    """Ends the script with exit status 1 and one line on stderr, never a traceback (issue 47)."""
    sys.exit(f"bench-report.py: {message}")


def describe_os_error(path, e):
    if isinstance(e, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(e, IsADirectoryError):
        return f"{path}: is a directory"
    return f"{path}: {e.strerror or e}"


def load(path):
    """A JSON file, or exit 1 naming the file and what is wrong with it."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        fail(describe_os_error(path, e))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f"line {e.lineno}, column {e.colno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else str(e)
        fail(f"{path}: not JSON ({where})")


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or n % 1024:
            return f"{n} {unit}"
        n //= 1024
    return f"{n} TiB"


def table(report, prefix):
    return [t for t in report["tables"] if t["title"].startswith(prefix)]


def summary(report):
    suite = report["suite"]
    if suite == "alloc":
        rows = report["tables"][0]["rows"]
        names = [k for k in rows[0] if k not in ("bytes", "pattern", "speedup")]
        parts = []
        for r in rows:
            if r["bytes"] == 1 << 20:
                parts.append(f'1 MiB {r["pattern"]}: ' + ", ".join(f'{n} {r[n]:.0f} ns' for n in names))
        return "; ".join(parts)
    if suite == "scope":
        rows = [r for r in report["tables"][0]["rows"] if r["strategy"] == "ncclpool"]
        most = max((r["segments"] for r in rows), default=0)
        hosts = ", ".join(f'G={r["groups"]} {r["host_per_use_us"]:.2f}' for r in rows if r["segments"] == most)
        ratio = "; ".join(n for n in report["notes"] if n.startswith("S = 64")) or "no S = 64, G = 2 row"
        return f"ncclpool host us/use at S={most}: {hosts}; {ratio}"
    if suite == "coll":
        s = table(report, "summary")[0]["rows"]
        parts = [f'{r["op"]} {r["kind"]} peak {r["peak_busbw"]:.1f}' for r in s]
        # What the targets are judged on first (the summary row is cut short): the auto pool's and
        # --auto's worst ratios, the rounds' noise, the check; then the peaks.
        keys = ("auto pool", "auto vs", "check")
        worst = [n for n in report["notes"] if n.startswith(keys)]
        worst += [n.split(":", 1)[1].strip() for n in report["notes"] if " rounds, each measuring" in n]
        return "; ".join(worst + ["busbw GB/s: " + ", ".join(parts)])
    return f"suite {suite}"


def plot(path, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("bench-report: plotting needs matplotlib (pip install matplotlib)")
    if path.endswith(".csv"):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"bench-report: {path} has no rows")
        x = [int(r["event"]) for r in rows]
        fig, ax = plt.subplots(figsize=(8, 4))
        for key in rows[0]:
            if key != "event":
                ax.plot(x, [int(r[key]) / 2**30 for r in rows], label=key.replace("_", " "))
        ax.set_xlabel("trace event")
        ax.set_ylabel("GiB")
        ax.set_title(f"memory over time: {path.split('/')[-1]}")
        ax.legend()
    else:
        report = load(path)
        facts = report["facts"]
        suite = report["suite"]
        if suite == "coll":
            ops = [t for t in report["tables"] if not t["title"].startswith("summary")]
            fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), squeeze=False)
            for ax, t in zip(axes[0], ops):
                kinds = [k[: -len("_busbw")] for k in t["rows"][0] if k.endswith("_busbw")]
                for i, kind in enumerate(kinds):
                    for place, style in (("out", "-"), ("in", ":")):  # one colour per kind
                        rows = [r for r in t["rows"] if r["placement"] == place]
                        ax.plot([r["bytes"] for r in rows], [r[f"{kind}_busbw"] for r in rows], style, marker=".", color=f"C{i}",
                                label=f"{kind} ({place}-of-place)" if place == "out" else f"{kind} (in-place)")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("size (bytes)")
                ax.set_ylabel("bus bandwidth (GB/s)")
                ax.set_title(t["title"].split(":")[0])
                ax.grid(True, alpha=0.3)
            axes[0][0].legend(fontsize=7)
            fig.suptitle(facts.get("ranks", ""), fontsize=8)
        elif suite == "alloc":
            t = report["tables"][0]
            names = [k for k in t["rows"][0] if k not in ("bytes", "pattern", "speedup")]
            fig, ax = plt.subplots(figsize=(9, 4))
            labels = [f'{human(r["bytes"])} {r["pattern"]}' for r in t["rows"]]
            width = 0.8 / len(names)
            for i, n in enumerate(names):
                ax.bar([j + i * width for j in range(len(labels))], [r[n] for r in t["rows"]], width, label=n)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, rotation=30, ha="right", fontsize=7)
            ax.set_yscale("log")
            ax.set_ylabel("ns per allocate + free (growth: per allocation)")
            ax.set_title(facts.get("target", ""))
            ax.legend()
        elif suite == "scope":
            t = report["tables"][0]
            fig, ax = plt.subplots(figsize=(7, 4))
            for strategy in ("ncclpool", "megatron", "per-group"):
                for g in sorted({r["groups"] for r in t["rows"]}):
                    rows = [r for r in t["rows"] if r["strategy"] == strategy and r["groups"] == g]
                    ax.plot([r["segments"] for r in rows], [r["per_use_us"] for r in rows], marker="o", label=f"{strategy}, G={g}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("segments S")
            ax.set_ylabel("per use (us)")
            ax.set_title(facts.get("ranks", ""), fontsize=8)
            ax.legend(fontsize=7)
        else:
            sys.exit(f"bench-report: nothing to plot for suite {suite}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def compare(coll, ref, min_bytes=1 << 20):
    """Per op and size: each kind's out-of-place busbw / the reference's; then how often `none` (pool
    memory, no registration: what the reference measures) is within 3% of it."""
    refs = {(r["op"], r["bytes"]): r for r in ref["rows"]}
    same = ref.get("kind", "none")  # the kind the reference measured (nccl-tests -R), else plain memory
    diffs = []
    print(f"reference: {ref.get('source', 'torch ' + str(ref.get('torch')))} NCCL {ref.get('nccl')}, {ref['ranks']} ranks; out-of-place busbw ratio kind / reference")
    for t in coll["tables"]:
        if t["title"].startswith("summary"):
            continue
        op = t["title"].split(" ")[0]
        kinds = [k[: -len("_busbw")] for k in t["rows"][0] if k.endswith("_busbw")]
        print(f"{op:15s} {'size':>10s} {'reference':>10s} " + " ".join(f"{k:>10s}" for k in kinds))
        for r in t["rows"]:
            base = refs.get((op, r["bytes"]))
            if r["placement"] != "out" or r["bytes"] < min_bytes or not base or base["busbw"] <= 0:
                continue
            ratios = [r[f"{k}_busbw"] / base["busbw"] for k in kinds]
            print(f"{'':15s} {r['bytes']:>10d} {base['busbw']:>10.2f} " + " ".join(f"{x:>10.3f}" for x in ratios))
            if same in kinds and r["bytes"] >= 8 << 20:
                diffs.append(abs(1 - ratios[kinds.index(same)]))
    if diffs:
        diffs.sort()
        within = sum(d <= 0.03 for d in diffs)
        print(f"'{same}' vs the reference at sizes >= 8 MiB: within 3% at {within} of {len(diffs)}, "
              f"median difference {diffs[len(diffs) // 2] * 100:.1f}%, largest {diffs[-1] * 100:.1f}%")


NCCL_TESTS_OPS = {"AllGather": "all_gather", "ReduceScatter": "reduce_scatter", "AllReduce": "all_reduce"}


def from_nccl_tests(paths, kind="none"):
    """Rows of nccl-tests' tables: size count type redop root | time algbw busbw #wrong (out of place) |
    the same in place. The op comes from the '# Collective test starting: all_gather_perf' line or the
    file name; the rank count from '#  Rank  N Group ...' lines."""
    rows, ranks, nccl = [], 0, None
    for path in paths:
        op = next((v for k, v in NCCL_TESTS_OPS.items() if v in path or k in path), None)
        with open(path) as f:
            for line in f:
                text = line.strip()
                if text.startswith("# Collective test starting:"):
                    name = text.split(":", 1)[1].strip()
                    op = next((v for v in NCCL_TESTS_OPS.values() if name.startswith(v)), op)
                elif text.startswith("#  Rank") and " Group " in text:
                    ranks = max(ranks, int(text.split()[2]) + 1)
                elif text.startswith("# nccl-tests version") or text.startswith("# NCCL version"):
                    nccl = text.split()[-1]
                elif text and not text.startswith("#"):
                    fields = text.split()
                    if len(fields) < 13 or not fields[0].isdigit():
                        continue
                    if op is None:
                        sys.exit(f"bench-report: {path}: cannot tell which collective this is")
                    time_us, busbw, wrong = float(fields[5]), float(fields[7]), fields[8]
                    if wrong not in ("0", "N/A"):
                        sys.exit(f"bench-report: {path}: nccl-tests reports {wrong} wrong results at {fields[0]} bytes")
                    rows.append({"op": op, "bytes": int(fields[0]), "us": time_us, "busbw": busbw})
    if not rows:
        sys.exit("bench-report: no nccl-tests rows found in " + ", ".join(paths))
    return {"ranks": ranks, "nccl": nccl, "torch": None, "source": f"nccl-tests ({kind})", "kind": kind, "rows": rows}


def scope_ab(directory):
    """Rows of (S, G, column, base median [min-max], new median [min-max], paired new/base median) for
    host_per_use_us and commit_host_us of the ncclpool strategy; rounds pair by run number."""
    import glob
    import os
    import re
    import statistics

    runs = {}
    for path in glob.glob(os.path.join(directory, "*-run*.json")):
        m = re.match(r"(base|new)-run(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        for r in load(path)["tables"][0]["rows"]:
            if r["strategy"] == "ncclpool":
                runs.setdefault((r["segments"], r["groups"]), {}).setdefault(m.group(1), {})[int(m.group(2))] = r
    out = []
    for (segments, groups), by in sorted(runs.items()):
        base, new = by.get("base", {}), by.get("new", {})
        paired = sorted(set(base) & set(new))
        for column in ("host_per_use_us", "commit_host_us"):
            def spread(side):
                values = [side[k][column] for k in sorted(side)]
                return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]" if values else "-"
            ratios = [new[k][column] / base[k][column] for k in paired if base[k][column] > 0]
            out.append((segments, groups, column, spread(base), spread(new), statistics.median(ratios) if ratios else float("nan"), len(paired)))
    return out


def main(argv):
    try:
        run(argv)
    except OSError as e:  # a file the command reads itself (plot's CSV, from-nccl-tests' outputs)
        fail(describe_os_error(e.filename, e) if e.filename else str(e))
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        fail(f"{' '.join(argv[1:])}: not what `ncclpool bench SUITE --json` writes ({type(e).__name__}: {e})")


def run(argv):
    if len(argv) >= 2 and argv[0] == "summary":
        print(summary(load(argv[1])))
    elif len(argv) >= 2 and argv[0] == "scope-ab":
        rows = scope_ab(argv[1])
        if not rows:
            print(f"scope-ab: no base-run*.json / new-run*.json in {argv[1]}")
            return
        print(f"{'S':>3} {'G':>2} {'column':<16} {'base: median [min-max]':>26} {'new: median [min-max]':>26} {'new/base':>9} rounds")
        for segments, groups, column, b, n, ratio, rounds in rows:
            print(f"{segments:>3} {groups:>2} {column:<16} {b:>26} {n:>26} {ratio:>9.3f} {rounds}")
    elif len(argv) >= 3 and argv[0] == "compare":
        compare(load(argv[1]), load(argv[2]))
    elif len(argv) >= 2 and argv[0] == "from-nccl-tests":
        kind, paths = "none", argv[1:]
        if paths[:1] == ["--kind"] and len(paths) >= 3 and paths[1] in ("none", "local", "symmetric"):
            kind, paths = paths[1], paths[2:]
        print(json.dumps(from_nccl_tests(paths, kind)))
    elif len(argv) >= 3 and argv[0] == "plot":
        plot(argv[1], argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

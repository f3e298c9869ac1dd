"""The verdicts of check_pdl_hazard.py and of bench/sglang_cases.py's pdl cases (no torch here: tests/python/test_gpu_check_verdicts.py runs it on
the CPU). A mode is promised never wrong when it is plain memory, or ncclpool windows without the
symmetric flag (the guard turned the kernels off), or ncclpool windows through the torch layer's
fenced collectives in a process that decided ``fence`` (issue 46). A promised mode that was wrong on
any rank, or that raised on any rank (an "error" row: nothing measured, so nothing shown right),
breaks the promise; an unavailable mode (torch-symm on a torch without it) and the unguarded modes
(ncclpool-unfenced, torch-symm, ncclpool with the kernels on unfenced) do not."""


def promised(mode, symmetric_flag, fenced=False):
    return mode == "plain" or (mode == "ncclpool" and (not symmetric_flag or fenced))


def judge(rows, wrong_all_ranks, errors_all_ranks, launches, world, symmetric_flag, fenced=False):
    """rows: this rank's rows ({"mode", "graph"} and one of "wrong", "error", "unavailable"), the same
    modes in the same order on every rank; wrong_all_ranks / errors_all_ranks: per row, the sum over
    ranks of wrong launches / of ranks where the row raised. Fills each row's "wrong_all_ranks",
    "launches_all_ranks" and "error_ranks", and returns the list of broken promises (empty: RESULT ok)."""
    broken = []
    for r, wrong, errors in zip(rows, wrong_all_ranks, errors_all_ranks, strict=True):
        label = f"{r['mode']} {'graph' if r['graph'] else 'eager'}"
        if "unavailable" in r:
            continue
        if errors:
            r["error_ranks"] = errors
        if "wrong" in r:
            r["wrong_all_ranks"] = wrong
            r["launches_all_ranks"] = launches * world
        if not promised(r["mode"], symmetric_flag, fenced):
            continue
        if errors:
            broken.append(f"{label} raised on {errors} rank(s): {r.get('error', 'on another rank')}")
        elif wrong:
            broken.append(f"{label} wrong {wrong} of {launches * world}")
    return broken


def judge_sglang(cases):
    """bench/sglang_bench.py's failure cases (its JSON's "cases"): those named pdl* (sglang_cases.py's
    pdl and pdl-nomix). ncclpool.sglang promises its all-reduce as SGLang calls it right after an early
    trigger where the process decided the fence, the guard or off, or where NCCL has no hazard: every
    rank must report such rows (a rank that raised, hung or is missing shows nothing right) with no
    wrong result. SGLang's allocator and ncclpool's unfenced rows promise nothing: the positive
    control. Returns (broken promises, one line per case)."""
    broken, lines = [], []
    for case in cases:
        if not case["name"].startswith("pdl"):
            continue
        ranks = case["ranks"]
        world = max([r["world"] for r in ranks], default=0)
        counts = {}
        for r in ranks:
            for row in r.get("pdl", []):
                key = (row["call"], row["graph"])
                wrong, launches = counts.get(key, (0, 0))
                counts[key] = (wrong + row["wrong"], launches + row["launches"])
        text = ", ".join(f"{call} {'graph' if graph else 'eager'} {w}/{n} wrong" for (call, graph), (w, n) in counts.items())
        lines.append(f"{case['name']}: {text or 'no rows'}")
        if not case["name"].endswith("ncclpool"):
            continue
        decided = {(r.get("decision"), r.get("hazard")) for r in ranks if "pdl" in r}
        if any(d == "on" and hazard for d, hazard in decided):
            continue  # the kernels forced on, unfenced: the same exposure as SGLang's allocator
        missing = [r for r in ranks if "pdl" not in r]
        if len(ranks) < world or not ranks or missing:
            broken.append(f"{case['name']}: {len(ranks) - len(missing)} of {world or '?'} rank(s) reported rows"
                          + (f" (rank {missing[0]['rank']}: {missing[0]['outcome'][:200]})" if missing else ""))
            continue
        for (call, graph), (wrong, launches) in counts.items():
            if call == "as SGLang calls it" and wrong:
                broken.append(f"{case['name']}: {call} {'graph' if graph else 'eager'} wrong {wrong} of {launches}")
    return broken, lines

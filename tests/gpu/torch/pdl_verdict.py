"""The verdict of check_pdl_hazard.py (no torch here: tests/python/test_gpu_check_verdicts.py runs it on
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

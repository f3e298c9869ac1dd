"""scripts/builtin-routes.py: the pick for buffers that name no collective ("any"), at rank counts whose
collectives measure different sizes and with a time the bench could not measure (null)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("builtin_routes", os.path.join(ROOT, "scripts", "builtin-routes.py"))
builtin_routes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(builtin_routes)

MIB = 1 << 20


def row(b, none, local, symmetric):
    times = dict(none=none, local=local, symmetric=symmetric)
    best = min((t, k) for k, t in times.items() if t is not None)[1]
    return dict(bytes=b, placement="out", auto_kind=best, spread_pct=1.0, **{f"{k}_us": t for k, t in times.items()})


def doc(ranks, tables):
    return {"facts": {"gpu": "NVIDIA H200", "nccl_version": "22809", "rank_count": str(ranks)},
            "tables": [{"title": f"{op} ({ranks} ranks)", "rows": rows} for op, rows in tables.items()]}


def test_collectives_at_other_sizes_are_weighed_at_their_nearest_size_below():
    # 3 ranks: all-gather's and reduce-scatter's sizes are multiples of 12, all-reduce's powers of two.
    ag = [row(64 * MIB - 4, 100, 95, 90), row(512 * MIB - 8, 100, 90, 95)]
    rs = [row(64 * MIB - 4, 100, 95, 90), row(512 * MIB - 8, 100, 95, 90)]
    ar = [row(64 * MIB, 90, 95, 100), row(512 * MIB, 90, 95, 100)]
    p = builtin_routes.profile_from(doc(3, dict(all_gather=ag, reduce_scatter=rs, all_reduce=ar)), "t")
    for c in p["classes"]:
        assert set(c["kind"]) == {"all_gather", "reduce_scatter", "all_reduce"}, c
    by_size = {c["min_bytes"]: c for c in p["classes"]}
    # From 512 MiB - 8 all-gather wants local, reduce-scatter symmetric, all-reduce (at 64 MiB, its
    # nearest size below) none: local's worst case (95/90) beats none's and symmetric's (100/90).
    assert by_size[512 * MIB - 8]["kind"] == {"all_gather": "local", "reduce_scatter": "symmetric", "all_reduce": "none"}
    assert by_size[512 * MIB - 8]["any"] == "local"
    # Where the three agree there is no "any" (the library takes their kind).
    agree = builtin_routes.profile_from(doc(3, dict(all_gather=ag[:1], reduce_scatter=rs[:1], all_reduce=[row(64 * MIB, 100, 95, 90)])), "t")
    assert all("any" not in c for c in agree["classes"]), agree["classes"]


def test_a_null_time_is_no_candidate_and_no_crash():
    ag = [row(64 * MIB, 100, 95, None)]
    rs = [row(64 * MIB, 100, 100, 90)]
    ar = [row(64 * MIB, 90, 100, 100)]
    p = builtin_routes.profile_from(doc(4, dict(all_gather=ag, reduce_scatter=rs, all_reduce=ar)), "t")
    assert p["classes"][0]["any"] in ("none", "local")  # never symmetric: all-gather has no time there

"""The built-in routes of auto pools (docs/pool.md): src/routing/builtin/*.json rendered as a table,
each file as scripts/builtin-routes.py makes it from the bench coll run it names (check-tree's
`builtin-routes` keeps the files equal to that), so the table states the run it is from."""

import importlib.util
import json
import os

from . import DATA, Run, _ROOT, figure, table

_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "builtin-routes.py")


def _builtin_script():
    spec = importlib.util.spec_from_file_location("builtin_routes_script", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files():
    folder = os.path.join(_ROOT[0], "src", "routing", "builtin")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []


def any_kind_of(c):
    """A class's kind for a buffer that names no collective: its "any", else its collectives' kind
    (builtin-routes.py writes "any" wherever they differ)."""
    kinds = set(c["kind"].values())
    if "any" not in c and len(kinds) != 1:
        raise ValueError(f"class from {c['min_bytes']}: the collectives differ and no \"any\"")
    return c.get("any") or kinds.pop()


def _describe(classes, op):
    """'symmetric from 0 B, none from 32 MiB' as size ranges of one collective's picks."""
    def size(b):
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if b >= 1 << shift and b % (1 << shift) == 0:
                return f"{b >> shift} {unit}"
        return f"{b} B"
    parts, last = [], None
    for c in classes:
        kind = any_kind_of(c) if op == "any" else c["kind"][op]
        if kind != last:
            parts.append(kind if not parts else f"{kind} from {size(c['min_bytes'])}")
            last = kind
    return parts[0] + " at every size" if len(parts) == 1 else ", ".join(parts)


@figure("routes.builtin")
def _builtin_table():
    script = _builtin_script()
    script.DATA = os.path.join(_ROOT[0], DATA)
    body, runs = [], []
    for path in _files():
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        source = stored["builtin"]["source"]
        made = script.build(os.path.join(_ROOT[0], DATA, source[len("data/"):]))  # what the run gives, not the file
        cc = made["builtin"]["compute_capability"]
        body.append([f"{cc // 10}.{cc % 10}", made["ranks"], made["gpu"], made["nccl_version"],
                     _describe(made["classes"], "all_gather"), _describe(made["classes"], "reduce_scatter"),
                     _describe(made["classes"], "all_reduce"), _describe(made["classes"], "any")])
        runs.append(Run(source[len("data/"):]))
    return table(["compute capability", "ranks", "measured on", "NCCL", "all-gather", "reduce-scatter", "all-reduce",
                  "a buffer naming no collective"], body, runs)

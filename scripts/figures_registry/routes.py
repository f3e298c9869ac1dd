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


def _describe(classes, op):
    """'symmetric from 0 B, none from 32 MiB' as size ranges of one collective's picks."""
    def size(b):
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if b >= 1 << shift and b % (1 << shift) == 0:
                return f"{b >> shift} {unit}"
        return f"{b} B"
    parts, last = [], None
    for c in classes:
        kind = c["kind"][op]
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
                     _describe(made["classes"], "all_reduce")])
        runs.append(Run(source[len("data/"):]))
    return table(["compute capability", "ranks", "measured on", "NCCL", "all-gather", "reduce-scatter", "all-reduce"], body, runs)

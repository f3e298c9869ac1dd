#!/usr/bin/env python3
"""Checks of the source tree that need no build; scripts/test.sh runs them first (docs/checks.md).

  layers   No #include runs up the layer order core (0) -> registry (1) -> routing (2) ->
           backends (3) -> capi (4). A file in src/<layer>/ may include headers of its own layer or a
           lower one; so may a public header (include/ncclpool/), whose layer PUBLIC_HEADERS gives: a
           header missing from that table is an error, so a new one must be placed there.
  lines    No source file outside tests/ (src, include, tools, bench, python, scripts, examples) is
           over 500 lines.
  getenv   In src/ and tools/, only src/core/environment.cpp reads or sets the environment; in
           python/ncclpool/, only python/ncclpool/_environment.py (os.environ, os.getenv, os.putenv).
  pyimports  No import circle among the modules of python/ncclpool/: an import inside a function
           counts as one at the top (an import under `if TYPE_CHECKING:` never runs and does not).
  sources  No CMake file outside src/ compiles a library source (src/**.c, .cpp): the library's loaders
           and JSON reader exist once per process, in libncclpool (src/CMakeLists.txt says why).
  figures  Every measured number in README.md and docs/ is generated from docs/benchmarks/data or
           tagged why not, and agrees with its data (scripts/figures.py --check; it prints its counts).

Usage: scripts/check-tree.py [--root DIR] [CHECK ...]   (default: every check)
Prints one line per problem and exits 1 when there is any. Standard library only.
"""

import argparse
import ast
import os
import re
import sys

LAYERS = ["core", "registry", "routing", "backends", "capi"]
ORDER = " -> ".join(LAYERS)

# The layer of each public header. A header may include its layer's headers and those below.
PUBLIC_HEADERS = {
    "pool.hpp": "core", "stats.hpp": "core", "stats_fields.h": "core", "segment_source.hpp": "core", "errors.hpp": "core",
    "export.hpp": "core", "communicator.hpp": "core", "registration.hpp": "core", "limit_source.hpp": "core",
    "registry.hpp": "registry", "registered_pool.hpp": "registry",
    "routes.hpp": "routing", "profile.hpp": "routing", "auto_pool.hpp": "routing",
    "cuda.hpp": "backends", "nccl.hpp": "backends", "sim.hpp": "backends", "loopback.hpp": "backends",
    "ncclpool.h": "capi",
}

LINE_LIMIT = 500
LINE_DIRS = ["src", "include", "tools", "bench", "python", "scripts", "examples"]
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".py", ".sh", ".cmake", ".in", ".ptx")
SKIP_DIRS = {".git", "__pycache__", "build", "dist", ".pytest_cache", ".venv"}

ENVIRONMENT_FILE = "src/core/environment.cpp"
ENVIRONMENT_CALL = re.compile(r"\b(?:secure_getenv|getenv|setenv|unsetenv|putenv|clearenv)\s*\(")
PYTHON_ENVIRONMENT_FILE = "python/ncclpool/_environment.py"
PYTHON_ENVIRONMENT_USE = re.compile(r"\bos\s*\.\s*(?:environ|getenv|putenv|unsetenv)\b|\bfrom\s+os\s+import\s+[^#]*\b(?:environ|getenv)\b")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
LIBRARY_SOURCE = re.compile(r"(?<![\w.-])(?:\$\{\w+\}/|(?:\.\./)+)?src/[\w/.+-]+\.(?:c|cc|cpp|cxx)\b")


def walk(root, top):
    """Relative paths of the files under root/top, sorted, skipping build and cache folders."""
    out = []
    for folder, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in files:
            out.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return sorted(out)


def read_lines(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def is_cxx(path):
    return path.endswith((".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp"))


def layer_of(path):
    """The layer of a file of the tree (relative path), None outside the layered folders, or
    'unknown' for a public header missing from PUBLIC_HEADERS or a src/ folder that is no layer."""
    parts = path.split("/")
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "unknown"
    if parts[:2] == ["include", "ncclpool"] and len(parts) == 3:
        return PUBLIC_HEADERS.get(parts[2], "unknown")
    return None


def resolve(root, path, quote, target):
    """The relative path an #include names, or None for a system header or one not in the tree."""
    if quote == "<":
        return "include/" + target if target.startswith("ncclpool/") else None
    for base in (os.path.dirname(path), "src", "include"):
        candidate = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def check_layers(root):
    problems = []
    files = [p for p in walk(root, "src") + walk(root, "include") if is_cxx(p)]
    for path in files:
        own = layer_of(path)
        if own is None:
            continue
        if own == "unknown":
            if path.startswith("include/"):
                problems.append(f"{path}: a public header missing from the layer table (PUBLIC_HEADERS in scripts/check-tree.py): place it in a layer")
            else:
                problems.append(f"{path}: not in a layer folder (src/{{{','.join(LAYERS)}}})")
            continue
        for number, line in enumerate(read_lines(root, path), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(2)
            included = resolve(root, path, m.group(1), target)
            if included is None:
                continue
            theirs = layer_of(included)
            shown = f"<{target}>" if m.group(1) == "<" else f'"{target}"'
            if theirs is None:
                problems.append(f"{path}:{number}: includes {shown} ({included}), outside the library's layers")
            elif theirs == "unknown":
                problems.append(f"{path}:{number}: includes {shown}: {included} has no layer (add it to PUBLIC_HEADERS in scripts/check-tree.py)")
            elif LAYERS.index(theirs) > LAYERS.index(own):
                problems.append(f"{path}:{number}: includes {shown} ({theirs}, layer {LAYERS.index(theirs)}) from {own} (layer {LAYERS.index(own)}): "
                                f"includes run down the order {ORDER} only")
    return problems


def check_lines(root):
    problems = []
    for top in LINE_DIRS:
        for path in walk(root, top):
            if not (path.endswith(SOURCE_SUFFIXES) or os.path.basename(path) == "CMakeLists.txt"):
                continue
            count = len(read_lines(root, path))
            if count > LINE_LIMIT:
                problems.append(f"{path}: {count} lines, over the limit of {LINE_LIMIT} for a source file outside tests/: split it by concern")
    return problems


def check_getenv(root):
    problems = []
    for path in walk(root, "src") + walk(root, "tools"):
        if path == ENVIRONMENT_FILE or not (is_cxx(path) or path.endswith(".py")):
            continue
        for number, line in enumerate(read_lines(root, path), 1):
            if ENVIRONMENT_CALL.search(line):
                problems.append(f"{path}:{number}: reads or sets the environment: only {ENVIRONMENT_FILE} does "
                                f"(add an accessor there, and the variable to docs/environment.md)")
    # The Python package: one file, so that a variable changing what a rank does collectively is read
    # once, where it becomes part of what the ranks agree on (issue 44). The .pth start-up line is not
    # under python/ncclpool/ (it checks NCCLPOOL_SGLANG without importing anything).
    for path in walk(root, "python/ncclpool"):
        if path == PYTHON_ENVIRONMENT_FILE or not path.endswith(".py"):
            continue
        for number, line in enumerate(read_lines(root, path), 1):
            if PYTHON_ENVIRONMENT_USE.search(line.split("#", 1)[0]):
                problems.append(f"{path}:{number}: reads or sets the environment: only {PYTHON_ENVIRONMENT_FILE} does "
                                f"(add an accessor there, and the variable to docs/environment.md)")
    return problems


PYTHON_PACKAGE = "python/ncclpool"


def python_modules(root):
    """{dotted module name: relative path} of the package's modules (a package by its __init__.py)."""
    base = os.path.dirname(PYTHON_PACKAGE)
    out = {}
    for path in walk(root, PYTHON_PACKAGE):
        if path.endswith(".py"):
            parts = os.path.relpath(path, base).replace(os.sep, "/")[:-3].split("/")
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def under_type_checking(tree):
    """The import nodes inside `if TYPE_CHECKING:` (or typing.TYPE_CHECKING) bodies: never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(id(n) for n in ast.walk(inner))
    return skipped


def imported_modules(name, path, tree, modules):
    """(line, module) for each package module that `name`'s imports name, wherever the import is (a
    function's too); `from A import b` names A.b when that is a module, else A."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    skipped = under_type_checking(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(anchor + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    yield node.lineno, f"{source}.{alias.name}"
                elif source in modules:
                    yield node.lineno, source


def check_pyimports(root):
    """Python's answer to `layers`: the package's modules import downward only, so that each piece of
    state has one owner the others import (issue 48). An import inside a function to dodge a circle
    still is one."""
    modules = python_modules(root)
    edges = {name: {} for name in modules}  # module -> {imported module: first line}
    problems = []
    for name, path in modules.items():
        try:
            tree = ast.parse("\n".join(read_lines(root, path)), filename=path)
        except SyntaxError as e:
            problems.append(f"{path}:{e.lineno}: not Python ({e.msg}): its imports cannot be checked")
            continue
        for line, target in imported_modules(name, path, tree, modules):
            if target != name:
                edges[name].setdefault(target, line)
    for group, cycle in import_circles(edges):
        steps = ", ".join(f"{modules[a]}:{edges[a][b]} imports {b}" for a, b in zip(cycle, cycle[1:] + cycle[:1]))
        tangle = f"; all of {', '.join(sorted(group))} reach each other" if len(group) > len(cycle) else ""
        problems.append(f"import circle {' -> '.join(cycle + cycle[:1])} ({steps}{tangle}): give the shared state "
                        "one owner module that the others import, downward only")
    return problems


def import_circles(edges):
    """(group, one circle in it) per strongly connected group of modules (Tarjan), the circle from
    the group's smallest name."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [(group, shortest_circle(edges, group)) for group in sorted(groups, key=min)]


def shortest_circle(edges, group):
    """The shortest circle through the group's smallest module, inside the group (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                return paths[v]
            if w in group and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return sorted(group)


def check_sources(root):
    problems = []
    cmake_files = ["CMakeLists.txt"] if os.path.isfile(os.path.join(root, "CMakeLists.txt")) else []
    for top in sorted(os.listdir(root)):
        if top != "src" and top not in SKIP_DIRS and os.path.isdir(os.path.join(root, top)):
            cmake_files += [p for p in walk(root, top) if os.path.basename(p) == "CMakeLists.txt" or p.endswith(".cmake")]
    for path in cmake_files:
        for number, line in enumerate(read_lines(root, path), 1):
            for m in LIBRARY_SOURCE.finditer(line.split("#", 1)[0]):
                problems.append(f"{path}:{number}: compiles the library's {m.group(0)} again: link ncclpool_internal "
                                f"(one copy per process, in libncclpool) instead")
    return problems


def check_figures(root):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import figures
    import time
    start = time.monotonic()
    problems, total = figures.check(root)
    files = len(figures.doc_files(root))
    if files:
        print(figures.summary(total, files, time.monotonic() - start))
    return problems


def check_builtin_routes(root):
    """src/routing/builtin/*.json: each what scripts/builtin-routes.py makes from the run it names."""
    import importlib.util
    import io
    import contextlib
    spec = importlib.util.spec_from_file_location("builtin_routes", os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin-routes.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.BUILTIN = os.path.join(root, "src", "routing", "builtin")
    module.DATA = os.path.join(root, "docs", "benchmarks", "data")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.check()
    return [line.removeprefix("builtin-routes: ") for line in out.getvalue().splitlines()]


CHECKS = {"layers": check_layers, "lines": check_lines, "getenv": check_getenv, "pyimports": check_pyimports,
          "sources": check_sources, "figures": check_figures, "builtin-routes": check_builtin_routes}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), help="the tree to check (default: this checkout)")
    parser.add_argument("checks", nargs="*", metavar="CHECK", help="any of " + ", ".join(CHECKS) + " (default: all)")
    args = parser.parse_args(argv)
    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown:
        parser.error("unknown check(s) " + ", ".join(unknown) + "; known: " + ", ".join(CHECKS))
    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root}: not a directory")
    failed = 0
    for name in args.checks or list(CHECKS):
        problems = CHECKS[name](args.root)
        for p in problems:
            print(f"check-tree {name}: {p}")
        failed += len(problems)
    if failed:
        print(f"check-tree: {failed} problem(s); docs/checks.md says what each check wants")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

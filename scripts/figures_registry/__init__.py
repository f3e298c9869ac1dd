"""The registry of generated figures (scripts/figures.py): each figure a small function that reads raw
files under docs/benchmarks/data/ through `data()`/`text()`, and returns the text of its marked place.

A figure states the run it is from in its text (device, commit, date: `run(path)` gives them, from
the data folder's name DATE-SUITE-DEVICE-COMMIT[-variant] or RUN_COMMITS), and its tolerance: how far
(relative) a number in the docs may be from the one its data gives before `--check` fails. The
default, TOLERANCE, only absorbs rounding of a value already rounded in the text.

One module per benchmark page; each registers its figures on import (listed at the end).
"""

import glob
import gzip
import json
import os
import re

TOLERANCE = 0.005
FIGURES = {}
_ROOT = [None]
DATA = "docs/benchmarks/data"

# Data folders whose name carries no commit: the commit their README.md gives.
RUN_COMMITS = {
    "2026-11-23-replay-ramp": "aff232b",  # replay folders without a commit: the commit that added them
    "2026-11-23-replay-ramp8": "c6a6039",
    "2026-11-27-gpu-check-2xh200-s3": "1a4ee3c",
    "2026-11-27-gpu-check-2xh200-s4": "7ec0c4a",
    "2026-11-27-gpu-check-2xh200-s5": "db1dd20",
}


def set_root(root):
    _ROOT[0] = root


def _device(parts):
    """The device a run's folder name states (its parts between dashes), or '?'."""
    device = "?"
    for part in parts:
        d = re.fullmatch(r"(?:(\d+)x)?(h100|h200|a100|b200)", part)
        if d:
            device = (f"{d.group(1)}x " if d.group(1) else "") + d.group(2).upper()
        elif part == "sim":
            device = "simulator"
        elif part == "cpu" and device == "?":
            device = "CPU"
    return device


class Run:
    """One run: where its raw output is, on what device, at what commit, when."""

    def __init__(self, path):
        self.path = path
        top = path.split("/")[0]
        top_name = re.sub(r"\.(jsonl|json|txt)$", "", top)  # a run that is one file: its name
        m = re.match(r"(\d{4}-\d{2}-\d{2})-(.*)$", top_name)
        self.date = m.group(1) if m else "?"
        rest = m.group(2).split("-") if m else []
        self.device = _device(rest)
        if self.device == "?" and rest[:1] in (["replay"], ["growth"]):
            self.device = "simulator"  # the tool's replays run the simulator's pools
        parts = path.split("/")
        if self.device == "?" and len(parts) > 2:  # a folder of calls on several kinds: each call's folder names its own
            self.device = _device(parts[1].split("-"))
        # A commit is 7 hex digits (digits only too: 4422052); the date's parts are split off above.
        commits = [p for p in rest if re.fullmatch(r"[0-9a-f]{7}", p)]
        self.commit = RUN_COMMITS.get(top) or (commits[0] if commits else "?")
        # A folder of several calls at several commits: each call's folder ends with its own.
        if self.commit == "?" and len(parts) > 2 and re.search(r"-([0-9a-f]{7})$", parts[1]):
            self.commit = re.search(r"-([0-9a-f]{7})$", parts[1]).group(1)

    def __str__(self):
        return f"{self.device}, {self.commit}, {self.date}: data/{self.path}"

    def label(self):
        """The run as the docs state it: device, commit, date."""
        return f"{self.device}, {self.commit}, {self.date}"


def _full(path):
    if _ROOT[0] is None:
        raise RuntimeError("figures_registry.set_root() not called")
    return os.path.join(_ROOT[0], DATA, path)


_TEXT = {}


def text(path):
    """The text of docs/benchmarks/data/path (a .gz file read uncompressed)."""
    full = _full(path)
    st = os.stat(full)
    key = (full, st.st_mtime_ns, st.st_size)
    if key not in _TEXT:  # figures read the same files many times: once while unchanged
        opener = gzip.open if full.endswith(".gz") else open
        with opener(full, "rt", encoding="utf-8") as f:
            _TEXT[key] = f.read()
    return _TEXT[key]


def listdir(path, pattern="*"):
    """The files of the data folder `path` matching `pattern`, as paths under docs/benchmarks/data/, sorted."""
    full = _full(path)
    return sorted(os.path.relpath(f, _full("")).replace(os.sep, "/") for f in glob.glob(os.path.join(full, pattern)))


_JSON = {}


def data(path):
    """The JSON file at docs/benchmarks/data/path (parsed once while unchanged: treat it as read-only)."""
    raw = text(path)
    key = (path, id(raw))
    if key not in _JSON:
        _JSON.clear() if len(_JSON) > 512 else None
        _JSON[key] = (raw, json.loads(raw))
    return _JSON[key][1]


def jsonl(path, prefix=""):
    """The JSON objects of a file of JSON lines (or of lines starting with prefix, e.g. 'BENCH ')."""
    out = []
    for line in text(path).splitlines():
        line = line.strip()
        if prefix:
            if prefix not in line:
                continue
            line = line[line.index(prefix) + len(prefix):]
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def rows(doc, title=None):
    """The rows of a tool's --json output (every table, or the one whose title starts with title)."""
    out = []
    for t in doc.get("tables", []):
        if title is None or t.get("title", "").startswith(title):
            out += t["rows"]
    return out


def row(rows_, **where):
    found = [r for r in rows_ if all(r.get(k) == v for k, v in where.items())]
    if len(found) != 1:
        raise KeyError(f"{len(found)} rows where {where}")
    return found[0]


class Figure:
    def __init__(self, name, fn, tol, sources):
        self.name, self.fn, self.tol, self.sources = name, fn, tol, sources

    def render(self):
        return self.fn()

    def runs(self):
        return [Run(s) for s in self.sources]


def figure(name, *sources, tol=TOLERANCE):
    """Register fn as figure `name`, reading the data files `sources` (paths under data/)."""
    def wrap(fn):
        if name in FIGURES:
            raise ValueError(f"figure {name} registered twice")
        FIGURES[name] = Figure(name, fn, tol, sources)
        return fn
    return wrap


def fmt(v, places=0):
    """A measured value with `places` decimals, thousands separated (79, 1.13, 78,874)."""
    return f"{v:,.{places}f}"


def span(values, places=0, sep="-"):
    """'lo-hi' of values (one value when both ends round the same)."""
    lo, hi = fmt(min(values), places), fmt(max(values), places)
    return lo if lo == hi else f"{lo}{sep}{hi}"


def table(header, body, source=None):
    """A Markdown table; source (a list of Runs) adds a line naming the runs."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
    text_ = "\n".join(lines)
    if source:
        text_ += "\n\nGenerated by `scripts/figures.py` from " + "; ".join(
            f"`data/{r.path}` ({r.label()})" for r in source) + "."
    return text_


def _register_every_module():
    """Import every module of this package: each registers its figures (one module per page)."""
    import importlib
    import pkgutil
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        importlib.import_module(f"{__name__}.{info.name}")


_register_every_module()

#!/usr/bin/env python3
"""Every measured figure of the docs from its raw data (docs/benchmarks/data), or tagged why not.

The docs (README.md, docs/**/*.md but docs/benchmarks/data/) hold three kinds of marked places:

  <!-- fig:NAME -->79 ns (H200, 7ec0c4a, 2026-11-27)<!-- /fig -->     one generated figure, inline
  <!-- table:NAME -->  ...a Markdown table...  <!-- /table -->        one generated table
  <!-- nodata: why -->...<!-- /nodata -->    figures with no raw data in the tree, and why
  <!-- todo: why -->...<!-- /todo -->        figures not converted yet (counted and reported)
  <!-- todo-file: why -->                     a whole file not converted yet (counted and reported)

NAME is a figure of the registry (scripts/figures_registry/*.py): a function that reads files under
docs/benchmarks/data/, returns the text of the marked place, and names the run(s) it read (device,
commit, date: each figure's text or the table's source line states them). `--write` regenerates
every marked place; `--check` (also scripts/check-tree.py's `figures` check, so CI runs it) fails:

  * when a marked place differs from what its data gives: the text around the numbers must be the
    generated text, and each number within the figure's tolerance of the generated one (the
    tolerance is relative, stated per figure, default TOLERANCE; a number is also allowed half a
    unit of the last digit the generated text shows);
  * when a measured number (a number with a unit of time, rate, ratio or a size that is no power of
    two: MEASURED) stands outside every marked place, or a table with numbers in docs/benchmarks/
    outside one. Not measured, so not checked: code blocks and `code spans`, HTML comments, sizes
    that are whole powers of two (parameters: 32 MiB, 1 GiB), `2x H200` (a device count);
  * on an unknown figure name, a marker left open, or a nodata/todo tag without a reason.

It prints the count of generated figures and tables and of figures tagged nodata and todo.

Usage: scripts/figures.py [--root DIR] (--check | --write | --list | --scan FILE...)
Standard library only.
"""

import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import figures_registry as registry  # noqa: E402

TOLERANCE = registry.TOLERANCE
DOC_ROOTS = ["README.md", "docs"]
SKIP = ("docs/benchmarks/data/",)

# A whole file not converted yet says so in its own text, `<!-- todo-file: why -->`: every measured
# number in it outside markers counts as todo, with that reason. Move a file out by marking its
# figures and deleting the line (each file carries its own tag, so pages convert independently).
TODO_FILE = re.compile(r"<!--\s*todo-file:\s*(.*?)\s*-->", re.S)

NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
UNIT = r"ns|us|µs|ms|s|sec|seconds|minutes|min|h|hours|GB/s|GiB/s|MB/s|GiB|MiB|KiB|GB|MB|TB|%"
# A measured number: a number or a range of numbers and a unit; 'x' only attached (1.45x), and not
# a device count (2x H200).
MEASURED = re.compile(
    r"(?<![\w.])[~+-]?(" + NUM + r")(?:\s?(?:-|–|/| to )\s?[~+-]?" + NUM + r")*"
    r"(?:(x)(?![\w])(?!\s*(?:H100|H200|A100|B200|GPU|NVIDIA))|\s?(" + UNIT + r")(?![\w/]))")
POW2_SIZE = {"KiB", "MiB", "GiB", "GB", "MB", "TB"}
TOKEN = re.compile(r"\d{4}-\d{2}-\d{2}|(?<![\w.])" + NUM + r"(?=x(?!\w)|[^\w]|$)")
REGION = re.compile(r"<!--\s*(fig|table):([\w.-]+)\s*-->(.*?)<!--\s*/(fig|table)\s*-->|"
                    r"<!--\s*(nodata|todo)(?::\s*(.*?))?\s*-->(.*?)<!--\s*/(nodata|todo)\s*-->", re.S)
ANY_MARK = re.compile(r"<!--\s*/?(?:fig|table|nodata|todo)(?![\w-])")
FENCE = re.compile(r"^([ \t]*)(```|~~~).*?^\1\2[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)
NUMERIC_CELL = re.compile(r"[~+-]?\d")  # a cell that starts with a number


def doc_files(root):
    out = []
    for top in DOC_ROOTS:
        full = os.path.join(root, top)
        if os.path.isfile(full):
            out.append(top)
        for folder, dirs, files in os.walk(full) if os.path.isdir(full) else []:
            dirs.sort()
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                if rel.endswith(".md") and not rel.startswith(SKIP):
                    out.append(rel)
    return out


def blank(text, pattern):
    """text with every match of pattern replaced by spaces (newlines kept): offsets stay."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def measured(text):
    """(offset, matched text) of each measured number in text outside code and comments."""
    visible = blank(blank(blank(text, FENCE), CODE_SPAN), COMMENT)
    out = []
    for m in MEASURED.finditer(visible):
        unit = m.group(3)
        if unit in POW2_SIZE and all(_pow2(n) for n in re.findall(NUM, m.group(0))):
            continue
        out.append((m.start(), m.group(0).strip()))
    return out


def _pow2(n):
    v = float(n.replace(",", ""))
    return v >= 1 and v == int(v) and (int(v) & (int(v) - 1)) == 0


def tables_with_numbers(text):
    """(offset, first row) of each Markdown table with a cell past its header that starts with a number."""
    visible = blank(blank(blank(text, FENCE), CODE_SPAN), COMMENT)
    out, start, rows = [], None, []
    lines = visible.split("\n")
    pos = 0
    for line in lines + [""]:
        if TABLE_ROW.match(line):
            if start is None:
                start, rows = pos, []
            rows.append(line)
        elif start is not None:
            if any(NUMERIC_CELL.match(c.strip(" *")) for r in rows[2:] for c in r.strip().strip("|").split("|")):
                out.append((start, rows[0].strip()[:60]))
            start = None
        pos += len(line) + 1
    return out


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def tokens(text):
    """(skeleton, numbers): the text with each number replaced by '#', and the numbers as strings."""
    nums = []

    def sub(m):
        if "-" in m.group(0)[1:5] and len(m.group(0)) == 10:
            return m.group(0)
        nums.append(m.group(0))
        return "#"
    return TOKEN.sub(sub, text), nums


def close_enough(doc, gen, tol):
    """Is the doc's number within tol (relative) of the generated one, or within half its last digit?"""
    a, b = float(doc.replace(",", "")), float(gen.replace(",", ""))
    places = len(gen.split(".")[1]) if "." in gen else 0
    return abs(a - b) <= tol * abs(b) + 0.5 * 10 ** -places + 1e-12


def compare(have, want, tol):
    """None when have matches want (same text but for numbers within tol), else why not."""
    if have.strip() == want.strip():
        return None
    hs, hn = tokens(have.strip())
    ws, wn = tokens(want.strip())
    if hs != ws:
        diff = next((i for i, (x, y) in enumerate(zip(hs, ws)) if x != y), min(len(hs), len(ws)))
        return f"text differs from the generated text near {hs[max(0, diff - 20):diff + 30]!r} (generated: {ws[max(0, diff - 20):diff + 30]!r})"
    for h, w in zip(hn, wn):
        if not close_enough(h, w, tol):
            return f"{h} where the data gives {w} (tolerance {tol:.1%})"
    return None


def render(name, inline):
    fig = registry.FIGURES[name]
    text = fig.render()
    return text if inline else "\n\n" + text.strip("\n") + "\n\n"


def scan(root, path, text, generated=None):
    """Problems of one file and its counts; with generated (a dict), also the regenerated text."""
    problems, counts = [], {"fig": 0, "table": 0, "nodata": 0, "todo": 0}
    spans = []  # (start, end, kind)
    out, last = [], 0
    code_free = blank(blank(text, FENCE), CODE_SPAN)  # markers shown in code are no markers
    for m in REGION.finditer(code_free):
        kind = m.group(1) or m.group(5)
        closer = m.group(4) or m.group(8)
        where = f"{path}:{line_of(text, m.start())}"
        spans.append((m.start(), m.end(), kind))
        if closer != kind:
            problems.append(f"{where}: <!-- {kind} --> closed by <!-- /{closer} -->")
            continue
        if kind in ("fig", "table"):
            name, body = m.group(2), text[m.start(3):m.end(3)]
            counts[kind] += 1
            if name not in registry.FIGURES:
                problems.append(f"{where}: unknown figure {name!r} (scripts/figures_registry/)")
                continue
            try:
                want = render(name, kind == "fig")
            except Exception as e:  # a figure whose data is gone or changed shape
                problems.append(f"{where}: {kind} {name}: its data could not be read: {e}")
                continue
            why = compare(body, want, registry.FIGURES[name].tol)
            if why:
                problems.append(f"{where}: {kind} {name}: {why}")
            if generated is not None:
                out.append(text[last:m.start(3)] + want)
                last = m.end(3)
        else:
            if not (m.group(6) or "").strip():
                problems.append(f"{where}: <!-- {kind} --> without a reason (<!-- {kind}: why -->)")
            inner = text[m.start(7):m.end(7)]
            counts[kind] += len(measured(inner)) + len(tables_with_numbers(inner))
    if generated is not None:
        out.append(text[last:])
        generated[path] = "".join(out)
    # Markers the region pattern did not pair up.
    inside = lambda o: next((k for s, e, k in spans if s <= o < e), None)  # noqa: E731
    for m in ANY_MARK.finditer(code_free):
        if inside(m.start()) is None:
            problems.append(f"{path}:{line_of(text, m.start())}: a figure marker without its pair")
    problems += [f"{path}:{line_of(text, o)}: {why}" for o, why in _paragraph_breaks(text)]
    tag = TODO_FILE.search(text)
    todo_file = tag.group(1) if tag else None
    for offset, what in measured(text):
        if inside(offset) is None:
            if todo_file:
                counts["todo"] += 1
            else:
                problems.append(f"{path}:{line_of(text, offset)}: measured figure {what!r} neither generated "
                                f"(<!-- fig:NAME -->) nor tagged (<!-- nodata: why -->)")
    for offset, head in tables_with_numbers(text):
        if path.startswith("docs/benchmarks/") and inside(offset) is None:
            if todo_file:
                counts["todo"] += 1
            else:
                problems.append(f"{path}:{line_of(text, offset)}: table with figures {head!r} neither generated "
                                f"(<!-- table:NAME -->) nor tagged (<!-- nodata: why -->)")
    return problems, counts


def _paragraph_breaks(text):
    """Markers that begin a line inside a paragraph: Markdown (CommonMark) starts an HTML block
    there, which cuts the paragraph in two. A marker may begin a line after a blank line, or be a
    closer alone on a line before a blank line."""
    out = []
    for m in ANY_MARK.finditer(blank(blank(text, FENCE), CODE_SPAN)):
        start = text.rfind("\n", 0, m.start()) + 1
        if text[start:m.start()].strip():
            continue
        prev_end = start - 1
        prev = text[text.rfind("\n", 0, max(prev_end, 0)) + 1:max(prev_end, 0)] if start else ""
        if not prev.strip():
            continue
        end = text.find("\n", m.start())
        end = len(text) if end < 0 else end
        rest = text[end + 1:text.find("\n", end + 1) if text.find("\n", end + 1) >= 0 else len(text)]
        line = text[start:end].strip()
        if COMMENT.fullmatch(line) and line.startswith("<!-- /") and not rest.strip():
            continue
        out.append((m.start(), "a marker begins a line inside a paragraph, which Markdown would cut there: "
                               "put a word before it on its line, or a blank line before it"))
    return out


def check(root, write=False):
    """(problems, counts) over every doc file; with write, regenerate marked places first."""
    registry.set_root(root)
    problems, total = [], {"fig": 0, "table": 0, "nodata": 0, "todo": 0}
    for path in doc_files(root):
        full = os.path.join(root, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        if write:
            gen = {}
            scan(root, path, text, gen)
            if gen[path] != text:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(gen[path])
                print(f"figures: wrote {path}")
                text = gen[path]
        found, counts = scan(root, path, text)
        problems += found
        for k in total:
            total[k] += counts[k]
    return problems, total


def summary(total, files, seconds):
    return (f"figures: {files} files, {total['fig']} figures and {total['table']} tables generated from data; "
            f"{total['nodata']} figures tagged nodata, {total['todo']} todo (not converted yet); {seconds:.2f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=os.path.dirname(HERE), help="the tree (default: this checkout)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="fail on a figure that is neither generated nor tagged, or off its data")
    mode.add_argument("--write", action="store_true", help="regenerate every marked place, then check")
    mode.add_argument("--list", action="store_true", help="every figure of the registry: its value, source runs, tolerance")
    mode.add_argument("--scan", nargs="+", metavar="FILE", help="the measured figures a file holds outside markers")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    if args.list:
        registry.set_root(root)
        for name, fig in sorted(registry.FIGURES.items()):
            try:
                text = fig.render().strip().replace("\n", " / ")
            except Exception as e:
                text = f"ERROR {e}"
            print(f"{name} (tolerance {fig.tol:.1%}; {'; '.join(str(r) for r in fig.runs())}):\n    {text[:200]}")
        return 0
    if args.scan:
        registry.set_root(root)
        for path in args.scan:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            rel = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
            for p in scan(root, rel, text)[0]:
                print(p)
        return 0
    start = time.monotonic()
    problems, total = check(root, write=args.write)
    for p in problems:
        print(f"figures: {p}")
    print(summary(total, len(doc_files(root)), time.monotonic() - start))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/figures.py: the figures check passes a tree whose figures match their data and fails on a
changed number, an untagged number, a marker whose data disagrees, an unknown figure, a tag
without a reason and a marker that would cut a paragraph (trees made in a temp dir)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "figures.py")
ALLOC = "docs/benchmarks/data/2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-alloc.json"

GOOD = """# A page

Allocate + free in <!-- fig:alloc.ncclpool_ns -->72-81 ns<!-- /fig --> on an H200
(<!-- fig:alloc.run -->H200, 7ec0c4a, 2026-11-27<!-- /fig -->). A build takes <!-- nodata: build time, not recorded -->about
2 minutes<!-- /nodata --> here; `--timeout 60 s` and

```sh
sleep 5 s   # code: not a figure
```

segments of 32 MiB (a power of two: a parameter) on 2x H200; a marker shown in code, `<!-- fig:NAME -->`,
is none.

<!-- table:alloc.table -->
<!-- /table -->
"""


def run(root, *args):
    r = subprocess.run([sys.executable, SCRIPT, "--root", str(root), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def tree(tmp_path):
    """README.md with figures, a nodata tag, code and parameters, and the one raw file they read."""
    os.makedirs(tmp_path / os.path.dirname(ALLOC))
    shutil.copy(os.path.join(ROOT, ALLOC), tmp_path / ALLOC)
    (tmp_path / "README.md").write_text(GOOD)
    code, out = run(tmp_path, "--write")  # fills the table
    assert code == 0, out
    return tmp_path


def edit(tree, old, new, path="README.md"):
    text = (tree / path).read_text()
    assert old in text
    (tree / path).write_text(text.replace(old, new, 1))


def test_a_good_tree_passes_and_reports_its_counts(tree):
    code, out = run(tree, "--check")
    assert code == 0, out
    assert "2 figures and 1 tables generated from data; 1 figures tagged nodata, 0 todo" in out
    assert "| 1,024 KiB | same stream | 79 |" in (tree / "README.md").read_text()


def test_a_changed_number_fails(tree):
    edit(tree, "72-81 ns<!-- /fig -->", "50-67 ns<!-- /fig -->")
    code, out = run(tree, "--check")
    assert code == 1
    assert "README.md:3: fig alloc.ncclpool_ns: 50 where the data gives 72" in out


def test_rounding_within_the_tolerance_passes(tree):
    edit(tree, "72-81 ns<!-- /fig -->", "72-81.3 ns<!-- /fig -->")
    code, out = run(tree, "--check")
    assert code == 0, out


def test_a_changed_table_cell_fails(tree):
    edit(tree, "| 1,024 KiB | same stream | 79 |", "| 1,024 KiB | same stream | 60 |")
    code, out = run(tree, "--check")
    assert code == 1
    assert "table alloc.table: 60 where the data gives 79" in out


def test_an_untagged_number_fails(tree):
    edit(tree, "on 2x H200;", "on 2x H200, 3.9% faster;")
    code, out = run(tree, "--check")
    assert code == 1
    assert "README.md:11: measured figure '3.9%' neither generated" in out


def test_a_marker_whose_data_disagrees_fails(tree):
    data = json.loads((tree / ALLOC).read_text())
    for row in data["tables"][0]["rows"]:
        row["ncclpool"] *= 1.5
    (tree / ALLOC).write_text(json.dumps(data))
    code, out = run(tree, "--check")
    assert code == 1
    assert "fig alloc.ncclpool_ns: 72 where the data gives 107" in out
    assert "table alloc.table:" in out


def test_data_that_is_gone_fails(tree):
    os.remove(tree / ALLOC)
    code, out = run(tree, "--check")
    assert code == 1
    assert "its data could not be read" in out


def test_text_around_the_numbers_must_be_the_generated_text(tree):
    edit(tree, "H200, 7ec0c4a, 2026-11-27<!-- /fig -->", "H100, 7ec0c4a, 2026-11-27<!-- /fig -->")
    code, out = run(tree, "--check")
    assert code == 1
    assert "fig alloc.run: text differs" in out


@pytest.mark.parametrize("old, new, expected", [
    ("fig:alloc.ncclpool_ns -->", "fig:alloc.nothing -->", "unknown figure 'alloc.nothing'"),
    ("<!-- nodata: build time, not recorded -->", "<!-- nodata -->", "<!-- nodata --> without a reason"),
    ("<!-- /nodata -->", "", "a figure marker without its pair"),
    ("(<!-- fig:alloc.run -->", "<!-- fig:alloc.run -->", "a marker begins a line inside a paragraph"),
])
def test_bad_markers_fail(tree, old, new, expected):
    edit(tree, old, new)
    code, out = run(tree, "--check")
    assert code == 1
    assert expected in out


def test_write_repairs_a_changed_number(tree):
    edit(tree, "72-81 ns<!-- /fig -->", "50-67 ns<!-- /fig -->")
    code, out = run(tree, "--write")
    assert code == 0, out
    assert "72-81 ns<!-- /fig -->" in (tree / "README.md").read_text()


def test_this_tree_passes():
    code, out = run(ROOT, "--check")
    assert code == 0, out


def test_a_todo_file_counts_its_numbers_instead_of_failing(tree):
    (tree / "docs").mkdir(exist_ok=True)
    (tree / "docs" / "page.md").write_text("# Page\n\n<!-- todo-file: not converted yet -->\n\nIt took 12 ms.\n")
    code, out = run(tree, "--check")
    assert code == 0, out
    assert "1 todo" in out
    (tree / "docs" / "page.md").write_text("# Page\n\nIt took 12 ms.\n")  # the tag removed: the number fails
    code, out = run(tree, "--check")
    assert code == 1
    assert "docs/page.md:3: measured figure '12 ms'" in out

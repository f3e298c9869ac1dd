"""Issue 47 defect 12, the Python side: what a new user met in the reports.

* ``memory_summary()`` cut a communicator's name to 44 characters.
* ``scripts/bench-report.py summary /nonexistent`` ended in a traceback (so did a file that is not JSON).
The demo's half of defect 12 (``ncclpool_demo --source bogus`` / ``--help``) is in test_examples.py.
"""
import os
import subprocess
import sys

import ncclpool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH_REPORT = os.path.join(ROOT, "scripts", "bench-report.py")


def test_memory_summary_keeps_the_whole_communicator_name():
    name = "expert-parallel-data-parallel-shards-of-layer-group-seven"
    group = ncclpool.SimGroup(name, 1)
    pool = ncclpool.Pool(source="sim", registration="local", name="summary")
    try:
        comm = pool.attach_sim(group, 0)
        full = pool.stats_json()["communicators"][0]["communicator"]
        assert name in full and len(full) > 44
        text = pool.memory_summary()
        row = next(line for line in text.splitlines() if name in line)
        assert full in row and row.split(full, 1)[1].split()[0] == "local"  # the kind column follows the name
        header = next(line for line in text.splitlines() if line.strip().startswith("communicator ") and "kind" in line)
        assert header.index("kind") + len("kind") == row.index("local") + len("local")  # columns still line up
        comm.detach()
    finally:
        pool.close()
        group.close()


def run_report(*args):
    return subprocess.run([sys.executable, BENCH_REPORT, *args], capture_output=True, text=True, timeout=60)


def test_bench_report_names_a_missing_file_without_a_traceback(tmp_path):
    missing = tmp_path / "nonexistent.json"
    p = run_report("summary", str(missing))
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stderr.strip() == f"bench-report.py: {missing}: no such file"


def test_bench_report_names_a_file_that_is_not_json(tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text("not json\n")
    p = run_report("summary", str(bad))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"bench-report.py: {bad}: not JSON (line 1")
    directory = run_report("summary", str(tmp_path))
    assert directory.returncode == 1 and "Traceback" not in directory.stderr
    assert f"{tmp_path}: is a directory" in directory.stderr


def test_bench_report_names_json_that_is_no_bench_report(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}\n')
    p = run_report("summary", str(other))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"{other}: not what `ncclpool bench SUITE --json` writes" in p.stderr

"""scripts/bench-report.py's nccl-tests reader (what scripts/nccl-tests.sh feeds to `compare`)."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("bench_report", os.path.join(ROOT, "scripts", "bench-report.py"))
bench_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_report)

SAMPLE = """# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_gather_perf
# nThread 2 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 10 iters: 100 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on       host device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid   4242 on       host device  1 [0000:2a:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           128     float    none      -1    10.52    0.10    0.05      0    10.40    0.10    0.05      0
        2048           256     float    none      -1    10.61    0.19    0.10      0    10.47    0.20    0.10      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.075
"""


def test_nccl_tests_output_becomes_a_reference(tmp_path):
    path = tmp_path / "all_gather-symmetric.txt"
    path.write_text(SAMPLE)
    ref = bench_report.from_nccl_tests([str(path)], "symmetric")
    assert ref["ranks"] == 2 and ref["kind"] == "symmetric" and ref["source"] == "nccl-tests (symmetric)"
    assert ref["rows"] == [{"op": "all_gather", "bytes": 1024, "us": 10.52, "busbw": 0.05},
                           {"op": "all_gather", "bytes": 2048, "us": 10.61, "busbw": 0.10}]


def test_wrong_results_are_refused(tmp_path):
    path = tmp_path / "all_reduce.txt"
    path.write_text(SAMPLE.replace("0.05      0    10.40", "0.05      3    10.40").replace("all_gather_perf", "all_reduce_perf"))
    with pytest.raises(SystemExit, match="3 wrong results"):
        bench_report.from_nccl_tests([str(path)])


def _scope_run(path, host, commit):
    rows = [{"segments": 8, "groups": 2, "strategy": "ncclpool", "host_per_use_us": host, "commit_host_us": commit},
            {"segments": 8, "groups": 2, "strategy": "megatron", "host_per_use_us": 999.0, "commit_host_us": 0.0}]
    path.write_text('{"suite": "scope", "tables": [{"title": "t", "rows": ' + str(rows).replace("'", '"') + "}], \"notes\": []}")


def test_scope_ab_pairs_rounds_by_number_and_reads_only_ncclpool_rows(tmp_path):
    _scope_run(tmp_path / "base-run1.json", 1.0, 10.0)
    _scope_run(tmp_path / "new-run1.json", 2.0, 10.0)
    _scope_run(tmp_path / "base-run2.json", 3.0, 20.0)
    _scope_run(tmp_path / "new-run2.json", 3.0, 10.0)
    _scope_run(tmp_path / "new-run3.json", 9.0, 9.0)  # no base round 3: not paired
    (tmp_path / "notes.json").write_text("{}")         # not a run: ignored
    rows = {(s, g, c): (b, n, ratio, k) for s, g, c, b, n, ratio, k in bench_report.scope_ab(str(tmp_path))}
    b, n, ratio, k = rows[(8, 2, "host_per_use_us")]
    assert b == "2.000 [1.000-3.000]" and n == "3.000 [2.000-9.000]"
    assert k == 2 and ratio == pytest.approx(1.5)  # median of 2.0 and 1.0
    assert rows[(8, 2, "commit_host_us")][2] == pytest.approx(0.75)  # median of 1.0 and 0.5
    assert len(rows) == 2  # the megatron row is not read

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

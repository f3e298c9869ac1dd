"""Every check can fail (issue 49), on the CPU: gpu-check's rows and its exit status
(scripts/gpu-check-rows.sh, and scripts/gpu-check.sh itself over a stand-in build that fails), the
sanitizer log it judges (scripts/gpu_check_logs.py), its sections (header and default list agree;
each section not run has a row), its evidence (no NCCL log of an earlier run read), the PDL check's
verdict (tests/gpu/torch/pdl_verdict.py), SGLang's bench results line, the skip report of
scripts/test.sh (scripts/report-skips.py) and the NCCL-headers check's skip status. Each is given
a wrong input and must say so."""
import importlib
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")


def bash(script, **env):
    return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def rows_run(body, **env):
    """body run after sourcing scripts/gpu-check-rows.sh, then the summary and the verdict's status."""
    return bash(f"source scripts/gpu-check-rows.sh\n{body}\nprintf '%s\\n' \"${{rows[@]}}\"\ngpu_check_verdict", **env)


# ---- gpu-check's rows and verdict ----

@pytest.mark.parametrize("text, verdict", [
    ("32 passed, 0 failed, 0 skipped (rc=0)", "ok"),
    ("31 passed, 1 failed, 0 skipped (rc=1)", "fail"),
    ("32 passed, 0 failed, 0 skipped (rc=124)", "fail"),  # timed out after its tests
    ("rc=0; RESULT ok", "ok"),
    ("rc=0; RESULT FAILED: plain memory gave a wrong result", "fail"),
    ("rc=0; no RESULT (timeout or crash)", "fail"),
    ("rc=1; no result (No such file)", "fail"),
    ("record rc=0; 4.0K; shared pool 1", "ok"),
    ("runs rc=0, report rc=2; G=1 1.00", "fail"),
    ("rc=; nothing", "fail"),  # an rc never captured
    ("14 ok, 0 failed, 0 skipped (rc=0); library x", "ok"),
    ("not run (no torch with CUDA here)", "skip"),
    ("not run: NCCLPOOL_GPU_CHECK_BUDGET_S spent", "skip"),
    ("42", "ok"),  # a count, informational
])
def test_row_verdict(text, verdict):
    out = bash(f'source scripts/gpu-check-rows.sh; row_verdict "{text}"')
    assert out.returncode == 0 and out.stdout.strip() == verdict, (text, out.stdout, out.stderr)


def test_verdict_fails_exactly_when_a_row_failed():
    passing = rows_run('row "gpu tests" "3 passed, 0 failed, 0 skipped (rc=0)"\nrow "  NCCL log" "12"\n'
                       'row "wheel" "not run (no wheel)"\nrow "sanitizer" "rc=99; 0 errors" ok')
    assert passing.returncode == 0, passing.stdout
    assert "=== verdict: passed (4 rows, none failed; 1 not run)" in passing.stdout
    assert "  wheel: not run (no wheel)" in passing.stdout  # the skip is listed with its reason

    failing = rows_run('row "gpu tests" "3 passed, 0 failed, 0 skipped (rc=0)"\nrow "cetrain: FSDP2" "rc=0; 1 ms"\n'
                       'row "  losses" "bitwise equal; FLAG/FAILED lines: 2" fail\nrow "demo" "rc=139"')
    assert failing.returncode == 1, failing.stdout
    assert "=== verdict: FAILED, 2 of 4 row(s):" in failing.stdout
    assert "  cetrain: FSDP2: losses" in failing.stdout and "\n  demo\n" in failing.stdout
    assert re.search(r"^FAIL demo +rc=139$", failing.stdout, re.M)
    assert re.search(r"^FAIL   losses ", failing.stdout, re.M)

    odd = rows_run('row "x" "text" maybe')  # a verdict that is none of ok, fail, skip fails the row
    assert odd.returncode == 1 and "is not ok, fail or skip" in odd.stdout


def test_not_run_rows_name_every_section_left_out():
    out = rows_run('not_run_rows ",cuda,torch," cuda nccl torch asnodes', NCCLPOOL_GPU_CHECK="cuda,torch")
    assert out.returncode == 0
    assert re.search(r"^-- +nccl +not run \(not in NCCLPOOL_GPU_CHECK=cuda,torch\)$", out.stdout, re.M)
    assert re.search(r"^-- +asnodes +not run", out.stdout, re.M)
    assert not re.search(r"^-- +(cuda|torch) ", out.stdout, re.M)
    default = rows_run('not_run_rows ",cuda,nccl,torch," cuda nccl torch asnodes', NCCLPOOL_GPU_CHECK="")
    assert re.search(r"^-- +asnodes +not run \(only when named: NCCLPOOL_GPU_CHECK\)$", default.stdout, re.M), default.stdout


def stand_in_checkout(tmp_path, gtest_output, gtest_rc, sanitizer=None):
    """A copy of gpu-check's scripts beside a build "carried from another machine" whose GPU suite is a
    stand-in printing `gtest_output`; `sanitizer` (a bash body) stands in for compute-sanitizer."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("gpu-check.sh", "gpu-check-rows.sh", "gpu-check-programs.sh", "gpu-check-asnodes.sh", "gpu_check_logs.py"):
        shutil.copy(os.path.join(SCRIPTS, name), repo / "scripts" / name)
    tests = repo / "build" / "gpu" / "tests"
    tests.mkdir(parents=True)
    (repo / "build" / "gpu" / ".built-on").write_text("another-machine\n")
    suite = tests / "ncclpool_gpu_tests"
    suite.write_text(f"#!/bin/bash\ncat <<'EOF'\n{gtest_output}\nEOF\nexit {gtest_rc}\n")
    suite.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "python3", "cat", "grep", "sed", "awk", "date", "mkdir", "rm", "tee", "head", "tail", "wc",
                 "cut", "tr", "printf", "env", "timeout", "ldd", "dirname", "basename", "cp", "ls", "sort", "uniq", "xargs", "mv"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    if sanitizer is not None:
        (bin_dir / "compute-sanitizer").write_text("#!/bin/bash\n" + sanitizer + "\n")
        (bin_dir / "compute-sanitizer").chmod(0o755)
    return repo, {"PATH": str(bin_dir), "OUT": str(tmp_path / "out"), "NCCLPOOL_GPU_CHECK": "cuda"}


GTEST_PASS = "[==========] 2 tests\n[       OK ] A.B (1 ms)\n[       OK ] A.C (1 ms)\n[  PASSED  ] 2 tests."
GTEST_FAIL = "[==========] 2 tests\n[       OK ] A.B (1 ms)\n[  FAILED  ] A.C (1 ms)\n[  FAILED  ] 1 test, listed below:"


def gpu_check(repo, env):
    return subprocess.run(["bash", str(repo / "scripts" / "gpu-check.sh")], cwd=repo, capture_output=True, text=True,
                          timeout=120, env=env)


def test_gpu_check_exit_status_is_its_verdict(tmp_path):
    repo, env = stand_in_checkout(tmp_path / "pass", GTEST_PASS, 0)
    ok = gpu_check(repo, env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert re.search(r"^ +gpu tests \(cuda, vmm sources\) +2 passed, 0 failed, 0 skipped \(rc=0\)$", ok.stdout, re.M), ok.stdout
    assert re.search(r"^-- +pdl +not run \(not in NCCLPOOL_GPU_CHECK=cuda\)$", ok.stdout, re.M), ok.stdout
    assert "=== verdict: passed" in ok.stdout

    repo, env = stand_in_checkout(tmp_path / "fail", GTEST_FAIL, 1)
    bad = gpu_check(repo, env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "=== verdict: FAILED, 1 of" in bad.stdout and "\n  gpu tests (cuda, vmm sources)\n" in bad.stdout


def test_gpu_check_out_holds_this_run_alone(tmp_path):
    # An earlier run's file in OUT (a GPU host's /tmp that outlived a lease) is moved aside, kept.
    repo, env = stand_in_checkout(tmp_path, GTEST_PASS, 0)
    out = tmp_path / "out"
    out.mkdir()
    (out / "decode.json").write_text("{}")
    result = gpu_check(repo, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "gpu-check.log").exists() and not (out / "decode.json").exists()
    earlier = [p for p in tmp_path.iterdir() if p.name.startswith("out.earlier-")]
    assert len(earlier) == 1 and (earlier[0] / "decode.json").read_text() == "{}", list(tmp_path.iterdir())
    assert "held an earlier run's files" in result.stderr


def test_gpu_check_fails_a_sanitizer_run_that_did_not_finish(tmp_path):
    # The suite passes; the sanitizer's log ends without an ERROR SUMMARY (killed): the row fails.
    repo, env = stand_in_checkout(tmp_path, GTEST_PASS, 0, sanitizer='echo "========= COMPUTE-SANITIZER"; echo "[       OK ] A.B (1 ms)"; exit 137')
    out = gpu_check(repo, env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r"^FAIL compute-sanitizer memcheck +1 passed, 0 failed; no ERROR SUMMARY", out.stdout, re.M), out.stdout


# ---- the sanitizer's log ----

PROBE_ERROR = """========= Program hit CUDA_ERROR_{code} (error 1) due to "invalid argument" on CUDA API call to cuMemCreate.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: ncclpool::cuda::(anonymous namespace)::VmmSource::{frame}(ncclpool::VmmSourceOptions const&) [0xa8358] in libncclpool.so.0
=========         Host Frame: ncclpool::make_vmm_source(ncclpool::VmmSourceOptions const&) [0xa9ab0] in libncclpool.so.0
"""


def sanitizer_row(tmp_path, text, rc, *flags):
    log = tmp_path / "sanitizer.log"
    log.write_text(text)
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "gpu_check_logs.py"), "sanitizer", str(log), str(rc), *flags],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.rstrip("\n").split("\t")


def test_sanitizer_log_judged(tmp_path):
    probes = PROBE_ERROR.format(code="INVALID_VALUE", frame="VmmSource") + PROBE_ERROR.format(code="NOT_PERMITTED", frame="VmmSource")
    tests = "[       OK ] A.B (1 ms)\n"
    text, verdict = sanitizer_row(tmp_path, tests + probes + "========= ERROR SUMMARY: 2 errors\n", 99, "--api-errors")
    assert verdict == "ok" and text == "1 passed, 0 failed; 0 error(s), 2 expected cuMemCreate probe refusal(s) (rc=99)"
    # A cuMemCreate error outside the constructor's probe (an allocation) is an error, not a probe.
    alloc = PROBE_ERROR.format(code="INVALID_VALUE", frame="allocate")
    text, verdict = sanitizer_row(tmp_path, tests + probes + alloc + "========= ERROR SUMMARY: 3 errors\n", 99, "--api-errors")
    assert verdict == "fail" and "1 error(s), 2 expected" in text
    # No ERROR SUMMARY: the sanitizer did not finish. Not "0 errors".
    text, verdict = sanitizer_row(tmp_path, tests, 124, "--api-errors")
    assert verdict == "fail" and "no ERROR SUMMARY" in text
    # A failed test, or an exit status that is neither 0 nor 99, fails the row.
    assert sanitizer_row(tmp_path, tests + "[  FAILED  ] A.C (2 ms)\n========= ERROR SUMMARY: 0 errors\n", 1)[1] == "fail"
    assert sanitizer_row(tmp_path, tests + "========= ERROR SUMMARY: 0 errors\n", 134)[1] == "fail"
    assert sanitizer_row(tmp_path, tests + "========= ERROR SUMMARY: 0 errors\n", 0) == ["1 passed, 0 failed; 0 error(s) (memory errors) (rc=0)", "ok"]
    # Without --api-errors (the nccl pass reports memory errors only) nothing is subtracted.
    assert sanitizer_row(tmp_path, tests + probes + "========= ERROR SUMMARY: 2 errors\n", 99)[1] == "fail"


# ---- gpu-check's sections and evidence ----

def script_text(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def test_sections_header_and_default_agree():
    text = script_text("gpu-check.sh")
    all_sections = re.search(r"^ALL_SECTIONS=\(([^)]*)\)", text, re.M).group(1).split()
    opt_in = re.search(r"^OPT_IN_SECTIONS=\(([^)]*)\)", text, re.M).group(1).split()
    header = text[:text.index("set -uo pipefail")]
    listed = re.search(r"comma list of: (.*?);", header, re.S).group(1)
    assert sorted(re.sub(r"[#\s]+", " ", listed).replace(",", " ").split()) == sorted(all_sections)
    said_opt_in = re.search(r"torchversions; (.*?) only when named", header, re.S).group(1)
    assert sorted(re.findall(r"\b(window|cetrain|asnodes|pdl|ncclversions|torchversions)\b", said_opt_in)) == sorted(opt_in)
    programs = script_text("gpu-check-programs.sh") + script_text("gpu-check-asnodes.sh")
    wanted = set(re.findall(r"\bwant (\w+)", text + programs)) - {"1"}
    assert wanted == set(all_sections), wanted ^ set(all_sections)
    docs = open(os.path.join(ROOT, "docs", "gpu-check.md")).read()
    for s in opt_in:
        assert re.search(rf"`{s}` \(only when named", docs), s


def normalized(path):
    path = path.replace('"', "").replace("%h", "*").replace("%p", "*")
    while "*.*" in path:
        path = path.replace("*.*", "*")
    return path


def test_every_nccl_log_a_row_reads_is_removed_before_its_run():
    for name in ("gpu-check.sh", "gpu-check-programs.sh", "gpu-check-asnodes.sh", "gpu-check-torch-versions.sh"):
        lines = script_text(name).splitlines()
        for i, line in enumerate(lines):
            for target in re.findall(r'NCCL_DEBUG_FILE=("[^"]*"|\S+)', line):
                glob = normalized(target)
                removed = [j for j, earlier in enumerate(lines[:i]) if re.match(r"\s*(fresh|rm -f|rm -rf) ", earlier)
                           and any(normalized(w) in (glob, os.path.dirname(glob)) for w in earlier.split()[1:])]
                assert removed, f"{name}:{i + 1}: {target} is never removed before the run that writes it"


# ---- the PDL check's verdict ----

@pytest.fixture
def pdl_verdict(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tests", "gpu", "torch"))
    sys.modules.pop("pdl_verdict", None)
    return importlib.import_module("pdl_verdict")


def pdl_rows(**override):
    rows = [{"mode": m, "graph": g, "wrong": 0} for m in ("plain", "ncclpool", "torch-symm") for g in (False, True)]
    for i, row in override.items():
        rows[int(i[1:])] = {"mode": rows[int(i[1:])]["mode"], "graph": rows[int(i[1:])]["graph"], **row}
    return rows


def test_pdl_verdict(pdl_verdict):
    judge = pdl_verdict.judge
    assert judge(pdl_rows(), [0] * 6, [0] * 6, 200, 2, symmetric_flag=False) == []
    # The hazard on the unguarded modes (kernels on) is the positive control, not a broken promise.
    assert judge(pdl_rows(), [0, 0, 400, 400, 400, 0], [0] * 6, 200, 2, symmetric_flag=True) == []
    assert judge(pdl_rows(), [0, 0, 3, 0, 0, 0], [0] * 6, 200, 2, symmetric_flag=False) == ["ncclpool eager wrong 3 of 400"]
    assert judge(pdl_rows(), [0, 1, 0, 0, 0, 0], [0] * 6, 200, 2, symmetric_flag=True) == ["plain graph wrong 1 of 400"]
    # A promised mode that raised measured nothing: broken, on the rank that raised and on the others.
    raised = pdl_rows(r0={"error": "RuntimeError: boom"})
    assert judge(raised, [0] * 6, [1, 0, 0, 0, 0, 0], 200, 2, symmetric_flag=False) == ["plain eager raised on 1 rank(s): RuntimeError: boom"]
    assert judge(pdl_rows(), [0] * 6, [0, 0, 0, 1, 0, 0], 200, 2, symmetric_flag=False) == [
        "ncclpool graph raised on 1 rank(s): on another rank"]
    # Not promised (kernels on, or torch-symm) or unavailable: reported, not a broken promise.
    assert judge(pdl_rows(r4={"unavailable": "no symm_mem"}), [0] * 6, [0, 0, 1, 0, 0, 1], 200, 2, symmetric_flag=True) == []
    # The fence (issue 46): fenced ncclpool windows are promised; the unfenced control beside them is not.
    fenced = pdl_rows() + [{"mode": "ncclpool-unfenced", "graph": g, "wrong": 0} for g in (False, True)]
    assert judge(fenced, [0, 0, 0, 0, 400, 0, 400, 400], [0] * 8, 200, 2, symmetric_flag=True, fenced=True) == []
    assert judge(fenced, [0, 0, 0, 2, 0, 0, 400, 0], [0] * 8, 200, 2, symmetric_flag=True, fenced=True) == ["ncclpool graph wrong 2 of 400"]


def sglang_pdl_case(name, wrong_per_rank, decision="fence", hazard=True, world=2, calls=("as SGLang calls it", "unfenced")):
    """A pdl case of bench/sglang_bench.py's JSON: wrong_per_rank[rank][row], None for a rank that
    raised (no rows), rows in the order (call, eager), (call, graph) per call."""
    ranks = []
    for rank, wrongs in enumerate(wrong_per_rank):
        r = {"rank": rank, "world": world, "outcome": "error: RuntimeError: boom" if wrongs is None else "rows"}
        if wrongs is not None:
            keys = [(c, g) for c in calls for g in (False, True)]
            r.update(decision=decision, hazard=hazard,
                     pdl=[{"call": c, "graph": g, "wrong": w, "launches": 200} for (c, g), w in zip(keys, wrongs, strict=True)])
        ranks.append(r)
    return {"name": name, "rc": 0, "ranks": ranks}


def test_sglang_pdl_verdict(pdl_verdict):
    judge = pdl_verdict.judge_sglang
    right = sglang_pdl_case("pdl-ncclpool", [[0, 0, 200, 0], [0, 0, 150, 0]])
    control = sglang_pdl_case("pdl-sglang", [[200, 0], [180, 0]], decision="on", calls=("as SGLang calls it",))
    broken, lines = judge([{"name": "growth-sglang", "rank": []}, right, control])
    assert broken == []  # SGLang's allocator and the unfenced rows wrong: the positive control
    assert lines == ["pdl-ncclpool: as SGLang calls it eager 0/400 wrong, as SGLang calls it graph 0/400 wrong, "
                     "unfenced eager 350/400 wrong, unfenced graph 0/400 wrong",
                     "pdl-sglang: as SGLang calls it eager 380/400 wrong, as SGLang calls it graph 0/400 wrong"]
    # A wrong fenced row on one rank, a rank that raised, a rank missing: each breaks the promise.
    assert judge([sglang_pdl_case("pdl-nomix-ncclpool", [[0, 0, 0, 0], [0, 3, 0, 0]])])[0] == [
        "pdl-nomix-ncclpool: as SGLang calls it graph wrong 3 of 400"]
    assert judge([sglang_pdl_case("pdl-ncclpool", [[0, 0, 0, 0], None])])[0] == [
        "pdl-ncclpool: 1 of 2 rank(s) reported rows (rank 1: error: RuntimeError: boom)"]
    assert judge([sglang_pdl_case("pdl-ncclpool", [[0, 0, 0, 0]], world=2)])[0] == ["pdl-ncclpool: 1 of 2 rank(s) reported rows"]
    assert judge([{"name": "pdl-ncclpool", "rc": 1, "ranks": []}])[0] == ["pdl-ncclpool: 0 of ? rank(s) reported rows"]
    # The kernels forced on where NCCL has the hazard: unfenced, promised nothing (the guard's or the
    # fence's decision, or no hazard, keep the promise).
    forced = [[5, 0, 5, 0], [0, 0, 0, 0]]
    assert judge([sglang_pdl_case("pdl-ncclpool", forced, decision="on")])[0] == []
    assert judge([sglang_pdl_case("pdl-ncclpool", forced, decision="on", hazard=False)])[0] == [
        "pdl-ncclpool: as SGLang calls it eager wrong 5 of 400"]
    assert judge([sglang_pdl_case("pdl-ncclpool", forced, decision="guard")])[0] == [
        "pdl-ncclpool: as SGLang calls it eager wrong 5 of 400"]


# ---- SGLang's bench: a mode that failed setup is not "right" ----

def test_sglang_bench_results_line_with_a_failed_setup(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    sys.modules.pop("sglang_bench", None)
    bench = importlib.import_module("sglang_bench")
    setup = {"pool_s": 0.1, "capture_s": 0.2, "device_bytes": 1 << 20, "pool_bytes": 1 << 20}
    rank = {"versions": {"nccl_loaded": "2.28.9", "symmetric_kernels": True, "symmetric_ctas": 0, "gpu": "H200"}, "world": 2,
            "layers": 4, "samples": [{"mode": m, "size": 1 << 20, "us": 10.0} for m in ("plain", "ncclpool")],
            "setup": {"plain": setup, "ncclpool": setup, "sglang": {"error": "RuntimeError: JIT failed"}}, "wrong": []}
    lines = bench.summarize_perf({"config": "", "ranks": [rank, rank]})
    assert lines[-1] == "results: INCOMPLETE: setup failed for sglang on rank 0, sglang on rank 1"
    rank["setup"]["sglang"] = setup
    assert bench.summarize_perf({"config": "", "ranks": [rank, rank]})[-1] == "results: right on every rank"


# ---- scripts/test.sh's skips ----

CTEST_JUNIT = textwrap.dedent("""\
    <?xml version="1.0" encoding="UTF-8"?>
    <testsuite name="Linux" tests="3" failures="0" disabled="0" skipped="1" hostname="" time="1" timestamp="">
      <testcase name="Pool.Passes" classname="Pool.Passes" time="0.1" status="run"><system-out>[  PASSED  ] 1 test.</system-out></testcase>
      <testcase name="Cuda.NeedsGpu" classname="Cuda.NeedsGpu" time="0.1" status="notrun"><skipped message="Test Skipped"/>
        <system-out>Running main()
    /src/tests/unit/test_x.cpp:12: Skipped
    no CUDA device here
    [  SKIPPED ] Cuda.NeedsGpu (0 ms)
    </system-out></testcase>
      <testcase name="python_ctypes" classname="python_ctypes" time="9" status="run"><system-out>219 passed, 1 skipped</system-out></testcase>
    </testsuite>
    """)
PYTEST_JUNIT = textwrap.dedent("""\
    <?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" skipped="1" tests="2">
    <testcase classname="test_sglang" name="test_every_name" time="0.1"/>
    <testcase classname="test_sglang" name="test_signatures_match_sglangs_own_module" time="0.0">
    <skipped type="pytest.skip" message="SGLang's module is an input: scripts/sglang-inputs.sh">/x/test_sglang.py:238: SGLang's module is an input</skipped>
    </testcase></testsuite></testsuites>
    """)


def test_report_skips_lists_every_skip_with_its_reason(tmp_path):
    (tmp_path / "ctest.xml").write_text(CTEST_JUNIT)
    (tmp_path / "python_ctypes.xml").write_text(PYTEST_JUNIT)
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report-skips.py"), "default", str(tmp_path / "ctest.xml"),
                          str(tmp_path / "python_ctypes.xml")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "default: Cuda.NeedsGpu: no CUDA device here",
        "default: test_sglang::test_signatures_match_sglangs_own_module: SGLang's module is an input: scripts/sglang-inputs.sh",
    ]
    missing = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report-skips.py"), "asan", str(tmp_path / "none.xml")],
                             capture_output=True, text=True, timeout=30)
    assert "asan: " in missing.stdout and "no such JUnit file" in missing.stdout  # a report that is missing says so


def test_test_sh_lists_skips_and_counts_them_last():
    text = script_text("test.sh")
    assert "report-skips.py" in text and "--output-junit" in text
    last = [line for line in text.splitlines() if line.startswith('echo "=== all CPU tests passed')]
    assert len(last) == 1 and "${#skips[@]} skipped" in last[0] and "${headers}" in last[0]
    cmake = open(os.path.join(ROOT, "tests", "CMakeLists.txt")).read()
    assert re.search(r"pytest -q -rs .*--junitxml=", cmake)


def test_nccl_headers_check_that_checked_nothing_exits_77(tmp_path):
    # No index to download the headers from (and none cached): nothing was checked, so not exit 0.
    out = subprocess.run(["bash", os.path.join(SCRIPTS, "check-nccl-headers.sh")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PIP_NO_INDEX": "1", "NCCLPOOL_NCCL_HEADERS_VERSION": "0.0.1",
                              "CUDA_HOME": str(tmp_path)})
    assert out.returncode == 77, out.stdout + out.stderr
    assert out.stdout.startswith("check-nccl-headers: skipped (")

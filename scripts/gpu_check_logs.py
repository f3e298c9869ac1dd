"""Logs that scripts/gpu-check.sh judges for its rows, read the same way on the CPU by
tests/python/test_gpu_check_verdicts.py. Prints "TEXT<tab>VERDICT" (VERDICT: ok or fail).

  python3 scripts/gpu_check_logs.py sanitizer LOG RC [--api-errors]

sanitizer: a compute-sanitizer memcheck run of a GoogleTest binary (--error-exitcode 99). The row
fails when the log has no ERROR SUMMARY (the sanitizer did not finish: killed, timed out), when a
test failed, when errors remain after the expected probes, or when RC is neither 0 nor 99 (99: the
errors found, all of them expected). With --api-errors (API errors reported, the default of
compute-sanitizer) the expected ones are ncclpool's capability probes: cuMemCreate refused with
CUDA_ERROR_NOT_PERMITTED, NOT_SUPPORTED or INVALID_VALUE in VmmSource's constructor (the optional
properties it drops one at a time: src/backends/cuda/vmm_source.cpp); any other API error counts, a
cuMemCreate of an allocation included.
"""
import re
import sys

PROBE = re.compile(r"Program hit CUDA_ERROR_(NOT_PERMITTED|NOT_SUPPORTED|INVALID_VALUE) \(error \d+\) .* on CUDA API call to cuMemCreate")
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def expected_probes(lines):
    """API errors of the capability probes: the error line, then a backtrace through VmmSource's constructor."""
    count = 0
    for i, line in enumerate(lines):
        if PROBE.search(line) and any("VmmSource::VmmSource" in frame for frame in lines[i + 1:i + 6]):
            count += 1
    return count


def sanitizer(text, rc, api_errors):
    lines = text.splitlines()
    passed = sum(1 for line in lines if line.startswith("[       OK ]"))
    failed = sum(1 for line in lines if line.startswith("[  FAILED  ]") and line.rstrip().endswith(")"))
    totals = [int(m.group(1)) for m in map(SUMMARY.search, lines) if m]
    if not totals:
        return f"{passed} passed, {failed} failed; no ERROR SUMMARY: the sanitizer did not finish (rc={rc})", "fail"
    probes = expected_probes(lines) if api_errors else 0
    errors = totals[-1] - probes
    what = f"{passed} passed, {failed} failed; {errors} error(s)" + (f", {probes} expected cuMemCreate probe refusal(s)" if api_errors else " (memory errors)")
    ok = failed == 0 and errors == 0 and (rc == 0 or (rc == 99 and totals[-1] > 0))
    return f"{what} (rc={rc})", "ok" if ok else "fail"


def main(argv):
    if len(argv) >= 3 and argv[0] == "sanitizer":
        try:
            text = open(argv[1], errors="replace").read()
        except OSError as e:
            print(f"no log ({e})\tfail")
            return 0
        out, verdict = sanitizer(text, int(argv[2]) if argv[2].lstrip("-").isdigit() else -1, "--api-errors" in argv[3:])
        print(f"{out}\t{verdict}")
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

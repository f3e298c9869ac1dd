"""Figures of docs/gpu-check.md: how long gpu-check's calls and parts took on 2x H200 (2026-11-27), from
what the runs' own files record: each call's start (the date gpu-check.log prints under `=== machine`)
and end (the time stamp of its summary), gtest's times, tune's progress lines, the NCCL build's line;
and the figures its table of issues quotes that no benchmark page's module gives (first registration
at 1a4ee3c, FSDP2 memory at e370088).

The sections of each call are those of its command (the folder's name and its lease's README.md say it):
a fact of the command, not a measurement.
"""

import datetime
import re
import statistics

from . import Run, data, figure, fmt, jsonl, span, table, text

D = "2026-11-27-gpu-check-2xh200-"
# (lease, call, sections, gpu-check.log, the stdout holding the summary's time stamp)
CALLS = [
    ("1st", "call1", "`nccl`, `pdl`, `torch`, `toolbench` (scope)", D + "deb58c4/call1-nccl-pdl-torch-scope/"),
    ("1st", "call2", "`pdl` (probe), `nccl`, `asnodes` (checks)", D + "deb58c4/call2-pdl-probe-nccl-asnodes/"),
    ("2nd", "call1", "`pdl`, `fsdp2`, `decode` with `--guard`", D + "e370088-s2/call1-pdl-fsdp2-decode-guard/gpu-check/"),
    ("2nd", "call2", "`cecoll`, `copyengine`, `sglang`", D + "e370088-s2/call2-cecoll-copyengine-sglang/gpu-check2/"),
    ("2nd", "call3 (a)", "`sglang`, `asnodes` with its bench", D + "e370088-s2/call3-sglang-asnodes/gc-a/"),
    ("2nd", "call3 (b)", "`cetrain` paths and one comm-heavy FSDP2 round", D + "e370088-s2/call3-cetrain-comm-heavy/gc-b/"),
    ("2nd", "call4", "`ncclversions` (2.30.7, prebuilt)", D + "e370088-s2/call4-ncclversions-2.30.7/gc-v/"),
    ("2nd", "call5", "`ncclversions` (2.29.7, prebuilt), `torch`, `megatron`", D + "e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/"),
    ("3rd", "call1", "`cetrain` paths, FSDP2 comm-heavy: 6 modes x 3 rounds", D + "s3/call1-cetrain-comm-heavy/"),
    ("3rd", "call3", "`torch`, `cetrain` FSDP2 compute-bound: 6 modes x 3 rounds", D + "s3/call3-torch-cetrain-compute-bound/"),
    ("3rd", "call4", "`cetrain` Megatron-FSDP: 4 configurations and the paths run", D + "s3/call4-cetrain-megatron/"),
    ("4th", "call1", "`cuda`, `nccl` (+ sanitizer), `bench`, `wheel`, `tool`, `demo`, `examples`",
     D + "s4/call1-cuda-nccl-bench-wheel-tool-demo-examples/"),
    ("4th", "call2", "`cetrain` Megatron-FSDP in 3 rounds, then `tune` (cut by the budget)", D + "s4/call2-cetrain-megatron-3-rounds/"),
    ("4th", "call3", "`toolbench` `alloc scope coll`, and `tune` (hung)", D + "s4/call3-toolbench/"),
    ("5th", "call1", "`wheel`, `toolbench` `graph tune tunece` (tune hung)", D + "s5/call1-wheel-toolbench/"),
    ("5th", "call2", "`nccltests` (with its build), `torch`", D + "s5/call2-nccltests-torch/"),
    ("5th", "call4", "`toolbench` `tune tunece` (both hung)", D + "s5/call4-tune-2.28.9/"),
    ("5th", "call6", "`nccltests` (with its build)", D + "s5/call6-nccltests-32ctas/"),
    ("5th", "call7", "`nccltests` (with its build)", D + "s5/call7-nccltests-nccl-ctas/"),
]
LOGS = [c[3] + ("gpu-check.log.gz" if "-s4/call1" in c[3] else "gpu-check.log") for c in CALLS]


def _log_text(folder):
    try:
        return text(folder + "gpu-check.log")
    except FileNotFoundError:  # the fourth lease's first call keeps its log compressed
        return text(folder + "gpu-check.log.gz")


def _summary_text(folder):
    for path in (folder + "stdout.txt", folder.rstrip("/").rsplit("/", 1)[0] + "/stdout.txt"):
        try:
            found = re.search(r"summary \((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)", text(path))
        except FileNotFoundError:
            continue
        if found:
            return found.group(1)
    raise KeyError(f"no summary time stamp for {folder}")


def call_s(folder):
    """Seconds from gpu-check's start (its `=== machine` date) to its summary's time stamp."""
    m = re.search(r"=== machine\n(.+)\n", _log_text(folder))
    start = datetime.datetime.strptime(m.group(1).strip(), "%a %b %d %I:%M:%S %p UTC %Y")
    end = datetime.datetime.strptime(_summary_text(folder), "%Y-%m-%dT%H:%M:%SZ")
    return (end - start).total_seconds()


def _call(lease, call):
    return next(c[3] for c in CALLS if c[0] == lease and c[1] == call)


@figure("gpu_check.calls.table", *LOGS)
def _calls_table():
    body = [[lease, call, sections, fmt(call_s(folder))] for lease, call, sections, folder in CALLS]
    leases = []
    for c in CALLS:
        top = c[3].split("/")[0] + "/"
        if top not in leases:
            leases.append(top)
    return table(["lease", "call", "sections", "seconds"], body, [Run(top) for top in leases])


def _call_fig(name, lease, call):
    figure(name, _call(lease, call) + "gpu-check.log")(lambda: fmt(call_s(_call(lease, call))) + " s")


_call_fig("gpu_check.s_s4_call1", "4th", "call1")
_call_fig("gpu_check.s_s4_call2", "4th", "call2")
_call_fig("gpu_check.s_s4_call3", "4th", "call3")
_call_fig("gpu_check.s_s2_gca", "2nd", "call3 (a)")
_call_fig("gpu_check.s_s2_gcb", "2nd", "call3 (b)")
_call_fig("gpu_check.s_s2_gcv", "2nd", "call4")
_call_fig("gpu_check.s_s3_call1", "3rd", "call1")
_call_fig("gpu_check.s_s3_call4", "3rd", "call4")
figure("gpu_check.s_nccltests", *(_call("5th", c) + "gpu-check.log" for c in ("call6", "call7")))(
    lambda: span([call_s(_call("5th", c)) for c in ("call6", "call7")]) + " s")


# The NCCL suites on 2 GPUs, 16 tests (gtest's own times).
NCCL16 = [D + "s4/call1-cuda-nccl-bench-wheel-tool-demo-examples/nccl-tests-2.log",
          D + "e370088-s2/call4-ncclversions-2.30.7/gc-v/nccl-tests-2.30.7-1.log",
          D + "e370088-s2/call5-ncclversions-2.29.7-torch-megatron/gc-w/nccl-tests-2.29.7-1.log"]


@figure("gpu_check.nccl_suites", *NCCL16)
def _nccl_suites():
    totals, each = [], []
    for path in NCCL16:
        t = text(path)
        m = re.search(r"(\d+) tests from \d+ test suites ran\. \((\d+) ms total\)", t)
        if int(m.group(1)) != 16:
            raise ValueError(f"{path}: {m.group(1)} tests, not 16")
        totals.append(int(m.group(2)) / 1000)
        each += [int(ms) / 1000 for ms in re.findall(r"\[\s+OK \] \S+ \((\d+) ms\)", t)]
    return f"{span(totals)} s on 2 GPUs (16 tests, {span(each, 1)} s each)"


# tune: the start of each run ("N of M runs, S s so far"); a run's length is tool.md's tool.tune.run_s.
TUNE_ERR = [D + "s5/call5-tune-nccl-2.30.7/tune.err", D + "s5/call5-tune-nccl-2.30.7/tunece.err"]


def _starts(path):
    return [int(s) for s in re.findall(r"runs, (\d+) s so far\)", text(path))]


@figure("gpu_check.tune_last_start", *TUNE_ERR)
def _tune_last():
    return f"{fmt(_starts(TUNE_ERR[0])[-1])} s (`tunece`: {fmt(_starts(TUNE_ERR[1])[-1])} s)"


BUILD = D + "s5/call3-diag-hang/build-nccl.log"


def _build():
    m = re.search(r"build-nccl: \S+ \(([\d.-]+), (\d+) s, (\d+)M\)", text(BUILD))
    return m.group(1), int(m.group(2)), int(m.group(3))


figure("gpu_check.nccl_build_s", BUILD)(lambda: f"{_build()[1]} s")
figure("gpu_check.nccl_build_mib", BUILD)(lambda: f"{_build()[2]} MiB")


# The issue table's figures.
S3_TORCH = D + "s3/call3-torch-cetrain-compute-bound/torch.log"
S2_FSDP2 = D + "e370088-s2/call1-pdl-fsdp2-decode-guard/gpu-check/fsdp2/fsdp2.json"


def _bench_median(path, name):
    vals = [b["value"] for b in jsonl(path, "BENCH ") if b["name"] == name]
    if not vals:
        raise KeyError(f"no BENCH {name!r} in {path}")
    return statistics.median(vals)


@figure("gpu_check.s3_first", S3_TORCH)
def _s3_first():
    f = {k: _bench_median(S3_TORCH, "first registration, " + k) for k in
         ("ncclpool default", "ncclpool min_segment 1 GiB", "torch register_mem_pool", "plain MemPool")}
    return (f"default {fmt(f['ncclpool default'], 1)} ms, `min_segment` 1 GiB {fmt(f['ncclpool min_segment 1 GiB'], 1)} ms, "
            f"torch {fmt(f['torch register_mem_pool'], 1)} ms, plain allocation {fmt(f['plain MemPool'], 1)} ms")


@figure("gpu_check.s2_fsdp2_memory", S2_FSDP2)
def _s2_fsdp2_memory():
    """Device memory of each ncclpool mode against plain FSDP2 (medians over the rounds)."""
    by = {}
    for r in data(S2_FSDP2):
        by.setdefault(r["spec"], []).append(r["device_used_gib"])
    plain = statistics.median(by.pop("plain"))
    return "+" + span([(statistics.median(v) / plain - 1) * 100 for v in by.values()], 1) + "%"

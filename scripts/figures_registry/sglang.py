"""Figures of docs/sglang.md: `bench/sglang_bench.py` on 2x H200 (gpu-check's `sglang` section at
e370088) and SGLang's JIT build in the 1-GPU smoke test (2x H200's host at e370088, 1x H100 at 9a410ed).

The bench's own summary (`sglang.txt`) is rank 0's: medians and min-max over the rounds of rank 0's
samples; the figures here compute the same from `sglang.json`.
"""

import statistics

from . import Run, data, figure, fmt, span, table

GC = "2026-11-27-gpu-check-2xh200-e370088-s2/call3-sglang-asnodes/gc-a/"
BENCH = GC + "sglang.json"
SMOKE_H200 = GC + "sglang-smoke.json"
SMOKE_H100 = "2026-11-25-gpu-check-1xh100-9a410ed/sglang-smoke.json"
JIT_STEP = "SGLang's JIT build and an allocation in its pool"
MODES = ("plain", "ncclpool", "sglang")
ON, NCCL_CTAS, GUARD = ("NCCLPOOL_SYMMETRIC_KERNELS=on", "NCCLPOOL_SYMMETRIC_KERNELS=on,NCCLPOOL_SYM_CTAS=nccl",
                        "NCCLPOOL_SYMMETRIC_KERNELS=auto")
MIB = 1 << 20


def _rank0(config):
    for part in data(BENCH)["perf"]:
        if part["config"] == config:
            return part["ranks"][0]
    raise KeyError(f"no perf run {config!r} in {BENCH}")


def _us(config):
    """{(size, mode): [us per step, one per round]} of rank 0."""
    out = {}
    for s in _rank0(config)["samples"]:
        out.setdefault((s["size"], s["mode"]), []).append(s["us"])
    return out


def _sizes(config):
    return sorted({size for size, _ in _us(config)})


def _med(config, size, mode):
    return statistics.median(_us(config)[(size, mode)])


def _ratios(config, num, den):
    return [_med(config, z, num) / _med(config, z, den) for z in _sizes(config)]


def _setup(config, mode, key):
    return _rank0(config)["setup"][mode][key]


def _jit_s(path):
    return data(path)["steps"][JIT_STEP]["seconds"]


@figure("sglang.run", BENCH)
def _run():
    return Run(BENCH).label()


@figure("sglang.jit_cold_h200", SMOKE_H200)
def _jit_h200():
    return fmt(_jit_s(SMOKE_H200), 1) + " s"


@figure("sglang.jit_cold_h100", SMOKE_H100)
def _jit_h100():
    return fmt(_jit_s(SMOKE_H100), 1) + " s"


@figure("sglang.jit_cold_both", SMOKE_H200, SMOKE_H100)
def _jit_both():
    return (f"{fmt(_jit_s(SMOKE_H200), 1)} s from cold on {Run(SMOKE_H200).label()}, "
            f"{fmt(_jit_s(SMOKE_H100), 1)} s on {Run(SMOKE_H100).label()}")


@figure("sglang.same_kernels_pct", BENCH)
def _same_kernels():
    """The worst gap between SGLang's allocator and ncclpool.sglang with the symmetric kernels on."""
    worst = max(abs(r - 1) for c in (ON, NCCL_CTAS) for r in _ratios(c, "sglang", "ncclpool"))
    return fmt(worst * 100, 1) + "%"


@figure("sglang.on_vs_plain", BENCH)
def _on_vs_plain():
    return span(_ratios(ON, "plain", "ncclpool"), 2) + "x"


@figure("sglang.nccl_ctas_slower", BENCH)
def _nccl_ctas_slower():
    """plain / ncclpool where NCCL's own CTA count is slower than plain memory."""
    return span([r for r in _ratios(NCCL_CTAS, "plain", "ncclpool") if r < 0.95], 2) + "x"


@figure("sglang.guard_vs_plain", BENCH)
def _guard_vs_plain():
    return span(_ratios(GUARD, "plain", "ncclpool"), 2) + "x"


@figure("sglang.pool_setup_s", BENCH)
def _pool_setup():
    return span([_setup(c, "ncclpool", "pool_s") for c in (ON, NCCL_CTAS, GUARD)], 2) + " s"


@figure("sglang.sglang_setup_s", BENCH)
def _sglang_setup():
    return span([_setup(c, "sglang", "pool_s") for c in (ON, NCCL_CTAS, GUARD)], 2) + " s"


@figure("sglang.capture_s", BENCH)
def _capture():
    return span([_setup(c, m, "capture_s") for c in (ON, NCCL_CTAS, GUARD) for m in ("ncclpool", "sglang")], 2) + " s"


def _mib(config, mode, key):
    return _setup(config, mode, key) / MIB


@figure("sglang.pool_holds_mib", BENCH)
def _pool_holds():
    return span([_mib(c, m, "pool_bytes") for c in (ON, NCCL_CTAS, GUARD) for m in ("ncclpool", "sglang")]) + " MiB"


@figure("sglang.memory_on", BENCH)
def _memory_on():
    return (f"{fmt(_mib(ON, 'ncclpool', 'device_bytes'))} MiB for ncclpool.sglang and "
            f"{fmt(_mib(ON, 'sglang', 'device_bytes'))} MiB for SGLang")


@figure("sglang.memory_guard", BENCH)
def _memory_guard():
    return f"{fmt(_mib(GUARD, 'ncclpool', 'device_bytes'))} and {fmt(_mib(GUARD, 'sglang', 'device_bytes'))} MiB"


@figure("sglang.symmetric_resources_mib", BENCH)
def _symmetric_resources():
    """What the first symmetric window of the process cost: each allocator's drop with it minus without it."""
    return span([_mib(ON, "ncclpool", "device_bytes") - _mib(GUARD, "ncclpool", "device_bytes"),
                 _mib(GUARD, "sglang", "device_bytes") - _mib(ON, "sglang", "device_bytes")]) + " MiB"


def _cell(config, size, mode, ranged):
    us = _us(config)[(size, mode)]
    text_ = fmt(statistics.median(us), 1)
    return f"{text_} ({fmt(min(us), 1)}-{fmt(max(us), 1)})" if ranged else text_


@figure("sglang.table", BENCH)
def _table():
    body = []
    names = {ON: "symmetric kernels `on`, 32 CTAs (ncclpool's)",
             GUARD: "the guard's default (`auto`: symmetric kernels off)"}
    for config in (ON, NCCL_CTAS, GUARD):
        sizes = _sizes(config)
        if config == NCCL_CTAS:  # one row: the medians of every size
            med = {m: [_med(config, z, m) for z in sizes] for m in MODES}
            body.append(["`on`, NCCL's own CTA count", f"{sizes[0] >> 10} KiB - {sizes[-1] >> 20} MiB",
                         f"{fmt(med['plain'][0], 1)} - {fmt(med['plain'][-1], 1)}",
                         ", ".join(fmt(v, 1) for v in med["ncclpool"]), ", ".join(fmt(v, 1) for v in med["sglang"]),
                         span(_ratios(config, "sglang", "ncclpool"), 3)])
            continue
        for i, z in enumerate(sizes):
            first = i == 0
            label = f"{z >> 10} KiB" if z < MIB else f"{z >> 20} MiB"
            body.append([names[config] if first else "", label,
                         _cell(config, z, "plain", first),
                         _cell(config, z, "ncclpool", first or config == ON),
                         _cell(config, z, "sglang", first or config == ON),
                         fmt(_med(config, z, "sglang") / _med(config, z, "ncclpool"), 3)])
    return table(["configuration (NCCL 2.28.9)", "size", "plain", "ncclpool.sglang", "SGLang's allocator",
                  "SGLang / ncclpool"], body, [Run(BENCH)])

"""The cost of registering one NCCL window, measured: the registration bench of gpu-check's `bench`
section on 2x H200 (`ncclpool_nccl_registration_bench --gpus 2 --segments 1,8,64 --chunk-mib 64`,
its table in the call's stdout.txt).

Figures other pages reuse:
  window.cost_ms   one window on 2 ranks, with its run: "3.2 ms (2x H200, 7ec0c4a, 2026-11-27)"
  window.ms        the same value alone, where the text already names the run ("3.2 ms")
  window.first_ms  a process's first symmetric window (NCCL's symmetric set-up included), with its run
  window.run       the run: device, commit, date
The per-window figure is the bench's own "per segment" column at S = 64 (attach time / 64): the
first window's set-up is spread over 64, as in a pool's first registration.
"""

import re

from . import Run, figure, fmt, text

REG = "2026-11-27-gpu-check-2xh200-s4/call1-cuda-nccl-bench-wheel-tool-demo-examples/stdout.txt"


def registration_rows(path=REG):
    """{(segments, kind): (attach_ms, per_segment_ms)} of the registration bench's table in path."""
    out, inside = {}, False
    for line in text(path).splitlines():
        if line.startswith("segments") and "attach ms" in line:
            inside = True
            continue
        m = re.match(r"(\d+)\s+(local|symmetric)\s+([\d.]+)\s+([\d.]+)", line)
        if inside and m:
            out[(int(m.group(1)), m.group(2))] = (float(m.group(3)), float(m.group(4)))
        elif inside and out and not m:
            break
    if not out:
        raise KeyError("no registration table in " + path)
    return out


def per_window_ms():
    return registration_rows()[(64, "symmetric")][1]


@figure("window.run", REG)
def _run():
    return Run(REG).label()


@figure("window.ms", REG)
def _ms():
    return fmt(per_window_ms(), 1) + " ms"


@figure("window.cost_ms", REG)
def _cost_ms():
    return f"{fmt(per_window_ms(), 1)} ms ({Run(REG).label()})"


@figure("window.first_ms", REG)
def _first_ms():
    return f"{fmt(registration_rows()[(1, 'symmetric')][0], 1)} ms ({Run(REG).label()})"

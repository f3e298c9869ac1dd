"""Figures of README.md: it quotes the benchmark pages' registry figures; these name the runs of the
quoted figures that no page's figure names (device, commit, date)."""

from . import Run, figure

RUNS = {
    "readme.run_growth": "2026-11-25-growth-sim-4c07312/decode-segments-min0.json",
    "readme.run_megatron": "2026-11-23-megatron-fsdp-2xh200-ac5b222.jsonl",
    "readme.run_ce_coll": "2026-11-27-gpu-check-2xh200-e370088-s2/call2-cecoll-copyengine-sglang/gpu-check2/bench-coll-ce.json",
    "readme.run_cetrain_fsdp2": "2026-11-27-gpu-check-2xh200-s3/call3-torch-cetrain-compute-bound/cetrain-compute-bound/fsdp2.json",
    "readme.run_cetrain_megatron": "2026-11-27-gpu-check-2xh200-s4/call2-cetrain-megatron-3-rounds/runs/megatron-fsdp.jsonl",
    "readme.run_fsdp2_df7": "2026-11-24-gpu-check-2xh200-df7cf49/call2-torch-fsdp2-megatron-decode/fsdp2.txt",
}

for _name, _path in RUNS.items():
    figure(_name, _path)(lambda p=_path: Run(p).label())

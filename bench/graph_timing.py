"""Timing a captured CUDA graph by replaying it, shared by the benches that capture one
(decode_bench.py: microseconds per all-reduce; sglang_bench.py: per decode step)."""


def time_graph(graph, replays: int, per_replay: int = 1) -> float:
    """Microseconds per unit of work: one warm replay, then `replays` replays between two CUDA events,
    the time divided by replays * per_replay (the units one replay runs, e.g. all-reduces)."""
    import torch  # here, not at the top: the benches' drivers import their module without torch

    graph.replay()  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * per_replay)

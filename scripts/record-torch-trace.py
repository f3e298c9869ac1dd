"""Records a PyTorch memory snapshot of a few training steps, as JSON for `ncclpool replay`.

    torchrun --nproc-per-node 2 scripts/record-torch-trace.py --layout fsdp2 --out fsdp2.json
    torchrun --nproc-per-node 4 scripts/record-torch-trace.py --layout fsdp-ep --out fsdp_ep.json
    torchrun --nproc-per-node 2 scripts/record-torch-trace.py --layout decode --out decode.json

Rank 0's snapshot (torch.cuda.memory._snapshot(), allocation history on, no stack frames) is written.
Layouts: fsdp2 - a transformer-like MLP stack under FSDP2; fsdp-ep - the same with expert MLPs sharded
over an expert-data-parallel group and token dispatch/combine all-to-alls over an expert-parallel group
(the Megatron FSDP+EP shape); decode - a tensor-parallel decode loop as inference servers run it: bf16
layers whose outputs are all-reduced in place, a KV cache allocated up front, one CUDA graph captured
per batch size (1, 2, 4, 8) after a warm-up, then the graphs replayed in turn. In the FSDP traces FSDP's
all-gather and reduce-scatter buffers live on their own streams: `ncclpool replay TRACE --group-by
stream` treats each stream as a group.

To record your own job: call torch.cuda.memory._record_memory_history(max_entries=...) before the
steps, then write json.dump(torch.cuda.memory._snapshot(), f, default=str).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from ncclpool import torch_trace  # noqa: E402


class Experts(nn.Module):
    """Expert MLPs of one rank (a module with a forward, so fully_shard can take it)."""

    def __init__(self, hidden, count):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(count))

    def forward(self, tokens):
        return sum(e(tokens) for e in self.experts)


class Block(nn.Module):
    def __init__(self, hidden, experts=0, ep_group=None):
        super().__init__()
        self.attn = nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.experts = Experts(hidden, experts) if experts else None
        self.ep_group = ep_group

    def forward(self, x):
        x = x + self.attn(x)
        x = x + self.mlp(x)
        if self.experts is not None:
            tokens = torch.empty_like(x)
            dist.all_to_all_single(tokens, x.contiguous(), group=self.ep_group)  # dispatch
            y = self.experts(tokens)
            out = torch.empty_like(y)
            dist.all_to_all_single(out, y.contiguous(), group=self.ep_group)  # combine
            x = x + out
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", choices=["fsdp2", "fsdp-ep", "decode"], default="fsdp2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if args.layout == "decode":
        record_decode(args, rank, world)
        dist.destroy_process_group()
        return
    ep_group = edp_mesh = None
    if args.layout == "fsdp-ep":
        # ep: pairs of consecutive ranks; edp: ranks with the same position in their pair.
        mesh2d = init_device_mesh("cuda", (world // 2, 2), mesh_dim_names=("edp", "ep"))
        ep_group = mesh2d.get_group("ep")
        edp_mesh = mesh2d["edp"]
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.hidden, experts=2 if ep_group else 0, ep_group=ep_group)
                            for _ in range(args.layers)]).cuda()
    for block in model:
        if edp_mesh is not None:
            fully_shard(block.experts, mesh=edp_mesh)  # experts: expert-data-parallel group
        fully_shard(block)                            # the rest: the whole world (dp)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8, 512, args.hidden, device="cuda")
    torch_trace.start_recording()
    for _ in range(args.steps):
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    finish(args, rank, world)
    dist.destroy_process_group()


def finish(args, rank, world):
    """Rank 0 writes its snapshot; the others stop recording."""
    torch.cuda.synchronize()
    if rank == 0:
        events = torch_trace.write_trace(args.out, f"scripts/record-torch-trace.py --layout {args.layout} on {world} GPUs, "
                                         f"{args.layers} layers, hidden {args.hidden}, {args.steps} steps, torch {torch.__version__}")
        print(f"wrote {args.out}: {events} events", flush=True)
    else:
        torch.cuda.memory._record_memory_history(enabled=None)


def record_decode(args, rank, world):
    """Tensor-parallel decode with CUDA graphs: what a server's decode loop allocates."""
    torch.manual_seed(0)
    dtype = torch.bfloat16
    layers = [nn.Linear(args.hidden, args.hidden, bias=False).to("cuda", dtype) for _ in range(args.layers)]
    torch_trace.start_recording()
    kv_cache = [torch.zeros(8, 1024, args.hidden, dtype=dtype, device="cuda") for _ in layers]

    def decode_step(x):
        for layer, cache in zip(layers, kv_cache):
            y = layer(x) + cache[: x.shape[0], -1]
            dist.all_reduce(y)  # tensor parallel: the layer's partial outputs summed in place
            x = x + y
        return x

    graphs = []
    for batch in (1, 2, 4, 8):
        static_in = torch.zeros(batch, args.hidden, dtype=dtype, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside capture
                decode_step(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = decode_step(static_in)
        graphs.append((graph, static_in, static_out))
    for step in range(args.steps * 20):
        graph, static_in, _ = graphs[step % len(graphs)]
        static_in.normal_()
        graph.replay()
    finish(args, rank, world)


if __name__ == "__main__":
    main()

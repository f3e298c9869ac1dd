"""The FSDP unit of the end-to-end benchmarks (bench/fsdp2_bench.py, bench/megatron_fsdp_bench.py): a
transformer-like MLP block, LayerNorm -> Linear(dim, 4 dim) -> GELU -> Linear(4 dim, dim), residual."""
import torch


class Block(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

"""The toy FSDP2 training the GPU torch checks compare: three MLP blocks (512 -> 2048 -> 512), each an
FSDP module and the whole model one more, AdamW, per-rank random inputs from a fixed seed. The
parameters are the same on every rank and in every run, so two runs that differ only in where
communication buffers live must give the same losses (the checks compare them bitwise or within a
bound). Imported by the check scripts beside it (their folder is on sys.path when they run)."""
import torch


def train(rank: int, steps: int, configure=None) -> list[float]:
    """Losses of `steps` steps; configure(model), when given, runs after fully_shard and before the
    optimizer is made (where the pool helpers under test plug in)."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                                      torch.nn.Linear(2048, 512)) for _ in range(3)]).cuda()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    if configure is not None:
        configure(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 512, device="cuda", generator=g)
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses

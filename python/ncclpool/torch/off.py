"""``NCCLPOOL_TORCH=off``: ncclpool.torch's public names fall back to torch's own path, for bisecting a
problem (does it go away without ncclpool?) without editing the program.

The package (ncclpool/torch/__init__.py) reads the switch once, when it is imported
(ncclpool/_environment.py: ``torch_layer()``), and when it is off replaces its names by the ones here
and says so once (``RuntimeWarning``):

* ``create_nccl_mem_pool(...)`` checks its arguments as usual and returns a plain
  ``torch.cuda.MemPool()`` of torch's caching allocator: no ncclpool pool, nothing registered with NCCL;
* the contexts (``nccl_mem``, ``MultiGroupMemPoolAllocator``, ``MemPoolAllocatorWithoutRegistration``,
  ``use_mem_pool``) only route allocations to that MemPool (``torch.cuda.use_mem_pool``): no
  registration, no scope, nothing collective; ``graph`` is ``torch.cuda.graph(..., pool=pool.id)``;
* ``init``, ``register_mem_pool``, ``deregister_mem_pool``, ``release_mem_pool`` do nothing,
  ``forget_group`` finds nothing, ``copy_engine_group`` gives None (no copy-engine group);
* ``ncclpool_pool`` and ``stats`` raise ``InvalidArgument`` naming the switch (there is no ncclpool
  pool), ``memory_summary`` says the layer is off.

Every rank must set it alike: a rank with the layer on makes collective attaches that a rank with it
off never joins. Imports nothing of ncclpool.torch (the package imports this module).
"""
from __future__ import annotations

import torch

from ncclpool import errors

MESSAGE = ("ncclpool.torch is off (NCCLPOOL_TORCH=off): create_nccl_mem_pool returns a plain torch.cuda.MemPool, "
           "the contexts only route allocations to it (torch.cuda.use_mem_pool, torch.cuda.graph), nothing is "
           "registered with NCCL and copy_engine_group gives None; set it alike on every rank")


def _no_pool(what):
    return errors.InvalidArgument(f"{what}: NCCLPOOL_TORCH=off, so no MemPool has an ncclpool pool behind it "
                                  "(torch's own caching allocator serves it)")


def init() -> None:
    """Does nothing: the layer is off (NCCLPOOL_TORCH=off)."""


def create_nccl_mem_pool(symmetric: bool | None = None, *, kind: str | None = None, device=None,
                         growth_chunk: int | None = None, source: str = "auto", name: str | None = None, check=None,
                         min_segment: int | None = None, agreed_settings: str | None = None):
    """A plain ``torch.cuda.MemPool()`` (NCCLPOOL_TORCH=off). ``symmetric`` and ``kind`` are checked
    as with the layer on (InvalidArgument for both, or an unknown kind); the rest is not used."""
    if kind is not None and kind not in ("local", "symmetric", "auto"):
        raise errors.InvalidArgument(f"kind {kind!r} is not 'local', 'symmetric' or 'auto'")
    if kind is not None and symmetric is not None:
        raise errors.InvalidArgument(f"symmetric={symmetric} and kind={kind!r}: give one of them")
    return torch.cuda.MemPool()


def register_mem_pool(pool, group, symmetric: bool | None = None) -> None:
    """Does nothing: the layer is off (NCCLPOOL_TORCH=off)."""


def deregister_mem_pool(pool, group) -> None:
    """Does nothing: the layer is off (NCCLPOOL_TORCH=off)."""


def release_mem_pool(pool) -> None:
    """Does nothing: the layer is off (NCCLPOOL_TORCH=off); drop the MemPool as torch's own."""


def forget_group(group=None) -> int:
    """Nothing is registered with the layer off (NCCLPOOL_TORCH=off): returns 0."""
    return 0


def ncclpool_pool(mempool):
    """Raises InvalidArgument: with NCCLPOOL_TORCH=off no MemPool has an ncclpool pool behind it."""
    raise _no_pool(f"ncclpool_pool({mempool!r})")


def stats(pool) -> dict:
    """Raises InvalidArgument: with NCCLPOOL_TORCH=off there are no ncclpool pools to report."""
    raise _no_pool(f"stats({pool!r})")


def memory_summary(pool=None) -> str:
    """One line saying the layer is off (NCCLPOOL_TORCH=off): torch.cuda.memory_summary() reports the memory."""
    return "ncclpool memory summary: ncclpool.torch is off (NCCLPOOL_TORCH=off): no ncclpool pools\n"


def copy_engine_group(group=None, *, copy_engine: bool | None = None):
    """None: with NCCLPOOL_TORCH=off there is no copy-engine group (torch's own all-gathers run)."""
    return None


class _TorchPath:
    """Routes the thread's allocations to a plain MemPool (``torch.cuda.use_mem_pool``), nothing else."""

    def __init__(self, pool, device=None, enabled: bool = True):
        self.pool = pool
        self.device = device
        self.enabled = enabled
        self._context = None

    def __enter__(self):
        if self.enabled:
            self._context = torch.cuda.use_mem_pool(self.pool, device=self.device)
            self._context.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        context, self._context = self._context, None
        return bool(context.__exit__(exc_type, exc, tb)) if context is not None else False


class nccl_mem(_TorchPath):  # noqa: N801 (Megatron's name)
    """``torch.cuda.use_mem_pool(pool)`` without registration (NCCLPOOL_TORCH=off)."""

    def __init__(self, pool, enabled: bool = True, device=None, group=None, symmetric: bool | None = None):
        super().__init__(pool, device, enabled)


class MultiGroupMemPoolAllocator(_TorchPath):
    """``torch.cuda.use_mem_pool(pool)`` without registration (NCCLPOOL_TORCH=off)."""

    def __init__(self, pool, groups, symmetric: bool | None = None, *, collective: str | None = None):
        super().__init__(pool)


class MemPoolAllocatorWithoutRegistration(_TorchPath):
    """``torch.cuda.use_mem_pool(pool)`` (NCCLPOOL_TORCH=off)."""

    def __init__(self, pool):
        super().__init__(pool)


def use_mem_pool(pool, device=None):
    """``torch.cuda.use_mem_pool(pool, device)`` itself (NCCLPOOL_TORCH=off)."""
    return torch.cuda.use_mem_pool(pool, device=device)


def graph(cuda_graph, pool, groups=(), symmetric: bool | None = None, *, reserve: int = 0, **kwargs):
    """``torch.cuda.graph(cuda_graph, pool=pool.id, **kwargs)`` (NCCLPOOL_TORCH=off: no commits, no reserve)."""
    return torch.cuda.graph(cuda_graph, pool=pool.id, **kwargs)


# What the package's names become with the switch off.
FALLBACKS = {name: globals()[name] for name in (
    "init", "create_nccl_mem_pool", "register_mem_pool", "deregister_mem_pool", "release_mem_pool", "forget_group",
    "ncclpool_pool", "stats", "memory_summary", "copy_engine_group", "nccl_mem", "MultiGroupMemPoolAllocator",
    "MemPoolAllocatorWithoutRegistration", "use_mem_pool", "graph")}

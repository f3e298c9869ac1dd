"""A stand-in for torch (no GPU, no torch needed): enough of torch.cuda and torch.distributed for
ncclpool.torch's bookkeeping, with pools on the simulator. Used by conftest.torch_layer and by
bench/torch_layer_overhead.py.

Collectives: a process group's ranks can be threads of this process (``make_group(size)``: one
ProcessGroup object per rank, as each real process has its own), meeting at the group's rendezvous;
all_gather_into_tensor and all_reduce exchange real values there, split_group makes a new group over
the same ranks collectively. A group made with ``ProcessGroup()`` has one rank (this thread)."""
import contextlib
import threading
import types

_ZERO = 2  # NCCL_CTA_POLICY_ZERO


class Tensor:
    """A flat list of numbers with the few tensor methods the torch layer's vote uses."""

    def __init__(self, data, dtype=None, device=None):
        self.data = list(data)
        self.dtype = dtype
        self.device = device

    def tolist(self):
        return list(self.data)

    def numel(self):
        return len(self.data)


class Rendezvous:
    """Where the ranks of one group meet: each rank (a thread) hands in its item and gets every rank's.
    A rank that never comes breaks the barrier after `timeout` seconds (BrokenBarrierError) instead
    of hanging the test."""

    def __init__(self, size, timeout=10.0):
        self.size = size
        self.collectives = 0  # completed exchanges (counted by rank 0)
        self._barrier = threading.Barrier(size, timeout=timeout)
        self._slots = [None] * size

    def exchange(self, rank, item):
        self._slots[rank] = item
        self._barrier.wait()
        out = list(self._slots)
        self._barrier.wait()  # nobody overwrites a slot before every rank has read them all
        if rank == 0:
            self.collectives += 1
        return out


class ProcessGroup:
    """One rank's handle of a group: the group's global ranks, this rank's place in them, and the
    rendezvous every rank's handle shares."""

    def __init__(self, ranks=(0,), rank=0, rendezvous=None, options=None, desc="", backend="nccl"):
        self.ranks = list(ranks)
        self._rank = rank
        self.rendezvous = rendezvous if rendezvous is not None else Rendezvous(len(self.ranks))
        self.options = options  # the pg_options it was made with
        self.desc = desc
        self.backend = backend
        self.bound_device_id = None

    def size(self):
        return len(self.ranks)

    def rank(self):
        return self._rank

    def __repr__(self):
        return f"<stand-in group {self.desc or 'of'} {self.ranks}, rank {self._rank}>"


def make_group(size, ranks=None, desc=""):
    """The handles of one group over `size` ranks (threads), one per rank."""
    ranks = list(range(size)) if ranks is None else list(ranks)
    meet = Rendezvous(size)
    return [ProcessGroup(ranks, r, meet, desc=desc) for r in range(size)]


def _options():
    config = types.SimpleNamespace(cta_policy=0, blocking=1)
    return types.SimpleNamespace(config=config, is_high_priority_stream=False)


def _fsdp_modules():
    """torch.distributed.fsdp with FSDPModule, and the private module of FSDP2's AllGather / ReduceScatter."""
    fsdp = types.ModuleType("torch.distributed.fsdp")
    fsdp.FSDPModule = type("FSDPModule", (), {})
    fully_shard = types.ModuleType("torch.distributed.fsdp._fully_shard")
    api = types.ModuleType("torch.distributed.fsdp._fully_shard._fsdp_api")
    api.AllGather = type("AllGather", (), {})
    api.ReduceScatter = type("ReduceScatter", (), {})
    fsdp._fully_shard = fully_shard
    fully_shard._fsdp_api = api
    return {"torch.distributed.fsdp": fsdp, "torch.distributed.fsdp._fully_shard": fully_shard,
            "torch.distributed.fsdp._fully_shard._fsdp_api": api}


def make_modules():
    """Returns {"torch": ..., "torch.cuda": ..., "torch.distributed": ..., FSDP2's modules} to put in
    sys.modules. ``torch.distributed`` records what was done to it: ``calls`` (name, group, kwargs) of
    collectives and group creations, ``destroyed`` (groups given to destroy_process_group, in order;
    destroying a group twice raises ValueError, as torch does)."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+stand-in"
    torch.Tensor = Tensor
    torch.uint8 = "uint8"
    torch.device = lambda *a: types.SimpleNamespace(type=a[0] if a and isinstance(a[0], str) else "cuda",
                                                    index=a[-1] if len(a) > 1 else None)
    torch.tensor = lambda data, dtype=None, device=None: Tensor(data, dtype, device)
    torch.empty = lambda n, dtype=None, device=None: Tensor([0] * n, dtype, device)
    cuda = types.ModuleType("torch.cuda")
    cuda.is_available = lambda: True
    cuda.current_device = lambda: 0
    cuda.nccl = types.SimpleNamespace(version=lambda: 0)
    cuda.is_current_stream_capturing = lambda: False
    ids = iter(range(1, 1 << 30))
    cuda.MemPool = lambda allocator=None: types.SimpleNamespace(id=(next(ids), 0), allocator=allocator)
    cuda.memory = types.SimpleNamespace(CUDAPluggableAllocator=lambda *a: types.SimpleNamespace(allocator=lambda: None))
    cuda.use_mem_pool = lambda pool, device=None: contextlib.nullcontext()
    default_stream = types.SimpleNamespace(name="default")
    cuda.streams = types.SimpleNamespace(default=default_stream, current=default_stream)  # a test sets current
    cuda.default_stream = lambda device=None: cuda.streams.default
    cuda.current_stream = lambda device=None: cuda.streams.current
    torch.cuda = cuda

    dist = types.ModuleType("torch.distributed")
    dist.calls = []
    dist.destroyed = []
    record_lock = threading.Lock()

    def record(name, group, **kwargs):
        with record_lock:
            dist.calls.append((name, group, kwargs))

    dist.ProcessGroup = ProcessGroup
    dist.group = types.SimpleNamespace(WORLD=ProcessGroup(desc="world"))
    dist.group.WORLD.bound_device_id = types.SimpleNamespace(type="cuda", index=0)  # eager init (device_id given)

    def destroy_process_group(group=None):
        if group is not None and any(g is group for g in dist.destroyed):
            raise ValueError("Invalid process group specified")  # torch's words for a group already destroyed
        dist.destroyed.append(group)

    dist.destroy_process_group = destroy_process_group
    dist.distributed_c10d = types.SimpleNamespace(destroy_process_group=destroy_process_group,
                                                  _get_default_group=lambda: dist.group.WORLD)
    dist.ReduceOp = types.SimpleNamespace(SUM="sum", MIN="min", MAX="max")
    dist.get_rank = lambda group=None: (group or dist.group.WORLD).rank()
    dist.get_world_size = lambda group=None: (group or dist.group.WORLD).size()
    dist.get_process_group_ranks = lambda group: list(group.ranks)
    dist.get_backend = lambda group=None: (group or dist.group.WORLD).backend

    def all_reduce(tensor, op=None, group=None, async_op=False):
        group = group or dist.group.WORLD
        record("all_reduce", group, op=op)
        if not isinstance(tensor, Tensor):
            return None  # the layer's communicator probe (a real tensor in torch): nothing to reduce
        every = group.rendezvous.exchange(group.rank(), list(tensor.data))
        combine = {"min": min, "max": max}.get(op, sum)
        tensor.data[:] = [combine(values) for values in zip(*every)]
        return None

    def all_gather_into_tensor(output, input, group=None, async_op=False):  # noqa: A002 (torch's name)
        group = group or dist.group.WORLD
        record("all_gather_into_tensor", group, async_op=async_op, output=output, input=input,
               stream=cuda.streams.current)
        if isinstance(input, Tensor):
            every = group.rendezvous.exchange(group.rank(), list(input.data))
            output.data[:] = [v for item in every for v in item]
        if async_op:
            work = types.SimpleNamespace(waited=False)
            work.wait = lambda: setattr(work, "waited", True)
            dist.last_work = work
            return work
        return None

    def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None):
        """One split that keeps every rank of the parent (what the layer asks for): collective over the parent."""
        parent = parent_pg or dist.group.WORLD
        record("split_group", parent, split_ranks=split_ranks, pg_options=pg_options, group_desc=group_desc)
        assert split_ranks == [list(range(parent.size()))], split_ranks
        made = Rendezvous(parent.size()) if parent.rank() == 0 else None
        meet = parent.rendezvous.exchange(parent.rank(), made)[0]
        return ProcessGroup(parent.ranks, parent.rank(), meet, options=pg_options, desc=group_desc or "")

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False, group_desc=None):
        """A group of this thread alone (one-rank groups only: enough for the layer's lazy path)."""
        ranks = list(range(dist.group.WORLD.size())) if ranks is None else list(ranks)
        group = ProcessGroup(ranks, 0, options=pg_options, desc=group_desc or "")
        record("new_group", group, ranks=ranks, pg_options=pg_options, use_local_synchronization=use_local_synchronization)
        return group

    dist.all_reduce = all_reduce
    dist.all_gather_into_tensor = all_gather_into_tensor
    dist.split_group = split_group
    dist.new_group = new_group
    dist.ProcessGroupNCCL = types.SimpleNamespace(Options=_options, NCCL_CTA_POLICY_ZERO=_ZERO)
    torch.distributed = dist
    return {"torch": torch, "torch.cuda": cuda, "torch.distributed": dist, **_fsdp_modules()}

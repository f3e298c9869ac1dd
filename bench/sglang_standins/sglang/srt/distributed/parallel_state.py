"""Stand-in for sglang.srt.distributed.parallel_state (sglang 0.5.23): a GroupCoordinator with the
attributes the symmetric-memory allocator and its callers read, and the TP group's accessor."""


class GroupCoordinator:
    """pynccl_comm: SGLang's PyNcclCommunicator (None where pynccl is off); unique_name: the group's
    name; world_size, rank_in_group; is_first_rank; cpu_group / device: as SGLang sets them."""

    def __init__(self, *, unique_name, rank_in_group, world_size, pynccl_comm=None, cpu_group=None, device=None):
        self.unique_name = unique_name
        self.rank_in_group = rank_in_group
        self.world_size = world_size
        self.pynccl_comm = pynccl_comm
        self.cpu_group = cpu_group
        self.device = device

    @property
    def is_first_rank(self):
        return self.rank_in_group == 0

    def __repr__(self):
        return f"<GroupCoordinator {self.unique_name} rank {self.rank_in_group}/{self.world_size}>"


_TP = None


def set_tp_group(group) -> None:
    global _TP
    _TP = group


def get_tp_group():
    if _TP is None:
        raise AssertionError("tensor model parallel group is not initialized (stand-in: set_tp_group)")
    return _TP

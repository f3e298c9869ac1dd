"""The copy-engine (zero-SM) all-gather: a process group over the ranks of another, made with NCCL's
CTA policy ZERO, on which NCCL (2.28+) runs an all-gather between symmetric windows on the GPUs' copy
engines instead of SMs (docs/python.md, "Copy-engine all-gather (zero SMs)").

The CTA policy is fixed when a communicator is created, and ncclpool does not create torch's
communicators: :func:`copy_engine_group` makes a dedicated group over the same ranks. Making a group
is collective, so whether a rank makes one depends only on what every rank agreed (docs/registry.md,
"Lockstep"): each rank votes (``ncclpool.copy_engine_vote``: the request, NCCLPOOL_COPY_ENGINE, the
NCCL version and the symmetric-kernels decision; then whether this torch can make such a group), the
votes are all-gathered over the group, and every rank then makes the group, or none does. An
explicit request that some rank cannot honour raises the same error on every rank; auto stays off
everywhere with the reason recorded. fsdp.enable(copy_engine=...) uses it for each shard group;
stats() and memory_summary() report each pool's decisions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool import errors

from .binding import _lock

__all__ = ["copy_engine_group", "CopyEngineDecision"]

_CTA_POLICY_ZERO = 2     # NCCL_CTA_POLICY_ZERO (nccl.h), where torch does not export the constant
_RECORD = 256            # bytes of one rank's vote: [vote, request, reason (UTF-8, NUL-padded)]
_REQUEST_CODES = {True: 1, None: 2}
_REQUEST_NAMES = {1: "True", 2: "None"}


@dataclass(frozen=True)
class CopyEngineDecision:
    """What the ranks of a group agreed about the copy-engine all-gather (the same on every rank)."""

    requested: bool | None  # copy_engine as asked: True, None (auto) or False
    group: object | None    # the ZERO-policy group over the same ranks; None when off
    why: str
    ranks: int

    @property
    def used(self) -> bool:
        return self.group is not None

    def as_dict(self) -> dict:
        asked = {True: "on", None: "auto", False: "off"}[self.requested]
        return {"requested": asked, "used": self.used, "why": self.why, "ranks": self.ranks}


# id(source group) -> (source group, its decision). The entry keeps the group alive, so an id is
# never reused while its entry is here; destroy_process_group drops the entries (_forget).
_decisions: dict = {}
# torch MemPool id -> [(source group, decision)]: what fsdp.enable decided for a pool's all-gathers.
_pool_decisions: dict = {}


def copy_engine_group(group=None, *, copy_engine: bool | None = None):
    """The group of NCCL's CTA policy ZERO over the ranks of `group` (default: WORLD), or None.

    Collective over `group`: every rank of it calls this, in the same order as its other collectives
    on `group`. copy_engine: True (on: a rank that cannot raises ncclpool.Unsupported on every rank,
    naming the first rank that voted no and why), None (auto: this machine's ``ncclpool tune``
    profile decides; off everywhere, with the reason, if any rank votes no), False (off, without a
    vote: no collective). Give every rank the same value: ranks that ask differently raise
    ncclpool.AgreementError (False skips the vote, so it cannot be checked: it is on you).

    The decision is kept per group: a later call for the same group returns the same result without
    a collective, unless an earlier "off" answered another request (then the ranks vote again). The
    cache is the same on every rank as long as every rank made the same calls. On the returned
    group an all-gather runs on the copy engines when both buffers are symmetric windows (from 2.29:
    the output buffer) registered with it (a symmetric pool attached to it: fsdp.enable does that),
    the group is within one node and NCCL has symmetric support there; otherwise NCCL runs its
    kernels. Stay off the default stream (docs/python.md): NCCL 2.28.9 and 2.29.2 fail copy-engine
    collectives there."""
    if copy_engine not in (None, True, False):
        raise errors.InvalidArgument(f"copy_engine must be True, False or None (auto), not {copy_engine!r}")
    group = group if group is not None else dist.group.WORLD
    if copy_engine is False:
        return None
    with _lock:
        cached = _decisions.get(id(group))
    if cached is not None and (cached[1].used or cached[1].requested is copy_engine):
        return cached[1].group
    decision = _agree(group, copy_engine)
    with _lock:
        _decisions[id(group)] = (group, decision)
    return decision.group


def _decision_of(group) -> CopyEngineDecision | None:
    with _lock:
        entry = _decisions.get(id(group))
    return entry[1] if entry is not None else None


def _agree(group, requested) -> CopyEngineDecision:
    """One all-gather of every rank's vote over `group`, then the same decision on every rank."""
    ranks = dist.get_world_size(group)
    members = dist.get_process_group_ranks(group)
    use, why = _local_vote(group, requested, ranks)
    votes = _exchange(group, use, requested, why, ranks)
    asked = sorted({r for _, r, _ in votes})
    if len(asked) > 1:
        by_rank = ", ".join(f"rank {i}{_global(members, i)} copy_engine={_REQUEST_NAMES.get(r, r)}"
                            for i, (_, r, _) in enumerate(votes))
        raise errors.AgreementError(f"ncclpool.torch.copy_engine_group over {ranks} ranks: the ranks asked differently "
                                    f"({by_rank}); pass the same copy_engine on every rank")
    noes = [i for i, (v, _, _) in enumerate(votes) if not v]
    if noes:
        first = noes[0]
        more = f"; {len(noes) - 1} more rank(s) vote no" if len(noes) > 1 else ""
        reason = f"rank {first}{_global(members, first)} votes no: {_bare(votes[first][2], 'off: ')}{more}"
        if requested is True:
            raise errors.Unsupported(f"ncclpool.torch.copy_engine_group(copy_engine=True) over {ranks} ranks: {reason}")
        return CopyEngineDecision(requested, None, f"off: {reason}", ranks)
    zero = _make_zero_group(group, members)
    return CopyEngineDecision(requested, zero, f"on: every rank of {ranks} votes yes (rank 0: {_bare(votes[0][2], 'on: ')})",
                              ranks)


def _bare(why: str, prefix: str) -> str:
    """A vote's reason without the on/off its decision already says."""
    return why[len(prefix):] if why.startswith(prefix) else why


def _global(members, i) -> str:
    return f" (global rank {members[i]})" if members[i] != i else ""


def _local_vote(group, requested, ranks) -> tuple[bool, str]:
    """This rank's vote and its reason (ncclpool.copy_engine_vote on this rank's GPU, then this torch).
    A failure here is this rank's "no", never a skipped collective."""
    vote = getattr(_np, "copy_engine_vote", None)
    if vote is None:
        return False, "this ncclpool has no copy_engine_vote (a library from before the copy-engine route)"
    try:
        use, why = vote(requested, ranks, device=torch.cuda.current_device())
    except Exception as e:  # noqa: BLE001 - whatever failed, every rank must still take part in the vote
        return False, f"copy_engine_vote failed: {type(e).__name__}: {e}"
    if not use:
        return False, why
    able, reason = _torch_support(group)
    return (True, why) if able else (False, reason)


def _torch_support(group) -> tuple[bool, str]:
    """Whether this torch can make a ZERO-policy group over `group` (empty reason when it can)."""
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None:
        return False, f"torch {torch.__version__} has no ProcessGroupNCCL (built without NCCL)"
    try:
        backend = str(dist.get_backend(group)).lower()
    except Exception as e:  # noqa: BLE001 - a vote, not a crash
        return False, f"the group's backend is unknown ({type(e).__name__}: {e})"
    if backend != "nccl":
        return False, f"the group's backend is {backend}, not nccl"
    config = getattr(nccl.Options(), "config", None)
    if config is None:
        return False, f"torch {torch.__version__}: ProcessGroupNCCL.Options has no config (torch built with NCCL < 2.17)"
    if not hasattr(config, "cta_policy"):
        return False, (f"torch {torch.__version__}: ProcessGroupNCCL.Options().config has no cta_policy (torch "
                       "builds with NCCL >= 2.28 have it: torch 2.10 and newer)")
    if _eager() and not hasattr(dist, "split_group"):
        return False, f"torch {torch.__version__} has no dist.split_group (needed with an eagerly initialized WORLD)"
    return True, ""


def _eager() -> bool:
    """WORLD was made with device_id: torch makes new groups by ncclCommSplit of WORLD's communicator."""
    default = dist.distributed_c10d._get_default_group()
    return getattr(default, "bound_device_id", None) is not None


def _exchange(group, use, requested, why, ranks) -> list:
    """[(vote, request code, reason)] of every rank of `group`, in group rank order."""
    reason = why.encode(errors="replace")[:_RECORD - 2].decode(errors="ignore").encode()  # whole characters
    mine = bytes([1 if use else 0, _REQUEST_CODES[requested]]) + reason
    mine += bytes(_RECORD - len(mine))
    device = torch.device("cuda", torch.cuda.current_device())
    sent = torch.tensor(list(mine), dtype=torch.uint8, device=device)
    every = torch.empty(_RECORD * ranks, dtype=torch.uint8, device=device)
    dist.all_gather_into_tensor(every, sent, group=group)
    data = bytes(every.tolist())
    out = []
    for i in range(ranks):
        record = data[i * _RECORD:(i + 1) * _RECORD]
        out.append((record[0] == 1, record[1], record[2:].rstrip(b"\0").decode(errors="replace")))
    return out


def _make_zero_group(group, members):
    """The ZERO-policy group over the ranks of `group`: collective over `group` alone. With an eager
    WORLD, an ncclCommSplit of `group`'s own communicator (torch's new_group would split WORLD's, which
    every rank of WORLD must join); otherwise a new communicator of the members only."""
    nccl = dist.ProcessGroupNCCL
    options = nccl.Options()
    options.config.cta_policy = getattr(nccl, "NCCL_CTA_POLICY_ZERO", _CTA_POLICY_ZERO)
    desc = "ncclpool_copy_engine"
    if _eager():
        zero = dist.split_group(parent_pg=group, split_ranks=[list(range(len(members)))], pg_options=options,
                                group_desc=desc)
    else:
        zero = dist.new_group(members, pg_options=options, use_local_synchronization=True, group_desc=desc)
    if zero is None:
        raise errors.InvalidState(f"torch made no copy-engine group over ranks {members} (this rank is one of them)")
    return zero


def all_gather_into_tensor(output, input, group, async_op: bool = False):  # noqa: A002 (torch's name)
    """dist.all_gather_into_tensor on a copy-engine group, kept off the default stream: NCCL 2.28.9 and
    2.29.2 fail copy-engine collectives on the legacy default stream (fixed in 2.29.7; NCCL #2003), and
    since torch 2.8 an async_op=False collective runs on the current stream. There it runs on
    ProcessGroupNCCL's own stream, the current stream waiting for it (what async_op=False means)."""
    if not async_op and torch.cuda.current_stream(output.device) == torch.cuda.default_stream(output.device):
        dist.all_gather_into_tensor(output, input, group=group, async_op=True).wait()
        return None
    return dist.all_gather_into_tensor(output, input, group=group, async_op=async_op)


def _record_for_pool(mempool, group, decision: CopyEngineDecision) -> None:
    """fsdp.enable decided `decision` for the all-gathers of `mempool`'s buffers on `group` (a later
    enable for the same group replaces it: its modules use the later one)."""
    with _lock:
        entries = _pool_decisions.setdefault(mempool.id, [])
        entries[:] = [(g, d) for g, d in entries if g is not group] + [(group, decision)]


def _pool_stats(mempool_id) -> dict:
    """stats()['copy_engine'] of a pool: used, why, and one entry per shard group decided."""
    with _lock:
        entries = list(_pool_decisions.get(mempool_id, ()))
    if not entries:
        return {"used": False, "why": "not asked for this pool (fsdp.enable decides, copy_engine=None: auto)", "groups": []}
    decisions = [d for _, d in entries]
    used = [d for d in decisions if d.used]
    return {"used": bool(used), "why": (used[0] if used else decisions[0]).why,
            "groups": [d.as_dict() for d in decisions]}


def _summary_lines(mempool_id) -> list[str]:
    """memory_summary()'s lines for a pool that fsdp.enable asked about copy engines."""
    with _lock:
        entries = list(_pool_decisions.get(mempool_id, ()))
    return [f"  copy-engine all-gather ({d.ranks} ranks, asked {d.as_dict()['requested']}): {d.why}" for _, d in entries]


def _forget(group) -> list:
    """destroy_process_group(group) is coming: drops the decisions about `group` (every one for None)
    and returns the copy-engine groups made for it, which go first (forgotten, then destroyed; for None
    torch destroys every group itself)."""
    with _lock:
        if group is None:
            _decisions.clear()
            return []
        companions = []
        for key, (source, decision) in list(_decisions.items()):
            if source is group:
                del _decisions[key]
                if decision.group is not None and decision.group is not group:
                    companions.append(decision.group)
            elif decision.group is group:  # the copy-engine group itself: the next call votes again
                del _decisions[key]
        return companions

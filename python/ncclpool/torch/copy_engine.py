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
everywhere with the reason recorded. Each rank votes for both requests, so that every later call for
the group is answered from that one agreement, on every rank alike, without a collective.
fsdp.enable(copy_engine=...) uses it for each shard group; stats() and memory_summary() report each
pool's decisions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool import errors

from . import state

__all__ = ["copy_engine_group", "CopyEngineDecision"]

_CTA_POLICY_ZERO = 2     # NCCL_CTA_POLICY_ZERO (nccl.h), where torch does not export the constant
_REASON = 254            # bytes of one reason in a record (UTF-8, whole characters, NUL-padded)
_RECORD = 4 + 2 * _REASON + 8  # one rank's record: [vote if True, vote if None, request, maker], 2 reasons, its node
_REQUEST_CODES = {True: 1, None: 2, False: 3}
_REQUEST_NAMES = {1: "True", 2: "None", 3: "False"}
# How this rank would make the group: torch's split of the group's communicator (WORLD made with
# device_id) or new_group (lazy WORLD). Ranks that would do it differently cannot make it together.
_SPLIT, _NEW_GROUP = 1, 2
_MAKER_NAMES = {_SPLIT: "dist.split_group (WORLD made with device_id)",
                _NEW_GROUP: "dist.new_group (WORLD made without device_id)"}


@dataclass(frozen=True)
class CopyEngineDecision:
    """What the ranks of a group agreed about the copy-engine all-gather (the same on every rank)."""

    requested: bool | None  # copy_engine as asked: True, None (auto) or False
    group: object | None    # the ZERO-policy group over the same ranks; None when off
    why: str
    ranks: int

    @property
    def used(self) -> bool:
        """Whether the all-gathers run on the copy-engine group (``group`` is not None)."""
        return self.group is not None

    def as_dict(self) -> dict:
        """``{"requested": "on"|"auto"|"off", "used", "why", "ranks"}``: what stats() reports."""
        asked = {True: "on", None: "auto", False: "off"}[self.requested]
        return {"requested": asked, "used": self.used, "why": self.why, "ranks": self.ranks}


@dataclass(frozen=True)
class _Agreement:
    """What one vote over a group agreed, for either request (every rank voted for both): later calls
    are answered from it, on every rank alike, without a collective."""

    on: tuple   # (every rank votes yes for copy_engine=True, why)
    auto: tuple  # (every rank votes yes for copy_engine=None, why)
    first: bool | None  # the request of the call that voted
    group: object | None  # the ZERO-policy group made then (None: not made)
    ranks: int


# id(source group) -> (source group, its agreement, the last decision answered). The entry keeps the
# group alive, so an id is never reused while its entry is here; destroy_process_group drops the
# entries (_forget, registered with state.py's hook below).
_decisions: dict = {}
# torch MemPool id -> [(source group, decision)]: what fsdp.enable decided for a pool's all-gathers.
_pool_decisions: dict = {}


def copy_engine_group(group=None, *, copy_engine: bool | None = None):
    """The group of NCCL's CTA policy ZERO over the ranks of `group` (default: WORLD), or None.

    Collective over `group` the first time: every rank of it calls this, in the same order as its
    other collectives on `group`. copy_engine: True (on: a rank that cannot raises ncclpool.Unsupported
    on every rank, naming the first rank that voted no and why), None (auto: this machine's ``ncclpool
    tune`` profile decides; off everywhere, with the reason, if any rank votes no), False
    (off; it still votes, so that a rank asking False while another asks otherwise is an error on every
    rank, not a rank missing from the others' collective). Give every rank the same value: ranks that
    ask differently at the vote raise ncclpool.AgreementError.

    The first call for a group decides: each rank votes for both requests, and every later call for
    the group is answered from that agreement on every rank alike, without a collective (so a rank
    that calls once more, or asks otherwise later, cannot leave the others waiting): the group if it
    was made; else copy_engine=True raises (Unsupported with the agreed reason, or InvalidState when
    an earlier auto call decided off where True could have made it: ask True first), auto gives None.
    destroy_process_group(group) forgets the decision. On the returned group an all-gather runs on
    the copy engines when both buffers are symmetric windows (from 2.29: the output buffer) registered
    with it (a symmetric pool attached to it: fsdp.enable does that), the group is within one node and
    NCCL has symmetric support there; otherwise NCCL runs its kernels. Stay off the default stream
    (docs/python.md): NCCL 2.28.9 and 2.29.2 fail copy-engine collectives there."""
    return _decide(group, copy_engine).group


def _decide(group, requested) -> CopyEngineDecision:
    """copy_engine_group's decision (fsdp.enable records it for the pool's stats)."""
    if requested not in (None, True, False):
        raise errors.InvalidArgument(f"copy_engine must be True, False or None (auto), not {requested!r}")
    group = group if group is not None else dist.group.WORLD
    state.install_destroy_hook()  # destroy_process_group(group) drops the decision and destroys the group made for it
    with state.lock:
        entry = _decisions.get(id(group))
    agreement = entry[1] if entry is not None else None
    if agreement is None:
        agreement = _agree(group, requested)  # collective; raises AgreementError (nothing kept) on mixed requests
    decision = None
    try:
        decision = _answer(agreement, requested)
    finally:
        with state.lock:
            _decisions[id(group)] = (group, agreement, decision)
    return decision


def _answer(agreement: _Agreement, requested) -> CopyEngineDecision:
    """The answer to `requested` from an agreement: the same on every rank, no collective."""
    n = agreement.ranks
    if requested is False:
        return CopyEngineDecision(False, None, "off: copy_engine=False", n)
    first_why = (agreement.on if agreement.first else agreement.auto)[1]  # the reason of the call that voted
    if agreement.group is not None:
        return CopyEngineDecision(requested, agreement.group, f"on: {first_why}", n)
    ok, why = agreement.on if requested is True else agreement.auto
    if ok:  # this request could have made the group, but the first call asked otherwise: not made
        asked, first = _REQUEST_NAMES[_REQUEST_CODES[requested]], _REQUEST_NAMES[_REQUEST_CODES[agreement.first]]
        raise errors.InvalidState(
            f"ncclpool.torch.copy_engine_group(copy_engine={asked}) over {n} ranks: the first call for this group "
            f"(copy_engine={first}) decided off ({first_why}), and later "
            f"calls answer from that decision without a collective (so that no rank can leave the others waiting): "
            f"pass copy_engine={asked} in the group's first call")
    if requested is True:
        raise errors.Unsupported(f"ncclpool.torch.copy_engine_group(copy_engine=True) over {n} ranks: {why}")
    return CopyEngineDecision(requested, None, f"off: {why}", n)


def _decision_of(group) -> CopyEngineDecision | None:
    """The last decision answered for `group` on this rank (None: none yet, or the last call raised)."""
    with state.lock:
        entry = _decisions.get(id(group))
    return entry[2] if entry is not None else None


def _agree(group, requested) -> _Agreement:
    """One all-gather of every rank's votes over `group`, then the same agreement on every rank, and
    the group made where every rank votes yes for `requested`."""
    ranks = dist.get_world_size(group)
    members = dist.get_process_group_ranks(group)
    on, auto, maker, options = _local_votes(group, ranks)
    votes, nodes = _exchange(group, on, auto, requested, maker, _node(), ranks)
    asked = sorted({v[2] for v in votes})
    if len(asked) > 1:
        by_rank = ", ".join(f"rank {i}{_global(members, i)} copy_engine={_REQUEST_NAMES.get(v[2], v[2])}"
                            for i, v in enumerate(votes))
        raise errors.AgreementError(f"ncclpool.torch.copy_engine_group over {ranks} ranks: the ranks asked differently "
                                    f"({by_rank}); pass the same copy_engine on every rank")
    votes = _same_maker(votes)
    spanned = _count_nodes(nodes)
    if spanned > 1:  # every rank sees the same nodes: every rank decides "off" alike
        why = (f"the group spans {spanned} nodes (NCCL_HOSTID or hosts differ, or a rank's node is unknown): NCCL runs "
               "copy-engine collectives within one node only and would fall back to its kernels")
        votes = [(False, False, v[2], v[3], why, why) for v in votes]
    agreed_on = _outcome(votes, 0, members, ranks)
    agreed_auto = _outcome(votes, 1, members, ranks)
    ok = requested is not False and (agreed_on if requested else agreed_auto)[0]
    zero = _make_zero_group(group, members, votes[0][3], options) if ok else None
    return _Agreement(agreed_on, agreed_auto, requested, zero, ranks)


def _outcome(votes, which, members, ranks) -> tuple:
    """(every rank votes yes, why) for vote `which` (0: copy_engine=True, 1: None) of every rank."""
    noes = [i for i, v in enumerate(votes) if not v[which]]
    if noes:
        first = noes[0]
        more = f"; {len(noes) - 1} more rank(s) vote no" if len(noes) > 1 else ""
        return False, f"rank {first}{_global(members, first)} votes no: {_bare(votes[first][4 + which], 'off: ')}{more}"
    return True, f"every rank of {ranks} votes yes (rank 0: {_bare(votes[0][4 + which], 'on: ')})"


def _same_maker(votes) -> list:
    """A rank that would make the group otherwise than rank 0 (split_group / new_group) votes no:
    the ranks would wait in different calls."""
    reference = votes[0][3]
    out = []
    for v in votes:
        if reference and v[3] and v[3] != reference and (v[0] or v[1]):
            why = (f"this rank would make the group with {_MAKER_NAMES[v[3]]}, rank 0 with {_MAKER_NAMES[reference]}: "
                   "initialize WORLD the same way on every rank")
            v = (False, False, v[2], v[3], why, why)
        out.append(v)
    return out


def _bare(why: str, prefix: str) -> str:
    """A vote's reason without the on/off its decision already says."""
    return why[len(prefix):] if why.startswith(prefix) else why


def _global(members, i) -> str:
    return f" (global rank {members[i]})" if members[i] != i else ""


def _local_votes(group, ranks) -> tuple:
    """This rank's votes for copy_engine=True and for None ((use, why) each: ncclpool.copy_engine_vote
    on this rank's GPU, then this torch), how it would make the group, and the group's options.
    Never raises: whatever fails here is this rank's "no", never a skipped collective."""
    able, reason, maker, options = _torch_support(group)
    votes = []
    for requested in (True, None):
        use, why = _library_vote(requested, ranks)
        votes.append((use and able, why if not use or able else reason))
    return votes[0], votes[1], maker, options


def _library_vote(requested, ranks) -> tuple[bool, str]:
    vote = getattr(_np, "copy_engine_vote", None)
    if vote is None:
        return False, "this ncclpool has no copy_engine_vote (a library from before the copy-engine route)"
    try:
        use, why = vote(requested, ranks, device=torch.cuda.current_device())
        return bool(use), str(why)
    except Exception as e:  # noqa: BLE001 - whatever failed, every rank must still take part in the vote
        return False, f"copy_engine_vote failed: {type(e).__name__}: {e}"


def _torch_support(group) -> tuple:
    """(able, reason, maker, options): whether this torch can make a ZERO-policy group over `group`
    (the reason when not), how (_SPLIT / _NEW_GROUP; 0: unknown), and the group's options, built
    here so that a torch refusing them is a vote, not an error after the vote. Never raises."""
    try:
        return _torch_support_or_raise(group)
    except Exception as e:  # noqa: BLE001 - a vote, not a crash: the others are about to all-gather
        return False, f"checking this torch for CTA policies failed: {type(e).__name__}: {e}", 0, None


def _torch_support_or_raise(group) -> tuple:
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None:
        return False, f"torch {torch.__version__} has no ProcessGroupNCCL (built without NCCL)", 0, None
    maker = _SPLIT if _eager() else _NEW_GROUP
    backend = str(dist.get_backend(group)).lower()
    if backend != "nccl":
        return False, f"the group's backend is {backend}, not nccl", maker, None
    options = nccl.Options()
    config = getattr(options, "config", None)
    if config is None:
        return (False, f"torch {torch.__version__}: ProcessGroupNCCL.Options has no config (torch built with NCCL < 2.17)",
                maker, None)
    if not hasattr(config, "cta_policy"):
        return False, (f"torch {torch.__version__}: ProcessGroupNCCL.Options().config has no cta_policy (torch "
                       "builds with NCCL >= 2.28 have it: torch 2.10 and newer)"), maker, None
    if maker == _SPLIT and not hasattr(dist, "split_group"):
        return (False, f"torch {torch.__version__} has no dist.split_group (needed with an eagerly initialized WORLD)",
                maker, None)
    config.cta_policy = getattr(nccl, "NCCL_CTA_POLICY_ZERO", _CTA_POLICY_ZERO)
    return True, "", maker, options


def _eager() -> bool:
    """WORLD was made with device_id: torch makes new groups by ncclCommSplit of WORLD's communicator."""
    default = dist.distributed_c10d._get_default_group()
    return getattr(default, "bound_device_id", None) is not None


def _node() -> int:
    """The node this process runs on as NCCL tells nodes apart (ncclpool.node_id); 0 when unknown.
    Never raises: it goes into the vote every rank must join."""
    try:
        return int(_np.node_id()) & ((1 << 64) - 1)
    except Exception:  # noqa: BLE001 - an old library or a failed call: an unknown node, still a vote
        return 0


def _count_nodes(nodes) -> int:
    """Distinct nodes among every rank's; each unknown one (0) counts as a node of its own: unknown
    nodes cannot be told apart, so ranks that could not say theirs are never taken for one node."""
    return len({n for n in nodes if n != 0}) + sum(1 for n in nodes if n == 0)


def _exchange(group, on, auto, requested, maker, node, ranks) -> tuple:
    """([(vote if True, vote if None, request code, maker, reason if True, reason if None)],
    [node]) of every rank of `group`, in group rank order."""
    mine = bytes([1 if on[0] else 0, 1 if auto[0] else 0, _REQUEST_CODES[requested], maker])
    for why in (on[1], auto[1]):
        reason = why.encode(errors="replace")[:_REASON].decode(errors="ignore").encode()  # whole characters
        mine += reason + bytes(_REASON - len(reason))
    mine += node.to_bytes(8, "little")
    device = torch.device("cuda", torch.cuda.current_device())
    sent = torch.tensor(list(mine), dtype=torch.uint8, device=device)
    every = torch.empty(_RECORD * ranks, dtype=torch.uint8, device=device)
    dist.all_gather_into_tensor(every, sent, group=group)
    data = bytes(every.tolist())
    out, nodes = [], []
    for i in range(ranks):
        record = data[i * _RECORD:(i + 1) * _RECORD]
        reasons = [record[4 + k * _REASON:4 + (k + 1) * _REASON].rstrip(b"\0").decode(errors="replace") for k in (0, 1)]
        out.append((record[0] == 1, record[1] == 1, record[2], record[3], *reasons))
        nodes.append(int.from_bytes(record[4 + 2 * _REASON:], "little"))
    return out, nodes


def _make_zero_group(group, members, maker, options):
    """The ZERO-policy group over the ranks of `group`: collective over `group` alone, made the way
    every rank agreed (`maker`). _SPLIT (eager WORLD): an ncclCommSplit of `group`'s own communicator
    (torch's new_group would split WORLD's, which every rank of WORLD must join); _NEW_GROUP: a new
    communicator of the members only. A failure inside torch's call after the others entered it is
    beyond the vote (docs/python.md, "Copy-engine all-gather": known limits)."""
    desc = "ncclpool_copy_engine"
    if maker == _SPLIT:
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
    with state.lock:
        entries = _pool_decisions.setdefault(mempool.id, [])
        entries[:] = [(g, d) for g, d in entries if g is not group] + [(group, decision)]


def pool_stats(mempool_id) -> dict:
    """stats()['copy_engine'] of a pool: used, why, and one entry per shard group decided."""
    with state.lock:
        entries = list(_pool_decisions.get(mempool_id, ()))
    if not entries:
        return {"used": False, "why": "not asked for this pool (fsdp.enable decides, copy_engine=None: auto)", "groups": []}
    decisions = [d for _, d in entries]
    used = [d for d in decisions if d.used]
    return {"used": bool(used), "why": (used[0] if used else decisions[0]).why,
            "groups": [d.as_dict() for d in decisions]}


def summary_lines(mempool_id) -> list[str]:
    """memory_summary()'s lines for a pool that fsdp.enable asked about copy engines."""
    with state.lock:
        entries = list(_pool_decisions.get(mempool_id, ()))
    return [f"  copy-engine all-gather ({d.ranks} ranks, asked {d.as_dict()['requested']}): {d.why}" for _, d in entries]


def _forget(group) -> list:
    """destroy_process_group(group) is coming: drops the decisions about `group` (every one for None)
    and returns the copy-engine groups made for it, which go first (forgotten, then destroyed; for None
    torch destroys every group itself)."""
    with state.lock:
        if group is None:
            _decisions.clear()
            return []
        companions = []
        for key, (source, agreement, _) in list(_decisions.items()):
            if source is group:
                del _decisions[key]
                if agreement.group is not None and agreement.group is not group:
                    companions.append(agreement.group)
            elif agreement.group is group:  # the copy-engine group itself: the next call votes again
                del _decisions[key]
        return companions


state.on_group_destroyed(_forget)  # state.py's destroy_process_group hook asks before a group goes

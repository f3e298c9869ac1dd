"""ncclpool.torch's copy-engine all-gather (copy_engine.py, fsdp.enable(copy_engine=...)) over the
stand-in torch (conftest.torch_layer), the ranks of a group as threads of this process: the vote is
a real all-gather between them, so every rank must reach the same decision, or the same error, and
make the ZERO-policy group together or not at all (docs/registry.md, "Lockstep"). The C vote is
replaced per test (ncclpool.copy_engine_vote: the library's own is tested with the C ABI)."""
import threading
import types

import pytest

import ncclpool
import torch_stand_in
from ncclpool import errors
from ranks import current, rank_outcomes

ZERO = 2  # NCCL_CTA_POLICY_ZERO


@pytest.fixture
def vote(monkeypatch):
    """vote(per_rank): per_rank(rank, requested, ranks) -> (use, why) becomes ncclpool.copy_engine_vote;
    returns the list of (rank, requested, ranks) it was asked."""
    asked = []

    def install(per_rank):
        def copy_engine_vote(requested, ranks, device=0):
            rank = getattr(current, "rank", 0)
            assert device == 0, device  # this rank's GPU (the stand-in's current device)
            asked.append((rank, requested, ranks))
            return per_rank(rank, requested, ranks)
        monkeypatch.setattr(ncclpool, "copy_engine_vote", copy_engine_vote, raising=False)
        return asked

    return install


def yes(rank, requested, ranks):
    return True, f"on: requested (copy_engine={requested})"  # the library's reasons start with on: / off:


def calls(layer, name):
    return [c for c in layer.dist.calls if c[0] == name]


def test_true_makes_one_zero_policy_group_over_the_same_ranks(torch_layer, vote):
    layer = torch_layer
    vote(yes)
    groups = torch_stand_in.make_group(3, desc="dp")

    def rank(r):
        zero = layer.copy_engine_group(groups[r], copy_engine=True)
        again = layer.copy_engine_group(groups[r], copy_engine=True)   # cached: no collective
        auto = layer.copy_engine_group(groups[r])                       # a yes answers auto too
        return zero, again, auto, layer.copy_engine._decision_of(groups[r])

    out = rank_outcomes(3, rank)
    assert all(kind == "ok" for kind, _ in out), out
    zeros = [result[0] for _, result in out]
    for r, (zero, again, auto, decision) in enumerate(result for _, result in out):
        assert again is zero and auto is zero and decision.group is zero and decision.used
        assert zero.options.config.cta_policy == ZERO and zero.ranks == [0, 1, 2] and zero.rank() == r
        assert decision.why == "on: every rank of 3 votes yes (rank 0: requested (copy_engine=True))"
    assert len({id(z.rendezvous) for z in zeros}) == 1, "the ranks' groups are not one group"
    assert groups[0].rendezvous.collectives == 2  # the vote and the split, once
    splits = calls(layer, "split_group")
    assert sorted(c[1].rank() for c in splits) == [0, 1, 2]
    assert all(c[2]["split_ranks"] == [[0, 1, 2]] and c[2]["pg_options"].config.cta_policy == ZERO for c in splits)


def test_auto_without_a_profile_stays_off_on_every_rank_with_the_reason(torch_layer, vote):
    layer = torch_layer
    asked = vote(lambda r, requested, ranks: (False, "auto: no profile (ncclpool tune) says copy engines win"))
    groups = torch_stand_in.make_group(3)
    out = rank_outcomes(3, lambda r: (layer.copy_engine_group(groups[r]), layer.copy_engine._decision_of(groups[r])))
    assert [kind for kind, _ in out] == ["ok"] * 3
    whys = {decision.why for _, (zero, decision) in out}
    assert all(zero is None for _, (zero, _) in out)
    assert whys == {"off: rank 0 votes no: auto: no profile (ncclpool tune) says copy engines win; 2 more rank(s) vote no"}
    assert sorted(asked, key=repr) == sorted([(r, q, 3) for r in range(3) for q in (True, None)], key=repr)  # both votes
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    # Asked again the same way: the cached "off", no collective.
    before = groups[0].rendezvous.collectives
    rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r]))
    assert groups[0].rendezvous.collectives == before


@pytest.mark.parametrize("requested", [True, None])
def test_one_rank_voting_no_fails_or_stays_off_on_every_rank(torch_layer, vote, requested):
    # NCCLPOOL_COPY_ENGINE=off on rank 1 only: every rank raises the same error naming it (True), or
    # stays off with the same reason (auto); no rank makes the group, and the group still pairs.
    layer = torch_layer
    vote(lambda r, req, ranks: (False, "off: NCCLPOOL_COPY_ENGINE=off") if r == 1 else yes(r, req, ranks))
    groups = torch_stand_in.make_group(3, ranks=[4, 5, 6])
    out = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=requested))
    expected = "rank 1 (global rank 5) votes no: NCCLPOOL_COPY_ENGINE=off"
    if requested:
        assert [kind for kind, _ in out] == ["raised"] * 3
        messages = {str(e) for _, e in out}
        assert all(isinstance(e, errors.Unsupported) for _, e in out)
        assert messages == {f"ncclpool.torch.copy_engine_group(copy_engine=True) over 3 ranks: {expected}"}
        assert all(layer.copy_engine._decision_of(g) is None for g in groups)  # no decision answered
        # The agreement is kept: asked again, every rank raises the same, without a collective.
        before = groups[0].rendezvous.collectives
        again = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=requested))
        assert {str(e) for _, e in again} == messages and groups[0].rendezvous.collectives == before
    else:
        assert out == [("ok", None)] * 3
        assert {layer.copy_engine._decision_of(g).why for g in groups} == {f"off: {expected}"}
    assert not calls(layer, "split_group")
    # Every rank took part in the same collectives: the next exchange pairs.
    assert rank_outcomes(3, lambda r: groups[r].rendezvous.exchange(r, r)) == [("ok", [0, 1, 2])] * 3


def test_ranks_asking_differently_fail_together(torch_layer, vote):
    layer = torch_layer
    vote(yes)
    groups = torch_stand_in.make_group(2)
    out = rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True if r == 0 else None))
    assert all(kind == "raised" and isinstance(e, errors.AgreementError) for kind, e in out), out
    (message,) = {str(e) for _, e in out}
    assert "rank 0 copy_engine=True, rank 1 copy_engine=None" in message and "same copy_engine on every rank" in message
    assert not calls(layer, "split_group")


def test_a_vote_that_fails_is_that_ranks_no(torch_layer, vote):
    layer = torch_layer

    def per_rank(r, requested, ranks):
        if r == 2:
            raise errors.BackendError("NCCL version unknown")
        return yes(r, requested, ranks)

    vote(per_rank)
    groups = torch_stand_in.make_group(3)
    out = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert {str(e) for _, e in out} == {"ncclpool.torch.copy_engine_group(copy_engine=True) over 3 ranks: rank 2 votes "
                                        "no: copy_engine_vote failed: BackendError: NCCL version unknown"}


def test_a_long_reason_is_cut_whole_characters_first(torch_layer, vote):
    layer = torch_layer
    why = "a" + "é" * 300  # 601 bytes of UTF-8: the record has room for 254, 253 of them whole characters
    vote(lambda r, requested, ranks: (False, why))
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group) is None
    assert layer.copy_engine._decision_of(group).why == "off: rank 0 votes no: a" + "é" * 126


def test_false_votes_too_and_bad_values_make_no_collective(torch_layer, vote):
    # False is off, but still a vote (issue 44): a rank asking False while another asks otherwise must
    # fail every rank, never miss the others' collective.
    layer = torch_layer
    asked = vote(yes)
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group, copy_engine=False) is None
    assert layer.copy_engine._decision_of(group).why == "off: copy_engine=False"
    assert len(calls(layer, "all_gather_into_tensor")) == 1
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    before = len(layer.dist.calls)
    with pytest.raises(errors.InvalidArgument, match="True, False or None"):
        layer.copy_engine_group(group, copy_engine="on")
    assert len(layer.dist.calls) == before, "a bad value is refused before anything collective"


def test_false_on_one_rank_fails_every_rank(torch_layer, vote):
    layer = torch_layer
    vote(yes)
    groups = torch_stand_in.make_group(2)
    out = rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=False if r == 0 else None))
    assert all(kind == "raised" and isinstance(e, errors.AgreementError) for kind, e in out), out
    assert "copy_engine=False" in str(out[1][1])


def test_a_torch_without_cta_policy_votes_no(torch_layer, vote, monkeypatch):
    layer = torch_layer
    vote(yes)
    old = types.SimpleNamespace(config=types.SimpleNamespace(blocking=1))  # torch < 2.10: no cta_policy
    monkeypatch.setattr(layer.dist.ProcessGroupNCCL, "Options", lambda: old)
    (group,) = torch_stand_in.make_group(1)
    with pytest.raises(errors.Unsupported, match=r"rank 0 votes no: torch 2.11.0\+stand-in: ProcessGroupNCCL.Options\(\)."
                                                 r"config has no cta_policy"):
        layer.copy_engine_group(group, copy_engine=True)
    assert layer.copy_engine_group(group) is None
    assert "has no cta_policy" in layer.copy_engine._decision_of(group).why


def test_a_group_of_another_backend_votes_no(torch_layer, vote):
    layer = torch_layer
    vote(yes)
    (gloo,) = torch_stand_in.make_group(1)
    gloo.backend = "gloo"
    assert layer.copy_engine_group(gloo) is None
    assert layer.copy_engine._decision_of(gloo).why == "off: rank 0 votes no: the group's backend is gloo, not nccl"


def test_without_the_vote_function_every_rank_votes_no(torch_layer, monkeypatch):
    layer = torch_layer
    monkeypatch.delattr(ncclpool, "copy_engine_vote", raising=False)
    (group,) = torch_stand_in.make_group(1)
    with pytest.raises(errors.Unsupported, match="this ncclpool has no copy_engine_vote"):
        layer.copy_engine_group(group, copy_engine=True)


def test_a_lazy_world_makes_the_group_of_the_members_only(torch_layer, vote, monkeypatch):
    # Without device_id WORLD is lazy: new_group(use_local_synchronization=True) needs the members only
    # (with an eager WORLD it would split WORLD's communicator, which every rank of WORLD must join).
    layer = torch_layer
    vote(yes)
    monkeypatch.setattr(layer.dist.group.WORLD, "bound_device_id", None)
    (group,) = torch_stand_in.make_group(1, ranks=[3])
    zero = layer.copy_engine_group(group, copy_engine=True)
    (made,) = calls(layer, "new_group")
    assert made[1] is zero and made[2]["ranks"] == [3] and made[2]["use_local_synchronization"] is True
    assert zero.options.config.cta_policy == ZERO and not calls(layer, "split_group")


def test_the_first_call_decides_for_every_later_request(torch_layer, vote):
    # True would be yes, auto no (no profile): an auto first call decides off; a later True is refused
    # without a collective (a vote then would pair with nothing on a rank asking auto). A group whose
    # first call made it answers both requests with it.
    layer = torch_layer
    vote(lambda r, requested, ranks: (True, "on: requested") if requested else (False, "off: no profile"))
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group) is None
    with pytest.raises(errors.InvalidState, match=r"copy_engine=True\) over 1 ranks: the first call for this group "
                                                  r"\(copy_engine=None\) decided off \(rank 0 votes no: no profile\).*"
                                                  r"pass copy_engine=True in the group's first call"):
        layer.copy_engine_group(group, copy_engine=True)
    assert layer.copy_engine_group(group) is None
    assert group.rendezvous.collectives == 1  # the one vote
    (other,) = torch_stand_in.make_group(1)
    zero = layer.copy_engine_group(other, copy_engine=True)
    assert zero is not None and layer.copy_engine_group(other) is zero
    assert layer.copy_engine_group(other, copy_engine=True) is zero
    assert other.rendezvous.collectives == 2  # the vote and the split
    assert layer.copy_engine._decision_of(other).why == "on: every rank of 1 votes yes (rank 0: requested)"


def test_destroying_a_group_destroys_its_copy_engine_group_first(torch_layer, vote, monkeypatch):
    layer = torch_layer
    vote(yes)
    layer.init()  # installs the destroy_process_group hook
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", name="ce")
    pool = layer.ncclpool_pool(mempool)
    (group,) = torch_stand_in.make_group(1, desc="dp")
    (other,) = torch_stand_in.make_group(1, desc="tp")
    zero = layer.copy_engine_group(group, copy_engine=True)
    other_zero = layer.copy_engine_group(other, copy_engine=True)
    sims = {}
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: sims.setdefault(id(g), len(sims) + 1))
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(ncclpool.SimGroup(f"g{ptr}", 1), 0, kind))
    layer.register_mem_pool(mempool, zero)
    layer.register_mem_pool(mempool, group)
    assert len(pool.communicators) == 2
    layer.dist.destroy_process_group(group)
    assert layer.dist.destroyed == [zero, group]
    assert pool.communicators == [] and layer.copy_engine._decision_of(group) is None
    layer.dist.destroy_process_group()  # everything: torch destroys every group, the decisions go
    assert layer.dist.destroyed == [zero, group, None]
    assert layer.copy_engine._decision_of(other) is None and other_zero is not None


# ---- fsdp.enable(copy_engine=...) ----

@pytest.fixture
def fsdp(torch_layer, monkeypatch):
    """A one-rank model of three FSDP modules on one shard group, a symmetric sim pool whose groups
    attach simulated communicators (ptr -> the group attached), and the fsdp helper."""
    layer = torch_layer
    import ncclpool.torch.fsdp as helper
    FSDPModule = helper.FSDPModule

    class Block(FSDPModule):
        def __init__(self, shard, children=()):
            self.shard, self.kids, self.ag, self.rs = shard, list(children), None, None

        def modules(self):
            yield self
            for k in self.kids:
                yield from k.modules()

        def _get_fsdp_state(self):
            mesh = types.SimpleNamespace(shard_process_group=self.shard)
            return types.SimpleNamespace(_fsdp_param_group=types.SimpleNamespace(mesh_info=mesh))

        def set_custom_all_gather(self, comm):
            self.ag = comm

        def set_custom_reduce_scatter(self, comm):
            self.rs = comm

    (shard,) = torch_stand_in.make_group(1, desc="shard")
    model = Block(shard, [Block(shard), Block(shard)])
    attached = []  # (group, kind) in attach order
    groups_by_ptr = {}

    def comm_ptr(group, device):
        ptr = next((p for p, g in groups_by_ptr.items() if g is group), len(groups_by_ptr) + 1)
        groups_by_ptr[ptr] = group
        return ptr

    monkeypatch.setattr(layer.binding, "_comm_ptr", comm_ptr)
    made = []

    def make_pool(**kwargs):
        mempool = layer.create_nccl_mem_pool(source="sim", name=f"fsdp-{len(made)}", **kwargs)
        pool = layer.ncclpool_pool(mempool)

        def attach(ptr, kind):
            attached.append((groups_by_ptr[ptr], kind))
            return pool.attach_sim(ncclpool.SimGroup(f"g{ptr}", 1), 0, kind)

        monkeypatch.setattr(pool, "attach_nccl", attach)
        made.append(pool)
        return mempool

    ns = types.SimpleNamespace(layer=layer, helper=helper, model=model, shard=shard, attached=attached, pool=make_pool,
                               Block=Block)
    yield ns
    for pool in made:
        for c in list(pool.communicators):
            c.forget()


def test_fsdp_all_gathers_run_on_the_copy_engine_group_off_the_default_stream(fsdp, vote):
    layer, model, shard = fsdp.layer, fsdp.model, fsdp.shard
    asked = vote(yes)
    mempool = fsdp.pool(symmetric=True)
    assert fsdp.helper.enable(model, mempool, copy_engine=True) == 3
    assert asked == [(0, True, 1), (0, None, 1)]  # one vote (for both requests) for the one shard group
    zero = layer.copy_engine._decision_of(shard).group
    blocks = list(model.modules())
    assert all(b.ag.copy_engine_group is zero and b.ag.groups == [zero] for b in blocks)
    assert all(b.rs.groups == [shard] for b in blocks)  # reduce-scatter stays on the shard group
    # allocate: the all-gather's buffers are windows of the copy-engine group
    model.ag.allocate((16,), dtype=None, device=None)
    model.rs.allocate((16,), dtype=None, device=None)
    assert fsdp.attached == [(zero, "symmetric"), (shard, "symmetric")]
    # __call__: FSDP asks on the shard group, it runs on the copy-engine group
    out, inp = layer.torch.Tensor([0]), layer.torch.Tensor([7])
    cuda = layer.torch.cuda
    assert model.ag(out, inp, shard, async_op=False) is None
    name, group, kw = layer.dist.calls[-1]
    assert group is zero and kw["async_op"] is True and layer.dist.last_work.waited, "ran on the default stream"
    assert out.data == [7]
    side = types.SimpleNamespace(name="side")
    cuda.streams.current = side
    model.ag(out, inp, shard, async_op=False)
    assert layer.dist.calls[-1][1] is zero and layer.dist.calls[-1][2]["async_op"] is False
    assert layer.dist.calls[-1][2]["stream"] is side
    work = model.ag(out, inp, shard, async_op=True)
    assert work is layer.dist.last_work and not work.waited  # FSDP waits on it itself
    with pytest.raises(errors.InvalidArgument, match="would gather other ranks"):
        model.ag(out, inp, torch_stand_in.make_group(1)[0])
    # stats and the summary say so
    ce = layer.stats(mempool)["copy_engine"]
    assert ce["used"] and ce["groups"] == [{"requested": "on", "used": True, "ranks": 1, "why": ce["why"]}]
    assert ce["why"].startswith("on: every rank of 1 votes yes")
    assert "  copy-engine all-gather (1 ranks, asked on): on: every rank of 1 votes yes" in layer.memory_summary(mempool)


def test_fsdp_auto_off_keeps_the_shard_group(fsdp, vote):
    layer, model, shard = fsdp.layer, fsdp.model, fsdp.shard
    vote(lambda r, requested, ranks: (False, "auto: no profile"))
    mempool = fsdp.pool(symmetric=True)
    fsdp.helper.enable(model, mempool)  # copy_engine=None: auto
    assert all(b.ag.copy_engine_group is None and b.ag.groups == [shard] for b in model.modules())
    out, inp = layer.torch.Tensor([0]), layer.torch.Tensor([3])
    model.ag(out, inp, shard, async_op=False)
    assert layer.dist.calls[-1][1] is shard and layer.dist.calls[-1][2]["async_op"] is False
    ce = layer.stats(mempool)["copy_engine"]
    assert not ce["used"] and ce["why"] == "off: rank 0 votes no: auto: no profile"
    assert "copy-engine all-gather (1 ranks, asked auto): off: rank 0 votes no: auto: no profile" in layer.memory_summary()


def test_fsdp_copy_engines_need_windows(fsdp, vote):
    layer, model = fsdp.layer, fsdp.model
    asked = vote(yes)
    local = fsdp.pool(symmetric=False)
    with pytest.raises(errors.InvalidArgument, match="copy engines need windows"):
        fsdp.helper.enable(model, local, copy_engine=True)
    assert model.ag is None  # nothing configured
    symmetric = fsdp.pool(symmetric=True)
    with pytest.raises(errors.InvalidArgument, match="copy engines need windows"):
        fsdp.helper.enable(model, symmetric, symmetric=False, copy_engine=True)
    fsdp.helper.enable(model, local)  # auto: off, voting as False
    fsdp.helper.enable(model, symmetric, copy_engine=False)  # off, the vote answered from the first one
    assert len(calls(layer, "all_gather_into_tensor")) == 1, "one vote for the shard group"
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    assert layer.stats(local)["copy_engine"]["why"].startswith("off: the pool registers locally (no windows)")
    assert layer.stats(symmetric)["copy_engine"]["why"] == "off: copy_engine=False"
    with pytest.raises(errors.InvalidArgument, match="True, False or None"):
        fsdp.helper.enable(model, symmetric, copy_engine="yes")
    unasked = fsdp.pool(symmetric=True)
    assert layer.stats(unasked)["copy_engine"] == {
        "used": False, "why": "not asked for this pool (fsdp.enable decides, copy_engine=None: auto)", "groups": []}
    assert "copy-engine" not in layer.memory_summary(unasked)


def test_fsdp_votes_for_every_shard_group_before_configuring_a_module(fsdp, vote):
    # Two shard groups, the second one's vote is no: copy_engine=True raises before any module changed.
    asked = []
    # The first group's vote (True and None) is yes, the second's no.
    vote(lambda r, requested, ranks: (True, "yes") if len(asked.append(requested) or asked) <= 2
         else (False, "NCCLPOOL_COPY_ENGINE=off"))
    (other,) = torch_stand_in.make_group(1, desc="other shard")
    model = fsdp.Block(fsdp.shard, [fsdp.Block(other)])
    with pytest.raises(errors.Unsupported, match="rank 0 votes no: NCCLPOOL_COPY_ENGINE=off"):
        fsdp.helper.enable(model, fsdp.pool(symmetric=True), copy_engine=True)
    assert all(b.ag is None and b.rs is None for b in model.modules())


@pytest.mark.skipif(not hasattr(ncclpool, "copy_engine_vote"), reason="a library without ncclpool.copy_engine_vote")
def test_the_librarys_own_vote(torch_layer, monkeypatch):
    # The C vote itself (no stand-in): NCCLPOOL_COPY_ENGINE=off wins over copy_engine=True on every
    # rank; without it this machine (no GPU) still votes no, for a reason the library gives.
    layer = torch_layer
    monkeypatch.setenv("NCCLPOOL_COPY_ENGINE", "off")
    groups = torch_stand_in.make_group(2)
    out = rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert {(kind, type(e), str(e)) for kind, e in out} == {(
        "raised", errors.Unsupported, "ncclpool.torch.copy_engine_group(copy_engine=True) over 2 ranks: rank 0 votes no: "
        "NCCLPOOL_COPY_ENGINE=off; 1 more rank(s) vote no")}
    monkeypatch.delenv("NCCLPOOL_COPY_ENGINE")
    assert rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r])) == [("ok", None)] * 2
    whys = {layer.copy_engine._decision_of(g).why for g in groups}
    assert len(whys) == 1 and whys.pop().startswith("off: rank 0 votes no: ") and not calls(layer, "split_group")


# ---- attacks: one rank alone differs or fails; every rank must end the same way, none left waiting ----

def per_rank(by_rank, default):
    """A function of no arguments giving by_rank[this thread's rank], else default() (rank-local torch state)."""
    return lambda *a, **k: by_rank.get(getattr(current, "rank", 0), default)(*a, **k)


class PerRankLock:
    """The layer's lock (state.lock) as each rank (a process in real life, a thread here) has its own: a
    symmetric attach holds it during its collective."""

    def __init__(self):
        self._locks = {}
        self._guard = threading.Lock()

    def _mine(self):
        with self._guard:
            return self._locks.setdefault(getattr(current, "rank", 0), threading.RLock())

    def __enter__(self):
        self._mine().acquire()

    def __exit__(self, *exc):
        self._mine().release()


def test_after_the_first_call_mixed_requests_and_extra_calls_make_no_collective(torch_layer, vote):
    # Auto decided off (True would have been yes). Then rank 0 asks True while the others ask auto,
    # and rank 1 calls once more than the others: with no collective after the first call, nobody
    # waits for a rank that never comes (rank 0 used to vote alone here and hang).
    layer = torch_layer
    vote(lambda r, requested, ranks: (True, "on: requested") if requested else (False, "off: no profile"))
    groups = torch_stand_in.make_group(3)
    assert rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r])) == [("ok", None)] * 3
    before = groups[0].rendezvous.collectives

    def later(r):
        first = layer.copy_engine_group(groups[r], copy_engine=True if r == 0 else None)
        return first, layer.copy_engine_group(groups[r]) if r == 1 else None

    out = rank_outcomes(3, later)
    assert out[0][0] == "raised" and isinstance(out[0][1], errors.InvalidState), out
    assert out[1:] == [("ok", (None, None))] * 2
    assert groups[0].rendezvous.collectives == before and not calls(layer, "split_group")


def test_after_a_refused_true_one_rank_asking_again_makes_no_collective(torch_layer, vote):
    layer = torch_layer
    vote(lambda r, requested, ranks: (False, "off: NCCLPOOL_COPY_ENGINE=off") if r == 2 else yes(r, requested, ranks))
    groups = torch_stand_in.make_group(3)
    first = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    (message,) = {str(e) for _, e in first}
    before = groups[0].rendezvous.collectives
    # Rank 0 alone retries (used to vote alone: the others never came).
    again = rank_outcomes(1, lambda r: layer.copy_engine_group(groups[0], copy_engine=True))
    assert again[0][0] == "raised" and str(again[0][1]) == message
    assert groups[0].rendezvous.collectives == before


def test_ranks_that_would_make_the_group_differently_vote_no(torch_layer, vote, monkeypatch):
    # Rank 1's WORLD is lazy (no device_id), the others' eager: rank 1 would call new_group while the
    # others wait in split_group. Every rank votes, sees it, and none makes the group.
    layer = torch_layer
    vote(yes)
    lazy = torch_stand_in.ProcessGroup(desc="lazy world")
    eager = layer.dist.group.WORLD
    monkeypatch.setattr(layer.dist.distributed_c10d, "_get_default_group",
                        lambda: lazy if getattr(current, "rank", 0) == 1 else eager)
    groups = torch_stand_in.make_group(3)
    out = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert all(kind == "raised" and isinstance(e, errors.Unsupported) for kind, e in out), out
    (message,) = {str(e) for _, e in out}
    assert ("rank 1 votes no: this rank would make the group with dist.new_group (WORLD made without device_id), rank 0 "
            "with dist.split_group (WORLD made with device_id)") in message, message
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    assert rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r])) == [("ok", None)] * 3  # auto: off, the same


@pytest.mark.parametrize("failure", ["Options() raises", "config refuses cta_policy", "no cta_policy"])
def test_one_ranks_torch_failing_before_the_group_is_its_no(torch_layer, vote, monkeypatch, failure):
    # Rank 2's torch fails where the others' works: checking it (or building the group's options, which
    # happens before the vote now, not between the vote and the split) is rank 2's "no", on every rank.
    layer = torch_layer
    vote(yes)

    class Refusing:
        blocking = 1

        @property
        def cta_policy(self):
            return 0

        @cta_policy.setter
        def cta_policy(self, value):
            raise TypeError(f"incompatible value {value}")

    def broken():
        if failure == "Options() raises":
            raise RuntimeError("CUDA error: out of memory")
        config = Refusing() if failure == "config refuses cta_policy" else types.SimpleNamespace(blocking=1)
        return types.SimpleNamespace(config=config)

    monkeypatch.setattr(layer.dist.ProcessGroupNCCL, "Options", per_rank({2: broken}, torch_stand_in._options))
    groups = torch_stand_in.make_group(3)
    out = rank_outcomes(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert all(kind == "raised" and isinstance(e, errors.Unsupported) for kind, e in out), out
    (message,) = {str(e) for _, e in out}
    expected = {"Options() raises": "checking this torch for CTA policies failed: RuntimeError: CUDA error: out of memory",
                "config refuses cta_policy": "checking this torch for CTA policies failed: TypeError: incompatible value 2",
                "no cta_policy": "ProcessGroupNCCL.Options().config has no cta_policy"}[failure]
    assert message.startswith("ncclpool.torch.copy_engine_group(copy_engine=True) over 3 ranks: rank 2 votes no: ")
    assert expected in message, message
    assert not calls(layer, "split_group")


def test_destroying_groups_in_another_order_on_one_rank_ends_the_same(torch_layer, vote):
    # Rank 0 destroys the source group (its copy-engine group goes with it) and then the copy-engine
    # group; rank 1 the other way round. torch raises for a group destroyed twice: on rank 0 alone.
    layer = torch_layer
    vote(yes)
    layer.init()
    groups = torch_stand_in.make_group(2)
    zeros = [z for _, z in rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))]

    def teardown(r):
        order = [groups[r], zeros[r]] if r == 0 else [zeros[r], groups[r]]
        for g in order:
            layer.dist.destroy_process_group(g)

    assert rank_outcomes(2, teardown) == [("ok", None)] * 2
    for r in range(2):
        assert sum(g is zeros[r] for g in layer.dist.destroyed) == 1 and sum(g is groups[r] for g in layer.dist.destroyed) == 1
        assert layer.copy_engine._decision_of(groups[r]) is None
    with pytest.raises(ValueError, match="Invalid process group"):  # a third destroy is torch's again
        layer.dist.destroy_process_group(zeros[0])


def test_copy_engine_group_installs_the_destroy_hook_itself(torch_layer, vote):
    # No pool made (init() never ran): destroying the group still takes its copy-engine group with it.
    layer = torch_layer
    vote(yes)
    (group,) = torch_stand_in.make_group(1)
    zero = layer.copy_engine_group(group, copy_engine=True)
    layer.dist.destroy_process_group(group)
    assert layer.dist.destroyed == [zero, group]


def test_registration_with_the_zero_group_failing_on_one_rank_fails_every_rank(torch_layer, vote, monkeypatch):
    # fsdp's all-gather buffers are windows of the copy-engine group: the pool attaches to it at the
    # first allocate. Rank 1's window registration fails there: the registry's vote makes both ranks
    # raise, and both end with the same table (docs/registry.md, "Lockstep").
    layer = torch_layer
    vote(yes)
    import ncclpool.torch.fsdp as helper
    groups = torch_stand_in.make_group(2, desc="shard")
    zeros = [z for _, z in rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))]
    sims, sim_lock = {}, threading.Lock()

    def comm_ptr(group, device):  # one simulated communicator per group (its ranks' handles share a rendezvous)
        with sim_lock:
            key = id(group.rendezvous)
            if key not in sims:
                sims[key] = (len(sims) + 1, ncclpool.SimGroup(f"g{len(sims) + 1}", group.size(), timeout_ms=3000))
            return sims[key][0] * 16 + group.rank()

    monkeypatch.setattr(layer.binding, "_comm_ptr", comm_ptr)
    monkeypatch.setattr(layer.state, "lock", PerRankLock())  # each rank a process: a lock of its own
    mempools = [layer.create_nccl_mem_pool(symmetric=True, source="sim", name="ce-attach") for _ in range(2)]
    for r, mempool in enumerate(mempools):
        pool = layer.ncclpool_pool(mempool)
        pool.reserve(1 << 20)  # a segment to register at the attach
        sim_by_ptr = lambda ptr: next(sim for n, sim in sims.values() if n == ptr // 16)  # noqa: E731
        monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind, pool=pool: pool.attach_sim(sim_by_ptr(ptr), ptr % 16, kind))
    comm_ptr(zeros[0], 0)  # make the copy-engine group's simulated communicator
    next(iter(sims.values()))[1].inject_failure("register_window", rank=1)
    ags = [helper.PoolAllGather(mempools[r], [zeros[r]], None, copy_engine_group=zeros[r], shard_group=groups[r])
           for r in range(2)]
    out = rank_outcomes(2, lambda r: ags[r].allocate((16,), dtype=None, device=None))
    assert [kind for kind, _ in out] == ["raised"] * 2, out
    assert all(isinstance(e, errors.Error) for _, e in out), out
    tables = [len(layer.binding.binding_of(m).attachments) for m in mempools]
    assert tables[0] == tables[1], tables
    for mempool in mempools:
        for c in list(layer.ncclpool_pool(mempool).communicators):
            c.forget()


def test_fsdp_groups_of_other_ranks_decide_on_their_own(fsdp, vote):
    # HSDP: ranks 0-1 shard over group A, ranks 2-3 over group B; rank 3 votes no. A's ranks run their
    # all-gathers on A's copy-engine group, B's stay on B: every rank of a group decides the same.
    layer = fsdp.layer
    off = "NCCLPOOL_COPY_ENGINE=off"
    vote(lambda r, requested, ranks: (False, f"off: {off}") if r == 3 else yes(r, requested, ranks))
    a, b = torch_stand_in.make_group(2, ranks=[0, 1], desc="A"), torch_stand_in.make_group(2, ranks=[2, 3], desc="B")
    shard = [a[0], a[1], b[0], b[1]]
    models = [fsdp.Block(shard[r], [fsdp.Block(shard[r])]) for r in range(4)]
    mempools = [fsdp.pool(symmetric=True) for _ in range(4)]
    out = rank_outcomes(4, lambda r: fsdp.helper.enable(models[r], mempools[r]))
    assert out == [("ok", 2)] * 4
    for r in range(4):
        ce = [b.ag.copy_engine_group for b in models[r].modules()]
        assert (all(ce) and len(set(map(id, ce))) == 1) if r < 2 else ce == [None, None], (r, ce)
        why = layer.stats(mempools[r])["copy_engine"]["why"]
        assert why.startswith("on: every rank of 2 votes yes") if r < 2 else why == f"off: rank 1 (global rank 3) votes no: {off}"
    # copy_engine=True on every rank: B's ranks raise the same error, A's are on (already decided: no new vote).
    out = rank_outcomes(4, lambda r: fsdp.helper.enable(models[r], mempools[r], copy_engine=True))
    assert out[:2] == [("ok", 2)] * 2 and {str(e) for _, e in out[2:]} == {
        f"ncclpool.torch.copy_engine_group(copy_engine=True) over 2 ranks: rank 1 (global rank 3) votes no: {off}"}


def test_fsdp_ranks_asking_differently_fail_together_before_configuring(fsdp, vote):
    vote(yes)
    shards = torch_stand_in.make_group(2, desc="shard")
    models = [fsdp.Block(shards[r], [fsdp.Block(shards[r])]) for r in range(2)]
    mempools = [fsdp.pool(symmetric=True) for _ in range(2)]
    out = rank_outcomes(2, lambda r: fsdp.helper.enable(models[r], mempools[r], copy_engine=True if r == 0 else None))
    assert all(kind == "raised" and isinstance(e, errors.AgreementError) for kind, e in out), out
    assert all(b.ag is None for m in models for b in m.modules())


def test_fsdp_modules_without_parameters_cast_no_vote(fsdp, vote):
    # A root FSDP module whose parameters all live in its children has no param group: FSDP2 gathers
    # nothing for it. It used to fall back to WORLD and vote there (and make a copy-engine group over
    # every rank of WORLD, one more communicator, for nothing).
    layer = fsdp.layer
    asked = vote(yes)

    class Empty(fsdp.Block):
        def _get_fsdp_state(self):
            return types.SimpleNamespace(_fsdp_param_group=None)

    model = Empty(None, [fsdp.Block(fsdp.shard), fsdp.Block(fsdp.shard)])
    assert fsdp.helper.enable(model, fsdp.pool(symmetric=True), copy_engine=True) == 3
    assert asked == [(0, True, 1), (0, None, 1)]  # the shard group's vote only
    assert layer.copy_engine._decision_of(layer.dist.group.WORLD) is None
    assert model.ag.copy_engine_group is None and model.ag.groups == [layer.dist.group.WORLD]
    assert all(b.ag.copy_engine_group is not None for b in model.kids)
    assert [c[1] for c in calls(layer, "split_group")] == [fsdp.shard]


def test_ranks_on_different_nodes_agree_off_alike_and_true_raises_everywhere(torch_layer, vote, monkeypatch):
    """Ranks whose node differs (NCCL_HOSTID per process, or real nodes): NCCL runs copy engines within
    one node only. Every rank sees every rank's node in the same all-gather, so every rank decides off
    alike, though each voted yes on its own."""
    layer = torch_layer
    vote(yes)
    monkeypatch.setattr(layer.copy_engine, "_node", lambda: 0x1000 + getattr(current, "rank", 0) // 2)  # 2 ranks per node
    groups = torch_stand_in.make_group(4, desc="dp")
    out = rank_outcomes(4, lambda r: layer.copy_engine_group(groups[r]))
    assert [kind for kind, _ in out] == ["ok"] * 4, out
    assert all(result is None for _, result in out)
    whys = {layer.copy_engine._decision_of(g).why for g in groups}
    assert len(whys) == 1 and "spans 2 nodes" in whys.pop()
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    groups = torch_stand_in.make_group(4, desc="tp")
    out = rank_outcomes(4, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert [kind for kind, _ in out] == ["raised"] * 4, out
    messages = {str(e) for _, e in out}
    assert len(messages) == 1 and "spans 2 nodes" in messages.pop()
    assert all(isinstance(e, ncclpool.Unsupported) for _, e in out)


def test_an_unknown_node_is_a_vote_not_a_skipped_collective(torch_layer, vote, monkeypatch):
    layer = torch_layer
    vote(yes)

    def node_id():
        if getattr(current, "rank", 0) == 1:
            raise RuntimeError("node_id failed on rank 1")
        return 7

    monkeypatch.setattr(ncclpool, "node_id", node_id, raising=False)
    groups = torch_stand_in.make_group(2, desc="dp")
    out = rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r]))
    assert [kind for kind, _ in out] == ["ok", "ok"] and all(result is None for _, result in out), out
    assert "spans 2 nodes" in layer.copy_engine._decision_of(groups[0]).why


def test_one_rank_of_four_on_another_node_turns_it_off_on_every_rank(torch_layer, vote, monkeypatch):
    layer = torch_layer
    vote(yes)
    monkeypatch.setattr(layer.copy_engine, "_node", lambda: 0x2000 if getattr(current, "rank", 0) == 3 else 0x1000)
    groups = torch_stand_in.make_group(4, desc="dp")
    out = rank_outcomes(4, lambda r: layer.copy_engine_group(groups[r]))
    assert [kind for kind, _ in out] == ["ok"] * 4 and all(result is None for _, result in out), out
    whys = {layer.copy_engine._decision_of(g).why for g in groups}
    assert len(whys) == 1 and "spans 2 nodes" in whys.pop()
    groups = torch_stand_in.make_group(4, desc="tp")
    out = rank_outcomes(4, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert [kind for kind, _ in out] == ["raised"] * 4 and all(isinstance(e, ncclpool.Unsupported) for _, e in out), out
    assert len({str(e) for _, e in out}) == 1
    assert not calls(layer, "split_group") and not calls(layer, "new_group")


def test_ranks_whose_nodes_are_all_unknown_are_not_taken_for_one_node(torch_layer, vote, monkeypatch):
    """node_id fails on every rank (an old library): the ranks may be on two nodes, so the vote is off
    on every rank alike, never a copy-engine group across hosts."""
    layer = torch_layer
    vote(yes)

    def node_id():
        raise RuntimeError("no ncclpool_node_id in this library")

    monkeypatch.setattr(ncclpool, "node_id", node_id, raising=False)
    groups = torch_stand_in.make_group(2, desc="dp")
    out = rank_outcomes(2, lambda r: layer.copy_engine_group(groups[r]))
    assert [kind for kind, _ in out] == ["ok", "ok"] and all(result is None for _, result in out), out
    why = layer.copy_engine._decision_of(groups[0]).why
    assert "spans 2 nodes" in why and why == layer.copy_engine._decision_of(groups[1]).why
    assert not calls(layer, "split_group") and not calls(layer, "new_group")

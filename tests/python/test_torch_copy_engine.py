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

ZERO = 2  # NCCL_CTA_POLICY_ZERO
current = threading.local()  # which rank this thread is


def run_ranks(size, fn):
    """fn(rank) on one thread per rank; [("ok", result) or ("raised", exception)] in rank order."""
    out = [None] * size

    def body(rank):
        current.rank = rank
        try:
            out[rank] = ("ok", fn(rank))
        except BaseException as e:  # noqa: BLE001 - each rank's outcome is what the test checks
            out[rank] = ("raised", e)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting: the ranks did not do the same collectives"
    return out


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

    out = run_ranks(3, rank)
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
    out = run_ranks(3, lambda r: (layer.copy_engine_group(groups[r]), layer.copy_engine._decision_of(groups[r])))
    assert [kind for kind, _ in out] == ["ok"] * 3
    whys = {decision.why for _, (zero, decision) in out}
    assert all(zero is None for _, (zero, _) in out)
    assert whys == {"off: rank 0 votes no: auto: no profile (ncclpool tune) says copy engines win; 2 more rank(s) vote no"}
    assert sorted(asked) == [(0, None, 3), (1, None, 3), (2, None, 3)]
    assert not calls(layer, "split_group") and not calls(layer, "new_group")
    # Asked again the same way: the cached "off", no collective.
    before = groups[0].rendezvous.collectives
    run_ranks(3, lambda r: layer.copy_engine_group(groups[r]))
    assert groups[0].rendezvous.collectives == before


@pytest.mark.parametrize("requested", [True, None])
def test_one_rank_voting_no_fails_or_stays_off_on_every_rank(torch_layer, vote, requested):
    # NCCLPOOL_COPY_ENGINE=off on rank 1 only: every rank raises the same error naming it (True), or
    # stays off with the same reason (auto); no rank makes the group, and the group still pairs.
    layer = torch_layer
    vote(lambda r, req, ranks: (False, "off: NCCLPOOL_COPY_ENGINE=off") if r == 1 else yes(r, req, ranks))
    groups = torch_stand_in.make_group(3, ranks=[4, 5, 6])
    out = run_ranks(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=requested))
    expected = "rank 1 (global rank 5) votes no: NCCLPOOL_COPY_ENGINE=off"
    if requested:
        assert [kind for kind, _ in out] == ["raised"] * 3
        messages = {str(e) for _, e in out}
        assert all(isinstance(e, errors.Unsupported) for _, e in out)
        assert messages == {f"ncclpool.torch.copy_engine_group(copy_engine=True) over 3 ranks: {expected}"}
        assert all(layer.copy_engine._decision_of(g) is None for g in groups)  # nothing cached: a later call votes
    else:
        assert out == [("ok", None)] * 3
        assert {layer.copy_engine._decision_of(g).why for g in groups} == {f"off: {expected}"}
    assert not calls(layer, "split_group")
    # Every rank took part in the same collectives: the next exchange pairs.
    assert run_ranks(3, lambda r: groups[r].rendezvous.exchange(r, r)) == [("ok", [0, 1, 2])] * 3


def test_ranks_asking_differently_fail_together(torch_layer, vote):
    layer = torch_layer
    vote(yes)
    groups = torch_stand_in.make_group(2)
    out = run_ranks(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True if r == 0 else None))
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
    out = run_ranks(3, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert {str(e) for _, e in out} == {"ncclpool.torch.copy_engine_group(copy_engine=True) over 3 ranks: rank 2 votes "
                                        "no: copy_engine_vote failed: BackendError: NCCL version unknown"}


def test_a_long_reason_is_cut_whole_characters_first(torch_layer, vote):
    layer = torch_layer
    why = "a" + "é" * 300  # 601 bytes of UTF-8: the record has room for 254, 253 of them whole characters
    vote(lambda r, requested, ranks: (False, why))
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group) is None
    assert layer.copy_engine._decision_of(group).why == "off: rank 0 votes no: a" + "é" * 126


def test_false_and_bad_values_make_no_collective(torch_layer, vote):
    layer = torch_layer
    asked = vote(yes)
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group, copy_engine=False) is None
    with pytest.raises(errors.InvalidArgument, match="True, False or None"):
        layer.copy_engine_group(group, copy_engine="on")
    assert asked == [] and layer.dist.calls == []


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


def test_an_off_decision_is_asked_again_for_another_request(torch_layer, vote):
    layer = torch_layer
    answers = iter([(False, "auto: no profile"), (True, "copy engines asked for")])
    vote(lambda r, requested, ranks: next(answers))
    (group,) = torch_stand_in.make_group(1)
    assert layer.copy_engine_group(group) is None
    zero = layer.copy_engine_group(group, copy_engine=True)  # another request: a new vote, now yes
    assert zero is not None and layer.copy_engine_group(group) is zero
    assert group.rendezvous.collectives == 3  # two votes and one split


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
    assert len(asked) == 1  # one vote for the one shard group
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
    fsdp.helper.enable(model, local)  # auto: off without a vote
    fsdp.helper.enable(model, symmetric, copy_engine=False)  # off without a vote
    assert asked == [] and layer.dist.calls == []
    assert layer.stats(local)["copy_engine"]["why"].startswith("off: the pool registers locally (no windows)")
    assert layer.stats(symmetric)["copy_engine"]["why"] == "off: copy_engine=False (no vote)"
    with pytest.raises(errors.InvalidArgument, match="True, False or None"):
        fsdp.helper.enable(model, symmetric, copy_engine="yes")
    unasked = fsdp.pool(symmetric=True)
    assert layer.stats(unasked)["copy_engine"] == {
        "used": False, "why": "not asked for this pool (fsdp.enable decides, copy_engine=None: auto)", "groups": []}
    assert "copy-engine" not in layer.memory_summary(unasked)


def test_fsdp_votes_for_every_shard_group_before_configuring_a_module(fsdp, vote):
    # Two shard groups, the second one's vote is no: copy_engine=True raises before any module changed.
    answers = iter([(True, "yes"), (False, "NCCLPOOL_COPY_ENGINE=off")])
    vote(lambda r, requested, ranks: next(answers))
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
    out = run_ranks(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))
    assert {(kind, type(e), str(e)) for kind, e in out} == {(
        "raised", errors.Unsupported, "ncclpool.torch.copy_engine_group(copy_engine=True) over 2 ranks: rank 0 votes no: "
        "NCCLPOOL_COPY_ENGINE=off; 1 more rank(s) vote no")}
    monkeypatch.delenv("NCCLPOOL_COPY_ENGINE")
    assert run_ranks(2, lambda r: layer.copy_engine_group(groups[r])) == [("ok", None)] * 2
    whys = {layer.copy_engine._decision_of(g).why for g in groups}
    assert len(whys) == 1 and whys.pop().startswith("off: rank 0 votes no: ") and not calls(layer, "split_group")


def test_destroying_groups_in_another_order_on_one_rank_ends_the_same(torch_layer, vote):
    # Rank 0 destroys the source group (its copy-engine group goes with it) and then the copy-engine
    # group; rank 1 the other way round. torch raises for a group destroyed twice: on rank 0 alone.
    layer = torch_layer
    vote(yes)
    layer.init()
    groups = torch_stand_in.make_group(2)
    zeros = [z for _, z in run_ranks(2, lambda r: layer.copy_engine_group(groups[r], copy_engine=True))]

    def teardown(r):
        order = [groups[r], zeros[r]] if r == 0 else [zeros[r], groups[r]]
        for g in order:
            layer.dist.destroy_process_group(g)

    assert run_ranks(2, teardown) == [("ok", None)] * 2
    for r in range(2):
        assert sum(g is zeros[r] for g in layer.dist.destroyed) == 1 and sum(g is groups[r] for g in layer.dist.destroyed) == 1
        assert layer.copy_engine._decision_of(groups[r]) is None
    with pytest.raises(ValueError, match="Invalid process group"):  # a third destroy is torch's again
        layer.dist.destroy_process_group(zeros[0])

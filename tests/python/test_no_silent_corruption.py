"""Bad inputs and rank mismatches through the Python package, on the simulator (CI, no GPU)."""
import time

import pytest

import ncclpool
from ncclpool import errors

from ranks import run_ranks
from test_capi import MiB, sim_pool


def test_sizes_beyond_size_t_are_refused_not_wrapped():
    with sim_pool() as p:
        with pytest.raises(errors.SizeTooLarge):
            p.alloc(2**64 + 1024)  # ctypes alone would allocate 1024 bytes
        with pytest.raises(errors.InvalidArgument):
            p.alloc(-1)
        with pytest.raises(errors.InvalidArgument):
            p.alloc(1.5)
        with pytest.raises(errors.SizeTooLarge):
            p.reserve(2**70)
        assert p.stats()["active_allocations"] == 0
    with pytest.raises(errors.SizeTooLarge):
        sim_pool(growth_chunk=2**64)


def test_free_without_a_stream_uses_the_allocations_stream():
    with sim_pool() as p:
        a = p.alloc(MiB, stream=7)
        p.free(a)  # was: stream 0, so reuse on stream 7 needed a cross-stream wait
        b = p.alloc(MiB, stream=7)
        assert b == a and p.stats()["cross_stream_reuses"] == 0
        p.free(b)
        p.check()


def test_closing_a_pool_inside_its_own_scope_is_refused():
    p = sim_pool()
    with p.scope():
        with pytest.raises(errors.InvalidState, match="scope"):
            p.close()
        x = p.alloc(MiB)  # the pool is intact
        p.free(x)
    p.close()
    assert p.closed


def test_a_rank_with_nothing_pending_learns_of_the_mismatch_at_its_next_agreement_point():
    world = ncclpool.SimGroup("world", 2, matching="nccl")

    def rank(r):
        p = sim_pool("symmetric", name="shared", growth_chunk=4 * MiB)
        c = p.attach_sim(world, r)
        if r == 0:
            p.alloc(MiB)  # only rank 0 grows
            time.sleep(0.05)
        now = None
        try:
            p.commit()
        except errors.AgreementError as e:
            now = str(e)
        c.sim_user_collective(99)  # pairs with the other rank's, not with a stray agreement
        later = None
        try:
            p.poll()
        except errors.AgreementError as e:
            later = str(e)
        c.forget()
        return now, later

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    (now0, _), (now1, later1) = results
    assert "ranks disagree at commit #1" in now0
    assert now1 is None and "found after the fact" in later1


def test_an_exception_inside_a_scope_on_one_rank_counts_its_end_and_fails_every_rank_there():
    world = ncclpool.SimGroup("world", 2, matching="nccl")

    def rank(r):
        p = sim_pool("symmetric", name="shared", growth_chunk=4 * MiB)
        c = p.attach_sim(world, r)
        seen = None
        buf = None
        try:
            with p.scope():
                buf = p.alloc(MiB)  # both grow: a window pending on both ranks
                if r == 1:
                    raise KeyError("the application failed here, on rank 1 only")
        except errors.AgreementError as e:
            seen = str(e)
        except KeyError:
            seen = "KeyError"
        ends = p.stats_json()["scope_ends"]
        c.sim_user_collective(5)  # pairs with the other rank's: no stray agreement
        with p.scope():  # the next scope end agrees on both ranks and registers the window
            pass
        pending = p.pending
        p.free(buf)
        c.detach()
        p.close()
        return seen, ends, pending

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    (seen0, ends0, pending0), (seen1, ends1, pending1) = results
    assert "voted no" in seen0, seen0
    assert seen1 == "KeyError"
    assert ends0 == ends1
    assert pending0 == pending1 == 0


def test_check_level_is_an_option_and_an_environment_variable(monkeypatch):
    with sim_pool("symmetric", check="layout") as p:
        assert p.check_level == "layout"
        assert p.stats_json()["check"] == "layout"
    monkeypatch.setenv("NCCLPOOL_CHECK", "collectives")
    with sim_pool("symmetric") as p:
        assert p.check_level == "collectives"
    monkeypatch.setenv("NCCLPOOL_CHECK", "paranoid")
    with pytest.raises(errors.InvalidArgument, match="NCCLPOOL_CHECK"):
        sim_pool("symmetric")
    with pytest.raises(errors.InvalidArgument):
        sim_pool("symmetric", check="paranoid")


def test_buffers_at_other_offsets_are_named_with_ranks_and_offsets():
    world = ncclpool.SimGroup("world", 2, matching="nccl")

    def rank(r):
        p = sim_pool("symmetric", name="shared", growth_chunk=128 * MiB)
        c = p.attach_sim(world, r)
        p.reserve(128 * MiB)  # one segment for both
        first, second = p.alloc(4 * MiB), p.alloc(4 * MiB)
        p.commit()
        x = first if r == 0 else second
        try:
            c.verify_buffers(x, x)
        finally:
            c.forget()

    _, failures = run_ranks(2, rank)
    for f in failures:
        assert isinstance(f, errors.AgreementError), f
        assert "rank 0: window #0 offset 0;" in str(f) and "rank 1: window #0 offset 4194304;" in str(f)


# ---- the torch layer's bookkeeping, with a stand-in for torch (conftest.torch_layer)

def test_release_mem_pool_that_fails_keeps_its_table_true(torch_layer):
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(symmetric=False, source="sim")
    pool = layer.ncclpool_pool(mempool)
    assert pool.name == "torch-pool-0"  # no rank or device in it: pools are matched by name
    group = ncclpool.SimGroup("dp", 1)
    comm = pool.attach_sim(group, 0, "local")
    layer.binding.binding_of(mempool).attachments[1] = layer.state.Attachment(object(), 1, "local", comm)
    live = pool.alloc(MiB)
    with pytest.raises(errors.InvalidState, match="still live"):
        layer.release_mem_pool(mempool)  # detaches the group, then the pool refuses to close
    assert layer.binding.binding_of(mempool).attachments == {}, "a detached group stayed in the table"
    pool.free(live)
    layer.release_mem_pool(mempool)
    assert pool.closed


@pytest.mark.parametrize("kind", ["local", "symmetric", "auto", None])
def test_helpers_follow_the_kind_the_pool_was_made_for(torch_layer, monkeypatch, kind):
    # Was: create_nccl_mem_pool(symmetric=False) then nccl_mem / fsdp.enable failed with "symmetric
    # registration needs a deterministic pool": the helpers defaulted to symmetric.
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(kind=kind, source="sim")
    pool = layer.ncclpool_pool(mempool)
    groups = [ncclpool.SimGroup(name, 1) for name in ("dp", "ep")]
    kinds = []

    def attach_nccl(ptr, kind):  # a simulated communicator stands in for the group's ncclComm_t
        kinds.append(kind)
        return pool.attach_sim(groups[ptr - 1], 0, kind)

    monkeypatch.setattr(pool, "attach_nccl", attach_nccl)
    world, other = layer.dist.ProcessGroup(), layer.dist.ProcessGroup()
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda group, device: 1 if group is world else 2)
    with layer.nccl_mem(mempool, group=world):
        pass
    with layer.MultiGroupMemPoolAllocator(mempool, [world, other]):
        pass
    expected = kind or "auto"  # create_nccl_mem_pool() with neither symmetric nor kind: an auto pool
    assert pool.registration == expected and kinds == [expected, expected], kinds
    for c in list(pool.communicators):
        c.forget()


def test_an_auto_pool_routes_torch_segments_and_release_detaches_its_local_groups(torch_layer, monkeypatch, sim_profile):
    # A profile for the simulator: tensors below 2 MiB unregistered, larger ones local (no windows,
    # so nothing collective: release_mem_pool may detach the group itself).
    sim_profile(1, [(0, "none"), (2 * MiB, "local")])
    layer = torch_layer
    with pytest.raises(errors.InvalidArgument, match="give one of them"):
        layer.create_nccl_mem_pool(symmetric=True, kind="auto", source="sim")
    mempool = layer.create_nccl_mem_pool(kind="auto", source="sim")
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)
    world = layer.dist.ProcessGroup()
    lib = ncclpool.library()
    with layer.nccl_mem(mempool, group=world):
        small = lib.ncclpool_torch_alloc(2 * MiB, 0, None)
        large = lib.ncclpool_torch_alloc(64 * MiB, 0, None)
    routes = pool.routes()
    assert routes["description"] == "none below 2 MiB, local from 2 MiB", routes
    held = {p["placement"]: p["stats"]["active_allocations"] for p in routes["parts"]}
    assert held == {"none": 1, "local": 1, "symmetric": 0}, held
    assert layer.checks._symmetric_comm_of(world) is None  # no windows: check mode has nothing to verify
    assert group.live_registrations == 1  # the local part's segment only
    for ptr in (small, large):
        lib.ncclpool_torch_free(ptr, 0, 0, None)
    layer.release_mem_pool(mempool)
    assert pool.closed and group.live_registrations == 0


def test_an_auto_pool_with_windows_for_one_collective_only_counts_as_having_windows(torch_layer, monkeypatch, sim_profile):
    # Most collectives pick no registration, all-gather picks windows: the attachment has windows
    # (its detach is collective, check mode verifies its collectives) though the combined routes have none.
    sim_profile(1, [(0, {"all_gather": "symmetric", "reduce_scatter": "none", "all_reduce": "none"})])
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(kind="auto", source="sim", check="collectives")
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)
    world = layer.dist.ProcessGroup()
    layer.register_mem_pool(mempool, world)
    assert pool.routes()["description"] == "none at every size"
    assert layer.binding.binding_of(mempool).attachments[1].windows
    assert layer.checks._symmetric_comm_of(world) is not None
    for c in list(pool.communicators):
        c.forget()
    layer.check_collectives(False)


def test_check_mode_verifies_only_the_groups_of_pools_in_check_mode(torch_layer, monkeypatch):
    # check_collectives() is switched on per process (a pool made in check mode 'collectives' on this
    # rank): a group with windows of a pool that is not in check mode must not make this rank verify
    # its collectives alone (verify_buffers is collective: the other ranks, whose pools agreed on no
    # check mode, would not join it; issue 44's audit of the torch layer).
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", check="off")
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)
    world = layer.dist.ProcessGroup()
    layer.register_mem_pool(mempool, world)
    layer.check_collectives(True)  # as a check-mode pool made on this rank alone would
    try:
        assert layer.binding.binding_of(mempool).attachments[1].windows
        assert layer.checks._symmetric_comm_of(world) is None
    finally:
        layer.check_collectives(False)
        for c in list(pool.communicators):
            c.forget()


def test_a_context_use_finds_registered_groups_without_asking_torch(torch_layer, monkeypatch):
    # Every use of nccl_mem / MultiGroupMemPoolAllocator registers its groups; a group already
    # registered is found by identity, without the torch calls behind _comm_ptr.
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(symmetric=False, source="sim")
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    world = layer.dist.ProcessGroup()
    asked = []
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: asked.append(g) or 1)
    for _ in range(5):
        with layer.nccl_mem(mempool, group=world):
            pass
    assert asked == [world], "the communicator of a registered group was looked up again"
    with pytest.raises(errors.InvalidState, match="deregister_mem_pool first"):
        layer.register_mem_pool(mempool, world, symmetric=True)  # the other kind: still refused
    for c in list(pool.communicators):
        c.forget()


@pytest.mark.parametrize("fails_in", ["enter", "exit"])
def test_a_torch_context_that_fails_leaves_no_scope_open(torch_layer, monkeypatch, fails_in):
    layer = torch_layer

    class Failing:
        def __enter__(self):
            if fails_in == "enter":
                raise RuntimeError("torch refused to route allocations")
            return self

        def __exit__(self, *exc):
            if fails_in == "exit":
                raise RuntimeError("torch refused to stop routing allocations")
            return False

    monkeypatch.setattr(layer.torch.cuda, "use_mem_pool", lambda pool, device=None: Failing())
    mempool = layer.create_nccl_mem_pool(symmetric=False, source="sim")
    npool = layer.binding.binding_of(mempool).pool
    ends = npool.stats_json()["scope_ends"]
    with pytest.raises(RuntimeError, match="torch refused"):
        with layer.use_mem_pool(mempool):
            pass
    assert ncclpool.library().ncclpool_current_pool() is None, "the pool's scope stayed open"
    assert npool.stats_json()["scope_ends"] == ends + 1, "a failed context is still a scope end, as on every other rank"
    layer.release_mem_pool(mempool)  # refused while a scope of the pool is open


def test_pools_grow_by_their_requests_then_by_chunks_that_grow(torch_layer):
    # A torch segment of a small process gets a segment of its own size, not a 1 GiB chunk; past the
    # segment budget chunks start at 1/16 and grow with the pool (docs/pool.md).
    layer = torch_layer
    MiB = 1 << 20
    for pool in (layer.ncclpool_pool(layer.create_nccl_mem_pool(symmetric=True, source="sim")),
                 ncclpool.Pool(source="sim", registration="symmetric")):
        assert pool.growth_chunk == 1024 * MiB
        ptr = pool.alloc(20 * MiB)
        assert pool.stats()["reserved_bytes"] == 20 * MiB and pool.stats()["segment_count"] == 1
        assert "past the segment budget, chunks ramp up to it" in pool.memory_summary()
        pool.free(ptr)


def test_a_detach_that_fails_regardless_drops_the_handle_too():
    # A refused local deregistration detaches the communicator regardless (RegistrationError): the C
    # handle and the Python Communicator go with it, as on every other rank; they used to stay, naming
    # a communicator the pool no longer had (neither detach nor forget could remove them, and the torch
    # layer's table kept the group, so on that rank alone the next use skipped the attach).
    g = ncclpool.SimGroup("dp", 1)
    p = ncclpool.Pool(source="sim", registration="local", name="zombie", growth_chunk=4 * MiB)
    buf = p.alloc(1 * MiB)
    c = p.attach_sim(g, 0)
    g.inject_failure("deregister_local", rank=0, nth=1)
    with pytest.raises(errors.RegistrationError, match="detached regardless"):
        c.detach()
    assert not c.attached and c not in p.communicators
    with pytest.raises(errors.InvalidState, match="no longer attached"):
        c.forget()
    c2 = p.attach_sim(g, 0)  # attachable again
    c2.detach()
    p.free(buf)
    p.close()

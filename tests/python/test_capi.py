"""The Python package (ctypes over the C ABI) on the simulator: runs in CI without a GPU."""
import ctypes
import threading

import pytest

import ncclpool
from ncclpool import errors
from ranks import run_ranks

MiB = 1 << 20


def sim_pool(registration="local", **kw):
    kw.setdefault("growth_chunk", 4 * MiB)
    return ncclpool.Pool(source="sim", registration=registration, name=kw.pop("name", f"py-{registration}"), **kw)


def test_version_and_features():
    assert ncclpool.version().count(".") == 2
    f = ncclpool.features()
    assert set(f) >= {"cuda_available", "nccl_available", "nccl_version", "nccl_windows", "why_not", "library"}
    assert f["library"].endswith((".so", ".so.0", ".so.0.1.0")) or "libncclpool" in f["library"]
    if not f["cuda_available"]:
        assert "CUDA" in f["why_not"]
    # Decided at the process's first window registration (an NCCL communicator's): not here.
    assert f["symmetric_ctas_decided"] is False and f["symmetric_ctas"] == 0
    assert "not decided" in f["symmetric_ctas_source"]


def test_copy_engine_vote_says_no_with_its_reason_and_refuses_bad_requests(monkeypatch):
    monkeypatch.setenv("NCCLPOOL_COPY_ENGINE", "off")
    use, why = ncclpool.copy_engine_vote(True, 2)
    assert use is False and why == "off: NCCLPOOL_COPY_ENGINE=off"
    monkeypatch.delenv("NCCLPOOL_COPY_ENGINE")
    use, why = ncclpool.copy_engine_vote(False, 2)
    assert use is False and why.startswith("off: ")
    if not ncclpool.features()["cuda_available"]:  # CI: no GPU, no copy engines
        use, why = ncclpool.copy_engine_vote(True, 2)
        assert use is False and why.startswith("off: ")
    with pytest.raises(ncclpool.InvalidArgument, match="requested must be None, True or False"):
        ncclpool.copy_engine_vote("yes", 2)
    with pytest.raises(ncclpool.InvalidArgument, match="ranks is 0"):
        ncclpool.copy_engine_vote(None, 0)


def test_node_id_is_one_value_per_process_and_follows_nccl_hostid():
    import subprocess
    import sys
    assert ncclpool.node_id() == ncclpool.node_id()
    code = "import ncclpool; print(ncclpool.node_id())"
    def node_with(hostid):
        env = dict(__import__("os").environ, NCCL_HOSTID=hostid)
        return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert node_with("node-a") == node_with("node-a") != node_with("node-b")


def test_pool_resolves_defaults():
    with sim_pool("symmetric") as p:
        assert p.source == "sim"
        assert p.deterministic and p.registration == "symmetric"
        assert p.alignment == 512
        assert "sim device 0" in p.source_description
    assert p.closed
    with pytest.raises(errors.InvalidState, match="closed"):
        p.alloc(10)


def test_alloc_free_and_errors_map_to_exceptions():
    p = sim_pool()
    a = p.alloc(1000, stream=3)
    b = p.alloc(3 * MiB, stream=3)
    assert a % 512 == 0
    s = p.stats()
    assert s["active_allocations"] == 2 and s["requested_bytes"] == 1000 + 3 * MiB
    with pytest.raises(errors.InvalidArgument, match="0 bytes"):
        p.alloc(0)
    with pytest.raises(errors.SizeTooLarge):
        p.alloc(1 << 62)
    with pytest.raises(errors.InvalidState, match="still live"):
        p.close()
    p.free(a, stream=3)
    with pytest.raises(errors.DoubleFree) as info:
        p.free(a, stream=3)
    assert info.value.status == 4 and "ncclpool_free" in str(info.value)
    assert isinstance(info.value, ValueError)  # Pythonic base classes too
    with pytest.raises(errors.InvalidPointer):
        p.free(b + 512)
    with pytest.raises(errors.ForeignPointer):
        p.free(12345 * 4096)
    p.free(b, stream=3)
    p.check()
    assert ncclpool.last_error().startswith("ncclpool_free")
    p.close()


def test_a_stream_publishes_its_frees_for_other_streams():
    p = sim_pool(name="py-streams", growth_chunk=2 * MiB)
    a = p.alloc(2 * MiB, stream=1)
    p.free(a)  # stream 1's unpublished block: stream 2 does not get it
    b = p.alloc(2 * MiB, stream=2)
    assert b != a
    s = p.stats()
    assert s["unpublished_skips"] >= 1 and s["stream_publishes"] == 0
    assert p.stats_json()["stats"]["unpublished_skips"] == s["unpublished_skips"]
    p.free(b)
    p.publish_frees(1)
    assert p.stats()["stream_publishes"] == 1
    c = p.alloc(2 * MiB, stream=3)
    assert c in (a, b) and p.stats()["cross_stream_reuses"] == 1
    p.free(c)
    p.check()
    p.close()


def test_out_of_memory_leaves_pool_usable():
    p = sim_pool(sim_capacity=64 * MiB)
    ncclpool.sim_inject_oom(p, 1)
    with pytest.raises(errors.OutOfMemory) as info:
        p.alloc(8 * MiB)
    assert isinstance(info.value, MemoryError)
    x = p.alloc(8 * MiB)
    p.free(x)
    p.check()
    assert p.stats()["oom_count"] == 1
    p.reserve(16 * MiB)
    assert p.stats()["reserved_bytes"] >= 16 * MiB
    assert p.trim() > 0
    p.close()


def test_bad_arguments_are_clear():
    with pytest.raises(errors.InvalidArgument, match="source"):
        ncclpool.Pool(source="floppy")
    with pytest.raises(errors.InvalidArgument, match="deterministic"):
        ncclpool.Pool(source="sim", registration="symmetric", deterministic=False)
    with pytest.raises(errors.InvalidArgument, match="alignment"):
        ncclpool.Pool(source="sim", alignment=100)
    with pytest.raises(errors.InvalidArgument, match="size"):
        ncclpool.SimGroup("g", 0)


def test_a_bad_stream_is_an_ncclpool_error_not_a_ctypes_one():
    # Was: ValueError from int('abc'); -1 wrapped by ctypes to 0xffffffffffffffff, a stream nobody made.
    import types
    pool = sim_pool()
    for bad, match in (("abc", "'abc' is not a stream"), (1.5, "1.5 is not a stream"), (True, "True is not a stream"),
                       (-1, "stream handle -1 is outside 0 .. 2\\*\\*64 - 1"), (2**64, "outside 0 .. 2\\*\\*64 - 1"),
                       (types.SimpleNamespace(cuda_stream="x"), "is not a stream")):
        with pytest.raises(errors.InvalidArgument, match=match):
            pool.alloc(4096, stream=bad)
        with pytest.raises(errors.InvalidArgument):
            pool.publish_frees(bad)
    ptr = pool.alloc(4096, stream=types.SimpleNamespace(cuda_stream=7))  # torch.cuda.Stream's way
    with pytest.raises(errors.InvalidArgument, match="stream handle -1"):
        pool.free(ptr, stream=-1)
    pool.free(ptr, stream=7)
    assert pool.stats()["active_allocations"] == 0


def test_growth_chunk_from_the_environment_is_checked(monkeypatch, torch_layer):
    for bad in ("abc", "-1", "1e6", "4 MiB", str(2**64)):
        monkeypatch.setenv("NCCLPOOL_GROWTH_CHUNK", bad)
        with pytest.raises(errors.InvalidArgument, match=f"NCCLPOOL_GROWTH_CHUNK='{bad}' is not a number of bytes"):
            torch_layer.create_nccl_mem_pool(symmetric=True, source="sim")
    monkeypatch.setenv("NCCLPOOL_GROWTH_CHUNK", str(8 * MiB))
    mempool = torch_layer.create_nccl_mem_pool(symmetric=True, source="sim")
    assert torch_layer.ncclpool_pool(mempool).stats_json()["growth_chunk"] == 8 * MiB
    torch_layer.release_mem_pool(mempool)  # unbinds it from the torch entry points
    monkeypatch.setenv("NCCLPOOL_GROWTH_CHUNK", "")
    assert ncclpool._growth_chunk_from_env() == 0


def test_min_segment_from_the_environment_and_the_argument(monkeypatch, torch_layer):
    for bad in ("abc", "1GiB", "-1", str(2**64)):
        monkeypatch.setenv("NCCLPOOL_MIN_SEGMENT", bad)
        with pytest.raises(errors.InvalidArgument, match=f"NCCLPOOL_MIN_SEGMENT='{bad}' is not a number of bytes"):
            torch_layer.create_nccl_mem_pool(symmetric=True, source="sim")
    monkeypatch.setenv("NCCLPOOL_MIN_SEGMENT", str(1024 * MiB))
    mempool = torch_layer.create_nccl_mem_pool(symmetric=True, source="sim")
    pool = torch_layer.ncclpool_pool(mempool)
    assert pool.min_segment == 1024 * MiB and pool.stats_json()["min_segment"] == 1024 * MiB
    assert "min segment 1.0 GiB" in pool.memory_summary()
    torch_layer.release_mem_pool(mempool)
    mempool = torch_layer.create_nccl_mem_pool(symmetric=True, source="sim", min_segment=256 * MiB)  # the argument wins
    assert torch_layer.ncclpool_pool(mempool).min_segment == 256 * MiB
    torch_layer.release_mem_pool(mempool)
    monkeypatch.setenv("NCCLPOOL_MIN_SEGMENT", "")
    assert ncclpool._min_segment_from_env() == 0
    with pytest.raises(errors.InvalidArgument, match="min_segment .* exceeds the device capacity"):
        sim_pool("symmetric", name="too-large", min_segment=128 << 30)  # the simulator has 64 GiB
    with pytest.raises(errors.InvalidArgument, match="min_segment must be an int"):
        sim_pool("symmetric", name="not-a-size", min_segment="1G")


def test_a_segment_torch_frees_is_published_to_every_stream_at_once():
    """torch hands a segment back rarely, often from a stream that never allocates again (a CUDA
    graph's): ncclpool_torch_free publishes it, so another stream takes it without the pool growing."""
    lib = ncclpool.library()
    p = sim_pool("local", name="torch-publish")
    with p.scope():
        first = lib.ncclpool_torch_alloc(8 * MiB, 0, ctypes.c_void_p(7))  # stream 7: a graph's, say
    lib.ncclpool_torch_free(first, 8 * MiB, 0, ctypes.c_void_p(7))
    with p.scope():
        second = lib.ncclpool_torch_alloc(8 * MiB, 0, ctypes.c_void_p(9))  # another stream
    stats = p.stats()
    assert second == first, "the freed segment was not reused by another stream"
    assert stats["segments_created"] == 1 and stats["stream_publishes"] >= 1, stats
    lib.ncclpool_torch_free(second, 8 * MiB, 0, ctypes.c_void_p(9))
    p.check()
    p.close()


def test_min_segment_puts_torch_segments_in_fewer_windows_per_group():
    """torch_bench.py's first registration on the simulator: 64 torch segments of 32 MiB in one scope
    of a pool attached to two groups on two ranks: a window per segment and group by default (as
    torch's register_mem_pool), 2 per group with min_segment 1 GiB, for the same 2 GiB reserved."""
    lib = ncclpool.library()

    def windows(min_segment):
        world = ncclpool.SimGroup(f"world-{min_segment}", 2)
        second = ncclpool.SimGroup(f"second-{min_segment}", 2)

        def rank(r):
            p = sim_pool("symmetric", name=f"torch-{min_segment}", growth_chunk=1024 * MiB, min_segment=min_segment)
            comms = [p.attach_sim(world, r), p.attach_sim(second, r)]
            with p.scope():
                ptrs = [lib.ncclpool_torch_alloc(32 * MiB, 0, None) for _ in range(64)]
            out = ([c.stats()["registrations"] for c in comms], p.stats()["reserved_bytes"], p.stats()["segment_count"])
            for ptr in ptrs:
                lib.ncclpool_torch_free(ptr, 32 * MiB, 0, None)
            p.check()
            for c in comms:
                c.detach()
            p.close()
            return out

        results, failures = run_ranks(2, rank)
        assert failures == [None, None], failures
        assert results[0] == results[1]
        return results[0]

    assert windows(0) == ([64, 64], 2048 * MiB, 64)
    assert windows(1024 * MiB) == ([2, 2], 2048 * MiB, 2)


def test_an_auto_pools_min_segment_is_its_symmetric_parts(sim_profile):
    sim_profile(1, [(0, "none"), (MiB, "local"), (8 * MiB, "symmetric")])
    p = sim_pool("auto", name="auto-min", min_segment=256 * MiB)
    c = p.attach_sim(ncclpool.SimGroup("auto-min", 1), 0)
    ptrs = [p.alloc(size) for size in (64 << 10, 4 * MiB, 16 * MiB)]  # one per part
    parts = {part["placement"]: part for part in p.stats_json()["routes"]["parts"]}
    assert parts["symmetric"]["min_segment"] == 256 * MiB
    assert parts["local"]["min_segment"] == 0 and parts["none"]["min_segment"] == 0
    assert parts["symmetric"]["stats"]["reserved_bytes"] == 256 * MiB
    assert parts["local"]["stats"]["reserved_bytes"] == 4 * MiB
    for ptr in ptrs:
        p.free(ptr)
    c.detach()
    p.close()


def test_an_auto_pool_before_its_first_attach_routes_as_ncclpool_info_says():
    """`ncclpool info` and Pool(registration='auto').routes() apply one rule (auto_routes_windows in routes.hpp)."""
    import json
    import os
    import subprocess
    tool = os.path.join(os.path.dirname(ncclpool.library_path()), "..", "tools", "ncclpool")
    if not os.path.exists(tool):
        pytest.skip(f"no ncclpool tool beside {ncclpool.library_path()}")
    info = json.loads(subprocess.run([tool, "info", "--json"], check=True, capture_output=True, text=True).stdout)
    routes = ncclpool.Pool(registration="auto", name="py-auto-as-info").routes()
    assert info["registration"]["auto_routes"].startswith(routes["description"] + " ("), (info["registration"]["auto_routes"], routes)


def test_local_registration_and_stats_json():
    g = ncclpool.SimGroup("dp", 1)
    p = sim_pool()
    before = p.alloc(1 * MiB)
    c = p.attach_sim(g, 0)
    after = p.alloc(6 * MiB)  # new segment: registered inside the allocation
    st = c.stats()
    assert st["kind"] == "local" and st["registered_segments"] == 2 and st["registrations"] == 2
    assert c.handle_of(before) and c.handle_of(after)
    j = p.stats_json()
    assert j["name"] == "py-local" and j["communicators"][0]["registered_segments"] == 2
    b = j["breakdown"]
    assert b["reserved"] == j["stats"]["reserved_bytes"] and b["requested"] == 7 * MiB
    assert b["requested"] + b["rounding"] + b["free_in_used_segments"] + b["empty_segments"] == b["reserved"]
    text = p.memory_summary()
    assert "py-local" in text and "loopback comm 'dp'" in text and "local" in text
    assert "free in used segments" in text and "never used" in text
    with pytest.raises(errors.InvalidArgument, match="already attached|attached"):
        p.attach_sim(g, 0)
    p.free(before)
    p.free(after)
    c.detach()
    assert not c.attached and g.live_registrations == 0
    with pytest.raises(errors.InvalidState, match="no longer attached"):
        c.stats()
    p.close()


def test_stats_structs_come_from_the_librarys_field_lists():
    """The ctypes structs are built from ncclpool_stats_fields (no field list in Python): stats() and
    the JSON have exactly the library's fields; a wrong struct_size is refused with a clear message."""
    from ncclpool import _capi
    pool_struct, comm_struct = _capi.stats_struct("pool"), _capi.stats_struct("comm")
    assert pool_struct._fields_[0] == ("struct_size", ctypes.c_size_t)
    assert comm_struct._fields_[1] == ("kind", ctypes.c_int) and dict(comm_struct._fields_)["registration_seconds"] is ctypes.c_double
    assert "without a wait" in pool_struct.docs["largest_fresh_block"]
    g = ncclpool.SimGroup("fields", 1)
    p = sim_pool(name="py-fields")
    x = p.alloc(1 * MiB)
    c = p.attach_sim(g, 0)
    s = p.stats()
    assert list(s) == [name for name, _ in pool_struct._fields_][1:]
    assert s["attached_communicators"] == 1 and s["active_allocations"] == 1 and s["largest_fresh_block"] > 0
    cs = c.stats()
    assert list(cs) == [name for name, _ in comm_struct._fields_][1:]
    assert cs["kind"] == "local" and (cs["rank"], cs["size"], cs["device"]) == (0, 1, 0)
    j = p.stats_json()
    # The pool's JSON has the C++ struct's fields (not the C ABI's own); a communicator's has all.
    assert set(j["stats"]) == set(s) - {"attached_communicators", "pending_registrations"}
    assert set(j["communicators"][0]) == {"communicator"} | set(cs)
    assert j["communicators"][0]["kind"] == "local" and j["communicators"][0]["registered_segments"] == 1
    wrong = pool_struct()
    for size in (0, ctypes.sizeof(wrong) - 8, ctypes.sizeof(wrong) + 1):
        wrong.struct_size = size
        with pytest.raises(errors.InvalidArgument, match=f"ncclpool_pool_stats: stats->struct_size is {size}, .*set it to sizeof"):
            _capi.call("ncclpool_pool_stats", p.handle, ctypes.byref(wrong))
    with pytest.raises(errors.InvalidArgument, match="stats kind 9"):
        _capi.call("ncclpool_stats_fields", 9, ctypes.byref(ctypes.POINTER(_capi._StatsField)()), ctypes.byref(ctypes.c_size_t()))
    p.free(x)
    c.detach()
    p.close()


def test_failed_registration_rolls_back():
    g = ncclpool.SimGroup("ep", 1)
    p = sim_pool()
    c = p.attach_sim(g, 0)
    g.inject_failure("register_local", rank=0, nth=1)
    with pytest.raises(errors.RegistrationError):
        p.alloc(2 * MiB)
    assert p.stats()["segment_count"] == 0  # the segment went back to the source
    x = p.alloc(2 * MiB)
    assert c.stats()["registered_segments"] == 1 and c.stats()["errors"] == 1
    p.free(x)
    c.detach()
    p.close()


def test_symmetric_windows_commit_at_scope_end_across_four_ranks():
    world = ncclpool.SimGroup("world", 4)
    ep = ncclpool.SimGroup("ep", 4)
    lib = ncclpool.library()

    def rank(r):
        p = sim_pool("symmetric", name="world-pool", growth_chunk=64 * MiB)
        cw = p.attach_sim(world, r)
        ce = p.attach_sim(ep, r)
        ptrs = []
        with p.scope():
            assert ncclpool.library().ncclpool_current_pool() == p.handle.value
            for size in (2 * MiB, 80 * MiB, 2 * MiB):  # torch's segment sizes
                ptrs.append(lib.ncclpool_torch_alloc(size, 0, None))
            # Three segments (each request's own size, within the segment budget) x two communicators.
            assert p.pending == 3 * 2
        assert p.pending == 0
        s = cw.stats()
        assert s["registered_segments"] == 3 and s["kind"] == "symmetric"
        # A second use with no new segment (it reuses a freed block) registers nothing.
        lib.ncclpool_torch_free(ptrs.pop(), 0, 0, None)
        with p.scope():
            q = lib.ncclpool_torch_alloc(1 * MiB, 0, None)
        assert cw.stats()["registrations"] == 3 and ce.stats()["registrations"] == 3
        for ptr in ptrs + [q]:
            lib.ncclpool_torch_free(ptr, 0, 0, None)
        p.check()
        cw.detach()
        ce.detach()
        p.close()
        return True

    _, failures = run_ranks(4, rank)
    assert failures == [None] * 4, failures
    assert world.live_registrations == 0 and ep.live_registrations == 0


def test_divergent_ranks_raise_agreement_error_on_every_rank():
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000)
    lib = ncclpool.library()
    comms = [None, None]

    def rank(r):
        p = sim_pool("symmetric", name="div-pool", growth_chunk=4 * MiB)
        comms[r] = p.attach_sim(world, r)  # collective: every rank attaches
        with pytest.raises(errors.AgreementError) as info:
            with p.scope():
                for _ in range(r + 1):  # rank 1 makes one segment more than rank 0
                    lib.ncclpool_torch_alloc(4 * MiB, 0, None)
        assert "rank" in str(info.value)
        assert p.pending == r + 1  # nothing registered, still pending
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    for c in comms:
        c.forget()


def test_ranks_that_would_launch_symmetric_kernels_differently_fail_at_attach():
    # NCCL_SYM_CTAS or a profile on some ranks only, or ncclpool.prefer_nccl_symmetric_ctas() declared
    # on some (on Hopper: NCCL's count there, 32 elsewhere): their first symmetric kernel would hang.
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000)
    world.set_symmetric_kernels(0, 32)
    world.set_symmetric_kernels(1, 0)

    def rank(r):
        p = sim_pool("symmetric", name="ctas-pool", growth_chunk=4 * MiB)
        with pytest.raises(errors.AgreementError, match="different CTA counts") as info:
            p.attach_sim(world, r)
        assert "symmetric kernels' CTAs 32" in str(info.value) and "CTAs NCCL's choice" in str(info.value)
        assert "ncclpool_prefer_nccl_symmetric_ctas" in str(info.value)  # the message names the declaration
        assert p.communicators == []  # nothing attached, nothing registered
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0
    with pytest.raises(errors.InvalidArgument, match="not -1..64"):
        world.set_symmetric_kernels(0, 65)


def test_auto_pool_routes_torch_segments_by_the_tensors_they_serve(sim_profile):
    # Small tensors (torch's 2 MiB segments) unregistered, 1-20 MiB tensors local, larger ones windows.
    sim_profile(2, [(0, "none"), (2 * MiB, "local"), (32 * MiB, "symmetric")])
    world = ncclpool.SimGroup("world", 2, timeout_ms=5000)
    lib = ncclpool.library()

    def rank(r):
        p = sim_pool("auto", name="auto-pool")
        assert p.registration == "auto" and p.deterministic
        assert p.routes()["fixed"] is False
        c = p.attach_sim(world, r)  # collective: the symmetric part
        routes = p.routes()
        assert routes["description"] == "none below 2 MiB, local from 2 MiB to below 32 MiB, symmetric from 32 MiB", routes
        assert "the profile" in routes["source"]
        with p.scope():
            small = lib.ncclpool_torch_alloc(2 * MiB, 0, None)   # tensors up to 1 MiB
            medium = lib.ncclpool_torch_alloc(20 * MiB, 0, None)  # tensors of 1-20 MiB
            large = lib.ncclpool_torch_alloc(64 * MiB, 0, None)   # one 63-64 MiB tensor
        assert c.stats()["kind"] == "auto"
        handle = ctypes.c_void_p()
        got = []
        for ptr in (small, medium, large):
            ncclpool.call("ncclpool_comm_handle_of", c.handle, ctypes.c_void_p(ptr), ctypes.byref(handle))
            got.append(handle.value is not None)
        assert got == [False, True, True]
        parts = {part["placement"]: part["stats"]["active_allocations"] for part in p.routes()["parts"]}
        assert parts == {"none": 1, "local": 1, "symmetric": 1}
        assert p.stats()["active_allocations"] == 3
        assert "auto routes: none below 2 MiB" in p.memory_summary()
        for ptr in (small, medium, large):
            lib.ncclpool_torch_free(ptr, 0, 0, None)
        p.check()
        c.detach()
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0


def test_auto_pools_that_route_differently_fail_on_every_rank(sim_profile):
    sim_profile(2, [(0, "none"), (MiB, "symmetric")])
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000)

    def rank(r):
        p = sim_pool("auto", name="auto-pool")
        if r == 1:
            p.free(p.alloc(4096))  # an allocation before the attach fixes the built-in routes
        with pytest.raises(errors.AgreementError, match="route the auto pool 'auto-pool' differently"):
            p.attach_sim(world, r)
        assert p.communicators == []
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0


def test_auto_pools_attached_with_other_kinds_fail_on_every_rank(sim_profile):
    # The kind decides which parts' attaches are collective: LOCAL on rank 1 makes none, SYMMETRIC on
    # rank 0 the windows' (found 2026-11-26: rank 1 returned attached while rank 0's window agreement
    # waited alone; on NCCL it pairs with rank 1's next collective). The routes agreement compares kinds.
    sim_profile(2, [(0, "local"), (MiB, "symmetric")])
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000, matching="nccl")

    def rank(r):
        p = sim_pool("auto", name="auto-pool")
        with pytest.raises(errors.AgreementError, match="attach it with another kind"):
            p.attach_sim(world, r, kind="symmetric" if r == 0 else "local")
        assert p.communicators == []
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0


@pytest.mark.parametrize("registration,kind,expected", [
    ("local", None, ("local", 0, 0)), ("local", "local", ("local", 0, 0)),
    ("symmetric", None, ("symmetric", 1, 0)), ("symmetric", "local", ("local", 0, 0)),
    ("symmetric", "symmetric", ("symmetric", 1, 0)),
    ("auto", None, ("auto", 1, 1)), ("auto", "auto", ("auto", 1, 1)), ("auto", "local", ("local", 0, 0)),
    ("auto", "symmetric", ("symmetric", 1, 0)),
])
def test_comm_stats_say_how_it_is_attached_in_c_and_json(sim_profile, registration, kind, expected):
    # The pool owns its attachments: kind (AUTO for an attach with no kind), has_windows (whether its
    # detach is collective, and the pool cannot be closed before it) and routed, the same in the C
    # struct and the JSON, whatever asked.
    sim_profile(1, [(0, "local"), (MiB, "symmetric")])
    p = sim_pool(registration, name=f"stats-{registration}-{kind}")
    c = p.attach_sim(ncclpool.SimGroup(f"g-{registration}-{kind}", 1), 0, kind=kind)
    s = c.stats()
    j = p.stats_json()["communicators"][0]
    assert (s["kind"], s["has_windows"], s["routed"]) == expected
    assert (j["kind"], j["has_windows"], j["routed"]) == expected
    if expected[1]:
        with pytest.raises(errors.InvalidState, match="attached with symmetric windows"):
            p.close()
        c.detach()
    p.close()


def test_an_auto_pool_whose_routes_have_no_windows_reports_none(sim_profile):
    sim_profile(1, [(0, "none"), (MiB, "local")])
    p = sim_pool("auto", name="no-windows")
    c = p.attach_sim(ncclpool.SimGroup("g-no-windows", 1), 0)
    assert (c.stats()["kind"], c.stats()["has_windows"], c.stats()["routed"]) == ("auto", 0, 1)
    p.close()  # nothing collective to detach: the pool may close with it attached


def test_an_auto_pools_parts_share_max_reserved(sim_profile):
    # Small requests to the none part, larger ones to the local part (a profile for one rank): each
    # part is a pool of its own, but max_reserved holds for them together.
    sim_profile(1, [(0, "none"), (MiB, "local")])
    p = sim_pool("auto", name="capped", max_reserved=16 * MiB, growth_chunk=8 * MiB)
    c = p.attach_sim(ncclpool.SimGroup("one", 1), 0)
    small = p.alloc(64 << 10)      # none part: a 2 MiB segment (the request's size, to the granularity)
    large = p.alloc(4 * MiB)       # local part: a segment of its own size
    assert p.stats()["reserved_bytes"] == 6 * MiB
    with pytest.raises(errors.OutOfMemory, match="shared by its parts"):
        p.alloc(12 * MiB)          # a 12 MiB segment would make 18 MiB in all
    p.free(large)
    again = p.alloc(12 * MiB)      # the local part gives its empty 4 MiB segment back first: 14 MiB
    assert p.stats()["reserved_bytes"] <= 16 * MiB
    for ptr in (small, again):
        p.free(ptr)
    p.check()
    c.detach()
    p.close()


def test_an_auto_pool_routes_buffers_named_for_a_collective_by_its_profile(sim_profile):
    sim_profile(1, [(0, {"all_gather": "local", "reduce_scatter": "none", "all_reduce": "none"})])
    p = sim_pool("auto", name="by-op")
    c = p.attach_sim(ncclpool.SimGroup("one", 1), 0)
    lib = ncclpool.library()
    plain = p.alloc(MiB)
    gathered = p.alloc(MiB, collective="all_gather")
    with p.scope(collective="all_gather"):
        segment = lib.ncclpool_torch_alloc(2 * MiB, 0, None)
    assert [c.handle_of(x) is not None for x in (plain, gathered, segment)] == [False, True, True]
    routes = p.routes()
    assert routes["description"] == "none at every size" and routes["by_collective"] == {"all_gather": "local at every size"}, routes
    with pytest.raises(errors.InvalidArgument, match="collective 'broadcast'"):
        p.alloc(MiB, collective="broadcast")
    for x in (plain, gathered):
        p.free(x)
    lib.ncclpool_torch_free(segment, 0, 0, None)
    c.detach()
    p.close()


def test_auto_registration_needs_an_auto_pool():
    p = sim_pool("local")
    with pytest.raises(errors.InvalidArgument, match="not an auto pool"):
        p.attach_sim(ncclpool.SimGroup("one", 1), 0, kind="auto")
    assert p.routes() is None
    with pytest.raises(errors.InvalidArgument, match="must be deterministic"):
        sim_pool("auto", deterministic=False)
    p.close()


def test_scope_under_graph_capture_defers_windows():
    g = ncclpool.SimGroup("world", 1)
    p = sim_pool("symmetric")
    c = p.attach_sim(g, 0)
    lib = ncclpool.library()
    ncclpool.sim_set_capturing(p, True)
    with p.scope():
        x = lib.ncclpool_torch_alloc(2 * MiB, 0, None)
    assert p.pending == 1
    with pytest.raises(errors.InvalidState, match="captured"):
        p.commit()
    ncclpool.sim_set_capturing(p, False)
    p.commit()
    assert p.pending == 0 and c.stats()["registered_segments"] == 1
    lib.ncclpool_torch_free(x, 0, 0, None)
    c.detach()
    p.close()


def test_scope_without_commit_and_error_path_leave_pending():
    g = ncclpool.SimGroup("world", 1)
    p = sim_pool("symmetric")
    c = p.attach_sim(g, 0)
    lib = ncclpool.library()
    with p.scope(commit=False):
        x = lib.ncclpool_torch_alloc(2 * MiB, 0, None)
    assert p.pending == 1
    with pytest.raises(KeyError):
        with p.scope():
            y = lib.ncclpool_torch_alloc(6 * MiB, 0, None)
            raise KeyError("user error inside the scope")
    assert p.pending == 2  # no collective on the error path
    assert ncclpool.library().ncclpool_current_pool() is None
    p.commit()
    for ptr in (x, y):
        lib.ncclpool_torch_free(ptr, 0, 0, None)
    c.detach()
    p.close()


def test_scope_ends_commit_on_a_schedule_and_commit_is_immediate():
    g = ncclpool.SimGroup("world", 1)
    p = sim_pool("symmetric")
    c = p.attach_sim(g, 0)
    lib = ncclpool.library()
    for _ in range(16):  # scope ends 0..15: each one agrees
        with p.scope():
            pass
    agreements = c.stats()["agreements"]
    with p.scope():  # scope end 16: scheduled
        x = lib.ncclpool_torch_alloc(6 * MiB, 0, None)
    assert p.pending == 0 and c.stats()["agreements"] == agreements + 1
    with p.scope():  # scope end 17: not scheduled, the window waits and nothing collective runs
        y = lib.ncclpool_torch_alloc(6 * MiB, 0, None)
    assert p.pending == 1 and c.stats()["agreements"] == agreements + 1
    j = p.stats_json()
    assert (j["scope_ends"], j["scope_period"], j["next_committing_scope_end"]) == (18, 16, 32)
    assert "scope ends 18 (the first 16 commit, then every 16th); the next that commits: #32 (pending windows wait" in p.memory_summary()
    # The symmetric kernels' CTA count is decided at the first NCCL window; loopback windows are not NCCL's.
    assert j["symmetric_ctas"]["decided"] is False and "not decided" in j["symmetric_ctas"]["source"]
    assert "symmetric kernels' CTAs: not decided yet" in p.memory_summary()
    # Whether windows carry NCCL's symmetric flag: decided at the first NCCL window too; without NCCL
    # (this build or machine) the summary says what a first attach would find.
    assert j["symmetric_kernels"]["decided"] is False and j["symmetric_kernels"]["why"]
    assert "symmetric kernels: " in p.memory_summary()
    f = ncclpool.features()
    assert {"symmetric_kernels_decided", "symmetric_kernels_enabled", "symmetric_kernels_hazard", "symmetric_kernels_why"} <= set(f)
    assert f["symmetric_kernels_decided"] is False and f["symmetric_kernels_why"]
    p.commit()  # at once
    assert p.pending == 0 and c.stats()["registered_segments"] == 2
    for ptr in (x, y):
        lib.ncclpool_torch_free(ptr, 0, 0, None)
    c.detach()
    p.close()


def test_torch_entry_points_route_by_scope_then_binding():
    lib = ncclpool.library()
    a, b = sim_pool(name="a"), sim_pool(name="b")
    assert lib.ncclpool_torch_alloc(1024, 0, None) is None
    assert "no ncclpool pool is active" in ncclpool.last_error()
    lib.ncclpool_torch_bind(a.handle)
    x = lib.ncclpool_torch_alloc(1024, 0, None)  # the only bound pool of device 0
    assert a.stats()["active_allocations"] == 1
    lib.ncclpool_torch_bind(b.handle)
    assert lib.ncclpool_torch_alloc(1024, 0, None) is None
    assert "ambiguous" in ncclpool.last_error()
    with b.scope():
        y = lib.ncclpool_torch_alloc(1024, 0, None)  # the scope decides
    assert b.stats()["active_allocations"] == 1
    failures = lib.ncclpool_torch_failures()
    with b.scope():
        assert lib.ncclpool_torch_alloc(1024, 1, None) is None  # scope pool is on device 0
    assert lib.ncclpool_torch_failures() == failures + 1
    lib.ncclpool_torch_free(x, 1024, 0, None)  # free finds the owner by address
    lib.ncclpool_torch_free(y, 1024, 0, None)
    assert a.stats()["active_allocations"] == 0 and b.stats()["active_allocations"] == 0
    for p in (a, b):
        lib.ncclpool_torch_unbind(p.handle)
        p.close()


def test_scopes_are_per_thread():
    p, q = sim_pool(name="main"), sim_pool(name="other")
    lib = ncclpool.library()
    seen = []
    with p.scope():
        t = threading.Thread(target=lambda: seen.append(lib.ncclpool_current_pool()))
        t.start()
        t.join()
        with q.scope():
            assert lib.ncclpool_current_pool() == q.handle.value
        assert lib.ncclpool_current_pool() == p.handle.value
    assert seen == [None]
    p.close()
    q.close()


def test_torchs_nccl_is_preferred_to_the_systems(tmp_path):
    """With the `nvidia.nccl` package (torch's NCCL) installed and no NCCL chosen, ncclpool points
    NCCLPOOL_NCCL_LIBRARY at it, so that a later `import torch` does not find the system's NCCL already
    loaded under its soname. An explicit choice is left alone."""
    import os
    import subprocess
    import sys

    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "nvidia" / "nccl" / "__init__.py").write_text("")
    (lib / "libnccl.so.2").write_bytes(b"")
    python_dir = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    probe = "import os, ncclpool._capi as c; print(c.prefer_torchs_nccl()); print(os.environ.get('NCCLPOOL_NCCL_LIBRARY'))"
    env = {k: v for k, v in os.environ.items() if k != "NCCLPOOL_NCCL_LIBRARY"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), python_dir])
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(lib / "libnccl.so.2")] * 2
    env["NCCLPOOL_NCCL_LIBRARY"] = "/chosen/libnccl.so.2"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["None", "/chosen/libnccl.so.2"]


def test_torch_trace_writes_what_replay_reads(tmp_path, monkeypatch):
    """ncclpool.torch_trace with a stand-in for torch: frames dropped, recording stopped."""
    import json
    import sys
    import types

    calls = []
    memory = types.SimpleNamespace(
        _record_memory_history=lambda **kw: calls.append(kw),
        _snapshot=lambda: {"segments": [{"big": 1}], "device_traces": [[{"action": "alloc", "addr": 1, "size": 512, "frames": [1]}]]},
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory)))
    from ncclpool import torch_trace

    torch_trace.start_recording()
    out = tmp_path / "t.json"
    assert torch_trace.write_trace(str(out), "a test") == 1
    j = json.loads(out.read_text())
    assert j == {"device_traces": [[{"action": "alloc", "addr": 1, "size": 512}]], "segments": [], "recorded_by": "a test"}
    assert calls[0]["context"] is None and calls[-1] == {"enabled": None}


def test_vote_no_fails_the_next_commit_on_every_rank_and_the_one_after_agrees():
    # Issue 44: a failure found on one rank alone (out of memory in a layer above, say) is that rank's
    # "no" at the pool's next collective step, never a reason to skip it.
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000, matching="nccl")

    def rank(r):
        p = sim_pool("symmetric", name="votes")
        c = p.attach_sim(world, r)
        x = p.alloc(MiB)
        if r == 0:
            p.vote_no("out of memory in the layer above")
            with pytest.raises(errors.InvalidState, match="out of memory in the layer above"):
                p.commit()
        else:
            with pytest.raises(errors.AgreementError, match="voted no"):
                p.commit()
        assert p.pending == 1
        p.commit()  # taken once: this one agrees
        assert p.pending == 0
        p.free(x)
        c.detach()
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0


def test_agreed_settings_make_a_local_attach_collective_and_compare_kinds():
    # NCCLPOOL_SGLANG_KIND=local on one rank only, symmetric on the other (issue 44 item 4): with agreed
    # settings both attaches run one agreement, and both ranks fail there, naming the kinds.
    world = ncclpool.SimGroup("world", 2, timeout_ms=3000, matching="nccl")

    def rank(r):
        p = sim_pool("symmetric", name="settings", agreed_settings="kind=auto;debug=0")
        assert p.agreed_settings == "kind=auto;debug=0"
        with pytest.raises(errors.AgreementError, match="attach with different kinds"):
            p.attach_sim(world, r, kind="symmetric" if r == 0 else "local")
        assert p.communicators == []
        c = p.attach_sim(world, r, kind="local")  # alike on every rank: agrees
        c.detach()
        p.close()
        return True

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert world.live_registrations == 0
    assert sim_pool("local", name="no-settings").agreed_settings is None

#!/usr/bin/env python3
"""The torch matrix on the CPU (issue 45 item 3): run under one installed torch (PYTHONPATH), it checks
what python/ncclpool/torch/*.py calls on that torch, with no GPU:

  api      every torch / torch.cuda / torch.distributed / FSDP2 name the layer uses exists, with the
           parameters it passes (inspect.signature; a pybind function: its docstring's signature)
  pg       which class init_process_group("nccl") makes (classic ProcessGroupNCCL or nccl2), under
           TORCH_DIST_USE_NCCL2 unset, 0 and 1 (a child process each: torch reads it once), whether
           that class has _comm_ptr, and what ncclpool.torch.process_group_implementation() says
  layer    ncclpool.torch, .fsdp and .megatron import on this torch; init() refuses without CUDA
  gloo     two processes in a gloo group: the layer's destroy hook and collective wrappers, the
           copy-engine vote's torch probe, FSDP2 on the CPU with ncclpool's PoolAllGather /
           PoolReduceScatter calls (a CPU buffer instead of a pool) against plain FSDP2 and an
           unsharded model, the shard group fsdp.enable reads, and (torch 2.14+) a module with two
           parameter groups: the property's AssertionError, FSDP2's refusal, ncclpool's Unsupported

One line per check: "ok", "FAIL" (the layer would break) or "info" (a fact); exit 1 on any FAIL.
scripts/torch-matrix.sh installs each torch and runs this; results in docs/benchmarks/data/*-torch-matrix-cpu.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
results = []


def report(status, name, detail=""):
    results.append((status, name, str(detail)))
    print(f"{status:5} {name}: {detail}", flush=True)


def attr(path):
    import importlib
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def params_of(fn):
    """The parameter names of fn, from inspect or a pybind docstring's first signature line."""
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        doc = (getattr(fn, "__doc__", "") or "").strip().splitlines()
        line = next((d for d in doc if "(" in d), "")
        inner = line[line.find("(") + 1:line.rfind(")")] if "(" in line else ""
        return [p.split(":")[0].split("=")[0].strip().lstrip("*") for p in inner.split(",") if p.strip()]


# name -> parameters the layer passes (by keyword, or positionally in this order); None: only exists
API = {
    "torch.empty": ["dtype", "device"], "torch.zeros": ["device"], "torch.tensor": ["dtype", "device"],
    "torch.uint8": None, "torch.device": None, "torch.Tensor.data_ptr": None, "torch.Tensor.is_cuda": None,
    "torch.dtype": None, "torch.nn.Module": None,
    "torch.cuda.is_available": [], "torch.cuda.current_device": [], "torch.cuda.synchronize": ["device"],
    "torch.cuda.is_current_stream_capturing": [], "torch.cuda.current_stream": ["device"],
    "torch.cuda.default_stream": ["device"], "torch.cuda.empty_cache": [], "torch.cuda.nccl.version": [],
    "torch.cuda.MemPool": ["allocator"], "torch.cuda.MemPool.id": None,
    "torch.cuda.memory.CUDAPluggableAllocator": ["path_to_so_file", "alloc_fn_name", "free_fn_name"],
    "torch.cuda.memory.CUDAPluggableAllocator.allocator": [],
    "torch.cuda.use_mem_pool": ["pool", "device"], "torch.cuda.graph": ["cuda_graph", "pool"],
    "torch.distributed.group.WORLD": None,
    "torch.distributed.all_gather_into_tensor": ["output_tensor", "input_tensor", "group", "async_op"],
    "torch.distributed.reduce_scatter_tensor": ["output", "input", "op", "group", "async_op"],
    "torch.distributed.all_reduce": ["tensor", "op", "group", "async_op"],
    "torch.distributed.split_group": ["parent_pg", "split_ranks", "pg_options", "group_desc"],
    "torch.distributed.new_group": ["ranks", "pg_options", "use_local_synchronization", "group_desc"],
    "torch.distributed.get_world_size": ["group"], "torch.distributed.get_process_group_ranks": ["group"],
    "torch.distributed.get_backend": ["group"], "torch.distributed.destroy_process_group": ["group"],
    "torch.distributed.distributed_c10d.destroy_process_group": ["group"],
    "torch.distributed.distributed_c10d._get_default_group": [],
    "torch.distributed.ProcessGroup": None, "torch.distributed.ProcessGroup._get_backend": None,
    "torch.distributed.ProcessGroup.bound_device_id": None,
    "torch.distributed.ProcessGroupNCCL": None, "torch.distributed.ProcessGroupNCCL.Options": None,
    "torch.distributed.ProcessGroupNCCL._comm_ptr": None,
    "torch.distributed.fsdp.FSDPModule": None, "torch.distributed.fsdp.fully_shard": None,
    "torch.distributed.fsdp.FSDPModule.set_custom_all_gather": ["comm"],
    "torch.distributed.fsdp.FSDPModule.set_custom_reduce_scatter": ["comm"],
    "torch.distributed.fsdp.FSDPModule._get_fsdp_state": [],
    "torch.distributed.fsdp._fully_shard._fsdp_api.AllGather.allocate": ["size", "dtype", "device"],
    "torch.distributed.fsdp._fully_shard._fsdp_api.AllGather.__call__": ["output_tensor", "input_tensor", "group", "async_op"],
    "torch.distributed.fsdp._fully_shard._fsdp_api.ReduceScatter.__call__":
        ["output_tensor", "input_tensor", "group", "op", "async_op"],
}
OPTIONAL = {  # facts, not needs: the layer copes without them
    "torch.distributed.ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO", "torch.distributed.ProcessGroupNCCL.register_mem_pool",
    "torch.distributed.ProcessGroupNCCL2", "torch.distributed.ProcessGroupNCCL2._comm_ptr",
    "torch.distributed.ProcessGroupNCCL2.register_mem_pool", "torch.distributed.ProcessGroupNCCL2.mem_allocator",
    "torch.distributed.fsdp.FSDPModule.set_allocate_memory_from_process_group_for_comm",
    "torch.distributed.fsdp._fully_shard._fsdp_common.ShardPlacementResult",
}


def check_api():
    import torch
    for name, wanted in API.items():
        try:
            obj = attr(name)
        except Exception as e:  # noqa: BLE001
            report("FAIL", f"api {name}", f"missing: {type(e).__name__}: {e}")
            continue
        if not wanted:
            report("ok", f"api {name}", "exists")
            continue
        have = params_of(obj.fget if isinstance(obj, property) else obj)
        missing = [w for w in wanted if w not in have and "kwargs" not in have]
        report("FAIL" if missing else "ok", f"api {name}", f"({', '.join(have)})" + (f"; lacks {missing}" if missing else ""))
    for name in sorted(OPTIONAL):
        try:
            attr(name)
            report("info", f"api {name}", "exists")
        except Exception:  # noqa: BLE001
            report("info", f"api {name}", "absent")
    cfg = torch.distributed.ProcessGroupNCCL.Options().config
    report("ok" if hasattr(cfg, "cta_policy") else "FAIL", "api ProcessGroupNCCL.Options().config.cta_policy",
           getattr(cfg, "cta_policy", "absent"))
    from ncclpool.torch.checks import _COLLECTIVES  # the positions its wrapper reads tensors at
    names = ("output", "input", "output_tensor", "input_tensor", "tensor", "output_tensor_list", "input_list",
             "tensor_list", "output_list")
    for coll, positions in _COLLECTIVES.items():
        fn = getattr(torch.distributed, coll, None)
        if fn is None:
            report("info", f"api checks wrapper {coll}", "absent in this torch (the wrapper skips it)")
            continue
        have = params_of(fn)
        at = [have[i] if i < len(have) else None for i in positions]
        bad = [p for p in at if p not in names]
        report("FAIL" if bad else "ok", f"api checks wrapper {coll}", f"tensor parameters {at}")
    from ncclpool.torch import fsdp
    api = attr("torch.distributed.fsdp._fully_shard._fsdp_api")
    for ours, theirs in ((fsdp.PoolAllGather, api.AllGather), (fsdp.PoolReduceScatter, api.ReduceScatter)):
        for method in ("allocate", "__call__"):
            a, b = params_of(getattr(ours, method)), params_of(getattr(theirs, method))
            report("ok" if a == b else "FAIL", f"api {ours.__name__}.{method} as FSDP2's", f"ours {a}, torch's {b}")


PG_CHILD = r"""
import json, torch, torch.distributed as dist
from ncclpool.torch import versions
out = {"default": versions.default_implementation(), "report": versions.torch_report()}
plugin = getattr(dist.Backend, "_plugins", {}).get("NCCL")
out["creator"] = getattr(getattr(plugin, "creator_fn", None), "__name__", None)
try:  # what a one-rank nccl group makes here (no GPU: torch's own refusal is the answer)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    out["init"] = "made " + type(dist.group.WORLD._get_backend(torch.device("cuda"))).__name__
    out["init"] += f"; process_group_implementation() {versions.process_group_implementation()}"
    from ncclpool.torch import binding
    try:  # the layer's communicator lookup on the real group (refused before any collective where no _comm_ptr)
        out["init"] += f"; the layer's _comm_ptr lookup: {binding._comm_ptr(dist.group.WORLD, 0)}"
    except Exception as e:
        out["init"] += f"; the layer's _comm_ptr lookup: {type(e).__name__}: {e}"
except Exception as e:
    out["init"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
print("PG " + json.dumps(out))
"""


def check_pg():
    import torch.distributed as dist
    for cls in ("ProcessGroupNCCL", "ProcessGroupNCCL2", "ProcessGroupNCCLLazy"):
        c = getattr(dist, cls, None)
        report("info", f"pg class {cls}", "absent" if c is None else
               f"exists; _comm_ptr {'yes' if hasattr(c, '_comm_ptr') else 'NO'}; register_mem_pool "
               f"{'yes' if hasattr(c, 'register_mem_pool') else 'no'}")
    for value in (None, "0", "1"):
        env = {k: v for k, v in os.environ.items() if k != "TORCH_DIST_USE_NCCL2"}
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")])  # ncclpool, this torch
        if value is not None:
            env["TORCH_DIST_USE_NCCL2"] = value
        label = f"TORCH_DIST_USE_NCCL2={value if value is not None else '(unset)'}"
        p = subprocess.run([sys.executable, "-c", PG_CHILD], env=env, capture_output=True, text=True, timeout=300)
        line = next((x for x in p.stdout.splitlines() if x.startswith("PG ")), None)
        if line is None:
            report("FAIL", f"pg {label}", (p.stderr.strip().splitlines() or ["no output"])[-1])
            continue
        out = json.loads(line[3:])
        r = out["report"]
        report("info", f"pg {label}", f"init_process_group('nccl') makes {out['default']} (registered creator "
               f"{out['creator']}); ncclpool.torch can use it: {r['usable']} ({r['why']}); one-rank init here: {out['init']}")
        if "_comm_ptr lookup" in out["init"]:  # a group was made here: the layer's lookup ran on it
            refused = "lookup: Unsupported" in out["init"] and "TORCH_DIST_USE_NCCL2=0" in out["init"]
            report("ok" if refused != r["usable"] else "FAIL", f"pg {label} the layer's lookup",
                   "refused, naming TORCH_DIST_USE_NCCL2=0" if refused else "accepted")


def check_layer():
    import ncclpool.torch as layer
    import ncclpool.torch.fsdp  # noqa: F401
    import ncclpool.torch.megatron  # noqa: F401
    from ncclpool import errors
    report("ok", "layer import", "ncclpool.torch, .fsdp, .megatron")
    try:
        layer.init()
        report("FAIL", "layer init() without CUDA", "did not refuse")
    except errors.Unsupported as e:
        report("ok", "layer init() without CUDA", f"Unsupported: {e}")


def gloo_rank(rank, world, store_path):
    """One rank of the gloo checks; prints RESULT lines for the parent."""
    import torch
    import torch.distributed as dist
    from ncclpool.torch import checks, copy_engine, fsdp, state, versions
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world)
    report("info", "gloo process_group_implementation(WORLD)", versions.process_group_implementation())
    able, why, maker, _ = copy_engine._torch_support_or_raise(dist.group.WORLD)
    report("ok" if not able and "gloo" in why else "FAIL", "gloo copy-engine torch probe", f"votes {able}: {why}; maker {maker}")
    checks.check_collectives(True)  # the wrappers on the real functions (no pool: they pass through)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    out = torch.empty(2 * world)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
    rs = torch.empty(2)
    dist.reduce_scatter_tensor(rs, torch.arange(2.0 * world), op=dist.ReduceOp.SUM)
    checks.check_collectives(False)
    ok = t.tolist() == [3.0] * 4 and out.tolist() == [0.0, 0.0, 1.0, 1.0] and rs.tolist() == [2.0 * 2 * rank, 2.0 * (2 * rank + 1)]
    report("ok" if ok else "FAIL", "gloo collectives through the check wrappers", f"{t.tolist()} {out.tolist()} {rs.tolist()}")
    sub = dist.new_group([0, 1], use_local_synchronization=True, group_desc="ncclpool_matrix")
    try:
        split = dist.split_group(parent_pg=sub, split_ranks=[[0, 1]], group_desc="ncclpool_split")
        report("info", "gloo split_group", f"made {type(split).__name__}" if split is not None else "returned None")
    except Exception as e:  # noqa: BLE001 - a fact: the layer splits only NCCL groups
        report("info", "gloo split_group", f"{type(e).__name__}: {str(e).splitlines()[0][:140]}")
    state.install_destroy_hook()
    dist.destroy_process_group(sub)
    report("ok", "gloo destroy hook on a subgroup", "destroyed through ncclpool's hook")
    gloo_fsdp(rank, world, torch, dist, fsdp)
    dist.destroy_process_group()
    report("ok", "gloo destroy hook on WORLD", "destroyed")


def gloo_fsdp(rank, world, torch, dist, fsdp):
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError as e:
        report("FAIL", "fsdp import", e)
        return

    class CpuAllGather(fsdp.PoolAllGather):  # ncclpool's __call__; a CPU buffer instead of a pool's
        def __init__(self):
            self.copy_engine_group, self.shard_group, self.calls = None, None, 0

        def allocate(self, size, *, dtype, device):
            self.calls += 1
            return torch.empty(*size, dtype=dtype, device=device)

    class CpuReduceScatter(fsdp.PoolReduceScatter):
        def __init__(self):
            self.calls = 0

        def allocate(self, size, *, dtype, device):
            self.calls += 1
            return torch.empty(*size, dtype=dtype, device=device)

    def model(custom):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        ref = [p.detach().clone() for p in m.parameters()]
        mesh = init_device_mesh("cpu", (world,))
        for layer in (m[0], m[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        comms = []
        if custom:
            for sub in m.modules():
                if isinstance(sub, FSDPModule):
                    ag, rs = CpuAllGather(), CpuReduceScatter()
                    sub.set_custom_all_gather(ag)
                    sub.set_custom_reduce_scatter(rs)
                    comms += [ag, rs]
        return m, mesh, ref, comms

    def step(m):
        torch.manual_seed(1 + rank)
        x = torch.randn(3, 8)
        loss = m(x).pow(2).sum()
        loss.backward()
        return loss.item(), [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in m.parameters()]

    try:
        plain, mesh, ref, _ = model(False)
        plain_loss, plain_grads = step(plain)
        ours, _, _, comms = model(True)
        our_loss, our_grads = step(ours)
        same = our_loss == plain_loss and all(torch.equal(a, b) for a, b in zip(our_grads, plain_grads))
        used = [c.calls for c in comms]  # the root's pair first: it has no parameters, FSDP2 gathers nothing for it
        report("ok" if same and all(used[2:]) else "FAIL", "fsdp2 cpu step with ncclpool's AllGather/ReduceScatter",
               f"loss {our_loss:.6f} vs plain {plain_loss:.6f}, grads equal {same}, allocate calls per comm {used}")
        unsharded = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        with torch.no_grad():
            for p, r in zip(unsharded.parameters(), ref):
                p.copy_(r)
        torch.manual_seed(1 + rank)
        local = unsharded(torch.randn(3, 8)).pow(2).sum().item()
        report("ok" if abs(local - our_loss) < 1e-5 else "FAIL", "fsdp2 cpu loss against the unsharded model",
               f"{our_loss:.6f} vs {local:.6f}")
        groups = [fsdp._shard_group(s) for s in ours.modules() if isinstance(s, FSDPModule)]
        want = mesh.get_group(0)
        report("ok" if groups[0] is None and all(g is want for g in groups[1:]) else "FAIL",
               "fsdp _shard_group on real FSDP2 state", f"root {groups[0]}, layers are the mesh's group: "
               f"{all(g is want for g in groups[1:])}")
    except Exception as e:  # noqa: BLE001
        report("FAIL", "fsdp2 cpu", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    gloo_two_param_groups(torch, fsdp)


def gloo_two_param_groups(torch, fsdp):
    """torch 2.14+: a per-parameter mesh makes two parameter groups in one FSDP module."""
    from ncclpool import errors
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo, ShardPlacementResult
        from torch.distributed.tensor import Shard
    except ImportError as e:
        report("info", "fsdp two parameter groups", f"not in this torch ({e})")
        return
    mesh2d = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "one"))
    other = FSDPMeshInfo(mesh2d, shard_mesh_dim=1)
    m = torch.nn.Linear(8, 8)
    fully_shard(m, mesh=mesh2d["dp"], shard_placement_fn=lambda p: ShardPlacementResult(Shard(0), other) if p.ndim == 1 else None)
    state = m._get_fsdp_state()
    report("info", "fsdp two parameter groups", f"{len(state._fsdp_param_groups)} groups")
    try:
        state._fsdp_param_group
        report("info", "fsdp _fsdp_param_group with two groups", "no error")
    except AssertionError as e:
        report("info", "fsdp _fsdp_param_group with two groups", f"AssertionError: {str(e)[:120]}")
    try:
        m.set_custom_all_gather(fsdp.PoolAllGather.__new__(fsdp.PoolAllGather))
        report("info", "fsdp set_custom_all_gather with two groups", "accepted")
    except Exception as e:  # noqa: BLE001
        report("info", "fsdp set_custom_all_gather with two groups", f"{type(e).__name__}: {str(e)[:120]}")
    try:
        fsdp._shard_group(m)
        report("FAIL", "ncclpool fsdp._shard_group with two groups", "no error")
    except errors.Unsupported as e:
        report("ok", "ncclpool fsdp._shard_group with two groups", f"Unsupported: {str(e)[:100]}...")
    except Exception as e:  # noqa: BLE001
        report("FAIL", "ncclpool fsdp._shard_group with two groups", f"{type(e).__name__}: {e}")


def check_gloo(world=2):
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")]))
        procs = [subprocess.Popen([sys.executable, __file__, "--gloo-rank", str(r), "--world", str(world), "--store", store],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) for r in range(world)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        lines = [x for x in out.splitlines() if x[:5].strip() in ("ok", "FAIL", "info")]
        for x in lines:
            status, rest = x[:5].strip(), x[6:]
            name, _, detail = rest.partition(": ")
            report(status, f"rank {r} {name}", detail)
        if p.returncode != 0:
            report("FAIL", f"rank {r} gloo process", f"exit {p.returncode}: {out.strip().splitlines()[-3:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gloo-rank", type=int)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--store")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.gloo_rank is not None:
        gloo_rank(args.gloo_rank, args.world, args.store)
        return 0
    import torch
    report("info", "torch", f"{torch.__version__} from {os.path.dirname(torch.__file__)}; CUDA {torch.version.cuda}; "
           f"built with NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; cuda available {torch.cuda.is_available()}")
    for step in (check_api, check_pg, check_layer, check_gloo):
        try:
            step()
        except Exception as e:  # noqa: BLE001
            report("FAIL", step.__name__, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    fails = sum(1 for r in results if r[0] == "FAIL")
    print(f"summary: {sum(1 for r in results if r[0] == 'ok')} ok, {fails} FAIL, {sum(1 for r in results if r[0] == 'info')} info")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"status": s, "check": n, "detail": d} for s, n, d in results], f, indent=1)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

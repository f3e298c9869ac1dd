"""What the "as across nodes" check (check_as_nodes.py under scripts/as-nodes.sh; issue 34,
docs/scaling.md) reads and decides without torch: where NCCL writes its INFO log (NCCL_DEBUG_FILE's
%h and %p), what that log says about the communicators (nodes, transports, symmetric kernels, copy
engines), which sizes an auto pool's routes send to windows, what a symmetric attach should end in
with this NCCL, and whether every rank ended the same way. Standard library only: tests/python/
test_as_nodes.py runs it on the CPU.

    python3 tests/gpu/torch/as_nodes_support.py summary LOG...   one line for gpu-check's table
"""
import os
import re
import sys

# The subsystems the check asks of NCCL: INIT (nodes per communicator, channels and their transport,
# "Init CE"), ENV (NCCL_HOSTID read), NET (the network plugin), TUNING (rank 0 of each communicator:
# how each collective ran, "[Symmetric]" and "[Copy Engine]"), REG (registrations).
NCCL_LOG_SUBSYS = "INIT,ENV,NET,TUNING,REG"

# NCCL 2.28-2.30 log lines (src/init.cc, src/transport/{net,p2p,shm}.cc, src/misc/utils.cc,
# src/scheduler/symmetric_sched.cc, src/ce_coll.cc).
COMM_LINE = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)(?: MNNVL (\d+))?")
CHANNEL_LINE = re.compile(r"Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\](?: \[(?:send|receive)\])? via (NET|P2P|SHM)(?:/([A-Za-z0-9_-]+))?")
HOSTID_LINE = re.compile(r"NCCL_HOSTID set by environment to (\S+)")
SYMMETRIC_LINE = re.compile(r"\[Symmetric\]: \d+ Bytes -> ")
COPY_ENGINE_LINES = (re.compile(r"\bInit CE\b"), re.compile(r"\[Copy Engine\]"))

# What ncclpool raises when NCCL 2.28 answers a window registration with its local registration
# handle (src/backends/nccl/communicator.cpp, register_window), and its later versions' answers.
LOCAL_HANDLE_PHRASE = "registered the buffer locally instead of as a window"
NO_WINDOW_PHRASE = "returned no window"
CANNOT_REGISTER_PHRASE = "cannot register windows"


def nccl_debug_file(pattern, hostname, pid):
    """The file NCCL writes its log to for NCCL_DEBUG_FILE=`pattern` (src/debug.cc): %h is the host
    name up to its first '.', %p the process id, %% a '%'; any other %x stays as it is."""
    host = hostname.split(".", 1)[0]
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c != "%" or i + 1 >= len(pattern):
            out.append(c)
            i += 1
            continue
        code = pattern[i + 1]
        out.append({"%": "%", "h": host, "p": str(pid)}.get(code, "%" + code))
        i += 2
    return "".join(out)


def nccl_log_env(path_pattern):
    """The environment that makes NCCL write the INFO lines the check reads into `path_pattern`
    (NCCL_DEBUG_FILE: never stdout, where a JSON or CHECK line may be parsed). It must name the
    process (%p): the ranks of one host would otherwise write one file."""
    if "%p" not in path_pattern:
        raise ValueError(f"NCCL_DEBUG_FILE pattern {path_pattern!r} has no %p: every rank of the host would write the same file")
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": NCCL_LOG_SUBSYS, "NCCL_DEBUG_FILE": path_pattern}


def read_topology(lines):
    """What NCCL's INFO lines say: {"comms": {ptr: {"rank", "nranks", "nnodes", "local_ranks", "mnnvl"}},
    "channels": {"NET": n, "P2P": n, "SHM": n}, "nets": sorted net names (Socket, IB, ...),
    "hostids": the NCCL_HOSTID values read, "symmetric": "[Symmetric]" kernel lines,
    "copy_engine": "Init CE" and "[Copy Engine]" lines}."""
    out = {"comms": {}, "channels": {"NET": 0, "P2P": 0, "SHM": 0}, "nets": set(), "hostids": [], "symmetric": 0, "copy_engine": 0}
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = COMM_LINE.search(line)
        if m:
            out["comms"][m.group(1)] = {"rank": int(m.group(2)), "nranks": int(m.group(3)), "nnodes": int(m.group(4)),
                                        "local_ranks": int(m.group(5)), "mnnvl": int(m.group(7) or 0)}
        m = CHANNEL_LINE.search(line)
        if m:
            out["channels"][m.group(1)] += 1
            if m.group(1) == "NET" and m.group(2):
                out["nets"].add(m.group(2))
        m = HOSTID_LINE.search(line)
        if m:
            out["hostids"].append(m.group(1))
        if SYMMETRIC_LINE.search(line):
            out["symmetric"] += 1
        if any(p.search(line) for p in COPY_ENGINE_LINES):
            out["copy_engine"] += 1
    out["nets"] = sorted(out["nets"])
    return out


def read_topology_files(paths):
    lines = []
    for path in paths:
        with open(path, errors="replace") as f:
            lines.extend(f)
    return read_topology(lines)


def topology_problems(topology, ranks, nodes):
    """What is wrong with one rank's log for `ranks` ranks as `nodes` nodes ([] when nothing): NCCL
    read no NCCL_HOSTID, a communicator over every rank that does not span `nodes` nodes (or has
    more local ranks than a node holds, or joined over multi-node NVLink), no channel over the
    network, or SHM channels (ranks of one node, which the host id should have split). P2P channels are expected only with several ranks
    per node."""
    problems = []
    per_node = ranks // nodes if nodes else 0
    if not topology["hostids"]:
        problems.append("NCCL read no NCCL_HOSTID (run under scripts/as-nodes.sh; the log needs NCCL_DEBUG_SUBSYS ENV)")
    whole = {p: c for p, c in topology["comms"].items() if c["nranks"] == ranks}
    if not whole:
        problems.append(f"no communicator over all {ranks} ranks in the log (NCCL_DEBUG_SUBSYS needs INIT)")
    for ptr, c in sorted(whole.items()):
        if c["nnodes"] != nodes or c["local_ranks"] > per_node:
            problems.append(f"communicator {ptr}: nNodes {c['nnodes']}, localRanks {c['local_ranks']} (expected {nodes} nodes of {per_node})")
        if c["mnnvl"]:
            problems.append(f"communicator {ptr}: MNNVL {c['mnnvl']}: NCCL joins the nodes over NVLink (NCCL_MNNVL_ENABLE=0 keeps them apart)")
    channels = topology["channels"]
    if channels["NET"] == 0:
        problems.append("no channel via NET: the ranks are not connected by the network transport")
    if channels["SHM"]:
        problems.append(f"{channels['SHM']} channel(s) via SHM: ranks still share a node")
    if channels["P2P"] and per_node <= 1:
        problems.append(f"{channels['P2P']} channel(s) via P2P with one rank per node")
    return problems


def describe_topology(topology):
    """One line: nodes per communicator, channels per transport, the nets, kernel lines."""
    comms = topology["comms"].values()
    nodes = sorted({(c["nranks"], c["nnodes"]) for c in comms})
    spans = ", ".join(f"{r} ranks on {n} node(s)" for r, n in nodes) or "no communicator line"
    ch = topology["channels"]
    return (f"{len(topology['comms'])} communicator(s): {spans}; channels NET {ch['NET']}"
            f"{' (' + '/'.join(topology['nets']) + ')' if topology['nets'] else ''}, P2P {ch['P2P']}, SHM {ch['SHM']}; "
            f"NCCL_HOSTID read {len(topology['hostids'])}x; [Symmetric] {topology['symmetric']}, copy engine {topology['copy_engine']}")


def window_classes(routes):
    """The parts of an auto pool's routes (ncclpool.Pool.routes()) that send sizes to windows: its
    classes with placement 'symmetric' ('from 0 B' and so on), and the collectives whose own routes
    name symmetric. [] when no size goes to windows."""
    if routes is None:
        raise ValueError("no routes: not an auto pool")
    out = [f"from {c['min_bytes']} B" for c in routes.get("classes", []) if c.get("placement") == "symmetric"]
    out += [f"{op}: {text}" for op, text in sorted(routes.get("by_collective", {}).items()) if "symmetric" in text]
    return out


def expected_symmetric_attach(nccl_version, win_enable=True):
    """What a symmetric pool's windows on a communicator over several nodes without GIN (NET/Socket:
    no InfiniBand) should end in with this NCCL (an int, 22809 for 2.28.9), read from NCCL's and
    ncclpool's sources: ("windows", None, why) or ("error", the phrase every rank's error carries,
    why), or (None, None, why) where they do not settle it (either is accepted, as long as every rank
    ends the same way)."""
    if 22900 <= nccl_version < 22907:
        return ("error", NO_WINDOW_PHRASE, "NCCL 2.29.0-2.29.6 give no symmetric support across nodes without GIN "
                "(src/init.cc) and answer a window registration with no window; ncclpool, which cannot ask NCCL "
                "before 2.29.7, refuses it at the commit with a RegistrationError")
    if nccl_version >= 22907:
        return ("error", CANNOT_REGISTER_PHRASE, "NCCL >= 2.29.7 gives no symmetric support across nodes without GIN "
                "(src/init.cc) and says so (ncclCommQueryProperties): ncclpool's attach refuses, Unsupported")
    if not 22800 <= nccl_version < 22900:
        return (None, None, f"NCCL {nccl_version}: not read")
    if not win_enable:  # NCCL_WIN_ENABLE=0: no symmetric support on any communicator
        return ("error", LOCAL_HANDLE_PHRASE, "NCCL 2.28 answers a window registration with its local registration "
                "handle where it has no symmetric support (src/dev_runtime.cc); ncclpool sees a host object, "
                "deregisters it and raises RegistrationError")
    return ("windows", None, "NCCL 2.28 decides symmetric support from the ranks of each node only (isAllCudaP2p "
            "over local ranks, src/transport.cc), so it makes windows across nodes; it masks its symmetric kernels "
            "off with nNodes > 1 (src/sym_kernels.cc) and its copy engines need nNodes == 1 (src/enqueue.cc): "
            "windows without symmetric kernels")


def outcome_problems(outcomes, expected):
    """Every rank's outcome of the symmetric attach: ("windows", all buffers have one, results right)
    or ("error", exception class, message). [] when every rank ended the same way and as `expected`
    (expected_symmetric_attach) says; else what differs."""
    kinds = [o[0] for o in outcomes]
    problems = []
    if len(set(kinds)) > 1:
        return ["ranks ended differently: " + ", ".join(f"rank {r} {k}" for r, k in enumerate(kinds))]
    kind = kinds[0]
    if kind == "windows":
        for r, (_, every_buffer, right) in enumerate(outcomes):
            if not every_buffer:
                problems.append(f"rank {r}: not every pool buffer is a window")
            if not right:
                problems.append(f"rank {r}: collectives on the windows differ from plain memory")
    else:
        classes = {o[1] for o in outcomes}
        if len(classes) > 1:
            problems.append(f"ranks raised different errors: {sorted(classes)}")
    want = expected[0]
    if want is not None and want != kind:
        problems.append(f"expected {want} ({expected[-1]}), got {kind}" + (f": {outcomes[0][2][:200]}" if kind == "error" else ""))
    elif want == "error" and not all(expected[1] in o[2] for o in outcomes):
        problems.append(f"not every rank's error says '{expected[1]}': {outcomes[0][2][:200]}")
    return problems


def main(argv):
    if len(argv) < 2 or argv[0] != "summary":
        sys.exit("usage: python3 tests/gpu/torch/as_nodes_support.py summary LOG...   (NCCL_DEBUG=INFO logs, "
                 f"NCCL_DEBUG_SUBSYS={NCCL_LOG_SUBSYS})")
    paths = [p for p in argv[1:] if os.path.isfile(p)]
    if not paths:  # a shell glob that matched nothing comes here as itself
        print(f"no NCCL log: no file at {' '.join(argv[1:])}")
        sys.exit(1)
    print(describe_topology(read_topology_files(paths)))


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env bash
# "As across nodes" on one host (issue 34, docs/scaling.md): a wrapper for `torchrun --no-python` that
# gives each rank (or each group of NCCLPOOL_AS_NODES_RANKS_PER_NODE consecutive ranks) its own
# NCCL_HOSTID, so that NCCL takes each for a node of its own and connects them with its network
# transport (NET/Socket where there is no InfiniBand), then execs the rest of its arguments.
#
#   python3 -m torch.distributed.run --nproc-per-node 2 --no-python bash scripts/as-nodes.sh \
#       python3 tests/gpu/torch/check_as_nodes.py
#   NCCLPOOL_AS_NODES_RANKS_PER_NODE=2 python3 -m torch.distributed.run --nproc-per-node 4 --no-python \
#       bash scripts/as-nodes.sh python3 train.py        # 2 "nodes" of 2 GPUs (P2P inside, NET between)
#
# (`--no-python scripts/as-nodes.sh ...` works too where the file kept its executable mode.)
#
# Why a host id: NCCL groups ranks into nodes by a hash of NCCL_HOSTID (default: the host name and
# boot id), read once per process (src/misc/utils.cc, getHostHash). NCCL_P2P_DISABLE=1 alone leaves
# the GPUs of one host on one node (SHM between them, nNodes 1). Since the id is per process, only
# programs with one process per rank can be split this way: those that run every rank as a thread
# of one process (tests/gpu/test_nccl_registry.cpp, `ncclpool bench coll`) cannot.
#
# Reads: RANK (else LOCAL_RANK), set by torchrun; NCCLPOOL_AS_NODES_RANKS_PER_NODE (default 1); an
# NCCL_HOSTID already set is kept as the prefix of every node's id (default prefix: the host name).
# Sets, for the program: NCCL_HOSTID=<prefix>-as-node-<k> (k = rank / ranks per node),
# NCCLPOOL_AS_NODE=<k>, NCCLPOOL_AS_NODES_RANKS_PER_NODE, and NVLink multicast off
# (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
# Exits 2 with a message on a bad setting (no command, no rank, a rank or count that is no number).
set -euo pipefail

fail() {
  echo "as-nodes.sh: $*" >&2
  exit 2
}

[ $# -gt 0 ] || fail "no command to run (usage: torchrun --no-python bash scripts/as-nodes.sh COMMAND [ARGS...])"
rank=${RANK:-${LOCAL_RANK:-}}
[ -n "$rank" ] || fail "neither RANK nor LOCAL_RANK is set: run it under torchrun --no-python (one process per rank)"
[[ "$rank" =~ ^[0-9]+$ ]] || fail "rank '$rank' (RANK / LOCAL_RANK) is not a number >= 0"
per_node=${NCCLPOOL_AS_NODES_RANKS_PER_NODE:-1}
[[ "$per_node" =~ ^[0-9]+$ ]] && [ "$per_node" -ge 1 ] ||
  fail "NCCLPOOL_AS_NODES_RANKS_PER_NODE='$per_node' is not a number >= 1"

node=$(( 10#$rank / 10#$per_node ))
prefix=${NCCL_HOSTID:-$(hostname)}
export NCCL_HOSTID="$prefix-as-node-$node"
export NCCLPOOL_AS_NODE=$node NCCLPOOL_AS_NODES_RANKS_PER_NODE=$(( 10#$per_node ))
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec "$@"

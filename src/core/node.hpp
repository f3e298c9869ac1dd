#pragma once
// The node this process runs on, as NCCL tells nodes apart (Communicator::node's default). Internal.

#include <ncclpool/export.hpp>

#include <cstdint>

namespace ncclpool::detail {

/// A hash of NCCL_HOSTID when set, else of the host name and boot id; computed once per process.
NCCLPOOL_INTERNAL std::uint64_t process_node();

}  // namespace ncclpool::detail

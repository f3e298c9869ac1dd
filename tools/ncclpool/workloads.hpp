#pragma once
// Synthetic multi-group workloads for `ncclpool bench memory` when no trace is given.

#include "trace.hpp"

namespace ncclpool::tool {

struct FsdpEpShape {
  int layers = 24;
  int steps = 3;
  // One layer of a mid-size MoE model in bf16 (hidden 4096, 8 local experts), per rank.
  std::size_t dense_param_bytes = 400ull << 20;   // one layer's unsharded dense parameters (dp all-gather)
  std::size_t expert_param_bytes = 1152ull << 20; // one layer's experts on this rank (edp all-gather)
  std::size_t token_bytes = 256ull << 20;         // dispatch/combine buffers of one layer (ep all-to-all)
};

/// One rank of an FSDP + expert-parallel training step: per layer, forward all-gathers dense (dp) and
/// expert (edp) parameters and dispatches tokens (ep); backward re-gathers, and reduce-scatters
/// gradients; buffers are freed as FSDP frees them (after the layer, after the reduce-scatter).
Trace make_fsdp_ep_trace(const FsdpEpShape& shape);

}  // namespace ncclpool::tool

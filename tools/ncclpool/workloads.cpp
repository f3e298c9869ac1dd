// Synthetic workloads: the allocation pattern of an FSDP + EP step, per communication group.

#include "workloads.hpp"

namespace ncclpool::tool {

Trace make_fsdp_ep_trace(const FsdpEpShape& s) {
  Trace t;
  t.format = "synthetic fsdp+ep";
  const int dp = t.group_index("dp"), edp = t.group_index("edp"), ep = t.group_index("ep");
  std::uint64_t next = 0;
  auto alloc = [&](std::size_t size, int group, std::uint64_t stream) {
    t.events.push_back({TraceEvent::Op::alloc, next, size, stream, group});
    return next++;
  };
  auto release = [&](std::uint64_t id) { t.events.push_back({TraceEvent::Op::free, id, 0, 0, 0}); };
  constexpr std::uint64_t ag_stream = 1, rs_stream = 2, compute = 0;
  for (int step = 0; step < s.steps; ++step) {
    // Forward: gather layer i+1 while layer i computes (prefetch depth 1), free after the layer.
    std::vector<std::uint64_t> held;
    for (int layer = 0; layer < s.layers; ++layer) {
      const auto dense = alloc(s.dense_param_bytes, dp, ag_stream);
      const auto expert = alloc(s.expert_param_bytes, edp, ag_stream);
      const auto dispatch = alloc(s.token_bytes, ep, compute);
      const auto combine = alloc(s.token_bytes, ep, compute);
      release(dispatch);
      release(combine);
      for (auto id : held) release(id);
      held = {dense, expert};
    }
    for (auto id : held) release(id);
    held.clear();
    // Backward: re-gather, compute gradients, reduce-scatter them, free.
    for (int layer = s.layers - 1; layer >= 0; --layer) {
      const auto dense = alloc(s.dense_param_bytes, dp, ag_stream);
      const auto expert = alloc(s.expert_param_bytes, edp, ag_stream);
      const auto tokens = alloc(s.token_bytes, ep, compute);
      const auto dense_grad = alloc(s.dense_param_bytes, dp, rs_stream);
      const auto expert_grad = alloc(s.expert_param_bytes, edp, rs_stream);
      release(tokens);
      release(dense);
      release(expert);
      for (auto id : held) release(id);
      held = {dense_grad, expert_grad};  // freed once the next layer's reduce-scatter is issued
    }
    for (auto id : held) release(id);
  }
  return t;
}

}  // namespace ncclpool::tool

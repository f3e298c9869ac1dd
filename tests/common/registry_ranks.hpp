#pragma once
// Ranks as threads for registry tests on the simulator: each rank has its own sim pool and registry.

#include <ncclpool/loopback.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/sim.hpp>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ncclpool {
namespace {

constexpr std::size_t MiB = 1u << 20;
using namespace std::chrono_literals;

struct Rank {
  std::shared_ptr<SimSource> source;
  std::shared_ptr<Pool> pool;
  std::unique_ptr<Registry> registry;
};

Rank make_rank(bool deterministic = true, std::size_t chunk = 2 * MiB, int device = 0, const std::string& name = "ncclpool",
               RegistryOptions options = {CheckLevel::off}) {
  Rank r;
  SimSourceConfig sc;
  sc.device = device;
  r.source = std::make_shared<SimSource>(sc);
  PoolConfig pc;
  pc.deterministic = deterministic;
  pc.growth_chunk = chunk;
  pc.name = name;
  r.pool = std::make_shared<Pool>(r.source, pc);
  r.registry = std::make_unique<Registry>(r.pool, options);
  return r;
}

// Runs body(rank) on n threads; rethrows nothing, returns each rank's error message ("" = ok).
std::vector<std::string> on_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// group->size() ranks, each with its own deterministic pool and registry, attached symmetrically to
// `group`; body(rank's state, its communicator, rank) runs on one thread per rank.
[[maybe_unused]] std::vector<std::string> on_symmetric_ranks(const std::shared_ptr<LoopbackGroup>& group,
                                            const std::function<void(Rank&, const std::shared_ptr<LoopbackCommunicator>&, int)>& body) {
  std::vector<Rank> ranks;
  for (int i = 0; i < group->size(); ++i) ranks.push_back(make_rank());
  return on_ranks(group->size(), [&](int rank) {
    Rank& r = ranks[static_cast<std::size_t>(rank)];
    auto comm = std::make_shared<LoopbackCommunicator>(group, rank);
    r.registry->attach(comm, RegistrationKind::symmetric);
    body(r, comm, rank);
  });
}

}  // namespace
}  // namespace ncclpool

// This build found no CUDA/NCCL headers: the GPU parts of the benches and of `ncclpool info` say so.

#include "bench.hpp"

#include <ncclpool/errors.hpp>

namespace ncclpool::tool {
namespace {
constexpr const char* kWhy = "this ncclpool was built without the CUDA toolkit headers (cuda.h, nccl.h): GPU benches are not built";
}

bool gpu_benches_built() { return false; }
int gpu_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}
AllocTarget make_gpu_alloc_target(int) { throw Unsupported(kWhy); }
std::unique_ptr<Team> make_nccl_team(int, int, const std::set<int>&) { throw Unsupported(kWhy); }
void run_coll(const CollOptions&, Report&) { throw Unsupported(std::string("bench coll needs GPUs: ") + kWhy); }
void describe_gpus(std::vector<GpuDescription>&, std::vector<PeerLink>&) {}

}  // namespace ncclpool::tool

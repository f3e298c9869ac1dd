#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>
#include <cstdio>
#include <vector>
#include <cstdlib>
using namespace ncclpool;
int main(int argc, char** argv) {
  const std::size_t MiB = 1 << 20;
  std::size_t total = 64ull * 1024 * MiB;
  for (bool ramp : {false, true}) for (std::size_t req : {2 * MiB, 8 * MiB, 20 * MiB, 64 * MiB, 66*MiB, 128 * MiB, 256*MiB}) {
    SimSourceConfig c; c.capacity = 200ull << 30; auto source = std::make_shared<SimSource>(c);
    Pool pool(source, PoolConfig{.growth_chunk = 1024 * MiB, .ramp_up_chunks = ramp});
    std::vector<void*> v;
    for (std::size_t got = 0; got < total; got += req) v.push_back(pool.allocate(req));
    std::printf("ramp=%d req=%zu MiB: segments %zu reserved %.2f GiB\n", ramp, req / MiB, pool.stats().segment_count, pool.stats().reserved_bytes / 1073741824.0);
    for (void* p : v) pool.deallocate(p);
  }
}

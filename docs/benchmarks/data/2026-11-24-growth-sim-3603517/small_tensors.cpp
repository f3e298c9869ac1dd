#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>
#include <cstdio>
#include <vector>
using namespace ncclpool;
int main() {
  const std::size_t MiB = 1 << 20;
  for (bool ramp : {false, true}) {
    SimSourceConfig c; c.capacity = 200ull << 30; auto source = std::make_shared<SimSource>(c);
    Pool pool(source, PoolConfig{.growth_chunk = 1024 * MiB, .ramp_up_chunks = ramp});
    std::vector<void*> v; std::size_t live = 0; double worst = 0; std::size_t worst_live = 0;
    unsigned x = 12345;
    for (int i = 0; i < 3000; ++i) {
      x = x * 1103515245 + 12345;
      std::size_t sz = (1 + (x >> 16) % 4) * MiB - 4096 * ((x >> 8) % 7);
      v.push_back(pool.allocate(sz)); live += sz;
      double r = double(pool.stats().reserved_bytes) / live;
      if (live > 256 * MiB && r > worst) { worst = r; worst_live = live; }
    }
    std::printf("ramp=%d: live %.0f MiB reserved %.0f MiB segments %zu; worst reserved/live past 256 MiB %.3f at %.0f MiB live\n", ramp, live / 1048576.0,
                pool.stats().reserved_bytes / 1048576.0, pool.stats().segment_count, worst, worst_live / 1048576.0);
    for (void* p : v) pool.deallocate(p);
  }
}

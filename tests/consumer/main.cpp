#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <cstdio>

int main() {
  ncclpool::Pool pool(std::make_shared<ncclpool::SimSource>());
  void* p = pool.allocate(1 << 20);
  pool.deallocate(p);
  std::printf("consumer ok: %s\n", pool.stats_json().c_str());
  return pool.stats().allocation_count == 1 ? 0 : 1;
}

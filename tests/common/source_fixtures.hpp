#pragma once
// How each segment source is made and how tests touch its memory. The typed pool suite
// (pool_suite.hpp) is written once and instantiated for every fixture below that can run.

#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ncclpool::testing {

struct SimFixture {
  static constexpr const char* kName = "sim";
  static bool available(std::string*) { return true; }
  static std::shared_ptr<SegmentSource> make() { return std::make_shared<SimSource>(); }
  // Stream number i (0..3); 0 is the default stream.
  static stream_t stream(int i) { return static_cast<stream_t>(i); }
  static void fill(void* ptr, std::size_t n, std::uint8_t value) { std::memset(ptr, value, n); }
  static std::vector<std::uint8_t> read(const void* ptr, std::size_t n) {
    std::vector<std::uint8_t> out(n);
    std::memcpy(out.data(), ptr, n);
    return out;
  }
};

}  // namespace ncclpool::testing

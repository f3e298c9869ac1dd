// ncclpool_demo: allocates a training-step-like mix of blocks from a pool on this machine and prints
// what the pool did. Uses the GPU (cuMem `vmm` source) when there is one, else the simulator.
//
//   ncclpool_demo [--source auto|sim|cuda|vmm] [--device N] [--json]

#include <ncclpool/cuda.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

void print_usage(std::FILE* out, const char* argv0) {
  std::fprintf(out, "usage: %s [--source auto|sim|cuda|vmm] [--device N] [--json]\n", argv0);
}

// A refused command line: the reason first, then the usage, on stderr; exit status 2.
int usage(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "ncclpool_demo: %s\n", why.c_str());
  print_usage(stderr, argv0);
  return 2;
}

// --device N: a decimal device ordinal 0..1023 (atoi took "x" as 0 and wrapped large values).
bool parse_device(const char* text, int* out) {
  if (!*text || std::strlen(text) > 4) return false;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return false;
  }
  *out = std::atoi(text);
  return *out <= 1023;
}

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string source_name = "auto";
  int device = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      print_usage(stdout, argv[0]);
      return 0;
    } else if (!std::strcmp(argv[i], "--source")) {
      if (i + 1 >= argc) return usage(argv[0], "--source needs a value");
      source_name = argv[++i];
      if (source_name != "auto" && source_name != "sim" && source_name != "cuda" && source_name != "vmm") {
        return usage(argv[0], "--source '" + source_name + "' is not one of auto, sim, cuda, vmm");
      }
    } else if (!std::strcmp(argv[i], "--device")) {
      if (i + 1 >= argc) return usage(argv[0], "--device needs a value");
      if (!parse_device(argv[++i], &device)) {
        return usage(argv[0], std::string("--device '") + argv[i] + "' is not a device ordinal (0 to 1023)");
      }
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      return usage(argv[0], std::string("unknown argument '") + argv[i] + "'");
    }
  }
  // With --json, stdout carries the JSON only: what the demo says about its source goes to stderr.
  std::FILE* info = json ? stderr : stdout;
  try {
    std::shared_ptr<ncclpool::SegmentSource> source;
    if (source_name == "auto") {
      std::string why;
      if (ncclpool::cuda_available(&why)) {
        source_name = "vmm";
      } else {
        std::fprintf(info, "No GPU here (%s): using the built-in simulator (host memory, streams as ids).\n", why.c_str());
        source_name = "sim";
      }
    }
    if (source_name == "sim") {
      ncclpool::SimSourceConfig c;
      c.device = device;
      source = std::make_shared<ncclpool::SimSource>(c);
    } else if (source_name == "cuda") {
      source = ncclpool::make_cuda_source(device);
    } else if (source_name == "vmm") {
      ncclpool::VmmSourceOptions o;
      o.device = device;
      source = ncclpool::make_vmm_source(o);
    } else {
      return usage(argv[0], "--source '" + source_name + "' is not one of auto, sim, cuda, vmm");  // checked above
    }
    std::fprintf(info, "source: %s\n", source->properties().description.c_str());

    ncclpool::PoolConfig config;
    config.name = "demo";
    config.growth_chunk = 64u << 20;
    ncclpool::Pool pool(source, config);

    // A step: parameters live for the whole run, activations come and go on two streams.
    std::mt19937_64 rng(42);
    std::vector<void*> params;
    for (int i = 0; i < 24; ++i) params.push_back(pool.allocate((1u + rng() % 8) << 20));
    for (int step = 0; step < 5; ++step) {
      std::vector<void*> acts;
      for (int i = 0; i < 40; ++i) acts.push_back(pool.allocate(1024 + rng() % (4u << 20), i % 2));
      for (void* p : acts) pool.deallocate(p);
    }
    const ncclpool::PoolStats s = pool.stats();
    if (json) {
      std::printf("%s\n", pool.stats_json().c_str());
    } else {
      std::printf("%-22s %14s\n", "statistic", "value");
      std::printf("%-22s %14s\n", "allocated (live)", mib(s.allocated_bytes).c_str());
      std::printf("%-22s %14s\n", "peak allocated", mib(s.peak_allocated_bytes).c_str());
      std::printf("%-22s %14s\n", "reserved", mib(s.reserved_bytes).c_str());
      std::printf("%-22s %14zu\n", "segments", s.segment_count);
      std::printf("%-22s %14s\n", "largest free block", mib(s.largest_free_block).c_str());
      std::printf("%-22s %14llu\n", "allocations", static_cast<unsigned long long>(s.allocation_count));
      std::printf("%-22s %14llu\n", "cross-stream reuses", static_cast<unsigned long long>(s.cross_stream_reuses));
      std::printf("%-22s %14llu\n", "OOM errors", static_cast<unsigned long long>(s.oom_count));
    }
    for (void* p : params) pool.deallocate(p);
    pool.check_invariants();
    return 0;
  } catch (const ncclpool::Error& e) {
    std::fprintf(stderr, "ncclpool_demo: %s error: %s\n", ncclpool::to_string(e.code()), e.what());
    return 1;
  }
}

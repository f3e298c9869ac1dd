// NcclCommunicatorOptions from the environment (read in core/environment.cpp), and the check of every
// variable that takes a value (environment_problems). No NCCL needed: built in every configuration,
// so that the parsing is tested on machines without GPUs.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/registry.hpp>

#include "core/environment.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

namespace ncclpool {

std::chrono::milliseconds agreement_timeout_from_env(std::chrono::milliseconds fallback) {
  return environment::agreement_timeout().value_or(fallback);
}

bool agreement_buffers_on_device_from_env() { return environment::agreement_buffers_on_device(); }

std::vector<EnvironmentProblem> environment_problems() {
  std::vector<EnvironmentProblem> out;
  auto add = [&](const char* variable, const char* value, const std::string& message) {
    out.push_back({variable, value != nullptr ? value : "", message});
  };
  for (auto [variable, value, read] : {std::tuple{"NCCLPOOL_AGREEMENT_TIMEOUT_S", environment::agreement_timeout_text(), +[] { (void)environment::agreement_timeout(); }},
                                       std::tuple{"NCCLPOOL_AGREEMENT_BUFFERS", environment::agreement_buffers_text(), +[] { (void)environment::agreement_buffers_on_device(); }}}) {
    try {
      read();
    } catch (const std::exception& e) {
      add(variable, value, std::string(e.what()) + ": wrapping an NCCL communicator fails until it is fixed");
    }
  }
  // Read at the process's first symmetric attach, inside a collective: ignored there, with a message.
  if (const char* v = environment::ncclpool_sym_ctas(); v != nullptr && choose_symmetric_ctas(nullptr, v, 9, 0).ignored_setting)
    add("NCCLPOOL_SYM_CTAS", v, std::string("NCCLPOOL_SYM_CTAS='") + v + "' is neither 'nccl' nor a count from 1 to 64: ignored (NCCL's own choice)");
  if (const char* v = environment::symmetric_kernels(); v != nullptr && choose_symmetric_kernels(v, 0, 0, 0).ignored_setting)
    add("NCCLPOOL_SYMMETRIC_KERNELS", v, std::string("NCCLPOOL_SYMMETRIC_KERNELS='") + v + "' is not auto, on, off or fence: ignored (auto)");
  if (bool ignored = false; (void)choose_symmetric_fence_kind(environment::symmetric_fence(), &ignored), ignored)
    add("NCCLPOOL_SYMMETRIC_FENCE", environment::symmetric_fence(),
        std::string("NCCLPOOL_SYMMETRIC_FENCE='") + environment::symmetric_fence() + "' is not kernel, memset or node: ignored (node)");
  if (const char* v = environment::copy_engine(); v != nullptr && choose_copy_engine(CopyEngineRequest::automatic, v, 0, SymmetricKernels{}, nullptr).ignored_setting)
    add("NCCLPOOL_COPY_ENGINE", v, std::string("NCCLPOOL_COPY_ENGINE='") + v + "' is not auto, on or off: ignored (auto)");
  // Read by ncclpool.torch.create_nccl_mem_pool (python/ncclpool/torch), which refuses the same values.
  for (const auto& [variable, v] : {std::pair{"NCCLPOOL_GROWTH_CHUNK", environment::growth_chunk()}, std::pair{"NCCLPOOL_MIN_SEGMENT", environment::min_segment()}}) {
    if (v == nullptr || *v == '\0') continue;
    const std::string s = v;
    errno = 0;
    char* end = nullptr;
    (void)std::strtoull(v, &end, 10);
    if (s.find_first_not_of("0123456789") != std::string::npos || errno != 0 || *end != '\0')
      add(variable, v, std::string(variable) + "='" + s + "' is not a number of bytes (an integer from 0 to 2**64 - 1; 0: the pool's default): "
                                                      "ncclpool.torch.create_nccl_mem_pool refuses it");
  }
  // Read at each pool's creation with its check level unset: the same parse refuses it there.
  if (const char* v = environment::check(); v != nullptr) {
    try {
      (void)check_level_from_env();
    } catch (const std::exception& e) {
      add("NCCLPOOL_CHECK", v, std::string(e.what()) + ": creating a pool (or registry) without a check level fails until it is fixed");
    }
  }
  // Read by ncclpool.sglang (python/ncclpool/_environment.py, sglang_kind), which refuses the same values
  // (tests/python/test_misuse.py compares the two).
  if (const char* v = environment::sglang_kind(); v != nullptr) {
    const std::string s = v;
    if (!s.empty() && s != "auto" && s != "symmetric" && s != "local")
      add("NCCLPOOL_SGLANG_KIND", v, "NCCLPOOL_SGLANG_KIND='" + s + "' is not one of auto, symmetric, local (unset: auto): ncclpool.sglang refuses it");
  }
  return out;
}

}  // namespace ncclpool

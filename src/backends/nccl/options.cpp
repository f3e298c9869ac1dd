// NcclCommunicatorOptions from the environment. No NCCL needed: built in every configuration, so that
// the parsing is tested on machines without GPUs.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace ncclpool {

std::chrono::milliseconds agreement_timeout_from_env(std::chrono::milliseconds fallback) {
  const char* env = std::getenv("NCCLPOOL_AGREEMENT_TIMEOUT_S");
  if (env == nullptr || *env == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e7)
    throw InvalidArgument(std::string("NCCLPOOL_AGREEMENT_TIMEOUT_S='") + env + "' is not a positive number of seconds");
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

bool agreement_buffers_on_device_from_env() {
  const char* env = std::getenv("NCCLPOOL_AGREEMENT_BUFFERS");
  if (env == nullptr || *env == '\0') return false;
  const std::string v = env;
  if (v != "host" && v != "device") throw InvalidArgument("NCCLPOOL_AGREEMENT_BUFFERS='" + v + "' is not 'host' or 'device'");
  return v == "device";
}

std::vector<EnvironmentProblem> environment_problems() {
  std::vector<EnvironmentProblem> out;
  auto add = [&](const char* variable, const std::string& message) {
    const char* v = std::getenv(variable);
    out.push_back({variable, v != nullptr ? v : "", message});
  };
  for (auto [variable, read] : {std::pair{"NCCLPOOL_AGREEMENT_TIMEOUT_S", +[] { (void)agreement_timeout_from_env(std::chrono::seconds(60)); }},
                                std::pair{"NCCLPOOL_AGREEMENT_BUFFERS", +[] { (void)agreement_buffers_on_device_from_env(); }}}) {
    try {
      read();
    } catch (const std::exception& e) {
      add(variable, std::string(e.what()) + ": wrapping an NCCL communicator fails until it is fixed");
    }
  }
  // Read at the process's first symmetric attach, inside a collective: ignored there, with a message.
  if (const char* v = std::getenv("NCCLPOOL_SYM_CTAS"); v != nullptr && choose_symmetric_ctas(nullptr, v, 9, 0).ignored_setting)
    add("NCCLPOOL_SYM_CTAS", std::string("NCCLPOOL_SYM_CTAS='") + v + "' is neither 'nccl' nor a count from 1 to 64: ignored (NCCL's own choice)");
  if (const char* v = std::getenv("NCCLPOOL_SYMMETRIC_KERNELS"); v != nullptr && choose_symmetric_kernels(v, 0, 0, 0).ignored_setting)
    add("NCCLPOOL_SYMMETRIC_KERNELS", std::string("NCCLPOOL_SYMMETRIC_KERNELS='") + v + "' is not auto, on or off: ignored (auto)");
  // Read by ncclpool.torch.create_nccl_mem_pool (python/ncclpool/torch), which refuses the same values.
  for (const char* variable : {"NCCLPOOL_GROWTH_CHUNK", "NCCLPOOL_MIN_SEGMENT"}) {
    const char* v = std::getenv(variable);
    if (v == nullptr || *v == '\0') continue;
    const std::string s = v;
    errno = 0;
    char* end = nullptr;
    (void)std::strtoull(v, &end, 10);
    if (s.find_first_not_of("0123456789") != std::string::npos || errno != 0 || *end != '\0')
      add(variable, std::string(variable) + "='" + s + "' is not a number of bytes (an integer from 0 to 2**64 - 1; 0: the pool's default): "
                                                  "ncclpool.torch.create_nccl_mem_pool refuses it");
  }
  return out;
}

}  // namespace ncclpool

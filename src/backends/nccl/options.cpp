// NcclCommunicatorOptions from the environment. No NCCL needed: built in every configuration, so that
// the parsing is tested on machines without GPUs.

#include <ncclpool/errors.hpp>
#include <ncclpool/nccl.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

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

}  // namespace ncclpool

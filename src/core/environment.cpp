// The one place ncclpool's C++ code reads (and sets) environment variables: see environment.hpp and
// docs/environment.md, which lists every variable, its values and when it is read.

#include "environment.hpp"

#include <ncclpool/errors.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ncclpool::environment {
namespace {

// "" for an unset variable, as the callers below treat an empty one.
std::string text_of(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::string nccl_library() { return text_of("NCCLPOOL_NCCL_LIBRARY"); }

const char* symmetric_kernels() { return std::getenv("NCCLPOOL_SYMMETRIC_KERNELS"); }
const char* symmetric_fence() { return std::getenv("NCCLPOOL_SYMMETRIC_FENCE"); }
const char* nccl_graph_mixing_support() { return std::getenv("NCCL_GRAPH_MIXING_SUPPORT"); }
const char* copy_engine() { return std::getenv("NCCLPOOL_COPY_ENGINE"); }
const char* nccl_hostid() { return std::getenv("NCCL_HOSTID"); }
const char* ncclpool_sym_ctas() { return std::getenv("NCCLPOOL_SYM_CTAS"); }
const char* nccl_sym_ctas() { return std::getenv("NCCL_SYM_CTAS"); }

bool set_nccl_sym_ctas(int ctas) { return ::setenv("NCCL_SYM_CTAS", std::to_string(ctas).c_str(), /*overwrite=*/0) == 0; }

const char* agreement_timeout_text() { return std::getenv("NCCLPOOL_AGREEMENT_TIMEOUT_S"); }

std::optional<std::chrono::milliseconds> agreement_timeout() {
  const char* env = agreement_timeout_text();
  if (env == nullptr || *env == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (errno != 0 || end == env || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 || seconds > 1e7)
    throw InvalidArgument(std::string("NCCLPOOL_AGREEMENT_TIMEOUT_S='") + env + "' is not a positive number of seconds");
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

const char* agreement_buffers_text() { return std::getenv("NCCLPOOL_AGREEMENT_BUFFERS"); }

bool agreement_buffers_on_device() {
  const char* env = agreement_buffers_text();
  if (env == nullptr || *env == '\0') return false;
  const std::string v = env;
  if (v != "host" && v != "device") throw InvalidArgument("NCCLPOOL_AGREEMENT_BUFFERS='" + v + "' is not 'host' or 'device'");
  return v == "device";
}

const char* check() { return std::getenv("NCCLPOOL_CHECK"); }

std::string profile_setting() { return text_of("NCCLPOOL_PROFILE"); }

std::string profile_cache_dir() {
  if (std::string x = text_of("XDG_CACHE_HOME"); !x.empty()) return x + "/ncclpool";
  if (std::string h = text_of("HOME"); !h.empty()) return h + "/.cache/ncclpool";
  return "";
}

std::string profile_path() {
  if (std::string p = profile_setting(); !p.empty()) return p;
  const std::string dir = profile_cache_dir();
  return dir.empty() ? dir : dir + "/profile.json";
}

const char* growth_chunk() { return std::getenv("NCCLPOOL_GROWTH_CHUNK"); }
const char* min_segment() { return std::getenv("NCCLPOOL_MIN_SEGMENT"); }
const char* sglang_kind() { return std::getenv("NCCLPOOL_SGLANG_KIND"); }

const char* nccl_nvls_enable() { return std::getenv("NCCL_NVLS_ENABLE"); }

}  // namespace ncclpool::environment

#pragma once
// Test helpers for profiles (profile.hpp): one written for a machine key, with the same kind for every
// collective per size class, and NCCLPOOL_PROFILE pointed at it for a scope. Shared by the lockstep
// suites on the simulator (tests/unit) and on real NCCL (tests/gpu).

#include "scoped_env.hpp"

#include <ncclpool/profile.hpp>
#include <ncclpool/registration.hpp>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>

namespace ncclpool::testing_support {

// A profile for (gpu, nccl_version, ranks) with classes of (from bytes, kind), the same kind for every
// collective.
inline Profile profile_for(const std::string& gpu, int nccl_version, int ranks, const std::vector<std::pair<std::size_t, RegistrationKind>>& classes,
                           const std::string& measured = "lockstep test") {
  Profile p;
  p.gpu = gpu;
  p.nccl_version = nccl_version;
  p.ranks = ranks;
  p.measured = measured;
  for (const auto& [from, kind] : classes) {
    ProfileClass c;
    c.min_bytes = from;
    for (const char* op : {"all_gather", "reduce_scatter", "all_reduce"}) c.kind.emplace(op, kind);
    p.classes.push_back(std::move(c));
  }
  return p;
}

// Writes a profile to a temporary file and points NCCLPOOL_PROFILE at it; restores the variable (and
// removes the file) when it goes, so no other test sees it. Make it on the test's thread before the
// ranks start: no rank may read the environment while it changes.
class ScopedProfile {
 public:
  explicit ScopedProfile(const Profile& profile, const std::string& tag = "lockstep")
      : path_((std::filesystem::temp_directory_path() / ("ncclpool-" + tag + "-" + std::to_string(::getpid()) + ".json")).string()) {
    std::ofstream(path_) << profile_to_json(profile);
    env_.emplace("NCCLPOOL_PROFILE", path_);  // once the file is there
  }
  ~ScopedProfile() {
    env_.reset();
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  ScopedProfile(const ScopedProfile&) = delete;
  ScopedProfile& operator=(const ScopedProfile&) = delete;

 private:
  std::string path_;
  std::optional<ScopedEnv> env_;
};

}  // namespace ncclpool::testing_support

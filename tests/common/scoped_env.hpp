#pragma once
// Test helper: an environment variable set for one scope, and what was there before put back when the
// scope ends, so no other test sees it. Make it on the test's thread before any rank or child starts:
// nothing may read the environment while it changes.

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace ncclpool::testing_support {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace ncclpool::testing_support

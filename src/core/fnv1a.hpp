#pragma once
// FNV-1a over 64-bit words (each word's bytes, low first): the digests ranks compare in agreements
// and an auto pool's routes. Equal inputs give equal digests on every rank; no cryptographic claim.

#include <cstdint>

namespace ncclpool::detail {

class Fnv1a {
 public:
  void mix(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) {
      digest_ ^= (v >> (8 * i)) & 0xff;
      digest_ *= 1099511628211ull;
    }
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return digest_; }

 private:
  std::uint64_t digest_ = 1469598103934665603ull;
};

}  // namespace ncclpool::detail

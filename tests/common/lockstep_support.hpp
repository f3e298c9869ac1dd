#pragma once
// What the lockstep suites share: the fuzzer (tests/unit/test_lockstep_fuzz.cpp) and the cases written
// once over both communicators (lockstep_cases.hpp, run on the loopback and on real NCCL): what each
// rank caught, said with its type, and the pools the cases are built from, over any segment source.

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/pool.hpp>
#include <ncclpool/registry.hpp>
#include <ncclpool/routes.hpp>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ncclpool {

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// "AgreementError: ..." etc.: what a rank got, with its type, so that messages say which error.
inline std::string describe_error(const std::exception& e) {
  if (dynamic_cast<const AgreementError*>(&e)) return std::string("AgreementError: ") + e.what();
  if (dynamic_cast<const RegistrationError*>(&e)) return std::string("RegistrationError: ") + e.what();
  if (dynamic_cast<const OutOfMemory*>(&e)) return std::string("OutOfMemory: ") + e.what();
  if (dynamic_cast<const Error*>(&e)) return std::string("Error: ") + e.what();
  return std::string("exception: ") + e.what();
}

// What a rank caught running body: "" when nothing, else describe_error's text.
template <class Body>
std::string caught(Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return describe_error(e);
  }
  return "";
}

// Every rank's error, in one message.
inline std::string listing(const std::vector<std::string>& per_rank) {
  std::string out;
  for (std::size_t r = 0; r < per_rank.size(); ++r) out += "\n  rank " + std::to_string(r) + ": '" + per_rank[r].substr(0, 400) + "'";
  return out;
}

inline std::shared_ptr<Pool> deterministic_pool(std::shared_ptr<SegmentSource> source, const std::string& name, std::size_t chunk) {
  PoolConfig config;
  config.name = name;
  config.deterministic = true;
  config.growth_chunk = chunk;
  return std::make_shared<Pool>(std::move(source), config);
}

// An auto pool with fixed routes, local below 1 MiB and symmetric from 1 MiB, each part a
// deterministic pool over make_source() (the local part in 2 MiB chunks, the symmetric in 32 MiB).
inline std::unique_ptr<AutoPool> local_then_symmetric_pool(const std::function<std::shared_ptr<SegmentSource>()>& make_source) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto make_part = [make_source](RegistrationKind part) {
    return deterministic_pool(make_source(), "auto/" + std::string(to_string(part)), part == RegistrationKind::symmetric ? 32 * mib : 2 * mib);
  };
  return std::make_unique<AutoPool>("auto", make_part, SizeRoutes({{0, RegistrationKind::local}, {mib, RegistrationKind::symmetric}}),
                                    "set by the test", RegistryOptions{CheckLevel::off});
}

}  // namespace ncclpool

#pragma once
// A small JSON reader (RFC 8259 subset enough for PyTorch memory snapshots and ncclpool's
// profiles): objects, arrays, strings with escapes, numbers, true/false/null. Errors name the byte
// offset. Internal: the library reads profiles with it, and exports it (NCCLPOOL_INTERNAL) for the
// tool (traces, bench reports), which uses the library's copy.

#include <ncclpool/export.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ncclpool {

class NCCLPOOL_INTERNAL JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NCCLPOOL_INTERNAL Json {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool boolean = false;
  double number = 0;
  std::int64_t integer = 0;  // exact value when the number is an integer
  bool is_integer = false;
  std::string string;
  std::vector<Json> array;
  std::map<std::string, Json, std::less<>> object;

  /// The member `key` of an object, or nullptr.
  [[nodiscard]] const Json* find(std::string_view key) const;
  [[nodiscard]] std::int64_t as_int(std::string_view what) const;
};

/// Parses a whole document. @throws JsonError.
NCCLPOOL_INTERNAL Json parse_json(std::string_view text);

/// Escapes a string for JSON output (with the quotes).
NCCLPOOL_INTERNAL std::string json_quote(std::string_view s);

}  // namespace ncclpool

#pragma once
// The library's JSON reader (src/core/json.hpp, exported by libncclpool for its own tools), under the
// tool's names.

#include "core/json.hpp"

namespace ncclpool::tool {
using ncclpool::Json;
using ncclpool::json_quote;
using ncclpool::JsonError;
using ncclpool::parse_json;
}  // namespace ncclpool::tool

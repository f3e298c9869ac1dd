// The argument reader the subcommands share (see commands.hpp).

#include "commands.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ncclpool::tool {

Args Args::parse(const std::vector<std::string>& argv, const std::vector<std::string>& valued, const std::vector<std::string>& flags) {
  Args a;
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "-") {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    const auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if ((name == "json" || in(flags, name)) && eq != std::string::npos) {
      throw UsageError("--" + name + " takes no value, not '" + value + "' (leave it out for the default)");
    } else if (name == "json") {
      a.json = true;
    } else if (in(flags, name)) {
      a.options[name] = "1";
    } else if (in(valued, name)) {
      if (eq == std::string::npos) {
        if (i + 1 >= argv.size()) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
      a.options[name] = value;
    } else {
      throw UsageError("unknown option --" + name);
    }
  }
  return a;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() ? fallback : it->second;
}

long long Args::get_int(const std::string& name, long long fallback, long long min, long long max) const {
  if (!has(name)) return fallback;
  const std::string& s = options.at(name);
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < min || v > max)
    throw UsageError("--" + name + " must be an integer in " + std::to_string(min) + ".." + std::to_string(max) + ", not '" + s + "'");
  return v;
}

double Args::get_double(const std::string& name, double fallback, double min, double max) const {
  if (!has(name)) return fallback;
  const std::string& s = options.at(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  // Never infinite (a round of bench alloc --min-ms inf never ends; replay --window-ms inf made no JSON).
  if (s.empty() || *end != '\0' || !std::isfinite(v) || !(v >= min && v <= max)) {
    char range[96];
    if (std::isinf(max)) std::snprintf(range, sizeof range, ">= %g", min);
    else std::snprintf(range, sizeof range, "from %g to %g", min, max);
    throw UsageError("--" + name + " must be a finite number " + range + ", not '" + s + "'");
  }
  return v;
}

std::string read_input_file(const std::string& path, const std::string& what) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) throw std::runtime_error(what + ": " + path + ": is a directory; give a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(what + ": cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ncclpool::tool

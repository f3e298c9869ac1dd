// Profiles (profile.hpp): JSON in and out, and the lookup that refuses a profile measured elsewhere.

#include <ncclpool/errors.hpp>
#include <ncclpool/profile.hpp>

#include "core/environment.hpp"
#include "core/json.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>

namespace ncclpool {
namespace {

const Json& member(const Json& object, std::string_view key, Json::Type type, const std::string& where) {
  const Json* v = object.find(key);
  if (v == nullptr) throw InvalidArgument(where + ": no \"" + std::string(key) + "\"");
  if (v->type != type) throw InvalidArgument(where + ": \"" + std::string(key) + "\" has the wrong type");
  return *v;
}

// An integer member in [min, max], else an error naming the field and the value found.
std::int64_t integer_member(const Json& object, std::string_view key, const std::string& where, std::int64_t min, std::int64_t max) {
  const Json& v = member(object, key, Json::Type::number, where);
  if (v.is_integer && v.integer >= min && v.integer <= max) return v.integer;
  std::string found = std::to_string(v.integer);
  if (!v.is_integer) {  // not integral, or beyond int64
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", v.number);
    found = text;
  }
  throw InvalidArgument(where + ": \"" + std::string(key) + "\" must be an integer in " + std::to_string(min) + ".." +
                        std::to_string(max) + ", not " + found);
}

int int_member(const Json& object, std::string_view key, const std::string& where, int min) {
  return static_cast<int>(integer_member(object, key, where, min, std::numeric_limits<int>::max()));
}

}  // namespace

std::string profile_path() { return environment::profile_path(); }

Profile parse_profile(std::string_view text, const std::string& name) {
  Json doc;
  try {
    doc = parse_json(text);
  } catch (const JsonError& e) {
    throw InvalidArgument("profile " + name + ": " + e.what());
  }
  const std::string where = "profile " + name;
  if (doc.type != Json::Type::object) throw InvalidArgument(where + ": not a JSON object");
  const int format = int_member(doc, "ncclpool_profile", where, 0);
  if (format != Profile::kFormat)
    throw InvalidArgument(where + ": format " + std::to_string(format) + ", this ncclpool reads format " + std::to_string(Profile::kFormat) +
                          " (run `ncclpool tune` again)");
  Profile p;
  p.gpu = member(doc, "gpu", Json::Type::string, where).string;
  p.nccl_version = int_member(doc, "nccl_version", where, 0);
  p.ranks = int_member(doc, "ranks", where, 1);
  p.symmetric_ctas = int_member(doc, "symmetric_ctas", where, 0);
  if (p.symmetric_ctas > 64) throw InvalidArgument(where + ": \"symmetric_ctas\" above 64, NCCL's largest symmetric launch");
  if (const Json* m = doc.find("measured"); m != nullptr && m->type == Json::Type::string) p.measured = m->string;
  if (const Json* m = doc.find("symmetric_ctas_measured"); m != nullptr) {
    if (m->type != Json::Type::boolean) throw InvalidArgument(where + ": \"symmetric_ctas_measured\" must be true or false");
    p.symmetric_ctas_measured = m->boolean;
  }
  if (const Json* ce = doc.find("copy_engine_all_gather"); ce != nullptr) {
    if (ce->type != Json::Type::boolean) throw InvalidArgument(where + ": \"copy_engine_all_gather\" must be true or false");
    p.copy_engine_all_gather = ce->boolean;
  }
  for (const Json& c : member(doc, "classes", Json::Type::array, where).array) {
    const std::string at = where + ", class " + std::to_string(p.classes.size());
    if (c.type != Json::Type::object) throw InvalidArgument(at + ": not an object");
    ProfileClass pc;
    pc.min_bytes = static_cast<std::size_t>(integer_member(c, "min_bytes", at, 0, std::numeric_limits<std::int64_t>::max()));
    if (!p.classes.empty() && pc.min_bytes <= p.classes.back().min_bytes) throw InvalidArgument(at + ": classes must ascend by min_bytes");
    for (const auto& [op, kind] : member(c, "kind", Json::Type::object, at).object) {
      // A collective the profile names: one of registration.hpp's, never "any" (classes pick per collective).
      if (const auto named = collective_from_string(op); !named || *named == Collective::any)
        throw InvalidArgument(at + ": unknown collective \"" + op + "\"");
      const std::optional<RegistrationKind> k = kind.type == Json::Type::string ? registration_kind_from_string(kind.string) : std::nullopt;
      if (!k) throw InvalidArgument(at + ": the kind for " + op + " must be \"none\", \"local\" or \"symmetric\"");
      pc.kind.emplace(op, *k);
    }
    if (const Json* any = c.find("any"); any != nullptr) {
      const std::optional<RegistrationKind> k = any->type == Json::Type::string ? registration_kind_from_string(any->string) : std::nullopt;
      if (!k) throw InvalidArgument(at + ": \"any\" (the kind for buffers that name no collective) must be \"none\", \"local\" or \"symmetric\"");
      pc.any = *k;
    }
    p.classes.push_back(std::move(pc));
  }
  return p;
}

std::string profile_to_json(const Profile& p) {
  std::ostringstream o;
  o << "{\n \"ncclpool_profile\": " << Profile::kFormat << ",\n \"gpu\": " << json_quote(p.gpu) << ",\n \"nccl_version\": " << p.nccl_version
    << ",\n \"ranks\": " << p.ranks << ",\n \"symmetric_ctas\": " << p.symmetric_ctas
    << ",\n \"symmetric_ctas_measured\": " << (p.symmetric_ctas_measured ? "true" : "false")
    << ",\n \"copy_engine_all_gather\": " << (p.copy_engine_all_gather ? "true" : "false") << ",\n \"measured\": " << json_quote(p.measured)
    << ",\n \"classes\": [";
  for (std::size_t i = 0; i < p.classes.size(); ++i) {
    o << (i ? "," : "") << "\n  {\"min_bytes\": " << p.classes[i].min_bytes << ", \"kind\": {";
    bool first = true;
    for (const auto& [op, kind] : p.classes[i].kind) {
      o << (first ? "" : ", ") << json_quote(op) << ": " << json_quote(to_string(kind));
      first = false;
    }
    o << "}";
    if (p.classes[i].any) o << ", \"any\": " << json_quote(to_string(*p.classes[i].any));
    o << "}";
  }
  o << "\n ]\n}\n";
  return o.str();
}

namespace {

// A profile file that exists but does not parse is a mistake someone will want to hear of (a profile
// from a newer ncclpool, a hand edit): one line on stderr per path and process. The lookup still falls
// back (the built-in routes, the default CTA count) and its why_not says the same; no rank's part in a
// collective depends on the line.
void say_once_not_used(const std::string& path, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(path).second) std::fprintf(stderr, "ncclpool: %s (remove it or run `ncclpool tune` again)\n", why.c_str());
}

ProfileLookup read_profile_at(std::string path) {
  ProfileLookup out;
  out.path = std::move(path);
  if (out.path.empty()) {
    out.why_not = "no profile path (NCCLPOOL_PROFILE, XDG_CACHE_HOME and HOME unset)";
    return out;
  }
  if (std::error_code ec; std::filesystem::is_directory(out.path, ec)) {  // it opens, and reads as empty JSON
    out.why_not = "profile folder " + out.path + ": one profile per rank count in it (profile-<N>ranks.json, `ncclpool tune` writes one), " +
                  "read by communicators of N ranks";
    return out;
  }
  std::ifstream in(out.path, std::ios::binary);
  if (!in) {
    out.why_not = "no profile at " + out.path + " (`ncclpool tune` writes one)";
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    out.profile = parse_profile(text.str(), out.path);
  } catch (const std::exception& e) {
    out.why_not = std::string(e.what()) + ": not used";
    say_once_not_used(out.path, out.why_not);
  }
  return out;
}

}  // namespace

std::string profile_path(int ranks) {
  std::string dir = environment::profile_setting();
  std::error_code ec;
  if (!dir.empty() && dir.back() != '/' && !std::filesystem::is_directory(dir, ec)) return dir;  // a file, as named
  if (dir.empty()) dir = environment::profile_cache_dir();
  if (dir.empty()) return dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string per_ranks = dir + "/profile-" + std::to_string(ranks) + "ranks.json";
  const std::string single = dir + "/profile.json";
  if (!std::filesystem::exists(per_ranks, ec) && std::filesystem::is_regular_file(single, ec)) return single;
  return per_ranks;
}

ProfileLookup read_profile() { return read_profile_at(profile_path()); }

ProfileLookup read_profile(int ranks) { return read_profile_at(profile_path(ranks)); }

ProfileLookup match_profile(ProfileLookup lookup, const std::string& gpu, int nccl_version, int ranks) {
  if (!lookup.profile) return lookup;
  const Profile& p = *lookup.profile;
  std::string differs;
  if (p.gpu != gpu) differs = "GPU " + p.gpu + ", this is " + gpu;
  else if (p.nccl_version != nccl_version) differs = "NCCL " + std::to_string(p.nccl_version) + ", this is " + std::to_string(nccl_version);
  else if (p.ranks != ranks) differs = std::to_string(p.ranks) + " ranks, this communicator has " + std::to_string(ranks);
  if (!differs.empty()) {
    lookup.why_not = "profile " + lookup.path + " not used: measured for " + differs;
    lookup.profile.reset();
  }
  return lookup;
}

ProfileLookup find_profile(const std::string& gpu, int nccl_version, int ranks) { return match_profile(read_profile(ranks), gpu, nccl_version, ranks); }

}  // namespace ncclpool

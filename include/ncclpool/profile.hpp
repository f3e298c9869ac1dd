#pragma once
/// @file profile.hpp
/// @brief A measured performance profile of one machine: which registration kind is fastest for
/// each collective and size class, and the CTA count of NCCL's symmetric kernels. `ncclpool tune`
/// measures it and writes it as JSON (docs/tool.md, "tune"); the library reads it to decide the
/// symmetric kernels' CTA count (SymmetricCtas in nccl.hpp). A profile holds for one GPU model, one
/// NCCL version and one rank count: for anything else it is not used, and the decision says why.
///
/// Where: $NCCLPOOL_PROFILE, else $XDG_CACHE_HOME/ncclpool/profile.json, else
/// $HOME/.cache/ncclpool/profile.json.

#include <ncclpool/export.hpp>
#include <ncclpool/registration.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ncclpool {

/// One size class: messages of at least `min_bytes` (up to the next class's), per collective
/// ("all_gather", "reduce_scatter", "all_reduce") the kind to use ("none", "local", "symmetric").
struct ProfileClass {
  std::size_t min_bytes = 0;
  std::map<std::string, RegistrationKind, std::less<>> kind;
  /// The kind for a buffer that names no collective (Collective::any), where the collectives' kinds
  /// differ: the one whose worst time over the collectives, each against its fastest kind, was the
  /// smallest (a tie: the cheaper kind). JSON "any", a member of the class beside
  /// "kind" (libraries before it ignore it); absent: the kind most collectives picked (routes.hpp).
  std::optional<RegistrationKind> any = std::nullopt;
};

struct Profile {
  static constexpr int kFormat = 1;
  std::string gpu;           ///< the device name, e.g. "NVIDIA H200"
  int nccl_version = 0;      ///< ncclGetVersion, e.g. 22809 (0: the simulator)
  int ranks = 0;             ///< ranks of the communicators measured
  int symmetric_ctas = 0;    ///< the CTA count that measured fastest; 0 = NCCL's own choice
  /// False where the runs had the symmetric kernels off (the NCCL-version guard): no count was
  /// measured, symmetric_ctas means nothing and the library keeps its own default. JSON
  /// "symmetric_ctas_measured"; absent in profiles written before it: true.
  bool symmetric_ctas_measured = true;
  /// All-gather on a communicator made with NCCL's CTA policy ZERO (copy-engine collectives on
  /// windows, no SMs) measured faster with compute beside than the kernels (CopyEngineVote in nccl.hpp).
  /// JSON "copy_engine_all_gather"; absent in profiles written before it: false.
  bool copy_engine_all_gather = false;
  std::string measured;      ///< when, ISO 8601
  std::vector<ProfileClass> classes;  ///< ascending min_bytes
};

/// @brief $NCCLPOOL_PROFILE, else the cache path above ("" when neither HOME nor XDG_CACHE_HOME is set).
NCCLPOOL_API std::string profile_path();

/// @brief The profile for communicators of `ranks` ranks: one machine keeps one per rank count.
/// NCCLPOOL_PROFILE naming a file: that file (measured for one rank count, refused at others).
/// Otherwise a folder (NCCLPOOL_PROFILE naming a folder, or ending in '/'; else the cache folder
/// $XDG_CACHE_HOME/ncclpool or $HOME/.cache/ncclpool) and in it profile-<ranks>ranks.json, or the
/// folder's profile.json (the one file of earlier versions) while that file is absent. `ncclpool
/// tune` writes here by default. "" when no folder is known.
NCCLPOOL_API std::string profile_path(int ranks);

/// @brief Parses a profile document; `name` is used in messages.
/// @throws InvalidArgument naming `name` and what is wrong (not JSON, another format, a missing or
/// mistyped field, an unknown kind or collective, classes out of order).
NCCLPOOL_API Profile parse_profile(std::string_view json, const std::string& name);

/// @brief Writes a profile as JSON (what parse_profile reads back).
NCCLPOOL_API std::string profile_to_json(const Profile& profile);

/// The profile for this machine, if there is one that applies.
struct ProfileLookup {
  std::optional<Profile> profile;  ///< set when the file exists, parses and matches
  std::string path;                ///< the file looked at
  std::string why_not;             ///< when not set: "no profile at PATH", a parse error, or the mismatch
};

/// @brief Reads and parses profile_path(), whatever machine it was measured on. Never throws: a
/// missing or bad file is in why_not.
NCCLPOOL_API ProfileLookup read_profile();
/// @brief Reads and parses profile_path(ranks). Never throws.
NCCLPOOL_API ProfileLookup read_profile(int ranks);

/// @brief `lookup` with its profile kept only when it was measured on this GPU model, NCCL version
/// and rank count; otherwise the profile is dropped and why_not says what differs.
NCCLPOOL_API ProfileLookup match_profile(ProfileLookup lookup, const std::string& gpu, int nccl_version, int ranks);

/// @brief match_profile(read_profile(ranks), gpu, nccl_version, ranks). Never throws.
NCCLPOOL_API ProfileLookup find_profile(const std::string& gpu, int nccl_version, int ranks);

}  // namespace ncclpool

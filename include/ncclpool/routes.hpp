#pragma once
/// @file routes.hpp
/// @brief Which registration an allocation of a given size gets in an `auto` pool (AutoPool, auto_pool.hpp): size
/// classes, each with a placement (none, local, symmetric), taken from a measured Profile or from
/// built-in routes measured per GPU architecture and rank count (docs/pool.md, "Auto pools").
///
/// Routing depends on the request size only, so ranks that make the same requests route them the
/// same, and a symmetric part stays deterministic. Ranks must hold the same routes: AutoPool
/// compares their digests when it attaches a communicator.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/registration.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ncclpool {

/// Requests of at least `min_bytes` (up to the next class's) go to `placement`.
struct SizeRoute {
  std::size_t min_bytes = 0;
  RegistrationKind placement = RegistrationKind::local;
  friend bool operator==(const SizeRoute&, const SizeRoute&) = default;
};

/// @brief Size classes, ascending, the first from 0 bytes; adjacent classes differ in placement.
class NCCLPOOL_API SizeRoutes {
 public:
  /// One class: every size to `placement`.
  explicit SizeRoutes(RegistrationKind placement = RegistrationKind::local);
  /// @throws InvalidArgument (empty, first class not from 0, not ascending). Adjacent classes with
  /// the same placement are merged.
  explicit SizeRoutes(std::vector<SizeRoute> classes);

  /// The placement of a request of `bytes`.
  [[nodiscard]] RegistrationKind for_request(std::size_t bytes) const noexcept;
  /// The placement for a request that serves messages from `lo` to `hi` bytes (a torch segment holds
  /// many tensors): the placement of most classes that the range spans; a tie goes to the larger
  /// sizes' placement.
  [[nodiscard]] RegistrationKind for_range(std::size_t lo, std::size_t hi) const noexcept;
  /// Whether any class has this placement.
  [[nodiscard]] bool uses(RegistrationKind placement) const noexcept;
  /// The same routes with every symmetric class sent to local (where windows cannot be made).
  [[nodiscard]] SizeRoutes without_windows() const;
  [[nodiscard]] const std::vector<SizeRoute>& classes() const noexcept { return classes_; }
  /// "symmetric at every size", "none below 64 KiB, symmetric from 64 KiB".
  [[nodiscard]] std::string describe() const;
  /// Equal routes have equal digests (FNV-1a over the classes).
  [[nodiscard]] std::uint64_t digest() const noexcept;
  friend bool operator==(const SizeRoutes&, const SizeRoutes&) = default;

 private:
  std::vector<SizeRoute> classes_;
};

/// @brief The routes a profile measured for `collective`: per size class, its pick there (a class
/// without the collective: its pick in the nearest class before that names it); for Collective::any
/// the class's "any" kind (ProfileClass::any: the smallest worst case over the collectives), and
/// where a class has none (profiles written before it) the kind that most collectives pick there (a
/// tie goes to all_reduce's pick, else the costlier kind). Without windows (`windows_possible` false)
/// symmetric picks become local.
NCCLPOOL_API SizeRoutes routes_from_profile(const Profile& profile, bool windows_possible, Collective collective = Collective::any);

/// @brief The generic routes: symmetric at every size where windows are possible, else local. An
/// auto pool holds them until its first attach, and keeps them where no built-in routes were
/// measured for the communicator's GPU (builtin_routes_for).
NCCLPOOL_API SizeRoutes builtin_routes(bool windows_possible);

/// @brief Built-in routes measured for a kind of machine: `ncclpool bench coll` runs turned into
/// profiles by scripts/builtin-routes.py (src/routing/builtin/, compiled in), keyed by what changes
/// the answer: the GPU's compute capability (major * 10 + minor) and the communicator's rank count
/// (within one node: across nodes an auto pool routes no size to windows anyway). The file of the
/// nearest measured rank count is taken (a tie goes to the larger count); `source` says which, and
/// when the count differs.
struct BuiltinRoutes {
  std::optional<Profile> profile;  ///< none where no routes were measured for this compute capability
  std::string source;              ///< "built-in routes for compute capability 9.0 at 4 ranks (measured ...)"
};
NCCLPOOL_API BuiltinRoutes builtin_routes_for(int compute_capability, int ranks);
/// The routes an auto pool takes at its first attach without a profile: builtin_routes_for's
/// profile under routes_from_profile's rules, else builtin_routes(windows_possible).
NCCLPOOL_API SizeRoutes builtin_routes_for(const MachineKey& key, bool windows_possible, Collective collective = Collective::any);

/// @brief Whether an auto pool may route sizes to windows: the one rule, used at its first attach
/// (AutoPool::choose_routes_for, with the communicator's answers), for the routes it shows before
/// that attach (ncclpool_pool_create, with what this process's NCCL and GPU say) and by
/// `ncclpool info` (the same). Windows are routed when
///   * the symmetric part's source can back windows (vmm, nccl and the simulator's can; cuda cannot),
///   * the communicator can register them (NCCL >= 2.27 with the window API; the simulator's can), and
///   * NCCL's symmetric kernels are on in this process (SymmetricKernels in nccl.hpp: a window
///     registered without them is a local registration that costs a collective).
/// Otherwise symmetric classes go to the local part. A profile measured for the communicator's
/// machine (profile.hpp) then replaces the built-in routes at the first attach, under the same rule.
/// @param communicator_windows_why, kernels_why: why not, used in `why` (may be null) when false.
NCCLPOOL_API bool auto_routes_windows(bool source_window_capable, bool communicator_windows, const std::string& communicator_windows_why,
                                      bool symmetric_kernels_on, std::string* why);

/// @brief The tensor sizes that torch's caching allocator serves from a segment request of
/// `segment_bytes` (it asks for 2 MiB segments for tensors up to 1 MiB, 20 MiB ones for tensors up
/// to 10 MiB, and a tensor's own size rounded to 2 MiB above that). Sets lo and hi.
NCCLPOOL_API void torch_segment_tensors(std::size_t segment_bytes, std::size_t& lo, std::size_t& hi) noexcept;

}  // namespace ncclpool

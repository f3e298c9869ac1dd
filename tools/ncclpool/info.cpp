// `ncclpool info`: the environment as ncclpool sees it, and which sources and registration kinds
// can work here (and why not).

#include "commands.hpp"

#include "bench.hpp"
#include "json.hpp"
#include "report.hpp"

#include "core/environment.hpp"

#include <ncclpool/cuda.hpp>
#include <ncclpool/nccl.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/routes.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace ncclpool::tool {
namespace {

struct Probe {
  std::string name;
  bool ok = false;
  std::string detail;  // description when ok, reason when not
};

template <class Make>
Probe probe(const std::string& name, Make&& make) {
  Probe p{name, false, ""};
  try {
    auto source = make();
    p.ok = true;
    p.detail = source->properties().description + (source->properties().window_capable ? "; can back windows" : "; no windows");
  } catch (const std::exception& e) {
    p.detail = e.what();
  }
  return p;
}

}  // namespace

std::string nccl_version_text(int version) {
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9, major * 1000 + minor * 100 + patch before.
  if (version < 1000) return std::to_string(version);  // 0: none (the simulator's profiles)
  const bool old = version < 10000;
  const int major = old ? version / 1000 : version / 10000, minor = old ? version / 100 % 10 : version / 100 % 100, patch = version % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

const char* const kInfoUsage =
    "usage: ncclpool info [--json]\n"
    "\n"
    "The environment as ncclpool sees it: CUDA, NCCL (its version, windows), GPUs and their links, segment\n"
    "sources, registration kinds, what auto pools route here, this machine's profile, and ncclpool's\n"
    "environment variables that hold a value it does not accept. Works on any machine, without a GPU too.\n";

int cmd_info(const Args& args) {
  if (args.has("help")) {
    std::fputs(kInfoUsage, stdout);
    return 0;
  }
  if (!args.positional.empty()) throw UsageError("info takes no arguments, not '" + args.positional[0] + "'");
  std::string cuda_why;
  const bool cuda = cuda_available(&cuda_why);
  const int devices = cuda_device_count();
  const NcclInfo nccl = nccl_info();
  std::vector<Probe> probes;
  if (cuda) {
    for (int d = 0; d < devices; ++d) {
      const std::string dev = " (device " + std::to_string(d) + ")";
      probes.push_back(probe("cuda" + dev, [&] { return make_cuda_source(d); }));
      probes.push_back(probe("vmm" + dev, [&] { return make_vmm_source({.device = d}); }));
      probes.push_back(probe("vmm host-numa" + dev, [&] {
        VmmSourceOptions o;
        o.device = d;
        o.location = VmmLocation::host_numa;
        auto s = make_vmm_source(o);
        s->deallocate(s->allocate(s->properties().granularity));  // the location is checked at first use
        return s;
      }));
      probes.push_back(probe("nccl" + dev, [&] { return make_nccl_source(d); }));
    }
  }
  std::vector<GpuDescription> gpus;
  std::vector<PeerLink> links;
  if (cuda) describe_gpus(gpus, links);
  const bool local_ok = nccl.available && cuda;
  const bool symmetric_ok = local_ok && nccl.windows;
  const std::string local_why = !cuda ? "no CUDA device" : !nccl.available ? nccl.why_not : "";
  const std::string symm_why = !local_ok ? local_why : !nccl.windows ? "NCCL " + nccl_version_text(nccl.version) + " has no window API (needs >= 2.27)" : "";
  // This machine's profile (`ncclpool tune`), read once, and what a process here would decide at its
  // first symmetric attach on the first GPU (for communicators of the profile's rank count).
  const ProfileLookup profile = read_profile();
  const std::string profile_text =
      profile.profile ? profile.path + ": " + profile.profile->gpu + ", NCCL " + nccl_version_text(profile.profile->nccl_version) + ", " +
                            std::to_string(profile.profile->ranks) + " ranks, measured " + profile.profile->measured
                      : profile.why_not + ": built-in defaults";
  const ProfileLookup lookup =
      gpus.empty() ? ProfileLookup{} : match_profile(profile, gpus[0].name, nccl.version, profile.profile ? profile.profile->ranks : 0);
  const SymmetricCtas ctas = gpus.empty() ? SymmetricCtas{0, true, false, false, "no GPU: no symmetric kernels"}
                                          : choose_symmetric_ctas(environment::nccl_sym_ctas(), environment::ncclpool_sym_ctas(), gpus[0].cc_major, gpus[0].cc_minor, &lookup);
  const std::string ctas_text = (ctas.ctas > 0 ? std::to_string(ctas.ctas) : std::string("NCCL's choice")) + " (" + ctas.source + ")";
  // What a process that declares its collectives overlap compute decides (the training layers).
  const SymmetricCtas ctas_training = gpus.empty() ? ctas
                                                   : choose_symmetric_ctas(environment::nccl_sym_ctas(), environment::ncclpool_sym_ctas(),
                                                                           gpus[0].cc_major, gpus[0].cc_minor, &lookup, /*nccl_ctas_preferred=*/true);
  const std::string ctas_training_text =
      (ctas_training.ctas > 0 ? std::to_string(ctas_training.ctas) : std::string("NCCL's choice")) + " (" + ctas_training.source + ")";
  const SymmetricKernels kernels = symmetric_kernels_on(0);
  const std::string kernels_text = gpus.empty() ? "no GPU" : kernels.why;
  // What a process that declares the fence decides (ncclpool.torch, ncclpool.sglang, bench coll, tune),
  // and the fence's kind.
  const SymmetricKernels declared = symmetric_kernels_on(0, true);
  const std::string declared_text = gpus.empty() ? "no GPU" : declared.why;
  const std::string fence_kind = to_string(symmetric_fence_kind());
  // The copy-engine all-gather vote a rank here casts when asked for auto (the profile's rank count).
  const int vote_ranks = profile.profile ? profile.profile->ranks : 2;
  const CopyEngineVote copy_engine =
      copy_engine_vote(CopyEngineRequest::automatic, 0, vote_ranks, [&profile](const MachineKey& m) { return match_profile(profile, m.gpu, m.nccl_version, m.ranks); });
  const std::string copy_engine_text = gpus.empty() ? "no GPU" : copy_engine.why + " (auto, " + std::to_string(vote_ranks) + " ranks)";
  // What Pool(registration="auto") here routes: until its first attach, the built-in routes under the
  // rule of auto_routes_windows (routes.hpp), as ncclpool_pool_create applies it; at that attach a
  // profile for the communicator's machine replaces them (here: for communicators of the profile's
  // rank count). Source 'auto' is vmm with a GPU, else the simulator (whose communicators can
  // always register windows).
  std::string no_windows_why;
  bool windows_routed = true;
  if (cuda) {
    bool vmm_windows = false;
    try {
      vmm_windows = make_vmm_source({.device = 0})->properties().window_capable;
    } catch (const std::exception& e) {
      no_windows_why = e.what();
    }
    const std::string nccl_why = !nccl.available ? nccl.why_not : "NCCL " + nccl_version_text(nccl.version) + " has no window API (needs >= 2.27)";
    windows_routed = auto_routes_windows(vmm_windows, nccl.available && nccl.windows, nccl_why, kernels.enabled, &no_windows_why);
  }
  // Where the built-in routes come from, said as it is: until an auto pool's first attach the generic
  // ones; at it, those measured for the GPU and rank count (src/routing/builtin/), never on this
  // machine (a profile is what measures it); on the simulator they are not measured at all.
  const std::string builtin_text = builtin_routes(windows_routed).describe() +
                                   (!cuda ? " (built-in routes, not measured here: no GPU, an auto pool here is on the simulator"
                                          : " (generic built-in routes until an auto pool's first attach, then those measured for the GPU's compute capability and "
                                            "the communicator's rank count (src/routing/builtin/), not on this machine (`ncclpool tune` measures it)" +
                                                (windows_routed ? std::string() : "; without windows: " + no_windows_why)) +
                                   (profile.profile && !lookup.why_not.empty() ? "; the profile is not used: " + lookup.why_not : std::string()) + ")";
  const std::string routes_text =
      lookup.profile ? routes_from_profile(*lookup.profile, windows_routed).describe() + " (from the profile, at the first attach of a communicator of " +
                           std::to_string(lookup.profile->ranks) + " ranks; before it " + builtin_text + ")"
                     : builtin_text;
  const std::vector<EnvironmentProblem> env_problems = environment_problems();

  if (args.json) {
    std::ostringstream o;
    o << "{\"cuda\":{\"available\":" << (cuda ? "true" : "false") << ",\"devices\":" << devices << ",\"why_not\":" << json_quote(cuda ? "" : cuda_why)
      << "},\"nccl\":{\"available\":" << (nccl.available ? "true" : "false") << ",\"library\":" << json_quote(nccl.library_path)
      << ",\"version\":" << nccl.version << ",\"version_string\":" << json_quote(nccl.available ? nccl_version_text(nccl.version) : "") << ",\"windows\":" << (nccl.windows ? "true" : "false")
      << ",\"reused_loaded\":" << (nccl.reused_loaded ? "true" : "false") << ",\"why_not\":" << json_quote(nccl.why_not) << ",\"other_copies\":[";
    for (std::size_t i = 0; i < nccl.other_copies.size(); ++i)
      o << (i ? "," : "") << "{\"library\":" << json_quote(nccl.other_copies[i].path) << ",\"version\":" << nccl.other_copies[i].version
        << ",\"version_string\":" << json_quote(nccl_version_text(nccl.other_copies[i].version)) << "}";
    o << "]},\"gpus\":[";
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      const auto& g = gpus[i];
      o << (i ? "," : "") << "{\"ordinal\":" << g.ordinal << ",\"name\":" << json_quote(g.name) << ",\"pci_bus_id\":" << json_quote(g.pci_bus_id)
        << ",\"memory_bytes\":" << g.memory << ",\"compute_capability\":\"" << g.cc_major << "." << g.cc_minor << "\",\"vmm\":" << (g.vmm ? "true" : "false")
        << ",\"fabric_handles\":" << (g.fabric ? "true" : "false") << ",\"host_numa_id\":" << g.host_numa_id << "}";
    }
    o << "],\"links\":[";
    for (std::size_t i = 0; i < links.size(); ++i) {
      const auto& l = links[i];
      o << (i ? "," : "") << "{\"from\":" << l.from << ",\"to\":" << l.to << ",\"p2p\":" << (l.access ? "true" : "false")
        << ",\"native_atomics\":" << (l.native_atomics ? "true" : "false") << ",\"performance_rank\":" << l.performance_rank << "}";
    }
    o << "],\"sources\":[";
    for (std::size_t i = 0; i < probes.size(); ++i)
      o << (i ? "," : "") << "{\"name\":" << json_quote(probes[i].name) << ",\"ok\":" << (probes[i].ok ? "true" : "false")
        << ",\"detail\":" << json_quote(probes[i].detail) << "}";
    o << "],\"registration\":{\"local\":" << (local_ok ? "true" : "false") << ",\"local_why_not\":" << json_quote(local_why)
      << ",\"symmetric\":" << (symmetric_ok ? "true" : "false") << ",\"symmetric_why_not\":" << json_quote(symm_why)
      << ",\"symmetric_ctas\":" << ctas.ctas << ",\"symmetric_ctas_source\":" << json_quote(ctas.source)
      << ",\"symmetric_ctas_training\":" << ctas_training.ctas << ",\"symmetric_ctas_training_source\":" << json_quote(ctas_training.source)
      << ",\"symmetric_kernels\":{\"enabled\":" << (kernels.enabled ? "true" : "false") << ",\"hazard\":" << (kernels.hazard ? "true" : "false")
      << ",\"decision\":" << json_quote(gpus.empty() ? "off" : kernels.decision) << ",\"why\":" << json_quote(kernels_text)
      << ",\"declared_decision\":" << json_quote(gpus.empty() ? "off" : declared.decision) << ",\"declared_why\":" << json_quote(declared_text)
      << ",\"fence_kind\":" << json_quote(fence_kind) << "},\"copy_engine_all_gather\":{\"vote\":" << (copy_engine.use && !gpus.empty() ? "true" : "false")
      << ",\"why\":" << json_quote(copy_engine_text) << "},\"auto_routes\":" << json_quote(routes_text)
      << ",\"auto_routes_windows\":" << (windows_routed ? "true" : "false") << "},\"profile\":" << json_quote(profile_text) << ",\"environment_problems\":[";
    for (std::size_t i = 0; i < env_problems.size(); ++i)
      o << (i ? "," : "") << "{\"variable\":" << json_quote(env_problems[i].variable) << ",\"value\":" << json_quote(env_problems[i].value)
        << ",\"message\":" << json_quote(env_problems[i].message) << "}";
    // simulator: whether an auto pool (and source "auto") here runs on the simulator, i.e. no CUDA device.
    o << "]"
      << ",\"simulator\":" << (cuda ? "false" : "true") << "}";
    std::puts(o.str().c_str());
    return 0;
  }
  std::printf("ncclpool %s\n\n", NCCLPOOL_TOOL_VERSION);
  std::printf("CUDA      %s\n", cuda ? (std::to_string(devices) + " device(s)").c_str() : ("not available: " + cuda_why).c_str());
  if (nccl.available)
    std::printf("NCCL      %s from %s%s; symmetric windows: %s\n", nccl_version_text(nccl.version).c_str(), nccl.library_path.c_str(),
                nccl.reused_loaded ? " (already loaded by the process)" : "", nccl.windows ? "yes" : "no");
  else
    std::printf("NCCL      not available: %s\n", nccl.why_not.c_str());
  for (const NcclCopy& other : nccl.other_copies)
    std::printf("NCCL      %s from %s is loaded too: two NCCL libraries in one process (a communicator must be used with the one that made it)\n",
                nccl_version_text(other.version).c_str(), other.path.c_str());
  if (!gpus.empty()) {
    std::printf("\nGPUs\n");
    for (const auto& g : gpus)
      std::printf("  %d  %s, %s, compute %d.%d, PCI %s, VMM %s, fabric handles %s, host NUMA node %s\n", g.ordinal, g.name.c_str(),
                  format_bytes(g.memory & ~((std::size_t{1} << 20) - 1)).c_str(), g.cc_major, g.cc_minor, g.pci_bus_id.c_str(), g.vmm ? "yes" : "no",
                  g.fabric ? "yes" : "no", g.host_numa_id >= 0 ? std::to_string(g.host_numa_id).c_str() : "n/a");
  }
  if (!links.empty()) {
    // The driver does not name the link; native peer atomics are what NVLink (or NVSwitch) gives and
    // PCIe peer access usually lacks.
    std::printf("\nlinks (P2P access / native atomics / performance rank; atomics usually mean NVLink)\n      ");
    for (const auto& g : gpus) std::printf(" %-9d", g.ordinal);
    std::printf("\n");
    for (const auto& from : gpus) {
      std::printf("  %-3d ", from.ordinal);
      for (const auto& to : gpus) {
        std::string cell = "-";
        for (const auto& l : links)
          if (l.from == from.ordinal && l.to == to.ordinal)
            cell = !l.access ? "no P2P" : std::string(l.native_atomics ? "P2P+atom" : "P2P") + "/" + std::to_string(l.performance_rank);
        std::printf(" %-9s", cell.c_str());
      }
      std::printf("\n");
    }
  }
  if (!probes.empty()) {
    std::printf("\nsegment sources\n");
    for (const auto& p : probes) std::printf("  %-24s %-4s %s\n", p.name.c_str(), p.ok ? "ok" : "no", p.detail.c_str());
  }
  std::printf("\nregistration kinds\n");
  std::printf("  %-24s %-4s %s\n", "local (ncclCommRegister)", local_ok ? "ok" : "no", local_ok ? "any device source" : local_why.c_str());
  std::printf("  %-24s %-4s %s\n", "symmetric (windows)", symmetric_ok ? "ok" : "no",
              symmetric_ok ? "vmm or nccl sources, deterministic pools" : symm_why.c_str());
  std::printf("  %-24s      %s\n", "symmetric kernels", kernels_text.c_str());
  if (declared_text != kernels_text)
    std::printf("  %-24s      %s\n", "  with the fence declared", (declared_text + " (ncclpool.torch, ncclpool.sglang, bench coll, tune declare it)").c_str());
  std::printf("  %-24s      %s\n", "symmetric fence", (fence_kind + " (NCCLPOOL_SYMMETRIC_FENCE), launched where the decision is fence").c_str());
  std::printf("  %-24s      %s\n", "symmetric kernels' CTAs", ctas_text.c_str());
  if (ctas_training_text != ctas_text)
    std::printf("  %-24s      %s\n", "  in training", (ctas_training_text + " (the FSDP2 helper and Megatron's install() declare it)").c_str());
  std::printf("  %-24s      %s\n", "copy-engine all-gather", copy_engine_text.c_str());
  std::printf("  %-24s      %s\n", "auto pools route", routes_text.c_str());
  std::printf("\nprofile    %s\n", profile_text.c_str());
  if (env_problems.empty())
    std::printf("\nenvironment  the NCCLPOOL_ variables set here hold accepted values\n");
  else
    std::printf("\nenvironment  %zu variable(s) hold values ncclpool does not accept:\n", env_problems.size());
  for (const EnvironmentProblem& p : env_problems) std::printf("  %s\n", p.message.c_str());
  std::printf("\nsimulator  always available: host-memory segments (streams are ids) and loopback communicators\n"
              "           (ranks are threads) run the whole pool and registration logic; `ncclpool replay` and\n"
              "           `ncclpool bench memory` use it.%s\n",
              cuda ? "" : " No GPU here: everything GPU-specific above is unavailable.");
  return 0;
}

}  // namespace ncclpool::tool

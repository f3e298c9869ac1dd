// Communicator::node(): the node a rank runs on, told apart as NCCL tells them (src/misc/utils.cc,
// getHostHash): NCCL_HOSTID when set, else the host name followed by the boot id. Only equality
// between ranks matters (the value is ncclpool's own hash, not NCCL's).

#include <ncclpool/communicator.hpp>

#include "core/environment.hpp"
#include "core/fnv1a.hpp"
#include "core/node.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace ncclpool {

std::uint64_t detail::process_node() {
  static const std::uint64_t value = [] {
    std::string id;
    if (const char* v = environment::nccl_hostid(); v != nullptr) {
      id = v;
    } else {
      char host[1024] = {};
      (void)::gethostname(host, sizeof host - 1);
      id = host;
      std::ifstream boot("/proc/sys/kernel/random/boot_id");
      std::string boot_id;
      if (boot >> boot_id) id += boot_id;
    }
    detail::Fnv1a hash;
    for (const char c : id) hash.mix(static_cast<std::uint64_t>(static_cast<unsigned char>(c)));
    return hash.value();
  }();
  return value;
}

std::uint64_t Communicator::node() const { return detail::process_node(); }

}  // namespace ncclpool

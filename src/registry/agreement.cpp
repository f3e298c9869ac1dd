// Agreement records: before anything collective, ranks all-gather (phase, count, bytes, digest) of
// the segments they are about to register or release. Equal records mean every rank is about to make
// the same calls in the same order; anything else is reported, naming who differs, instead of hanging.

#include "registry_impl.hpp"

#include <map>
#include <sstream>

namespace ncclpool::detail {

namespace {
constexpr std::uint64_t kMagic = 0x6e63636c706f6f6cull;  // "ncclpool"

const char* phase_name(AgreementPhase phase) {
  switch (phase) {
    case AgreementPhase::attach: return "attach";
    case AgreementPhase::commit: return "commit";
    case AgreementPhase::detach: return "detach";
    case AgreementPhase::trim: return "trim";
  }
  return "?";
}
}  // namespace

AgreementRecord make_agreement(AgreementPhase phase, const std::vector<std::pair<std::uint64_t, std::size_t>>& segments) {
  std::uint64_t digest = 1469598103934665603ull;  // FNV-1a over (sequence, size) in order
  std::uint64_t bytes = 0;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      digest ^= (v >> (8 * i)) & 0xff;
      digest *= 1099511628211ull;
    }
  };
  for (auto [sequence, size] : segments) {
    mix(sequence);
    mix(size);
    bytes += size;
  }
  AgreementRecord r;
  r.words[0] = kMagic;
  r.words[1] = static_cast<std::uint64_t>(phase);
  r.words[2] = segments.size();
  r.words[3] = bytes;
  r.words[4] = digest;
  r.words[5] = segments.empty() ? 0 : segments.front().first;
  r.words[6] = segments.empty() ? 0 : segments.back().first;
  return r;
}

void check_agreement(const std::vector<AgreementRecord>& records, const Communicator& comm, AgreementPhase phase) {
  bool all_equal = true;
  for (const auto& r : records) all_equal = all_equal && r == records.front();
  if (all_equal) return;
  // Group ranks by what they brought, so the message reads "ranks 0,1,2: ...; rank 3: ...".
  std::map<std::vector<std::uint64_t>, std::vector<int>> groups;
  for (std::size_t rank = 0; rank < records.size(); ++rank)
    groups[{records[rank].words.begin(), records[rank].words.end()}].push_back(static_cast<int>(rank));
  std::ostringstream msg;
  msg << comm.describe() << ": ranks disagree at " << phase_name(phase) << "; nothing was registered:";
  for (const auto& [words, ranks] : groups) {
    msg << (ranks.size() > 1 ? " ranks " : " rank ");
    for (std::size_t i = 0; i < ranks.size(); ++i) msg << (i ? "," : "") << ranks[i];
    if (words[0] != kMagic) {
      msg << ": not an ncclpool agreement (another collective is running on this communicator);";
    } else if (words[1] != static_cast<std::uint64_t>(phase)) {
      msg << ": at " << phase_name(static_cast<AgreementPhase>(words[1])) << " instead;";
    } else {
      msg << ": " << words[2] << " segment(s), " << words[3] << " bytes, sequences " << words[5] << ".." << words[6]
          << ", digest " << std::hex << words[4] << std::dec << ';';
    }
  }
  msg << " (ranks must create the same segments in the same order: use a deterministic pool and the same requests)";
  throw AgreementError(msg.str());
}

}  // namespace ncclpool::detail

// verify_symmetric_buffers: one collective's buffers at the same (window, offset) on every rank.
//
// A symmetric kernel finds a peer's buffer at the same offset from the head of the same window, so
// two ranks whose buffers sit at different offsets (allocations made in another order) exchange
// wrong data without any error. Each rank sends, per buffer, the ordinal of the window holding it on
// this communicator (the k-th window registered on it, the same window on every rank) and its offset;
// every rank compares all ranks' entries and throws the same AgreementError if any differ.

#include "registry_impl.hpp"
#include "window_directory.hpp"

#include <sstream>

namespace ncclpool {

namespace {
constexpr std::size_t kPerRound = 4;  // buffers per record: words 3.. hold (ordinal + 1, offset, window size)

std::string describe_place(const std::uint64_t* w) {
  if (w[0] == 0) return "not in a window of this communicator";
  std::ostringstream out;
  out << "window #" << w[0] - 1 << " offset " << w[1];
  return out.str();
}
}  // namespace

void verify_symmetric_buffers(Communicator& comm, const std::vector<const void*>& buffers) {
  using namespace detail;
  const std::uintptr_t native = comm.native_handle();
  std::size_t rounds = 1;  // at least one, so that ranks with no buffers still meet the others
  for (std::size_t round = 0; round < rounds; ++round) {
    AgreementRecord r;
    r.words[0] = kAgreementMagic;
    r.words[1] = static_cast<std::uint64_t>(AgreementPhase::buffers);
    r.words[2] = buffers.size();
    for (std::size_t k = 0; k < kPerRound; ++k) {
      const std::size_t index = round * kPerRound + k;
      if (index >= buffers.size()) break;
      if (auto place = WindowDirectory::instance().locate(native, buffers[index])) {
        r.words[3 + 3 * k] = place->ordinal + 1;
        r.words[4 + 3 * k] = place->offset;
        r.words[5 + 3 * k] = place->size;
      }
    }
    const std::vector<AgreementRecord> all = comm.all_gather(r);
    std::uint64_t most = 0;
    for (const auto& a : all) {
      if (a.words[0] != kAgreementMagic || a.words[1] != r.words[1])
        throw AgreementError(comm.describe() + ": buffer check: a rank sent something else (another collective ran in its "
                             "place: every rank must check the buffers of the same collectives)");
      most = std::max(most, a.words[2]);
    }
    rounds = std::max<std::size_t>(1, (most + kPerRound - 1) / kPerRound);
    for (std::size_t k = 0; k < kPerRound; ++k) {
      const std::size_t base = 3 + 3 * k;
      const bool same = std::all_of(all.begin(), all.end(), [&](const AgreementRecord& a) {
        return a.words[base] == all.front().words[base] && a.words[base + 1] == all.front().words[base + 1];
      });
      if (same) continue;
      std::ostringstream msg;
      msg << comm.describe() << ": buffer #" << round * kPerRound + k
          << " of this collective is not at the same place in the same symmetric window on every rank (a symmetric kernel "
             "would read peers at the wrong offset):";
      for (std::size_t i = 0; i < all.size(); ++i) msg << " rank " << i << ": " << describe_place(&all[i].words[base]) << ';';
      msg << " (allocate the buffers of collectives in the same order and sizes on every rank)";
      throw AgreementError(msg.str());
    }
    bool counts_differ = false;
    for (const auto& a : all) counts_differ = counts_differ || a.words[2] != all.front().words[2];
    if (counts_differ && round + 1 >= rounds) {
      std::ostringstream msg;
      msg << comm.describe() << ": buffer check: ranks passed different numbers of buffers:";
      for (std::size_t i = 0; i < all.size(); ++i) msg << " rank " << i << ": " << all[i].words[2] << ';';
      throw AgreementError(msg.str());
    }
  }
}

}  // namespace ncclpool

// verify_symmetric_buffers: one collective's buffers at the same (window, offset) on every rank.
//
// A symmetric kernel finds a peer's buffer at the same offset from the head of the same window, so
// two ranks whose buffers sit at different offsets (allocations made in another order) exchange
// wrong data without any error. Each rank sends, per buffer, the ordinal of the window holding it on
// this communicator (the k-th window registered on it, the same window on every rank) and its offset;
// every rank compares all ranks' entries and throws the same AgreementError if any differ.

#include "registry_impl.hpp"
#include "window_directory.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>

namespace ncclpool {

namespace {
std::string describe_place(const detail::Triple& t) {
  if (t[0] == 0) return "not in a window of this communicator";
  std::ostringstream out;
  out << "window #" << t[0] - 1 << " offset " << t[1];
  return out.str();
}
}  // namespace

// Each buffer as (window ordinal + 1, offset, window size), 0 = in no window; compared on the window
// and the offset.
void verify_symmetric_buffers(Communicator& comm, const std::vector<const void*>& buffers) {
  using namespace detail;
  std::vector<Triple> places;
  for (const void* buffer : buffers) {
    const auto place = WindowDirectory::instance().locate(comm.native_handle(), buffer);
    places.push_back(place ? Triple{place->ordinal + 1, place->offset, place->size} : Triple{});
  }
  const TripleExchange x = exchange_until_different(comm, AgreementPhase::buffers, places, 2, SIZE_MAX);
  std::ostringstream msg;
  if (x.first_difference) {
    msg << comm.describe() << ": buffer #" << *x.first_difference
        << " of this collective is not at the same place in the same symmetric window on every rank (a symmetric kernel "
           "would read peers at the wrong offset):";
    for (std::size_t i = 0; i < x.at_difference.size(); ++i) msg << " rank " << i << ": " << describe_place(x.at_difference[i]) << ';';
    msg << " (allocate the buffers of collectives in the same order and sizes on every rank)";
    throw AgreementError(msg.str());
  }
  if (std::any_of(x.counts.begin(), x.counts.end(), [&](std::uint64_t n) { return n != x.counts.front(); })) {
    msg << comm.describe() << ": buffer check: ranks passed different numbers of buffers:";
    for (std::size_t i = 0; i < x.counts.size(); ++i) msg << " rank " << i << ": " << x.counts[i] << ';';
    throw AgreementError(msg.str());
  }
}

}  // namespace ncclpool

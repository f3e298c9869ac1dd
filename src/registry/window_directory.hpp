#pragma once
// WindowDirectory: every symmetric window this process registered, per native communicator, with its
// ordinal (the k-th window registered on that communicator). Window registration is collective, so
// the k-th window on a communicator is the same window on every rank: (ordinal, offset from the
// window's base) is what a symmetric kernel pairs across ranks, and what verify_symmetric_buffers
// compares. It also numbers the symmetric attachments of each communicator, which tells the pools
// sharing one communicator apart in agreement records. Process-wide, shared by all registries.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace ncclpool::detail {

struct WindowPlace {
  std::uint64_t ordinal = 0;  // k-th window registered on the communicator
  std::size_t offset = 0;     // of the queried address from the window's base
  std::size_t size = 0;       // of the window
};

class WindowDirectory {
 public:
  static WindowDirectory& instance();

  // A symmetric attachment of `comm` begins: returns its ordinal among this communicator's
  // attachments so far. Balanced by detach_comm().
  std::uint64_t attach_comm(std::uintptr_t comm);
  // The attachment ends; when the communicator has none left its counters start over (a later
  // communicator may reuse the address).
  void detach_comm(std::uintptr_t comm);
  void add_window(std::uintptr_t comm, const void* base, std::size_t size);  // the next ordinal of comm
  void remove_window(std::uintptr_t comm, const void* base);
  [[nodiscard]] std::optional<WindowPlace> locate(std::uintptr_t comm, const void* address) const;

 private:
  struct Window {
    std::size_t size;
    std::uint64_t ordinal;
  };
  struct Entry {
    int attachments = 0;
    std::uint64_t next_attachment = 0;
    std::uint64_t next_window = 0;
    std::map<std::uintptr_t, Window> windows;  // by base
  };
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Entry> comms_;
};

}  // namespace ncclpool::detail

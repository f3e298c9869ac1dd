// The process-wide directory of symmetric windows (window_directory.hpp).

#include "window_directory.hpp"

namespace ncclpool::detail {

WindowDirectory& WindowDirectory::instance() {
  static auto* directory = new WindowDirectory();  // never destroyed: registries may outlive statics at exit
  return *directory;
}

std::uint64_t WindowDirectory::attach_comm(std::uintptr_t comm) {
  std::lock_guard lock(mutex_);
  Entry& e = comms_[comm];
  ++e.attachments;
  return e.next_attachment++;
}

void WindowDirectory::detach_comm(std::uintptr_t comm) {
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) return;
  if (--it->second.attachments <= 0) comms_.erase(it);
}

void WindowDirectory::add_window(std::uintptr_t comm, const void* base, std::size_t size) {
  std::lock_guard lock(mutex_);
  Entry& e = comms_[comm];
  e.windows[reinterpret_cast<std::uintptr_t>(base)] = Window{size, e.next_window++};
}

void WindowDirectory::remove_window(std::uintptr_t comm, const void* base) {
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  if (it != comms_.end()) it->second.windows.erase(reinterpret_cast<std::uintptr_t>(base));
}

std::optional<WindowPlace> WindowDirectory::locate(std::uintptr_t comm, const void* address) const {
  std::lock_guard lock(mutex_);
  auto c = comms_.find(comm);
  if (c == comms_.end()) return std::nullopt;
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  auto it = c->second.windows.upper_bound(a);
  if (it == c->second.windows.begin()) return std::nullopt;
  --it;
  if (a >= it->first + it->second.size) return std::nullopt;
  return WindowPlace{it->second.ordinal, a - it->first, it->second.size};
}

}  // namespace ncclpool::detail

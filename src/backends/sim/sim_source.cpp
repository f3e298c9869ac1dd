// The simulator's segment source: anonymous mmap'd host memory (MAP_NORESERVE, so a large
// "device" costs nothing until touched), a capacity that behaves like device memory, and fault
// injection. Streams are ids; SimStreamOrdering records the dependencies the pool asks for.

#include <algorithm>
#include <ncclpool/errors.hpp>
#include <ncclpool/sim.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ncclpool {

// ---- SimStreamOrdering ----

void SimStreamOrdering::set_capturing(bool capturing) {
  std::lock_guard lock(capturers_mutex_);
  const auto me = std::find(capturers_.begin(), capturers_.end(), std::this_thread::get_id());
  if (capturing && me == capturers_.end()) capturers_.push_back(std::this_thread::get_id());
  if (!capturing && me != capturers_.end()) capturers_.erase(me);
  capturing_.store(static_cast<int>(capturers_.size()));
}

bool SimStreamOrdering::thread_capturing() {
  if (capturing_.load() == 0) return false;
  std::lock_guard lock(capturers_mutex_);
  return std::find(capturers_.begin(), capturers_.end(), std::this_thread::get_id()) != capturers_.end();
}

bool SimStreamOrdering::publish(stream_t stream) {
  if (fail_publishes_ > 0) {
    --fail_publishes_;
    throw BackendError("sim stream " + std::to_string(stream) + ": injected failure recording the publish event");
  }
  if (refuse_publishes_) return false;
  ++epochs_[stream];
  ++publishes_;
  return true;
}

// Like cuStreamWaitEvent on an event never recorded: there is nothing to wait on, so no dependency.
bool SimStreamOrdering::wait(stream_t consumer, stream_t producer) {
  if (refuse_waits_ || epoch(producer) == 0) return false;
  ++waits_;
  waited_[{consumer, producer}] = epoch(producer);
  return true;
}

bool SimStreamOrdering::is_complete(stream_t producer) {
  ++polls_;
  return complete_ && epoch(producer) != 0;
}

void SimStreamOrdering::synchronize(stream_t /*producer*/) { ++synchronizes_; }
void SimStreamOrdering::synchronize_device() { ++device_synchronizes_; }

std::uint64_t SimStreamOrdering::epoch(stream_t stream) const {
  auto it = epochs_.find(stream);
  return it == epochs_.end() ? 0 : it->second;
}

std::uint64_t SimStreamOrdering::waited_epoch(stream_t consumer, stream_t producer) const {
  auto it = waited_.find({consumer, producer});
  return it == waited_.end() ? 0 : it->second;
}

// ---- SimSource ----

SimSource::SimSource(SimSourceConfig config) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (config.granularity == 0 || config.granularity % page != 0)
    throw InvalidArgument("sim source: granularity must be a positive multiple of the page size (" + std::to_string(page) + ")");
  if (config.capacity < config.granularity)
    throw InvalidArgument("sim source: capacity must hold at least one granule");
  properties_.kind = SourceKind::sim;
  properties_.description = "sim device " + std::to_string(config.device) + " (host memory)";
  properties_.device = config.device;
  properties_.granularity = config.granularity;
  properties_.alignment = page;
  properties_.capacity = config.capacity;
  properties_.device_accessible = true;  // "device" = the CPU here
  properties_.window_capable = config.window_capable;
}

SimSource::~SimSource() = default;

SegmentAllocation SimSource::allocate(std::size_t size) {
  ++allocate_calls_;
  if (size == 0 || size % properties_.granularity != 0)
    throw InvalidArgument(properties_.description + ": segment size " + std::to_string(size) + " is not a positive multiple of the granularity");
  if (inject_error_ > 0) {
    --inject_error_;
    throw BackendError(properties_.description + ": injected allocation error");
  }
  if (inject_oom_ > 0) {
    --inject_oom_;
    throw OutOfMemory(properties_.description + ": injected out-of-memory");
  }
  if (size > properties_.capacity - in_use_)
    throw OutOfMemory(properties_.description + ": " + std::to_string(in_use_) + " of " +
                      std::to_string(properties_.capacity) + " bytes in use, " + std::to_string(size) + " more requested");
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    if (err == ENOMEM) throw OutOfMemory(properties_.description + ": mmap: " + std::strerror(err));
    throw BackendError(properties_.description + ": mmap: " + std::strerror(err));
  }
  in_use_ += size;
  ++live_;
  return SegmentAllocation{base, size, 0};
}

void SimSource::deallocate(const SegmentAllocation& segment) noexcept {
  ::munmap(segment.base, segment.size);
  in_use_ -= segment.size;
  --live_;
}

}  // namespace ncclpool

// ncclpool::Pool: the public facade over PoolImpl, plus small shared helpers (errors, names;
// PoolStats' JSON is in stats.cpp).

#include "pool_impl.hpp"

#include <cstdio>

namespace ncclpool {

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::size_too_large: return "size_too_large";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::double_free: return "double_free";
    case ErrorCode::foreign_pointer: return "foreign_pointer";
    case ErrorCode::invalid_pointer: return "invalid_pointer";
    case ErrorCode::backend_error: return "backend_error";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::invariant_violation: return "invariant_violation";
    case ErrorCode::invalid_state: return "invalid_state";
    case ErrorCode::registration_error: return "registration_error";
    case ErrorCode::agreement_error: return "agreement_error";
  }
  return "unknown";
}

const char* to_string(SourceKind kind) noexcept {
  switch (kind) {
    case SourceKind::sim: return "sim";
    case SourceKind::cuda: return "cuda";
    case SourceKind::vmm: return "vmm";
    case SourceKind::nccl: return "nccl";
  }
  return "unknown";
}

Pool::Pool(std::shared_ptr<SegmentSource> source, PoolConfig config)
    : impl_(std::make_unique<detail::PoolImpl>(std::move(source), std::move(config))) {}
Pool::~Pool() = default;

void* Pool::allocate(std::size_t bytes, stream_t stream) { return impl_->allocate(bytes, stream); }
void Pool::deallocate(void* ptr) { impl_->deallocate(ptr, nullptr); }
void Pool::deallocate(void* ptr, stream_t stream) { impl_->deallocate(ptr, &stream); }
void Pool::reserve(std::size_t bytes) { impl_->reserve(bytes); }
std::size_t Pool::trim() { return impl_->trim(); }
void Pool::publish_frees(stream_t stream) { impl_->publish_frees(stream); }
PoolStats Pool::stats() const { return impl_->stats(); }
MemoryBreakdown Pool::memory_breakdown() const { return impl_->memory_breakdown(); }
std::string Pool::stats_json() const { return to_json(impl_->stats()); }
void Pool::add_observer(PoolObserver& observer, bool replay_existing) { impl_->add_observer(observer, replay_existing); }
void Pool::remove_observer(PoolObserver& observer) noexcept { impl_->remove_observer(observer); }
std::vector<SegmentInfo> Pool::segments() const { return impl_->segments(); }
std::vector<SegmentInfo> Pool::empty_segments() const { return impl_->empty_segments(); }
std::vector<SegmentInfo> Pool::withhold_empty_segments() { return impl_->withhold_empty_segments(); }
std::size_t Pool::release_withheld(bool release) { return impl_->release_withheld(release); }
std::vector<BlockLocation> Pool::live_blocks() const { return impl_->live_blocks(); }
std::uint64_t Pool::placement_recoveries() const { return impl_->placement_recoveries(); }
std::optional<SegmentInfo> Pool::segment_of(const void* ptr) const { return impl_->segment_of(ptr); }
std::optional<BlockLocation> Pool::locate(const void* ptr) const { return impl_->locate(ptr); }
void Pool::check_invariants() const { impl_->check_invariants(); }
const PoolConfig& Pool::config() const noexcept { return impl_->config(); }
const SourceProperties& Pool::source_properties() const noexcept { return impl_->source_properties(); }
SegmentSource& Pool::source() noexcept { return impl_->source(); }

}  // namespace ncclpool

// LimitSource (limit_source.hpp): several sources counted against one limit.

#include <ncclpool/errors.hpp>
#include <ncclpool/limit_source.hpp>

namespace ncclpool {

SharedLimit::SharedLimit(std::size_t limit, std::string owner) : limit_(limit), owner_(std::move(owner)) {
  if (limit == 0) throw InvalidArgument(owner_ + ": a shared limit of 0 bytes allows nothing");
}

LimitSource::LimitSource(std::shared_ptr<SegmentSource> inner, std::shared_ptr<SharedLimit> limit)
    : inner_(std::move(inner)), limit_(std::move(limit)) {
  if (!inner_) throw InvalidArgument("LimitSource: no inner source");
  if (!limit_) throw InvalidArgument("LimitSource: no limit");
}

SegmentAllocation LimitSource::allocate(std::size_t size) {
  // Claim first, so that two sources growing at once cannot both pass the limit.
  const std::size_t before = limit_->reserved_.fetch_add(size);
  if (before + size > limit_->limit_) {
    limit_->reserved_.fetch_sub(size);
    throw OutOfMemory(limit_->owner_ + ": max_reserved=" + std::to_string(limit_->limit_) + " bytes is shared by its parts, which hold " +
                      std::to_string(before) + " bytes");
  }
  try {
    return inner_->allocate(size);
  } catch (...) {
    limit_->reserved_.fetch_sub(size);
    throw;
  }
}

void LimitSource::deallocate(const SegmentAllocation& segment) noexcept {
  inner_->deallocate(segment);
  limit_->reserved_.fetch_sub(segment.size);
}

}  // namespace ncclpool

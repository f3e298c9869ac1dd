#pragma once
/// @file limit_source.hpp
/// @brief A SegmentSource adaptor that counts the bytes of several sources against one limit (as
/// RMM's limiting_resource_adaptor, for a group of upstreams): the parts of an auto pool share the
/// pool's max_reserved, which each part's own Pool would otherwise allow alone. A refused allocation
/// is an OutOfMemory, so the pool first releases its empty segments and retries, as for a full device.

#include <ncclpool/export.hpp>
#include <ncclpool/segment_source.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

namespace ncclpool {

/// The limit and the bytes held, shared by every LimitSource of a group.
class NCCLPOOL_API SharedLimit {
 public:
  /// `limit` bytes at most in all; `owner` names the pool in messages. @throws InvalidArgument for 0.
  SharedLimit(std::size_t limit, std::string owner);
  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t reserved() const noexcept { return reserved_.load(std::memory_order_relaxed); }
  [[nodiscard]] const std::string& owner() const noexcept { return owner_; }

 private:
  friend class LimitSource;
  std::atomic<std::size_t> reserved_{0};
  std::size_t limit_;
  std::string owner_;
};

class NCCLPOOL_API LimitSource final : public SegmentSource {
 public:
  /// @throws InvalidArgument (null inner source or limit).
  LimitSource(std::shared_ptr<SegmentSource> inner, std::shared_ptr<SharedLimit> limit);

  [[nodiscard]] const SourceProperties& properties() const noexcept override { return inner_->properties(); }
  [[nodiscard]] StreamOrdering& ordering() noexcept override { return inner_->ordering(); }
  /// @throws OutOfMemory when the group would pass its limit (nothing taken), or what the inner
  /// source throws.
  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override;
  void deallocate(const SegmentAllocation& segment) noexcept override;
  [[nodiscard]] SegmentSource& inner() noexcept { return *inner_; }

 private:
  std::shared_ptr<SegmentSource> inner_;
  std::shared_ptr<SharedLimit> limit_;
};

}  // namespace ncclpool

#pragma once
// A SegmentSource adaptor that counts the bytes of several sources against one limit: the parts of
// an auto pool share the pool's max_reserved (each part's own Pool would otherwise allow it alone).
// A refused allocation is an OutOfMemory, so the part first releases its empty segments and retries.

#include <ncclpool/errors.hpp>
#include <ncclpool/segment_source.hpp>

#include <atomic>
#include <memory>
#include <string>

namespace ncclpool::capi {

class SharedLimitSource final : public SegmentSource {
 public:
  /// `reserved` is shared by every source of the group; `limit` bytes at most in all; `owner` names
  /// the pool in messages.
  SharedLimitSource(std::shared_ptr<SegmentSource> inner, std::shared_ptr<std::atomic<std::size_t>> reserved, std::size_t limit, std::string owner)
      : inner_(std::move(inner)), reserved_(std::move(reserved)), limit_(limit), owner_(std::move(owner)) {}

  [[nodiscard]] const SourceProperties& properties() const noexcept override { return inner_->properties(); }
  [[nodiscard]] StreamOrdering& ordering() noexcept override { return inner_->ordering(); }

  [[nodiscard]] SegmentAllocation allocate(std::size_t size) override {
    // Claim first, so that two parts growing at once cannot both pass the limit.
    const std::size_t before = reserved_->fetch_add(size);
    if (before + size > limit_) {
      reserved_->fetch_sub(size);
      throw OutOfMemory(owner_ + ": max_reserved=" + std::to_string(limit_) + " bytes is shared by its parts, which hold " +
                        std::to_string(before) + " bytes");
    }
    try {
      return inner_->allocate(size);
    } catch (...) {
      reserved_->fetch_sub(size);
      throw;
    }
  }
  [[nodiscard]] SegmentSource& inner() noexcept { return *inner_; }
  void deallocate(const SegmentAllocation& segment) noexcept override {
    inner_->deallocate(segment);
    reserved_->fetch_sub(segment.size);
  }

 private:
  std::shared_ptr<SegmentSource> inner_;
  std::shared_ptr<std::atomic<std::size_t>> reserved_;
  std::size_t limit_;
  std::string owner_;
};

}  // namespace ncclpool::capi

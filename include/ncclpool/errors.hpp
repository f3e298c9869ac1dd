#pragma once
/// @file errors.hpp
/// @brief The exception types ncclpool throws. Every error carries a code (also used by the C ABI)
/// and a message that names the pool, device and size involved.

#include <ncclpool/export.hpp>

#include <stdexcept>
#include <string>

namespace ncclpool {

/// Stable error codes; the C ABI maps them one to one onto its status codes.
enum class ErrorCode : int {
  invalid_argument = 1,     ///< a parameter is out of its documented range (zero size, bad alignment)
  size_too_large = 2,       ///< a request larger than the device (or the pool's limit) could ever hold
  out_of_memory = 3,        ///< the source is out of memory even after releasing cached segments
  double_free = 4,          ///< the pointer was already freed
  foreign_pointer = 5,      ///< the pointer does not belong to this pool
  invalid_pointer = 6,      ///< the pointer is inside the pool but not the start of a live allocation
  backend_error = 7,        ///< a CUDA driver (or other backend) call failed
  unsupported = 8,          ///< the feature is not available in this build or on this machine
  invariant_violation = 9,  ///< an internal consistency check failed (a bug: please report it)
  invalid_state = 10,       ///< the call is not allowed in the object's current state
  registration_error = 11,  ///< NCCL (or the simulator) refused a registration or deregistration
  agreement_error = 12,     ///< ranks disagree at an agreement point, or a collective timed out
};

/// @brief Short, stable name of an error code ("out_of_memory", ...).
NCCLPOOL_API const char* to_string(ErrorCode code) noexcept;

/// @brief Base class of every exception ncclpool throws.
class NCCLPOOL_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

#define NCCLPOOL_DECLARE_ERROR(Name, code_value)                                         \
  class NCCLPOOL_API Name : public Error {                                               \
   public:                                                                               \
    explicit Name(const std::string& message) : Error(ErrorCode::code_value, message) {} \
  }

NCCLPOOL_DECLARE_ERROR(InvalidArgument, invalid_argument);
NCCLPOOL_DECLARE_ERROR(SizeTooLarge, size_too_large);
NCCLPOOL_DECLARE_ERROR(OutOfMemory, out_of_memory);
NCCLPOOL_DECLARE_ERROR(DoubleFree, double_free);
NCCLPOOL_DECLARE_ERROR(ForeignPointer, foreign_pointer);
NCCLPOOL_DECLARE_ERROR(InvalidPointer, invalid_pointer);
NCCLPOOL_DECLARE_ERROR(BackendError, backend_error);
NCCLPOOL_DECLARE_ERROR(Unsupported, unsupported);
NCCLPOOL_DECLARE_ERROR(InvariantViolation, invariant_violation);
NCCLPOOL_DECLARE_ERROR(InvalidState, invalid_state);
NCCLPOOL_DECLARE_ERROR(RegistrationError, registration_error);
NCCLPOOL_DECLARE_ERROR(AgreementError, agreement_error);

#undef NCCLPOOL_DECLARE_ERROR

}  // namespace ncclpool

"""Exceptions raised by ncclpool. Each C status code has its own class; all derive from Error."""
from __future__ import annotations


class Error(RuntimeError):
    """Base class of ncclpool's errors. ``status`` is the C status code, ``status_name`` its name."""

    status = 13
    status_name = "internal_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class LibraryNotFound(Error, OSError):
    """libncclpool could not be loaded ($NCCLPOOL_LIBRARY, next to the package, the checkout's build,
    the loader's path: the message lists what was tried)."""

    status_name = "library_not_found"


def _make(name: str, status: int, status_name: str, *bases, doc: str = ""):
    text = f"Status {status} ({status_name}): {doc}" if doc else f"Status {status}: {status_name}."
    cls = type(name, (Error, *bases), {"status": status, "status_name": status_name, "__doc__": text})
    cls.__module__ = __name__
    return cls


InvalidArgument = _make("InvalidArgument", 1, "invalid_argument", ValueError,
                        doc="a parameter out of its documented range (a size, a name, a kind, a closed handle's use).")
SizeTooLarge = _make("SizeTooLarge", 2, "size_too_large", MemoryError,
                     doc="larger than the device or the pool's max_reserved.")
OutOfMemory = _make("OutOfMemory", 3, "out_of_memory", MemoryError,
                    doc="out of memory even after releasing the pool's empty segments.")
DoubleFree = _make("DoubleFree", 4, "double_free", ValueError,
                   doc="the block was freed already.")
ForeignPointer = _make("ForeignPointer", 5, "foreign_pointer", ValueError,
                       doc="not memory of this pool.")
InvalidPointer = _make("InvalidPointer", 6, "invalid_pointer", ValueError,
                       doc="inside the pool but not the start of a live block.")
BackendError = _make("BackendError", 7, "backend_error",
                     doc="a CUDA driver (or NCCL) call failed; the message names it.")
Unsupported = _make("Unsupported", 8, "unsupported",
                    doc="not available in this build, on this machine or with this torch/NCCL (the message says why).")
InvariantViolation = _make("InvariantViolation", 9, "invariant_violation",
                           doc="an internal consistency check failed: a bug of ncclpool's, please report it.")
InvalidState = _make("InvalidState", 10, "invalid_state",
                     doc="not allowed now (a closed pool, live blocks, an open scope, graph capture, a detached communicator).")
RegistrationError = _make("RegistrationError", 11, "registration_error",
                          doc="NCCL refused a registration or deregistration (rolled back: nothing half-registered).")
AgreementError = _make("AgreementError", 12, "agreement_error",
                       doc="the ranks differ at an agreement point (the message names them), another rank voted no, "
                           "or the agreement timed out.")
InternalError = _make("InternalError", 13, "internal_error",
                      doc="an unexpected C++ exception (std::bad_alloc, ...).")

_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgument, SizeTooLarge, OutOfMemory, DoubleFree, ForeignPointer, InvalidPointer, BackendError,
    Unsupported, InvariantViolation, InvalidState, RegistrationError, AgreementError, InternalError)}


def from_status(status: int, message: str) -> Error:
    """The exception for a C status code and message (InternalError for an unknown code)."""
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message or f"ncclpool call failed with status {status}")

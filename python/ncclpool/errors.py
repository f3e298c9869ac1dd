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
    status_name = "library_not_found"


def _make(name: str, status: int, status_name: str, *bases):
    cls = type(name, (Error, *bases), {"status": status, "status_name": status_name, "__doc__": f"Status {status}: {status_name}."})
    cls.__module__ = __name__
    return cls


InvalidArgument = _make("InvalidArgument", 1, "invalid_argument", ValueError)
SizeTooLarge = _make("SizeTooLarge", 2, "size_too_large", MemoryError)
OutOfMemory = _make("OutOfMemory", 3, "out_of_memory", MemoryError)
DoubleFree = _make("DoubleFree", 4, "double_free", ValueError)
ForeignPointer = _make("ForeignPointer", 5, "foreign_pointer", ValueError)
InvalidPointer = _make("InvalidPointer", 6, "invalid_pointer", ValueError)
BackendError = _make("BackendError", 7, "backend_error")
Unsupported = _make("Unsupported", 8, "unsupported")
InvariantViolation = _make("InvariantViolation", 9, "invariant_violation")
InvalidState = _make("InvalidState", 10, "invalid_state")
RegistrationError = _make("RegistrationError", 11, "registration_error")
AgreementError = _make("AgreementError", 12, "agreement_error")
InternalError = _make("InternalError", 13, "internal_error")

_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgument, SizeTooLarge, OutOfMemory, DoubleFree, ForeignPointer, InvalidPointer, BackendError,
    Unsupported, InvariantViolation, InvalidState, RegistrationError, AgreementError, InternalError)}


def from_status(status: int, message: str) -> Error:
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message or f"ncclpool call failed with status {status}")

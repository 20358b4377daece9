"""Loom's errors as Python exceptions: one class per loom_status (include/loom/loom_status.h),
all under LoomError, each carrying the runtime's message and its status code. Where a builtin
exception means the same thing the class derives from it too, so `except TimeoutError` or
`except ValueError` catch Loom's as well."""
import builtins

from . import _loom


class LoomError(Exception):
    """An error from the Loom runtime. `message` is the runtime's detail, `status` the
    loom_status code (negative) and `status_name` its name ("INVALID_ARGUMENT")."""

    status_name = "UNKNOWN"
    status_code = None  # set per class from libloom's table below

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else type(self).status_code

    def __str__(self):
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.status))


class InvalidArgumentError(LoomError, ValueError): pass
class NotFoundError(LoomError, LookupError): pass
class UnsupportedError(LoomError, NotImplementedError): pass
class HostOutOfMemoryError(LoomError, MemoryError): pass
class DeviceOutOfMemoryError(LoomError): pass
class ParseError(LoomError): pass
class VerifyError(LoomError): pass
class LoomIOError(LoomError, OSError): pass
class ProtocolError(LoomError): pass
class ConnectError(LoomError, ConnectionError): pass
class TimeoutError(LoomError, builtins.TimeoutError): pass
class CancelledError(LoomError): pass
class WorkerLostError(LoomError): pass
class InternalError(LoomError): pass
class VersionMismatchError(LoomError): pass
class ShapeMismatchError(LoomError, ValueError): pass
class CheckFailedError(LoomError): pass
class ClosedError(LoomError, ConnectionError): pass
class BusyError(LoomError): pass
class PermissionError(LoomError, builtins.PermissionError): pass
class PendingError(LoomError): pass


_BY_NAME = {
    "INVALID_ARGUMENT": InvalidArgumentError, "NOT_FOUND": NotFoundError, "UNSUPPORTED": UnsupportedError,
    "NO_MEMORY": HostOutOfMemoryError, "DEVICE_OUT_OF_MEMORY": DeviceOutOfMemoryError, "PARSE": ParseError,
    "VERIFY": VerifyError, "IO": LoomIOError, "PROTOCOL": ProtocolError, "CONNECT": ConnectError,
    "TIMEOUT": TimeoutError, "CANCELLED": CancelledError, "WORKER_LOST": WorkerLostError,
    "INTERNAL": InternalError, "VERSION_MISMATCH": VersionMismatchError, "SHAPE_MISMATCH": ShapeMismatchError,
    "CHECK_FAILED": CheckFailedError, "CLOSED": ClosedError, "BUSY": BusyError, "PERMISSION": PermissionError,
    "PENDING": PendingError,
}

#: status code -> exception class, for every status libloom knows (a newer libloom's codes get
#: a plain LoomError subclass named after them).
ERRORS = {}
STATUS_NAMES = {}
for _code, _name, _desc in _loom.statuses():
    STATUS_NAMES[_code] = _name
    if _code == 0:
        continue
    _cls = _BY_NAME.get(_name)
    if _cls is None:
        _cls = type("".join(w.capitalize() for w in _name.split("_")) + "Error", (LoomError,), {})
    _cls.status_name = _name
    _cls.status_code = _code
    ERRORS[_code] = _cls

_loom._init(ERRORS, LoomError)


def error_class(status):
    """The exception class for a loom_status code."""
    return ERRORS.get(status, LoomError)


__all__ = ["LoomError", "error_class", "ERRORS"] + sorted({c.__name__ for c in ERRORS.values()})

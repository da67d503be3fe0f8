"""Exceptions: one class per clattn_status, each carrying clattn_last_error's text."""


class Error(Exception):
    """A clattn call failed. str() is clattn_last_error's text; .status the C status code."""

    status = None
    status_name = "error"

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgument(Error, ValueError):
    status, status_name = 1, "invalid argument"


class ShapeMismatch(Error, ValueError):
    status, status_name = 2, "shape mismatch"


class InvalidTensor(Error, ValueError):
    status, status_name = 3, "invalid tensor"


class NoPlatform(Error, RuntimeError):
    status, status_name = 4, "no OpenCL platform"


class DeviceNotFound(Error, LookupError):
    status, status_name = 5, "device not found"


class BuildFailed(Error, RuntimeError):
    status, status_name = 6, "kernel build failed"


class OutOfMemory(Error, MemoryError):
    status, status_name = 7, "out of memory"


class OpenCLError(Error, RuntimeError):
    status, status_name = 8, "OpenCL error"


class Unsupported(Error, RuntimeError):
    status, status_name = 9, "unsupported"


class FileError(Error, OSError):
    status, status_name = 10, "I/O error"


_BY_STATUS = {c.status: c for c in (InvalidArgument, ShapeMismatch, InvalidTensor, NoPlatform,
                                    DeviceNotFound, BuildFailed, OutOfMemory, OpenCLError,
                                    Unsupported, FileError)}


def raise_status(status, message):
    """Raises the exception of a nonzero clattn_status with message."""
    cls = _BY_STATUS.get(status, Error)
    raise cls(message, status)

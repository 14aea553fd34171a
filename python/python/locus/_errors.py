"""Exceptions raised by locus.

Every error from the engine is a :class:`LocusError`; the subclasses are
also the built-in exceptions Python code already catches:

* :class:`InputError` (a ``ValueError``): bad data or parameters: shape
  mismatch, NaN/Inf, empty input, bandwidth not positive, unknown kernel.
* :class:`DeviceError` (a ``RuntimeError``): the GPU failed: no adapter,
  device lost, a driver error.
* :class:`LocusMemoryError` (a ``MemoryError``): a result or working set
  too large to allocate, or past the engine's memory limit.

A :class:`~locus.Client` of ``locus serve`` raises a :class:`ServiceError`
for an error answer, with its HTTP ``status``, ``kind`` and message:
:class:`ServiceInputError` (a 4xx; also an :class:`InputError`),
:class:`ServiceAuthError` (401, 403; also a ``PermissionError``),
:class:`ServiceBusyError` (429, 503: retry after ``retry_after`` seconds).

>>> import numpy as np, locus
>>> try:
...     locus.local_mean(np.zeros((2, 3)), np.zeros((4, 2)), bandwidth=1.0)
... except ValueError as e:
...     print(type(e).__name__)
InputError
"""

from __future__ import annotations

__all__ = [
    "LocusError",
    "InputError",
    "DeviceError",
    "LocusMemoryError",
    "ServiceError",
    "ServiceInputError",
    "ServiceAuthError",
    "ServiceBusyError",
]


class LocusError(Exception):
    """Base class of every error raised by locus."""


class InputError(LocusError, ValueError):
    """Invalid data or parameters (also a ``ValueError``)."""


class DeviceError(LocusError, RuntimeError):
    """The GPU could not be used or failed (also a ``RuntimeError``)."""


class LocusMemoryError(LocusError, MemoryError):
    """Too large to allocate, or past the memory limit (also a ``MemoryError``)."""


class ServiceError(LocusError):
    """An error answer of ``locus serve`` (see :class:`~locus.Client`).

    Parameters
    ----------
    status : int
        The HTTP status.
    kind : str
        The service's kind of error (``bad_request``, ``not_found``, …).
    message : str
        The service's message.
    """

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"HTTP {status} {kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message


class ServiceInputError(ServiceError, InputError):
    """A 4xx answer: a bad request, no such set, too large (also an
    :class:`InputError` and a ``ValueError``).

    Parameters
    ----------
    status : int
        The HTTP status.
    kind : str
        The service's kind of error.
    message : str
        The service's message.
    """


class ServiceAuthError(ServiceError, PermissionError):
    """401 or 403: no, an unknown, or a read-only API key (also a
    ``PermissionError``).

    Parameters
    ----------
    status : int
        The HTTP status.
    kind : str
        The service's kind of error.
    message : str
        The service's message.
    """


class ServiceBusyError(ServiceError):
    """429 or 503: the service is busy, loading, draining or out of memory;
    retry after :attr:`retry_after` seconds.

    Parameters
    ----------
    status : int
        The HTTP status.
    kind : str
        The service's kind of error (``queue_full``, ``unavailable``).
    message : str
        The service's message.
    retry_after : float or None
        The ``Retry-After`` header's seconds, if it had one.
    """

    def __init__(self, status: int, kind: str, message: str, retry_after: float | None) -> None:
        super().__init__(status, kind, message)
        self.retry_after = retry_after


for _cls in (
    LocusError,
    InputError,
    DeviceError,
    LocusMemoryError,
    ServiceError,
    ServiceInputError,
    ServiceAuthError,
    ServiceBusyError,
):
    _cls.__module__ = "locus"

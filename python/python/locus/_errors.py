"""Exceptions raised by locus.

Every error from the engine is a :class:`LocusError`; the subclasses are
also the built-in exceptions Python code already catches:

* :class:`InputError` (a ``ValueError``): bad data or parameters: shape
  mismatch, NaN/Inf, empty input, bandwidth not positive, unknown kernel.
* :class:`DeviceError` (a ``RuntimeError``): the GPU failed: no adapter,
  device lost, a driver error.
* :class:`LocusMemoryError` (a ``MemoryError``): a result or working set
  too large to allocate, or past the engine's memory limit.

>>> import numpy as np, locus
>>> try:
...     locus.local_mean(np.zeros((2, 3)), np.zeros((4, 2)), bandwidth=1.0)
... except ValueError as e:
...     print(type(e).__name__)
InputError
"""

from __future__ import annotations

__all__ = ["LocusError", "InputError", "DeviceError", "LocusMemoryError"]


class LocusError(Exception):
    """Base class of every error raised by locus."""


class InputError(LocusError, ValueError):
    """Invalid data or parameters (also a ``ValueError``)."""


class DeviceError(LocusError, RuntimeError):
    """The GPU could not be used or failed (also a ``RuntimeError``)."""


class LocusMemoryError(LocusError, MemoryError):
    """Too large to allocate, or past the memory limit (also a ``MemoryError``)."""


for _cls in (LocusError, InputError, DeviceError, LocusMemoryError):
    _cls.__module__ = "locus"

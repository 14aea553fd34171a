"""Engines and resident key sets."""

from __future__ import annotations

import threading
from typing import Any, Union

import numpy as np

from . import _locus
from ._arrays import (
    as_count,
    as_degree,
    as_dtype,
    as_float32,
    as_labels,
    as_matrix,
    as_seconds,
    as_values,
    fit_result,
    result_dtype,
)
from ._centre import add_offset, as_float64, centre_on
from ._centre import centre as _centre_keys
from ._compat import metric_spec, threads_for_n_jobs
from ._errors import InputError
from ._kernels import ProductKernel, kernel_arg
from ._results import KNNResult, LocalPCAResult, RowStates

__all__ = ["AttentionSet", "Engine", "KeySet", "check_backend", "engine_for"]

# The backends an engine is opened on, by name.
BACKENDS = ("auto", "gpu", "cpu")


def check_backend(backend: Any) -> None:
    """Refuses a backend name that is not one of :data:`BACKENDS`
    (estimators keep names, so that they pickle)."""
    if backend not in BACKENDS:
        raise InputError(f'backend must be "auto", "gpu" or "cpu", got {backend!r}')


class Engine:
    """A compute engine on one backend.

    ``backend="auto"`` takes a hardware GPU when wgpu finds one and the CPU
    otherwise; ``"gpu"`` takes the best GPU adapter, a software one
    (lavapipe) included, and raises :class:`~locus.DeviceError` when there
    is none; ``"cpu"`` runs on all cores with rayon. The environment
    variables ``LOCUS_ADAPTER`` and ``LOCUS_REQUIRE_HARDWARE`` choose among
    adapters as for the command-line tool. ``threads`` runs the engine's CPU
    work (every op of a CPU engine; a GPU engine's host-side work) on a pool
    of that many threads of its own, built once with the engine; by
    default it runs on rayon's global pool (every core, or
    ``RAYON_NUM_THREADS``). ``memory_limit`` caps the bytes
    the engine holds (key sets, GPU buffers); a call that can never fit
    under it (more than the limit less the key sets held) raises
    :class:`~locus.LocusMemoryError` at once and the engine keeps working.
    A call that would fit once other calls give their memory back waits
    for it, in arrival order, up to ``memory_wait`` seconds (default 10;
    ``0`` raises at once), then raises :class:`~locus.LocusMemoryError`.

    An engine is thread-safe, and every call releases the GIL, so Python
    threads sharing one engine run in parallel. The functions of
    :mod:`locus` take ``backend=`` either as a name (one shared engine per
    name) or as an ``Engine``.

    Parameters
    ----------
    backend : {"auto", "gpu", "cpu"}, default="auto"
        The backend, as above.
    memory_limit : int or None, default=None
        Bytes the engine may hold at once; unlimited when None.
    memory_wait : float or None, default=None
        Seconds a call waits for memory others hold (10 when None).
    threads : int or None, default=None
        CPU threads of the engine's own pool; rayon's global pool (every
        core, or ``RAYON_NUM_THREADS``) when None.

    Examples
    --------
    >>> import numpy as np, locus
    >>> engine = locus.Engine("cpu")
    >>> engine.info()["backend"]
    'cpu'
    >>> keys = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]], dtype=np.float32)
    >>> ks = engine.prepare(keys, values=np.array([1.0, 2.0, 9.0]))
    >>> ks.local_mean(np.array([[0.5, 0.0]]), bandwidth=0.5).round(3)
    array([1.5])
    """

    def __init__(
        self,
        backend: str = "auto",
        *,
        memory_limit: int | None = None,
        memory_wait: float | None = None,
        threads: int | None = None,
    ) -> None:
        check_backend(backend)
        if memory_limit is not None:
            memory_limit = as_count(memory_limit, "memory_limit")
        if memory_wait is not None:
            memory_wait = as_seconds(memory_wait, "memory_wait")
        if threads is not None:
            threads = as_count(threads, "threads")
        self._inner = _locus.Engine(
            backend, memory_limit=memory_limit, memory_wait=memory_wait, threads=threads
        )

    @property
    def backend(self) -> str:
        """``"cpu"`` or ``"gpu"``: where this engine runs."""
        return self._inner.backend

    @property
    def threads(self) -> int:
        """How many CPU threads this engine's work runs on: its own pool's
        (``threads=``), else rayon's global pool's (every core, or
        ``RAYON_NUM_THREADS``)."""
        return self._inner.threads

    def info(self) -> dict[str, Any]:
        """The backend: ``backend``, ``description``, ``software``, the
        adapter's ``name``/``api``/``device_type``/``driver`` and ``limits``
        on a GPU, ``threads``/``simd`` on the CPU, ``fallback_reason`` (why
        ``"auto"`` did not take a GPU it found) and ``memory`` in use.

        Returns
        -------
        dict
            The entries named above, by name.
        """
        return self._inner.info()

    def prepare(
        self,
        keys: Any,
        values: Any = None,
        labels: Any = None,
        *,
        batching: bool = True,
        max_request_rows: int | None = None,
        centre: bool = True,
        bandwidths: Any = None,
    ) -> KeySet:
        """Makes ``keys`` (N × d), and optionally ``values`` (N or N × q)
        and ``labels`` (N, any labels numpy can sort), resident on the
        backend, for many queries from many threads (see :class:`KeySet`).

        With ``batching``, small requests that arrive together from several
        threads are run as one call. ``max_request_rows`` bounds the rows of
        one request (default 2²⁰).

        Results come back in the floating dtype of the keys, values and
        queries together (float32 when all are float32, float64 otherwise);
        the keys and values are held in float32. float64 keys are centred
        near their float64 mean before they are rounded (and every query
        by the same offset), so a common offset costs no accuracy; local
        PCA's means get it back. ``centre=False`` keeps them as given (for
        the haversine metric, which a shift would change).

        Parameters
        ----------
        keys : array-like of shape (n_keys, n_features)
            The keys (N × d).
        values : array-like of shape (n_keys, n_values) or (n_keys,), default=None
            Values of the local means and fits.
        labels : array-like of shape (n_keys,), default=None
            Labels of :meth:`KeySet.predict_proba` and :meth:`KeySet.classify`.
        batching : bool, default=True
            Coalesce concurrent small requests into one call.
        max_request_rows : int or None, default=None
            The most rows of one request (2²⁰ when None).
        centre : bool, default=True
            Centre float64 keys before rounding them to float32.
        bandwidths : array-like of shape (n_keys,), default=None
            Per-key (sample-point) bandwidths, for
            :meth:`KeySet.local_mean_variable` and
            :meth:`KeySet.log_density_variable` (the keys are then kept a
            second time, with their scales).

        Returns
        -------
        KeySet
            The prepared keys.
        """
        dtype = result_dtype(keys, values)
        offset, x, _ = (
            _centre_keys(keys) if centre else (None, as_matrix(keys, "keys"), [])
        )
        y, vector = (None, False) if values is None else as_values(values, "values")
        classes, index = (None, None) if labels is None else as_labels(labels, x.shape[0])
        if max_request_rows is not None:
            max_request_rows = as_count(max_request_rows, "max_request_rows")
        inner = self._inner.prepare(
            x,
            y,
            index,
            batching=bool(batching),
            max_request_rows=max_request_rows,
            nearest_fallback=True,
            bandwidths=None if bandwidths is None else as_float32(bandwidths, "bandwidths", (1,)),
        )
        return KeySet(inner, classes, vector, dtype, offset)

    def prepare_attention(self, psi: Any, values: Any) -> AttentionSet:
        """Keeps attention keys ``psi`` (``(N, d)`` or batched
        ``(B, N, d)``) and their ``values`` (``(N, q)`` / ``(B, N, q)``) on
        the backend, for many :meth:`AttentionSet.attend` calls that upload
        only their queries (decoding, a fixed memory queried by many
        requests). Counted against ``memory_limit`` until dropped.

        Parameters
        ----------
        psi : array-like of shape (n_keys, d) or (batches, n_keys, d)
            The keys Ψ.
        values : array-like of shape (n_keys, q) or (batches, n_keys, q)
            The values V.

        Returns
        -------
        AttentionSet
            The prepared keys and values.
        """
        k = as_float32(psi, "psi", (2, 3))
        v = as_float32(values, "values", (2, 3))
        return AttentionSet(self._inner.prepare_attention(k, v))

    def __repr__(self) -> str:
        return repr(self._inner)


_engines: dict[tuple[str, int | None], Engine] = {}
_engines_lock = threading.Lock()

BackendLike = Union[str, Engine]


def engine_for(backend: BackendLike, n_jobs: int | None = None) -> Engine:
    """The engine for ``backend``: an :class:`Engine` as is, or the shared
    engine of that name and of the threads ``n_jobs`` asks for
    (scikit-learn's convention, see :func:`~locus._compat.threads_for_n_jobs`),
    created on first use: estimators with the same backend and thread
    count share one engine and its thread pool."""
    if isinstance(backend, Engine):
        return backend
    if backend not in BACKENDS:
        raise InputError(
            f'backend must be "auto", "gpu", "cpu" or a locus.Engine, got {backend!r}'
        )
    threads = threads_for_n_jobs(n_jobs)
    with _engines_lock:
        e = _engines.get((backend, threads))
        if e is None:
            e = _engines[(backend, threads)] = Engine(backend, threads=threads)
        return e


class AttentionSet:
    """Attention keys and values prepared on an engine's backend (see
    :meth:`Engine.prepare_attention`); :meth:`attend` gives what
    :func:`locus.kernel_softmax` gives on the same data. Thread-safe; each
    call releases the GIL.

    Examples
    --------
    >>> import numpy as np, locus
    >>> psi = 10 * np.eye(2, dtype=np.float32)
    >>> s = locus.Engine("cpu").prepare_attention(psi, [[1.0], [2.0]])
    >>> s.attend(np.eye(2), scale=1.0).round(3)
    array([[1.],
           [2.]], dtype=float32)
    >>> (s.batches, s.n_keys, s.dim, s.value_cols)
    (1, 2, 2, 1)
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def attend(
        self, phi: Any, *, scale: float | None = None, causal: bool = False
    ) -> np.ndarray:
        """``softmax(scale·ΦΨᵀ)V`` of ``phi`` (``(M, d)``, or
        ``(B, M, d)`` with the set's B) against the prepared keys and
        values; ``scale`` defaults to ``1/√d``; ``causal`` lets query i see
        the keys ``0..i + N − M``.

        Parameters
        ----------
        phi : array-like of shape (n_queries, d) or (batches, n_queries, d)
            The queries Φ.
        scale : float or None, default=None
            The factor of the scores; ``1/√d`` when None.
        causal : bool, default=False
            Query i sees the keys ``0..i + N − M``.

        Returns
        -------
        numpy.ndarray of shape (n_queries, q) or (batches, n_queries, q)
            ``softmax(scale·ΦΨᵀ)V`` (float32).
        """
        p = as_float32(phi, "phi", (2, 3))
        return self._inner.attend(p, scale=scale, causal=bool(causal))

    @property
    def batches(self) -> int:
        """Batches B."""
        return self._inner.batches

    @property
    def n_keys(self) -> int:
        """Keys per batch N."""
        return self._inner.keys

    @property
    def dim(self) -> int:
        """Feature dimension d."""
        return self._inner.dim

    @property
    def value_cols(self) -> int:
        """Value columns q."""
        return self._inner.value_cols

    @property
    def resident_bytes(self) -> int:
        """Bytes the backend holds for the keys and values."""
        return self._inner.resident_bytes

    def __repr__(self) -> str:
        return repr(self._inner)


class KeySet:
    """Keys (and values, labels) resident on an engine's backend, queried
    many times from many threads with any kernel and bandwidth.

    Made by :meth:`Engine.prepare`. Thread-safe: share one key set across a
    thread pool; each call releases the GIL, and concurrent small requests
    are coalesced into one engine call.

    Examples
    --------
    >>> import numpy as np, locus
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> rng = np.random.default_rng(0)
    >>> keys = rng.normal(size=(1000, 3)).astype(np.float32)
    >>> ks = locus.Engine("cpu").prepare(keys, values=keys[:, 0], labels=keys[:, 1] > 0)
    >>> with ThreadPoolExecutor(4) as pool:
    ...     outs = list(pool.map(lambda q: ks.local_mean(q, bandwidth=0.5), [keys[:16]] * 8))
    >>> outs[0].shape
    (16,)
    >>> ks.classes
    array([False,  True])
    """

    def __init__(
        self,
        inner: Any,
        classes: np.ndarray | None,
        vector_values: bool,
        dtype: type[np.floating] = np.float32,
        offset: np.ndarray | None = None,
    ) -> None:
        self._inner = inner
        self._classes = classes
        self._vector = vector_values
        self._dtype = dtype
        # Where the keys were centred (float64 keys), None: as given.
        self._offset = offset

    def _queries(self, queries: Any) -> np.ndarray:
        """``queries`` as the engine takes them: float32, moved by the
        keys' offset (in float64) when the keys were centred."""
        if self._offset is None:
            return as_matrix(queries, "queries")
        return centre_on(as_float64(queries, "queries"), self._offset, "queries")

    def _metric(self, metric: Any, p: Any) -> str:
        """``metric`` as the engine spells it; the haversine metric, which a
        shift would change, only on keys that were not moved."""
        m = metric_spec(metric, p)
        if m == "haversine" and self._offset is not None:
            raise InputError(
                "the haversine metric needs the keys as given, but these float64 keys "
                "were centred before rounding to float32; prepare them with centre=False"
            )
        return m

    def _dtype_for(self, queries: Any) -> type[np.floating]:
        """The results' dtype: float32 when the keys, values and queries
        are all float32, float64 otherwise."""
        if self._dtype == np.float32 and getattr(queries, "dtype", None) == np.float32:
            return np.float32
        return result_dtype(queries, np.empty(0, self._dtype))

    @property
    def n_keys(self) -> int:
        """Number of keys N."""
        return self._inner.rows

    @property
    def dim(self) -> int:
        """Dimension d of keys and queries."""
        return self._inner.dim

    @property
    def classes(self) -> np.ndarray | None:
        """The distinct labels (sorted), the columns of :meth:`predict_proba`."""
        return self._classes

    @property
    def resident_bytes(self) -> int:
        """Bytes the backend holds for this key set."""
        return self._inner.resident_bytes

    def stats(self) -> dict[str, int]:
        """How requests were served so far: ``direct``, ``batches``,
        ``batched_requests``, ``largest_batch``, ``retried_alone``.

        Returns
        -------
        dict of str to int
            The counters named above.
        """
        return self._inner.stats()

    def local_mean(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Local means of the values at ``queries`` (M × d), as
        :func:`locus.local_mean` with these keys and values; NaN rows for
        empty neighbourhoods.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_values) or (n_queries,)
            The local means (1-D for 1-D values).
        """
        out, _ = self._inner.local_mean(
            self._queries(queries), kernel=kernel_arg(kernel, bandwidth)
        )
        return as_dtype(out[:, 0] if self._vector else out, self._dtype_for(queries))

    @property
    def bandwidths(self) -> np.ndarray | None:
        """The per-key bandwidths the set was prepared with (float32), if any."""
        return self._inner.bandwidths

    def local_mean_variable(self, queries: Any, *, kernel: str = "gaussian") -> np.ndarray:
        """Local means of the values at ``queries`` under the per-key
        bandwidths the set was prepared with, as :func:`locus.local_mean`
        with ``bandwidths``.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        kernel : str, default="gaussian"
            A profile name.

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_values) or (n_queries,)
            The local means (1-D for 1-D values); NaN rows for empty
            neighbourhoods.
        """
        out, _ = self._inner.local_mean_variable(self._queries(queries), profile=kernel)
        return as_dtype(out[:, 0] if self._vector else out, self._dtype_for(queries))

    def log_density_variable(self, queries: Any, *, kernel: str = "gaussian") -> np.ndarray:
        """``ln p̂`` at ``queries`` under the per-key bandwidths the set was
        prepared with, as :func:`locus.log_density` with ``bandwidths``.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        kernel : str, default="gaussian"
            A profile name.

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            ``ln p̂`` at each query (float64).
        """
        return self._inner.log_density_variable(self._queries(queries), profile=kernel)

    def local_polynomial(
        self,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel = "gaussian",
        degree: int = 1,
        return_slopes: bool = False,
    ) -> Any:
        """Local polynomial regression of the values at ``queries``, as
        :func:`locus.local_polynomial` with these keys and values (the
        values are used as stored, not centred).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.
        degree : {0, 1}, default=1
            0: the local mean; 1: local linear regression.
        return_slopes : bool, default=False
            Also return the local slopes (``degree=1`` only).

        Returns
        -------
        fit : numpy.ndarray of shape (n_queries, n_values) or (n_queries,)
            The local fit at each query.
        slopes : numpy.ndarray
            The local slopes, only with ``return_slopes``.
        """
        degree = as_degree(degree, return_slopes)
        fit, slopes, _, _ = self._inner.local_polynomial(
            self._queries(queries), kernel=kernel_arg(kernel, bandwidth), degree=degree
        )
        dtype = self._dtype_for(queries)
        slopes = None if slopes is None else as_dtype(slopes, dtype)
        return fit_result(as_dtype(fit, dtype), slopes, self._vector, return_slopes)

    def local_pca(
        self,
        queries: Any,
        *,
        bandwidth: float | None = None,
        n_components: int = 1,
        kernel: str | ProductKernel = "gaussian",
    ) -> Any:
        """Local PCA at ``queries`` over these keys, as :func:`locus.local_pca`.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        n_components : int, default=1
            How many leading eigenpairs per query.
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.

        Returns
        -------
        LocalPCAResult
            ``(means, variances, components)``.
        """
        k = as_count(n_components, "n_components")
        means, variances, components, _ = self._inner.local_pca(
            self._queries(queries), kernel=kernel_arg(kernel, bandwidth), components=k
        )
        dtype = self._dtype_for(queries)
        means = add_offset(means, self._offset, dtype)
        return LocalPCAResult(means, as_dtype(variances, dtype), as_dtype(components, dtype))

    def row_states(
        self,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel = "gaussian",
        metric: str = "euclidean",
        p: float | None = None,
    ) -> RowStates:
        """The row states ``(m, s, u)`` behind :meth:`local_mean` (``u`` has
        no columns when the key set has no values), with ``r`` of ``k(r/h)``
        under ``metric`` (``p`` for ``"minkowski"``); states of several key
        sets merge associatively.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.
        metric : str, default="euclidean"
            The distance ``r`` of ``k(r/h)``: ``"euclidean"``, ``"manhattan"``,
            ``"chebyshev"``, ``"minkowski"`` (with ``p``) or ``"haversine"``
            (keys prepared with ``centre=False``).
        p : float or None, default=None
            Minkowski's exponent (``>= 1``; None for 2).

        Returns
        -------
        RowStates
            ``(m, s, u)``: ``(M,)``, ``(M,)``, ``(M × q)``.
        """
        kern = kernel_arg(kernel, bandwidth, self._metric(metric, p))
        m, s, u = self._inner.row_states(self._queries(queries), kernel=kern)
        return RowStates(m, s, u)

    def log_density(
        self,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel = "gaussian",
        metric: str = "euclidean",
        p: float | None = None,
    ) -> np.ndarray:
        """``ln p̂(q)`` of the KDE on the keys (float64), as :func:`locus.log_density`.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.
        metric : str, default="euclidean"
            The distance ``r`` of ``k(r/h)``: ``"euclidean"``, ``"manhattan"``,
            ``"chebyshev"``, ``"minkowski"`` (with ``p``) or ``"haversine"``
            (keys prepared with ``centre=False``).
        p : float or None, default=None
            Minkowski's exponent (``>= 1``; None for 2).

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            ``ln p̂`` at each query (float64).
        """
        kern = kernel_arg(kernel, bandwidth, self._metric(metric, p))
        return self._inner.log_density(self._queries(queries), kernel=kern)

    def density(
        self,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel = "gaussian",
        metric: str = "euclidean",
        p: float | None = None,
    ) -> np.ndarray:
        """``p̂(q)`` of the KDE on the keys (float64), as :func:`locus.density`.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.
        metric : str, default="euclidean"
            The distance ``r`` of ``k(r/h)``: ``"euclidean"``, ``"manhattan"``,
            ``"chebyshev"``, ``"minkowski"`` (with ``p``) or ``"haversine"``
            (keys prepared with ``centre=False``).
        p : float or None, default=None
            Minkowski's exponent (``>= 1``; None for 2).

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            ``p̂`` at each query (float64).
        """
        kern = kernel_arg(kernel, bandwidth, self._metric(metric, p))
        return self._inner.density(self._queries(queries), kernel=kern)

    def predict_proba(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """Class probabilities (M × C, columns in the order of
        :attr:`classes`): the local mean of one-hot labels; NaN rows for
        empty neighbourhoods.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_classes)
            The probabilities.
        """
        out, _ = self._inner.predict_proba(
            self._queries(queries), kernel=kernel_arg(kernel, bandwidth)
        )
        return as_dtype(out, self._dtype_for(queries))

    def classify(self, queries: Any, *, bandwidth: float | None = None, kernel: str | ProductKernel = "gaussian") -> np.ndarray:
        """The most probable label per query (ties to the smaller label); a
        query with an empty neighbourhood gets its nearest key's label.

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        bandwidth : float or None, default=None
            The kernel's bandwidth ``h`` (finite, > 0); required with a profile
            name, None with a :class:`~locus.ProductKernel` (its blocks carry
            theirs).
        kernel : str or ProductKernel, default="gaussian"
            A profile name (:doc:`/user_guide/functions`, "Kernels"), or a
            :class:`~locus.ProductKernel`.

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            The labels, of the labels' dtype.
        """
        if self._classes is None:
            raise InputError("this key set was prepared without labels")
        index, _, _ = self._inner.classify(
            self._queries(queries), kernel=kernel_arg(kernel, bandwidth)
        )
        return self._classes[index]

    def knn(self, queries: Any, k: int, *, metric: str = "euclidean", p: float | None = None) -> KNNResult:
        """The ``k`` nearest keys, nearest first, as :func:`locus.knn`: a
        :class:`~locus.KNNResult` ``(distances, indices)``, distances under
        ``metric`` (Euclidean by default; ``p`` for ``"minkowski"``)
        (M × k) and indices (M × k, int64).

        Parameters
        ----------
        queries : array-like of shape (n_queries, n_features)
            The query points (M × d).
        k : int
            Neighbours per query.
        metric : str, default="euclidean"
            The distance ``r`` of ``k(r/h)``: ``"euclidean"``, ``"manhattan"``,
            ``"chebyshev"``, ``"minkowski"`` (with ``p``) or ``"haversine"``
            (keys prepared with ``centre=False``).
        p : float or None, default=None
            Minkowski's exponent (``>= 1``; None for 2).

        Returns
        -------
        KNNResult
            ``(distances, indices)``.
        """
        m = self._metric(metric, p)
        idx, dist = self._inner.knn(self._queries(queries), as_count(k, "k"), m)
        return KNNResult(as_dtype(dist, self._dtype_for(queries)), idx)

    def __repr__(self) -> str:
        return repr(self._inner)

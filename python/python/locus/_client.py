"""A client of ``locus serve``, the HTTP service over named key sets.

NumPy in, NumPy out: query points go to the service as an Apache Arrow IPC
stream and the answers come back as one (``pip install
'locus-engine[client]'`` brings pyarrow); without pyarrow the points go as
``.npy`` and the answers come as JSON, with the same numbers. Only the
standard library speaks HTTP (one keep-alive connection per client).

Errors are typed: a 4xx is a :class:`ServiceInputError` (a ``ValueError``,
and an :class:`InputError`), 401/403 a :class:`ServiceAuthError`, 429/503 a
:class:`ServiceBusyError` carrying ``retry_after``, anything else a
:class:`ServiceError`; each has the HTTP ``status``, the service's ``kind``
and its message.

>>> import locus
>>> locus.Client("http://127.0.0.1:8080", arrow=False)  # connects on the first call
Client('http://127.0.0.1:8080', arrow=False)
"""

from __future__ import annotations

import http.client
import io
import json
import threading
import urllib.parse
from types import ModuleType
from typing import Any

import numpy as np

from ._errors import (
    InputError,
    ServiceAuthError,
    ServiceBusyError,
    ServiceError,
    ServiceInputError,
)
from ._kernels import ProductKernel
from ._results import KNNResult, MeanShiftResult, RowStates

__all__ = ["Client"]

ARROW = "application/vnd.apache.arrow.stream"
NPY = "application/x-npy"


def _pyarrow() -> ModuleType | None:
    """pyarrow, or None when it is not installed."""
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        return None
    return pyarrow


def _points(x: Any, name: str, *, wide: bool = False) -> np.ndarray:
    """``x`` as a C-contiguous matrix (1-D: one column) of float32, or with
    ``wide`` of float64 unless it is float32 (or float16) already: the
    service centres float64 points before it rounds them to float32, so
    points far from the origin keep their precision."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise InputError(f"{name}: numbers expected, not {a.dtype}")
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise InputError(f"{name}: a 2-D array expected, not {a.ndim}-D")
    narrow = not wide or a.dtype in (np.float32, np.float16)
    return np.ascontiguousarray(a, dtype=np.float32 if narrow else np.float64)


def _integer_labels(labels: Any) -> np.ndarray:
    """``labels`` as C-contiguous int64 (the service's class labels):
    integers, booleans, or floats that are whole numbers; others refused
    rather than truncated."""
    a = np.asarray(labels).ravel()
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)) or np.any(np.abs(a) >= 2.0**63):
            raise InputError("labels: whole numbers expected (the service's classes are int64)")
    elif a.dtype.kind not in "iub":
        raise InputError(f"labels: integers expected (the service's classes are int64), not {a.dtype}")
    elif a.dtype.kind == "u" and a.size and int(a.max()) >= 2**63:
        raise InputError("labels: values from 2**63 on do not fit the service's int64 classes")
    return np.ascontiguousarray(a, dtype=np.int64)


def _kernel_params(kernel: str | ProductKernel | None, bandwidth: float | None) -> dict[str, str]:
    """The query-string parameters of a kernel."""
    if isinstance(kernel, ProductKernel):
        if bandwidth is not None:
            raise InputError("a ProductKernel carries its bandwidths: pass no bandwidth")
        return {"blocks": ",".join(f"{d}:{p}:{h!r}" for d, p, h in kernel.blocks)}
    out: dict[str, str] = {}
    if kernel is not None:
        out["kernel"] = str(kernel)
    if bandwidth is not None:
        out["bandwidth"] = repr(float(bandwidth))
    return out


class Client:
    """A client of a running ``locus serve`` (docs/serve.md): the key-set
    ops of a named set by HTTP, NumPy arrays in and out.

    The methods mirror :class:`~locus.KeySet`'s, with the set's name first;
    ``kernel`` and ``bandwidth`` default to the service's (``--kernel``,
    ``--bandwidth``). Thread-safe (one connection, one request at a time).

    Points (keys, queries, MeanShift's points) go as float64 unless they
    are float32: the service centres a float64 set on its keys' mean before
    it rounds them to float32, and moves each query by the same offset, so
    coordinates far from the origin (``1e7 + x``) keep their precision, as
    in :class:`~locus.KeySet`. Pass float32 arrays to send half the bytes
    where that precision is not needed.

    Parameters
    ----------
    url : str
        The service's address, e.g. ``"http://127.0.0.1:8080"``.
    api_key : str or None, default=None
        Sent as ``Authorization: Bearer`` (a service with ``--api-keys``).
    timeout : float, default=60.0
        Seconds a connection or an answer may take.
    arrow : bool or None, default=None
        Send and receive Arrow IPC streams; None: when pyarrow is
        installed, else ``.npy`` bodies and JSON answers.

    Raises
    ------
    InputError
        A URL that is not ``http://HOST[:PORT]``, or ``arrow=True`` without
        pyarrow.

    Examples
    --------
    >>> import locus
    >>> c = locus.Client("http://127.0.0.1:8080")
    >>> c.url
    'http://127.0.0.1:8080'
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        arrow: bool | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise InputError(f"url {url!r}: use http://HOST[:PORT] (put a TLS proxy in front for https)")
        self.url = url.rstrip("/")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._timeout = float(timeout)
        self._api_key = api_key
        pa = _pyarrow()
        if arrow and pa is None:
            raise InputError("arrow=True needs pyarrow: pip install 'locus-engine[client]'")
        self._pa = pa if arrow is not False else None
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    @property
    def arrow(self) -> bool:
        """Whether bodies go as Arrow IPC streams (else ``.npy`` and JSON)."""
        return self._pa is not None

    def close(self) -> None:
        """Closes the connection (a later call opens another)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r}, arrow={self.arrow})"

    # -- HTTP ------------------------------------------------------------

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on the kept connection (reopened once if the service
        closed it while idle)."""
        headers = dict(headers)
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        with self._lock:
            for attempt in (0, 1):
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
                try:
                    self._conn.request(method, self._prefix + path, body=body, headers=headers)
                    r = self._conn.getresponse()
                    data = r.read()
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    self._conn.close()
                    self._conn = None
                    if attempt == 1:
                        raise
                    continue
                if r.getheader("Connection", "").lower() == "close":
                    self._conn.close()
                    self._conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        raise AssertionError("unreachable")  # pragma: no cover

    def _check(self, status: int, headers: dict[str, str], data: bytes) -> None:
        """Raises the typed error of an error answer."""
        if status < 400:
            return
        try:
            body = json.loads(data)
            message, kind = str(body["error"]), str(body["kind"])
        except (ValueError, KeyError, TypeError):
            message, kind = data.decode("utf-8", "replace")[:500], "error"
        if status in (401, 403):
            raise ServiceAuthError(status, kind, message)
        if status in (429, 503):
            retry = headers.get("retry-after")
            raise ServiceBusyError(status, kind, message, float(retry) if retry else None)
        if 400 <= status < 500:
            raise ServiceInputError(status, kind, message)
        raise ServiceError(status, kind, message)

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        status, headers, out = self._send(method, path, data, {"Content-Type": "application/json"})
        self._check(status, headers, out)
        return json.loads(out)

    # -- bodies ----------------------------------------------------------

    def _arrow_stream(self, columns: dict[str, np.ndarray]) -> bytes:
        """Columns as an Arrow IPC stream: 2-D as fixed-size lists."""
        pa = self._pa
        assert pa is not None
        arrays = []
        for a in columns.values():
            if a.ndim == 2:
                flat = pa.array(np.ascontiguousarray(a).ravel())
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, a.shape[1]))
            else:
                arrays.append(pa.array(a))
        batch = pa.record_batch(arrays, names=list(columns))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        return bytes(sink.getvalue().to_pybytes())

    def _read_arrow(self, data: bytes) -> dict[str, Any]:
        """An Arrow answer: its columns as arrays, its scalars decoded."""
        pa = self._pa
        assert pa is not None
        table = pa.ipc.open_stream(data).read_all()
        out: dict[str, Any] = {}
        for k, v in (table.schema.metadata or {}).items():
            if not k.startswith(b"locus."):
                out[k.decode()] = json.loads(v)
        for field in table.schema:
            col = table.column(field.name).combine_chunks()
            if pa.types.is_fixed_size_list(field.type):
                a = col.flatten().to_numpy(zero_copy_only=False)
                meta = field.metadata or {}
                shape = json.loads(meta[b"locus.shape"]) if b"locus.shape" in meta else [len(col), field.type.list_size]
                out[field.name] = a.reshape(shape)
            else:
                out[field.name] = col.to_numpy(zero_copy_only=False)
        return out

    @staticmethod
    def _read_json(data: bytes) -> dict[str, Any]:
        """A JSON answer: nested lists as arrays (``null`` as NaN)."""
        out: dict[str, Any] = json.loads(data)
        for k, v in out.items():
            if isinstance(v, list):
                a = np.array(v, dtype=object)
                if a.size and all(isinstance(x, int) and not isinstance(x, bool) for x in a.ravel()):
                    out[k] = a.astype(np.int64)
                else:
                    out[k] = np.array(np.where(a == None, np.nan, a), dtype=np.float64)  # noqa: E711
        return out

    def _query(
        self,
        path: str,
        points: Any,
        params: dict[str, str],
        *,
        field: str = "queries",
        answer_json: bool = False,
    ) -> dict[str, Any]:
        """Posts ``points`` to ``path`` with ``params`` in the query string."""
        x = _points(points, field, wide=True)
        query = "?" + urllib.parse.urlencode(params) if params else ""
        if self._pa is not None:
            body = self._arrow_stream({field: x})
            accept = "application/json" if answer_json else ARROW
            headers = {"Content-Type": ARROW, "Accept": accept}
        else:
            buf = io.BytesIO()
            np.save(buf, x, allow_pickle=False)
            body = buf.getvalue()
            headers = {"Content-Type": NPY, "Accept": "application/json"}
        status, answer_headers, data = self._send("POST", path + query, body, headers)
        self._check(status, answer_headers, data)
        if answer_headers.get("content-type", "").startswith(ARROW):
            return self._read_arrow(data)
        return self._read_json(data)

    def _op(self, name: str, op: str, queries: Any, params: dict[str, str]) -> dict[str, Any]:
        path = f"/v1/sets/{urllib.parse.quote(name, safe='')}/{op}"
        return self._query(path, queries, params)

    # -- the ops ---------------------------------------------------------

    def local_mean(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> np.ndarray:
        """Local means of set ``name``'s values at ``queries``, as
        :meth:`KeySet.local_mean`; NaN rows for empty neighbourhoods.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_values)
            The local means (float32).
        """
        a = self._op(name, "local-mean", queries, _kernel_params(kernel, bandwidth))
        return np.asarray(a["values"], dtype=np.float32)

    def local_polynomial(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
        degree: int = 1,
        return_slopes: bool = False,
    ) -> Any:
        """Local polynomial regression of set ``name``'s values, as
        :meth:`KeySet.local_polynomial`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).
        degree : {0, 1}, default=1
            0: the local mean; 1: local linear regression.
        return_slopes : bool, default=False
            Also return the slopes (``degree=1``).

        Returns
        -------
        fit : numpy.ndarray of shape (n_queries, n_values)
            The local fit (float32).
        slopes : numpy.ndarray of shape (n_queries, n_values, n_features)
            The local slopes, only with ``return_slopes``.
        """
        params = _kernel_params(kernel, bandwidth)
        params["degree"] = str(int(degree))
        a = self._op(name, "local-mean", queries, params)
        fit = np.asarray(a["values"], dtype=np.float32)
        if not return_slopes:
            return fit
        if "slopes" not in a:
            raise InputError("slopes need degree=1")
        return fit, np.asarray(a["slopes"], dtype=np.float32)

    def row_states(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> RowStates:
        """The row states ``(m, s, u)`` of set ``name``, as
        :meth:`KeySet.row_states` (they merge across sets).

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        RowStates
            ``(m, s, u)``: ``(M,)`` float32, ``(M,)`` and ``(M × q)`` float64.
        """
        a = self._op(name, "row-states", queries, _kernel_params(kernel, bandwidth))
        return RowStates(
            np.asarray(a["max_log_weight"], dtype=np.float32),
            np.asarray(a["sum"], dtype=np.float64),
            np.asarray(a["weighted"], dtype=np.float64),
        )

    def density(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> np.ndarray:
        """``p̂(q)`` of the KDE on set ``name``'s keys (weighted by its
        weights if it has them), as :meth:`KeySet.density`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            The densities (float64).
        """
        a = self._op(name, "density", queries, _kernel_params(kernel, bandwidth))
        return np.asarray(a["density"], dtype=np.float64)

    def log_density(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> np.ndarray:
        """``ln p̂(q)``, as :meth:`KeySet.log_density`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            The log-densities (float64).
        """
        a = self._op(name, "log-density", queries, _kernel_params(kernel, bandwidth))
        return np.asarray(a["log_density"], dtype=np.float64)

    def classify(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> np.ndarray:
        """The most probable label per query of set ``name``, as
        :meth:`KeySet.classify`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        numpy.ndarray of shape (n_queries,)
            The labels (int64).
        """
        a = self._op(name, "classify", queries, _kernel_params(kernel, bandwidth))
        return np.asarray(a["labels"], dtype=np.int64)

    def predict_proba(
        self,
        name: str,
        queries: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
    ) -> np.ndarray:
        """Class probabilities (columns in the order of the set's
        ``classes``, see :meth:`get_set`), as :meth:`KeySet.predict_proba`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).

        Returns
        -------
        numpy.ndarray of shape (n_queries, n_classes)
            The probabilities (float32).
        """
        a = self._op(name, "classify", queries, _kernel_params(kernel, bandwidth))
        return np.asarray(a["proba"], dtype=np.float32)

    def knn(self, name: str, queries: Any, k: int) -> KNNResult:
        """The ``k`` nearest keys of set ``name``, as :meth:`KeySet.knn`.

        Parameters
        ----------
        name : str
            The set.
        queries : array-like of shape (n_queries, n_features)
            The query points.
        k : int
            Neighbours per query.

        Returns
        -------
        KNNResult
            ``(distances, indices)``: (M × k) float32 and int64.
        """
        a = self._op(name, "knn", queries, {"k": str(int(k))})
        return KNNResult(np.asarray(a["distances"], dtype=np.float32), np.asarray(a["indices"], dtype=np.int64))

    def mean_shift(
        self,
        X: Any,
        *,
        bandwidth: float | None = None,
        kernel: str | ProductKernel | None = None,
        max_iter: int | None = None,
    ) -> MeanShiftResult:
        """MeanShift of the points ``X`` on the service (every point a seed).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The points.
        bandwidth : float or None, default=None
            The kernel's bandwidth (None: the service's).
        kernel : str, ProductKernel or None, default=None
            A profile name or a :class:`~locus.ProductKernel` (None: the service's).
        max_iter : int or None, default=None
            The most shifts a seed takes (None: the service's default).

        Returns
        -------
        MeanShiftResult
            ``(cluster_centers, labels, populations, n_iter, converged, bandwidth)``.
        """
        params = _kernel_params(kernel, bandwidth)
        if max_iter is not None:
            params["max_iter"] = str(int(max_iter))
        # The modes are not per point: the answer comes as JSON. They are
        # float64 where the points were (the service centred them).
        sent = _points(X, "points", wide=True)
        a = self._query("/v1/mean-shift", sent, params, field="points", answer_json=True)
        return MeanShiftResult(
            np.asarray(a["modes"], dtype=sent.dtype),
            np.asarray(a["labels"], dtype=np.int64),
            np.asarray(a["populations"], dtype=np.int64),
            int(a["iterations"]),
            bool(a["converged"]),
            float(a["bandwidth"]),
        )

    # -- sets and probes -------------------------------------------------

    def put_set(
        self,
        name: str,
        keys: Any,
        values: Any = None,
        labels: Any = None,
        weights: Any = None,
    ) -> dict[str, Any]:
        """Creates or replaces set ``name`` (an admin key on a service with
        API keys).

        Parameters
        ----------
        name : str
            The set (1 to 64 letters, digits, ``_``, ``-``, ``.``).
        keys : array-like of shape (n_keys, n_features)
            The keys.
        values : array-like of shape (n_keys, n_values) or (n_keys,), default=None
            The values of local means and row states.
        labels : array-like of int of shape (n_keys,), default=None
            The labels of classification (non-negative).
        weights : array-like of shape (n_keys,), default=None
            The density's weights (non-negative, not all zero).

        Returns
        -------
        dict
            ``{"set": {...}, "replaced": bool}``.
        """
        arrays: dict[str, np.ndarray] = {"keys": _points(keys, "keys", wide=True)}
        if values is not None:
            arrays["values"] = _points(values, "values")
        if labels is not None:
            arrays["labels"] = _integer_labels(labels)
        if weights is not None:
            arrays["weights"] = np.ascontiguousarray(np.asarray(weights, dtype=np.float32).ravel())
        path = f"/v1/sets/{urllib.parse.quote(name, safe='')}"
        if self._pa is not None:
            body, headers = self._arrow_stream(arrays), {"Content-Type": ARROW}
        else:
            buf = io.BytesIO()
            for a in arrays.values():
                np.save(buf, a, allow_pickle=False)
            body, headers = buf.getvalue(), {"Content-Type": NPY}
            path += "?" + urllib.parse.urlencode({"parts": ",".join(arrays)})
        status, answer_headers, data = self._send("PUT", path, body, headers)
        self._check(status, answer_headers, data)
        out: dict[str, Any] = json.loads(data)
        return out

    def delete_set(self, name: str) -> dict[str, Any]:
        """Drops set ``name`` (an admin key on a service with API keys).

        Parameters
        ----------
        name : str
            The set.

        Returns
        -------
        dict
            ``{"deleted": name}``.
        """
        out: dict[str, Any] = self._json("DELETE", f"/v1/sets/{urllib.parse.quote(name, safe='')}")
        return out

    def list_sets(self) -> list[dict[str, Any]]:
        """Every set: ``name``, ``keys``, ``dim``, ``value_cols``,
        ``classes``, ``weighted``, ``resident_bytes``, ``offset`` (what
        the set's float64 keys were centred by, or None), ``queue_depth``,
        ``in_queue``.

        Returns
        -------
        list of dict
            One per set, by name.
        """
        out: list[dict[str, Any]] = self._json("GET", "/v1/sets")["sets"]
        return out

    def get_set(self, name: str) -> dict[str, Any]:
        """What :meth:`list_sets` says of set ``name``.

        Parameters
        ----------
        name : str
            The set.

        Returns
        -------
        dict
            The set's description.
        """
        out: dict[str, Any] = self._json("GET", f"/v1/sets/{urllib.parse.quote(name, safe='')}")
        return out

    def livez(self) -> dict[str, Any]:
        """``GET /livez``: the process answers.

        Returns
        -------
        dict
            ``{"status": "live"}``.
        """
        out: dict[str, Any] = self._json("GET", "/livez")
        return out

    def readyz(self) -> dict[str, Any]:
        """``GET /readyz``: the sets named at start are prepared (else a
        :class:`ServiceBusyError`, 503).

        Returns
        -------
        dict
            ``{"status": "ready"}``.
        """
        out: dict[str, Any] = self._json("GET", "/readyz")
        return out


Client.__module__ = "locus"

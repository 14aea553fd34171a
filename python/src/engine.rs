//! `Engine`: a locus engine on one backend, shared by every thread.

use std::num::NonZeroUsize;
use std::time::Duration;

use locus::{BackendInfo, Device, EmptyFallback, EngineOptions, KeySetOptions};
use ndarray::{Ix2, Ix3};
use numpy::PyReadonlyArray1;
use numpy::PyReadonlyArray2;
use numpy::PyReadonlyArrayDyn;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::attention::AttentionSet;
use crate::convert::dim;
use crate::errors::{compute, input};
use crate::keyset::KeySet;

/// A compute engine on one backend: `"auto"` (a hardware GPU if there is
/// one, else the CPU), `"gpu"` (any GPU adapter, software included) or
/// `"cpu"`. Thread-safe; every call releases the GIL.
#[pyclass(module = "locus._locus", frozen)]
pub struct Engine {
    pub(crate) inner: locus::Engine,
}

#[pymethods]
impl Engine {
    /// Opens an engine on `backend`, with at most `memory_limit` bytes held
    /// (key sets, GPU buffers) when given; under it a call that would fit
    /// once others end waits up to `memory_wait` seconds (default 10; 0:
    /// it fails at once). `threads`: the CPU work on a pool of that many
    /// threads of the engine's own (default: rayon's global pool).
    #[new]
    #[pyo3(signature = (backend = "auto", *, memory_limit = None, memory_wait = None, threads = None))]
    fn new(
        py: Python<'_>,
        backend: &str,
        memory_limit: Option<u64>,
        memory_wait: Option<f64>,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let device = match backend {
            "auto" => Device::Auto,
            "gpu" => Device::Gpu,
            "cpu" => Device::Cpu,
            other => {
                return Err(input(
                    py,
                    format!("backend must be \"auto\", \"gpu\" or \"cpu\", got {other:?}"),
                ));
            }
        };
        let memory_wait = match memory_wait {
            None => locus::DEFAULT_MEMORY_WAIT,
            Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
                input(
                    py,
                    format!("memory_wait must be a finite number of seconds >= 0, got {s}"),
                )
            })?,
        };
        let threads =
            match threads {
                None => None,
                Some(n) => Some(NonZeroUsize::new(n).ok_or_else(|| {
                    input(py, "threads must be a positive number of threads, got 0")
                })?),
            };
        let inner = compute(py, || {
            if device == Device::Auto && memory_limit.is_none() && threads.is_none() {
                return Ok(locus::Engine::new());
            }
            let mut options = EngineOptions::from_env(device)?;
            options.memory_limit = memory_limit;
            options.memory_wait = memory_wait;
            options.threads = threads;
            match locus::Engine::with_options(options) {
                // As `Engine::new`: "auto" never fails for want of a GPU.
                Err(_) if device == Device::Auto => {
                    let mut cpu = EngineOptions::new(Device::Cpu);
                    cpu.memory_limit = memory_limit;
                    cpu.memory_wait = memory_wait;
                    cpu.threads = threads;
                    locus::Engine::with_options(cpu)
                }
                r => r,
            }
        })?;
        Ok(Engine { inner })
    }

    /// The backend as a dict: `backend` ("cpu"/"gpu"), `description`,
    /// `software`, GPU `name`/`api`/`device_type`/`driver` and `limits`,
    /// CPU `threads`/`simd`, `fallback_reason`, and `memory` in use.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let b = self.inner.backend();
        d.set_item("backend", b.kind())?;
        d.set_item("description", b.to_string())?;
        d.set_item("software", b.is_software())?;
        match b {
            BackendInfo::Cpu { threads, simd } => {
                d.set_item("threads", *threads)?;
                d.set_item("simd", *simd)?;
            }
            BackendInfo::Gpu {
                name,
                api,
                device_type,
                driver,
                ..
            } => {
                d.set_item("name", name)?;
                d.set_item("api", api)?;
                d.set_item("device_type", device_type)?;
                d.set_item("driver", driver)?;
            }
            _ => {}
        }
        if let Some(l) = self.inner.gpu_limits() {
            let limits = PyDict::new(py);
            limits.set_item("max_buffer_size", l.max_buffer_size)?;
            limits.set_item(
                "max_storage_buffer_binding_size",
                l.max_storage_buffer_binding_size,
            )?;
            limits.set_item(
                "max_compute_workgroups_per_dimension",
                l.max_compute_workgroups_per_dimension,
            )?;
            d.set_item("limits", limits)?;
        }
        d.set_item("fallback_reason", self.inner.fallback_reason())?;
        let m = self.inner.memory_usage();
        let mem = PyDict::new(py);
        mem.set_item("in_use", m.in_use)?;
        mem.set_item("idle", m.idle)?;
        mem.set_item("limit", m.limit)?;
        d.set_item("memory", mem)?;
        Ok(d)
    }

    /// `"cpu"` or `"gpu"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.backend().kind()
    }

    /// How many CPU threads the engine's work runs on.
    #[getter]
    fn threads(&self) -> usize {
        self.inner.threads()
    }

    /// Makes `keys` (`N × d`), and optionally `values` (`N × q`) and class
    /// indices `labels` (`N`, in `0..C`), resident on the backend.
    /// `nearest_fallback`: `classify` gives a query with an empty
    /// neighbourhood the label of its nearest key (else −1).
    #[pyo3(signature = (
        keys, values = None, labels = None, *, batching = true, max_request_rows = None,
        nearest_fallback = false, bandwidths = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        keys: PyReadonlyArray2<'_, f32>,
        values: Option<PyReadonlyArray2<'_, f32>>,
        labels: Option<PyReadonlyArray1<'_, i64>>,
        batching: bool,
        max_request_rows: Option<usize>,
        nearest_fallback: bool,
        bandwidths: Option<PyReadonlyArray1<'_, f32>>,
    ) -> PyResult<KeySet> {
        let py = keys.py();
        let mut options = KeySetOptions::default();
        if nearest_fallback {
            options.empty_fallback = EmptyFallback::NearestNeighbour;
        }
        if !batching {
            options.batching = locus::Batching::off();
        }
        if let Some(r) = max_request_rows {
            options.max_request_rows = r;
        }
        let (k, v, l, h) = (
            keys.as_array(),
            values.as_ref().map(|v| v.as_array()),
            labels.as_ref().map(|l| l.as_array()),
            bandwidths.as_ref().map(|h| h.as_array()),
        );
        let engine = &self.inner;
        let inner = compute(py, || {
            let mut b = engine.prepare(k).options(options);
            if let Some(v) = v {
                b = b.values(v);
            }
            if let Some(l) = l {
                b = b.labels(l);
            }
            if let Some(h) = h {
                b = b.bandwidths(h);
            }
            b.build()
        })?;
        Ok(KeySet { inner })
    }

    /// Keeps attention keys `psi` and `values` (both 2-D, or both batched
    /// 3-D) on the backend for repeated `AttentionSet.attend` calls.
    fn prepare_attention(
        &self,
        py: Python<'_>,
        psi: PyReadonlyArrayDyn<'_, f32>,
        values: PyReadonlyArrayDyn<'_, f32>,
    ) -> PyResult<AttentionSet> {
        let (k, v) = (psi.as_array(), values.as_array());
        let engine = &self.inner;
        let inner = match (k.ndim(), v.ndim()) {
            (2, 2) => compute(py, || {
                engine.prepare_attention(dim::<Ix2>(&k), dim::<Ix2>(&v))
            })?,
            (3, 3) => compute(py, || {
                engine.prepare_attention(dim::<Ix3>(&k), dim::<Ix3>(&v))
            })?,
            (a, b) => {
                return Err(input(
                    py,
                    format!(
                        "psi and values must both be 2-D (N × d, N × q) or both 3-D (B × N × ·); got {a} and {b} axes"
                    ),
                ));
            }
        };
        Ok(AttentionSet { inner })
    }

    fn __repr__(&self) -> String {
        format!("Engine({})", self.inner.backend())
    }
}

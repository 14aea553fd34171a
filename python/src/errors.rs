//! Rust errors as Python exceptions, and the one way compute is run: with
//! the GIL released, any panic caught, and, on the main thread, Ctrl-C
//! honoured while the call runs.
//!
//! The exception classes live in `locus/_errors.py` (they need multiple
//! inheritance: `InputError` is a `ValueError`, `DeviceError` a
//! `RuntimeError`, `LocusMemoryError` a `MemoryError`); they are looked up
//! once and cached.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use locus::{CancelToken, Error};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static LOCUS_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INPUT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DEVICE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MEMORY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const MODULE: &str = "locus._errors";

/// Which Python exception class an error becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `locus.LocusError`: anything not covered below.
    Other,
    /// `locus.InputError` (a `ValueError`): bad data or parameters.
    Input,
    /// `locus.DeviceError` (a `RuntimeError`): the GPU failed.
    Device,
    /// `locus.LocusMemoryError` (a `MemoryError`): too large to allocate.
    Memory,
}

/// The exception class for `e`.
pub(crate) fn kind(e: &Error) -> Kind {
    match e {
        Error::InvalidBandwidth { .. }
        | Error::UnknownProfile { .. }
        | Error::UnknownMetric { .. }
        | Error::MetricDimension { .. }
        | Error::UnsupportedMetric { .. }
        | Error::DimensionMismatch { .. }
        | Error::KernelDimension { .. }
        | Error::RowMismatch { .. }
        | Error::EmptyInput { .. }
        | Error::NonFinite { .. }
        | Error::InvalidParameter { .. }
        | Error::Rank { .. }
        | Error::BatchMismatch { .. }
        | Error::CausalShape { .. }
        | Error::NegativeFeature { .. }
        | Error::LogitOverflow { .. }
        | Error::Unsupported { .. }
        | Error::Cluster(_) => Kind::Input,
        Error::TooLarge { .. } | Error::MemoryLimit { .. } | Error::GpuOutOfMemory { .. } => {
            Kind::Memory
        }
        Error::NoAdapter { .. }
        | Error::AdapterNotFound { .. }
        | Error::SoftwareAdapter { .. }
        | Error::DeviceRequest { .. }
        | Error::Gpu { .. }
        | Error::DeviceLost { .. } => Kind::Device,
        _ => Kind::Other,
    }
}

/// A Python exception of class `kind` with `message`.
pub(crate) fn py_err(py: Python<'_>, kind: Kind, message: String) -> PyErr {
    let (cell, name) = match kind {
        Kind::Other => (&LOCUS_ERROR, "LocusError"),
        Kind::Input => (&INPUT_ERROR, "InputError"),
        Kind::Device => (&DEVICE_ERROR, "DeviceError"),
        Kind::Memory => (&MEMORY_ERROR, "LocusMemoryError"),
    };
    match cell.import(py, MODULE, name) {
        Ok(ty) => PyErr::from_type(ty.clone(), message),
        Err(e) => e,
    }
}

/// `e` as its Python exception, carrying the Rust error's message.
pub(crate) fn to_py(py: Python<'_>, e: &Error) -> PyErr {
    py_err(py, kind(e), e.to_string())
}

/// How often the main thread looks for signals (Ctrl-C) while a call runs.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The interpreter's main thread (`threading.main_thread().ident`).
static MAIN_THREAD: PyOnceLock<u64> = PyOnceLock::new();

thread_local! {
    /// Whether this OS thread is the interpreter's main thread, once asked.
    static IS_MAIN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether this is the interpreter's main thread, the one Python runs
/// signal handlers on (asked of Python once per thread).
fn on_main_thread(py: Python<'_>) -> bool {
    if let Some(known) = IS_MAIN.get() {
        return known;
    }
    let main = MAIN_THREAD.get_or_try_init(py, || -> PyResult<u64> {
        let threading = py.import("threading")?;
        threading
            .call_method0("main_thread")?
            .getattr("ident")?
            .extract()
    });
    let this = py
        .import("threading")
        .and_then(|t| t.call_method0("get_ident"))
        .and_then(|i| i.extract::<u64>());
    match (main, this) {
        (Ok(&main), Ok(this)) => {
            IS_MAIN.set(Some(main == this));
            main == this
        }
        _ => false,
    }
}

/// Runs `f` with the GIL released (other Python threads run meanwhile),
/// turning a Rust error into its Python exception and a panic into
/// `locus.LocusError`, so nothing unwinds into the interpreter.
///
/// On the main thread the call runs on the worker thread kept for such
/// calls (`worker.rs`) under a [`CancelToken`] while this thread checks for signals every
/// [`SIGNAL_POLL`]: Ctrl-C cancels the call (it stops at its next
/// checkpoint, the engine untouched) and raises `KeyboardInterrupt` once
/// the work has stopped. Other threads never receive signals, so they run
/// the call themselves.
pub(crate) fn compute<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> locus::Result<T> + Send,
{
    let outcome = if on_main_thread(py) {
        let token = CancelToken::new();
        let mut interrupted = None;
        let outcome = crate::worker::run(
            || token.run(f),
            |slot| {
                if py.detach(|| slot.wait(SIGNAL_POLL)) {
                    return;
                }
                if interrupted.is_none()
                    && let Err(e) = py.check_signals()
                {
                    token.cancel();
                    interrupted = Some(e);
                }
            },
        );
        if let Some(interrupt) = interrupted {
            return Err(interrupt);
        }
        outcome
    } else {
        py.detach(|| catch_unwind(AssertUnwindSafe(f)))
    };
    match outcome {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, &e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(py_err(
                py,
                Kind::Other,
                format!("internal error in locus (please report it): {what}"),
            ))
        }
    }
}

/// An `InputError` for a parameter the bindings check themselves.
pub(crate) fn input(py: Python<'_>, message: impl Into<String>) -> PyErr {
    py_err(py, Kind::Input, message.into())
}

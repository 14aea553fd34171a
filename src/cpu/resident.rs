//! Key sets on the CPU: keys and value matrices kept transposed in the
//! padded column layout the kernels stream ([`KeyColumns`]), so a query
//! pays for neither the transpose nor the checks of the keys. The ops are
//! those of a one-shot call (`on_keys.rs`), with each request charged to
//! the backend's memory budget.
//!
//! Imports: `super::{keys, knn, on_keys, local_mean, panels}`, `crate::backend`,
//! `crate::error`, `crate::kernel`, `crate::matrix`, `crate::memory`,
//! `crate::types`.

use std::sync::Arc;

use super::keys::{KeyColumns, Pack};
use super::local_mean::QUERY_GROUP;
use super::{knn, moments, on_keys, panels};
use crate::backend::Resident;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, ensure_room};
use crate::memory::{MemoryBudget, Reservation};
use crate::types::{MomentLayout, Neighbours, RowNormalized, RowStates};

/// A key set: its keys and value matrices in the kernels' layout, and the
/// memory they hold.
pub(crate) struct CpuResident {
    keys: KeyColumns,
    budget: Arc<MemoryBudget>,
    held: Reservation,
}

impl std::fmt::Debug for CpuResident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuResident")
            .field("n", &self.keys.n())
            .field("d", &self.keys.d())
            .field("sets", &self.keys.set_cols())
            .finish_non_exhaustive()
    }
}

/// Working memory of a request of `m` rows with `q` value columns: the
/// output and the `f64` row states.
fn request_bytes(m: usize, q: usize) -> u64 {
    let m = m.next_multiple_of(QUERY_GROUP) as u64;
    m.saturating_mul(12 * q as u64 + 16)
}

impl CpuResident {
    /// Transposes `keys` and every value matrix, after charging their size
    /// to `budget`.
    pub(crate) fn new(
        budget: &Arc<MemoryBudget>,
        keys: &Matrix<'_>,
        sets: &[Matrix<'_>],
    ) -> Result<Self> {
        // Panels whenever the dimension calls for them: a key set serves
        // many calls, so they are built once, here. kNN uses them from
        // d = KEY_SET_MIN_D, which covers the local means' range (from
        // panels::MIN_D); with the row-major copy kNN re-measures from.
        let d = keys.cols();
        const _: () = assert!(knn::KEY_SET_MIN_D <= panels::MIN_D);
        let pack = if (knn::KEY_SET_MIN_D..=panels::MAX_D).contains(&d) {
            Pack::PanelsAndRows
        } else {
            Pack::None
        };
        let bytes = KeyColumns::bytes(keys, sets, pack);
        let held = budget.reserve("prepare", "resident keys and values", bytes)?;
        // The transposes allocate what was charged: refuse rather than abort.
        ensure_room("prepare", "resident keys and values", bytes)?;
        Ok(CpuResident {
            keys: KeyColumns::new(keys, sets, pack),
            budget: Arc::clone(budget),
            held,
        })
    }
}

impl Resident for CpuResident {
    fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: usize,
    ) -> Result<RowNormalized> {
        let q = self.keys.soa(Some(set)).q;
        let _work =
            self.budget
                .reserve("local_mean", "request", request_bytes(queries.rows(), q))?;
        on_keys::local_mean(&self.keys, kernel, queries, set)
    }

    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: Option<usize>,
    ) -> Result<RowStates> {
        let q = self.keys.soa(set).q;
        let _work =
            self.budget
                .reserve("row_states", "request", request_bytes(queries.rows(), q))?;
        Ok(on_keys::row_states(&self.keys, kernel, queries, set, false))
    }

    fn local_moments(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        layout: MomentLayout,
        set: Option<usize>,
    ) -> Result<RowNormalized> {
        let keys = self.keys.soa(set);
        let _work = self.budget.reserve(
            "local_moments",
            "request",
            request_bytes(queries.rows(), layout.cols()),
        )?;
        moments::local_moments(kernel, queries, &keys, layout)
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize) -> Result<Neighbours> {
        let m = queries.rows();
        let _work =
            self.budget
                .reserve("knn", "request", (m as u64).saturating_mul(16 * k as u64))?;
        Ok(on_keys::knn(&self.keys, queries, k))
    }

    fn check_k(&self, _k: usize) -> Result<()> {
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}

//! Keys prepared on the CPU ([`PreparedKeys`]): keys and value matrices
//! transposed into the padded column layout the kernels stream
//! ([`KeyColumns`]), so a query pays for neither the transpose nor the
//! checks of the keys. A key set keeps them (charged, with each request's
//! working memory, to the backend's budget); a one-shot call builds them
//! for its one call, with the panels that call wants, and drops them. The
//! ops are the same code either way.
//!
//! Imports: `super::{cells, keys, knn, local_mean, kernel_matrix, moments, panels, threads}`,
//! `crate::backend`, `crate::error`, `crate::kernel`, `crate::matrix`,
//! `crate::memory`, `crate::space`, `crate::types`.

use std::sync::Arc;

use super::cells::{self, CellCache, CellIndex};
use super::keys::{KeyColumns, KeysSoa, Pack};
use super::local_mean::QUERY_GROUP;
use super::simd::Avx2Fma;
use super::threads::Threads;
use super::{kernel_matrix, knn, local_mean, moments, panels};
use crate::backend::{Call, CallKind, MatrixMode, Moments, PreparedKeys, Query};
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Metric;
use crate::matrix::{Matrix, alloc_output};
use crate::memory::{MemoryBudget, Reservation};
use crate::space;
use crate::types::{Neighbours, RowNormalized, RowStates};

/// Keys and value matrices in the kernels' layout, and, for a key set,
/// the memory they hold; a one-shot call's also borrow the caller's keys
/// (`'a`).
pub(crate) struct CpuKeys<'a> {
    keys: KeyColumns,
    /// The caller's keys, lent for a one-shot call's kNN (its panels keep
    /// no copy of them: [`Pack::PanelsInstead`]).
    lent: Option<&'a Matrix<'a>>,
    /// Where the ops run (the memory they wait for is reserved before,
    /// on the calling thread).
    threads: Threads,
    /// The reservation of the keys (a key set's, or one call's working
    /// copy), on the budget requests are charged to.
    held: Reservation,
    /// A key set's cell index for kernels of bounded reach (`cells.rs`);
    /// none for one call's keys.
    cells: Option<CellCache>,
}

impl std::fmt::Debug for CpuKeys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuKeys")
            .field("n", &self.keys.n())
            .field("d", &self.keys.d())
            .field("sets", &self.keys.set_cols())
            .field("bytes", &self.bytes())
            .finish_non_exhaustive()
    }
}

/// Working memory of a request of `m` rows with `q` value columns: the
/// output and the `f64` row states.
fn request_bytes(m: usize, q: usize) -> u64 {
    let m = m.next_multiple_of(QUERY_GROUP) as u64;
    m.saturating_mul(12 * q as u64 + 16)
}

impl CpuKeys<'static> {
    /// A key set: transposes `keys` and every value matrix, after charging
    /// their size to `budget`.
    pub(crate) fn kept(
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
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
        Ok(CpuKeys {
            keys: threads.install(|| KeyColumns::try_new("prepare", keys, sets, pack))?,
            lent: None,
            threads: threads.clone(),
            held,
            cells: Some(CellCache::default()),
        })
    }
}

impl<'a> CpuKeys<'a> {
    /// Keys for one `call`: transposed, with the panels that call uses
    /// (inner products for many queries in many dimensions; kNN's blocked
    /// path, which borrows `keys` row-major rather than copy them),
    /// charged to `budget` (with the call's working memory) until the
    /// call ends.
    pub(crate) fn for_call(
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
        keys: &'a Matrix<'a>,
        sets: &[Matrix<'_>],
        call: &Call<'_>,
    ) -> Result<Self> {
        let d = keys.cols();
        let pack = match (call.kind, call.kernel) {
            (CallKind::Knn { differences, .. }, _)
                if !differences && knn::blocked(d, call.rows, keys.rows()) =>
            {
                Pack::PanelsInstead
            }
            (CallKind::Means { .. } | CallKind::Matrix, Some(kernel)) => {
                Pack::panels_if(panels::wanted_for(kernel, d, call.rows))
            }
            _ => Pack::None,
        };
        let op = call.op;
        let held = budget.reserve_working(
            op,
            "working copy of the keys",
            KeyColumns::bytes(keys, sets, pack),
        )?;
        Ok(CpuKeys {
            keys: threads.install(|| KeyColumns::try_new(op, keys, sets, pack))?,
            lent: (pack == Pack::PanelsInstead).then_some(keys),
            threads: threads.clone(),
            held,
            cells: None,
        })
    }

    /// The borrowed layout the kernels take, with value matrix `set` (none:
    /// no value columns) and the keys row-major where they are at hand
    /// (the panels' copy of a key set, the keys a one-shot call lends).
    fn soa(&self, set: Option<usize>) -> KeysSoa<'_> {
        let soa = self.keys.soa(set);
        KeysSoa {
            rows: soa.rows.or(self.lent.map(Matrix::as_slice)),
            ..soa
        }
    }

    /// Charges a request of `bytes` working memory for as long as the guard
    /// lives.
    fn request(&self, op: &'static str, bytes: u64) -> Result<Reservation> {
        self.held.budget().reserve_working(op, "request", bytes)
    }

    /// The cell index that serves `q`, when the keys keep one and the
    /// kernel's reach is bounded (see `cells.rs`).
    fn cell_index(&self, q: &Query<'_>) -> Option<Arc<CellIndex>> {
        if u32::try_from(q.rows.rows()).is_err() {
            return None; // rows are numbered in `u32` there
        }
        let budget = self.held.budget();
        self.cells
            .as_ref()?
            .get(q.kernel, q.exclude_self, &self.keys, budget, &self.threads)
    }
}

/// [`request_bytes`] with what a request over a cell index adds.
fn indexed_request_bytes(m: usize, q: usize) -> u64 {
    let extra = (m as u64).saturating_mul(cells::BYTES_PER_QUERY);
    request_bytes(m, q).saturating_add(extra)
}

impl PreparedKeys for CpuKeys<'_> {
    fn local_mean(&self, q: &Query<'_>, set: usize) -> Result<RowNormalized> {
        let soa = self.soa(Some(set));
        let (queries, cols) = (q.rows, soa.q);
        let m = queries.rows();
        let cp = Checkpoint::current("local_mean");
        let rows = queries.as_slice();
        if let Some(ix) = self.cell_index(q) {
            if space::truncated(q.kernel) {
                // Rows beyond the truncated reach show in their states.
                return Ok(self.row_states(q, Some(set))?.means());
            }
            let _work = self.request("local_mean", indexed_request_bytes(m, cols))?;
            let mut out = alloc_output("local_mean", "output", m, cols)?;
            let empty = self
                .threads
                .install(|| ix.local_mean(q.kernel, rows, set, &mut out, &cp))?;
            return Ok(RowNormalized::from_parts(m, cols, out, empty));
        }
        let _work = self.request("local_mean", request_bytes(m, cols))?;
        let mut out = alloc_output("local_mean", "output", m, cols)?;
        let (d, exclude) = (self.keys.d(), q.exclude_self);
        let empty = self
            .threads
            .install(|| local_mean::local_mean(q.kernel, rows, d, &soa, exclude, &mut out, &cp))?;
        Ok(RowNormalized::from_parts(m, cols, out, empty))
    }

    fn row_states(&self, q: &Query<'_>, set: Option<usize>) -> Result<RowStates> {
        let soa = self.soa(set);
        let m = q.rows.rows();
        let (rows, d) = (q.rows.as_slice(), self.keys.d());
        let cp = Checkpoint::current("row_states");
        if let Some(ix) = self.cell_index(q) {
            let _work = self.request("row_states", indexed_request_bytes(m, soa.q))?;
            let mut states = self
                .threads
                .install(|| ix.row_states(q.kernel, rows, set, &cp))?;
            // A truncated (gaussian) request's rows whose nearest key lies
            // too far for the index's reach: over every key.
            let beyond = space::rows_beyond_reach(q.kernel, self.keys.n(), &states);
            if !beyond.is_empty() {
                let what = ("row_states", "rows beyond reach");
                let sub = space::gather_rows(what, rows, d, beyond.iter().copied())?;
                let groups = self
                    .threads
                    .install(|| local_mean::group_states(q.kernel, &sub, d, &soa, false, &cp))?;
                let full = local_mean::row_states_of(&groups, beyond.len(), soa.q)?;
                space::put_rows(&mut states, beyond, &full);
            }
            return Ok(states);
        }
        let _work = self.request("row_states", request_bytes(m, soa.q))?;
        let groups = self
            .threads
            .install(|| local_mean::group_states(q.kernel, rows, d, &soa, q.exclude_self, &cp))?;
        local_mean::row_states_of(&groups, m, soa.q)
    }

    fn local_moments(&self, q: &Query<'_>, pass: Moments) -> Result<RowNormalized> {
        q.kernel.require_euclidean("local_moments")?;
        let bytes = request_bytes(q.rows.rows(), pass.layout.cols());
        let _work = self.request("local_moments", bytes)?;
        let keys = self.soa(pass.set);
        self.threads
            .install(|| moments::local_moments(q.kernel, q.rows, &keys, pass.layout))
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize, metric: &Metric) -> Result<Neighbours> {
        let bytes = (queries.rows() as u64).saturating_mul(16 * k as u64);
        let _work = self.request("knn", bytes)?;
        let cp = Checkpoint::current("knn");
        let d = self.keys.d();
        // A call's keys without columns serve the blocked path only (the
        // call was planned for it: Euclidean, its query count); anything
        // else gets columns, charged as the request's.
        let (built, _columns);
        let blocked = metric.is_euclidean() && knn::blocked(d, queries.rows(), self.keys.n());
        let soa = match self.keys.has_columns() || blocked {
            true => self.soa(None),
            false => {
                let m = self.lent.expect("keys without columns are lent"); // ok: only PanelsInstead builds none
                _columns = self.request("knn", KeyColumns::bytes(m, &[], Pack::None))?;
                built = self
                    .threads
                    .install(|| KeyColumns::try_new("knn", m, &[], Pack::None))?;
                built.soa(None)
            }
        };
        let rows = queries.as_slice();
        let lists = self
            .threads
            .install(|| knn::knn(rows, d, &soa, (k, metric), &cp))?;
        knn::neighbours(&lists, k, metric)
    }

    fn kernel_matrix(&self, q: &Query<'_>, mode: MatrixMode) -> Result<RowNormalized> {
        q.kernel.require_euclidean("kernel_matrix")?;
        let (m, n) = (q.rows.rows(), self.keys.n());
        let mut out = alloc_output("kernel_matrix", "output", m, n)?;
        let (rows, d, keys) = (q.rows.as_slice(), self.keys.d(), self.soa(None));
        let isa = Avx2Fma::detect();
        let empty = self.threads.install(|| {
            kernel_matrix::kernel_matrix(isa, q.kernel, rows, d, &keys, mode, &mut out)
        })?;
        Ok(RowNormalized::from_parts(m, n, out, empty))
    }

    fn check_k(&self, _k: usize) -> Result<()> {
        Ok(())
    }

    fn bytes(&self) -> u64 {
        let cells = self.cells.as_ref().map_or(0, CellCache::bytes);
        self.held.bytes().saturating_add(cells)
    }
}

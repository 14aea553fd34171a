//! Key sets on the CPU: keys and value matrices kept transposed in the
//! padded column layout the kernels stream ([`KeysSoa`]), so a query pays
//! for neither the transpose nor the checks of the keys.

use std::sync::Arc;

use super::knn;
use super::local_mean::{self, KeysSoa, QUERY_GROUP};
use crate::backend::Resident;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output, ensure_room, padded_stride};
use crate::memory::{MemoryBudget, Reservation};
use crate::types::{Neighbours, RowNormalized, RowStates};

/// Keys (`d` columns of stride `ld`) and value matrices, transposed.
pub(crate) struct CpuResident {
    xt: Vec<f32>,
    /// Each value matrix transposed, and its column count.
    sets: Vec<(Vec<f32>, usize)>,
    n: usize,
    d: usize,
    ld: usize,
    budget: Arc<MemoryBudget>,
    held: Reservation,
}

impl std::fmt::Debug for CpuResident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuResident")
            .field("n", &self.n)
            .field("d", &self.d)
            .field("sets", &self.sets.iter().map(|s| s.1).collect::<Vec<_>>())
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
        let (n, d) = (keys.rows(), keys.cols());
        let ld = padded_stride(n);
        let cols: usize = d + sets.iter().map(Matrix::cols).sum::<usize>();
        let bytes = (ld as u64).saturating_mul(cols as u64).saturating_mul(4);
        let held = budget.reserve("prepare", "resident keys and values", bytes)?;
        // The transposes allocate what was charged: refuse rather than abort.
        ensure_room("prepare", "resident keys and values", bytes)?;
        Ok(CpuResident {
            xt: keys.transposed(),
            sets: sets.iter().map(|v| (v.transposed(), v.cols())).collect(),
            n,
            d,
            ld,
            budget: Arc::clone(budget),
            held,
        })
    }

    fn soa(&self, set: Option<usize>) -> KeysSoa<'_> {
        let (yt, q) = match set {
            Some(s) => (&self.sets[s].0[..], self.sets[s].1),
            None => (&[][..], 0),
        };
        KeysSoa {
            xt: &self.xt,
            yt,
            n: self.n,
            ld: self.ld,
            q,
        }
    }
}

impl Resident for CpuResident {
    fn local_mean(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: usize,
    ) -> Result<RowNormalized> {
        let soa = self.soa(Some(set));
        let (m, q) = (queries.rows(), soa.q);
        let _work = self
            .budget
            .reserve("local_mean", "request", request_bytes(m, q))?;
        let mut out = alloc_output("local_mean", "output", m, q)?;
        let empty =
            local_mean::local_mean(kernel, queries.as_slice(), self.d, &soa, false, &mut out);
        Ok(RowNormalized::from_parts(m, q, out, empty))
    }

    fn row_states(
        &self,
        kernel: &Kernel,
        queries: &Matrix<'_>,
        set: Option<usize>,
    ) -> Result<RowStates> {
        let soa = self.soa(set);
        let (m, q) = (queries.rows(), soa.q);
        let _work = self
            .budget
            .reserve("row_states", "request", request_bytes(m, q))?;
        let groups = local_mean::group_states(kernel, queries.as_slice(), self.d, &soa, false);
        Ok(local_mean::row_states_of(&groups, m, q))
    }

    fn knn(&self, queries: &Matrix<'_>, k: usize) -> Result<Neighbours> {
        let m = queries.rows();
        let _work =
            self.budget
                .reserve("knn", "request", (m as u64).saturating_mul(16 * k as u64))?;
        let lists = knn::knn(queries.as_slice(), self.d, &self.soa(None), k);
        Ok(knn::neighbours(&lists, k))
    }

    fn check_k(&self, _k: usize) -> Result<()> {
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}

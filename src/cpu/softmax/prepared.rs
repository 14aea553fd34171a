//! A prepared attention set on the CPU: every batch's keys and values
//! packed once (the layout `attention.rs` streams), so a call pays only for
//! its queries; the packed bytes are charged to the backend's budget.
//!
//! Imports: `super` (packing, attention), `super::super::simd`,
//! `crate::backend`, `crate::error`, `crate::memory`, `crate::types`.

use std::sync::Arc;

use rayon::prelude::*;

use super::super::simd::Avx2Fma;
use super::attention::attend_packed;
use super::{BK, NR, Packed, pack};
use crate::backend::PreparedAttention;
use crate::error::Result;
use crate::memory::{MemoryBudget, Reservation};
use crate::types::{Attention, Heads};

/// Packed keys and values of every batch.
pub(crate) struct CpuAttention {
    packed: Vec<Packed>,
    n: usize,
    q: usize,
    held: Reservation,
}

impl std::fmt::Debug for CpuAttention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuAttention")
            .field("batches", &self.packed.len())
            .field("n", &self.n)
            .field("q", &self.q)
            .finish_non_exhaustive()
    }
}

impl CpuAttention {
    /// Packs every batch of `psi` with its `values`, after charging the
    /// packed size (keys padded to whole tiles of `BK`, values to the
    /// packed column count) to `budget`.
    pub(crate) fn new(
        budget: &Arc<MemoryBudget>,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Self> {
        let (nb, n, d, q) = (psi.batch, psi.rows, psi.cols(), values.cols());
        let per_batch = (n.next_multiple_of(BK) * d + n * q.next_multiple_of(NR)) as u64 * 4;
        let bytes = per_batch.saturating_mul(nb as u64);
        let held = budget.reserve("prepare_attention", "attention keys and values", bytes)?;
        let packed = (0..nb)
            .into_par_iter()
            .map(|b| pack(psi.batch_slice(b), n, d, Some((values.batch_slice(b), q))))
            .collect();
        Ok(CpuAttention { packed, n, q, held })
    }
}

impl PreparedAttention for CpuAttention {
    fn attend(&self, phi: &Heads<'_>, attn: &Attention) -> Result<Vec<f32>> {
        let stored = |b: usize| &self.packed[b];
        attend_packed(phi, (self.n, self.q), attn, Avx2Fma::detect(), &stored)
    }

    fn bytes(&self) -> u64 {
        self.held.bytes()
    }
}

//! Attention keys and values prepared on the CPU: for a set kept across
//! calls, every batch's keys and values packed once (the layout
//! `attention.rs` streams), so a call pays only for its queries, and the
//! packed bytes charged to the backend's budget; for one call
//! (`kernel_softmax`), the inputs borrowed and each batch packed as its
//! group runs, into the buffers of the group before it ([`Spare`]), so
//! only one group's packing is in memory at a time and only the first
//! group's is fresh memory.
//!
//! Imports: `super` (packing, attention), `super::super::{simd, threads}`,
//! `crate::backend`, `crate::error`, `crate::memory`, `crate::types`.

use std::borrow::Borrow;
use std::sync::{Arc, Mutex, PoisonError};

use rayon::prelude::*;

use super::super::simd::TileIsa;
use super::super::threads::Threads;
use super::attention::attend_packed;
use super::{BK, NR, Packed, pack};
use crate::backend::PreparedAttention;
use crate::error::Result;
use crate::memory::{MemoryBudget, Reservation};
use crate::types::{Attention, Heads};

/// Keys and values of every batch: packed and charged (a set), or
/// borrowed and packed per call.
pub(crate) struct CpuAttention<'a> {
    stored: Stored<'a>,
    n: usize,
    q: usize,
    /// Where the calls run.
    threads: Threads,
}

enum Stored<'a> {
    /// Every batch packed once, and the reservation of their bytes.
    Packed(Vec<Packed>, Reservation),
    /// The inputs of one call.
    Borrowed(Heads<'a>, Heads<'a>),
}

impl std::fmt::Debug for CpuAttention<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuAttention")
            .field("kept", &matches!(self.stored, Stored::Packed(..)))
            .field("n", &self.n)
            .field("q", &self.q)
            .finish_non_exhaustive()
    }
}

impl<'a> CpuAttention<'a> {
    /// The keys and values of one call, borrowed: each batch is packed
    /// when its group runs.
    pub(crate) fn for_call(threads: &Threads, psi: &Heads<'a>, values: &Heads<'a>) -> Self {
        CpuAttention {
            n: psi.rows,
            q: values.cols(),
            stored: Stored::Borrowed(psi.clone(), values.clone()),
            threads: threads.clone(),
        }
    }
}

impl CpuAttention<'static> {
    /// A kept set: packs every batch of `psi` with its `values`, after charging the
    /// packed size (keys padded to whole tiles of `BK`, values to the
    /// packed column count) to `budget`.
    pub(crate) fn kept(
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
        psi: &Heads<'_>,
        values: &Heads<'_>,
    ) -> Result<Self> {
        let (nb, n, d, q) = (psi.batch, psi.rows, psi.cols(), values.cols());
        let per_batch = (n.next_multiple_of(BK) * d + n * q.next_multiple_of(NR)) as u64 * 4;
        let bytes = per_batch.saturating_mul(nb as u64);
        let held = budget.reserve("prepare_attention", "attention keys and values", bytes)?;
        let packed = threads.install(|| {
            (0..nb)
                .into_par_iter()
                .map(|b| {
                    let v = Some((values.batch_slice(b), q));
                    pack("prepare_attention", psi.batch_slice(b), n, d, v)
                })
                .collect::<Result<_>>()
        })?;
        Ok(CpuAttention {
            stored: Stored::Packed(packed, held),
            n,
            q,
            threads: threads.clone(),
        })
    }
}

impl CpuAttention<'_> {
    /// [`PreparedAttention::attend`] on the build `isa` (the best the CPU
    /// has, or a lower one that tests force).
    pub(crate) fn attend_on(
        &self,
        phi: &Heads<'_>,
        attn: &Attention,
        isa: TileIsa,
    ) -> Result<Vec<f32>> {
        let (n, q) = (self.n, self.q);
        match &self.stored {
            Stored::Packed(packed, _) => {
                attend_packed(phi, (n, q), attn, isa, (&|b| Ok(&packed[b]), true))
            }
            Stored::Borrowed(psi, values) => {
                let d = psi.cols();
                let spare = Mutex::new(Vec::<Packed>::new());
                let pack_batch = |b: usize| {
                    let (k, v) = (psi.batch_slice(b), Some((values.batch_slice(b), q)));
                    let reused = spare.lock().unwrap_or_else(PoisonError::into_inner).pop();
                    let packed = match reused {
                        Some(mut p) => {
                            p.fill(k, d, v);
                            p
                        }
                        None => pack("kernel_softmax", k, n, d, v)?,
                    };
                    Ok(Spare {
                        packed,
                        spare: &spare,
                    })
                };
                attend_packed(phi, (n, q), attn, isa, (&pack_batch, false))
            }
        }
    }
}

/// One batch's packing for one call, given back to the call's spares when
/// its group is done (the next group packs into it: fresh memory costs
/// page faults and clearing, the same again per group).
struct Spare<'s> {
    packed: Packed,
    spare: &'s Mutex<Vec<Packed>>,
}

impl Borrow<Packed> for Spare<'_> {
    fn borrow(&self) -> &Packed {
        &self.packed
    }
}

impl Drop for Spare<'_> {
    fn drop(&mut self) {
        let p = std::mem::take(&mut self.packed);
        self.spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(p);
    }
}

impl PreparedAttention for CpuAttention<'_> {
    fn attend(&self, phi: &Heads<'_>, attn: &Attention) -> Result<Vec<f32>> {
        self.threads
            .install(|| self.attend_on(phi, attn, TileIsa::best()))
    }

    fn bytes(&self) -> u64 {
        match &self.stored {
            Stored::Packed(_, held) => held.bytes(),
            Stored::Borrowed(..) => 0,
        }
    }
}

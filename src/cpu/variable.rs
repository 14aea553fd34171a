//! Row states with variable bandwidths (docs/numerics.md, "Variable
//! bandwidths"): per-query scales `σ_i`, per-key scales `τ_j` and per-key
//! log-weights `c_j`, every profile in the log domain. The CPU twin of
//! `shaders/variable_bandwidth.wgsl`.
//!
//! Per query row and block of [`BLOCK`] keys: `t = Σ_k ((x_k − q_k)·σ_i·τ_j)²`
//! by differences (scaled before squared, so `t` overflows `f32` only
//! beyond `T_FAR`), the log-weights `ln k(t) + c_j` in `f32`, the block's
//! largest, the block's sums `Σ e^{lw − max}` (and `·y`) in `f32`, merged
//! into the row's `f64` state with the rule of "Row states and their
//! merge". A full-support row left without weight (every key beyond
//! `T_FAR`) is recomputed in `f64` ([`VariablePass::exact_row`]).

use std::sync::Arc;

use ndarray::{Array1, Array2};
use rayon::prelude::*;

use crate::backend::PreparedVariable;
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::kernel::Profile;
use crate::kernel::form::log_weight_f32;
use crate::matrix::{Matrix, try_vec};
use crate::memory::{MemoryBudget, Reservation};
use crate::types::{RowStates, VariableKeys, VariablePass};

use super::Threads;

/// Keys per block: the `f32` level of the two-level summation.
const BLOCK: usize = 256;
/// Query rows per task.
const ROWS: usize = 16;

/// The row states of `pass` on `threads`.
fn variable_states(pass: &VariablePass<'_>, threads: &Threads) -> Result<RowStates> {
    let (m, q) = (pass.queries.rows(), pass.cols());
    let check = Checkpoint::current(pass.op);
    // Fail before the work when the output cannot be allocated.
    let mut mw = try_vec(pass.op, "row states", m as u64, 0.0f32)?;
    let mut sum = try_vec(pass.op, "row states", m as u64, 0.0f64)?;
    let mut u = try_vec(
        pass.op,
        "row states",
        (m as u64).saturating_mul(q as u64),
        0.0f64,
    )?;
    threads.install(|| {
        let uq = (ROWS * q).max(1);
        let mut dummy = vec![0.0f64; m.div_ceil(ROWS)];
        let u_chunks: Vec<&mut [f64]> = if q == 0 {
            dummy.chunks_mut(1).collect()
        } else {
            u.chunks_mut(uq).collect()
        };
        mw.par_chunks_mut(ROWS)
            .zip(sum.par_chunks_mut(ROWS))
            .zip(u_chunks.into_par_iter())
            .enumerate()
            .for_each(|(c, ((mc, sc), uc))| {
                if check.is_cancelled() {
                    return;
                }
                let mut lw = [0.0f32; BLOCK];
                for (r, (mi, si)) in mc.iter_mut().zip(sc.iter_mut()).enumerate() {
                    let i = c * ROWS + r;
                    let ui: &mut [f64] = if q == 0 {
                        &mut []
                    } else {
                        &mut uc[r * q..(r + 1) * q]
                    };
                    let (mm, ss) = row(pass, i, ui, &mut lw);
                    let (mm, ss) = if pass.needs_exact(mm, ss) {
                        pass.exact_row(i, ui)
                    } else {
                        (mm, ss)
                    };
                    *mi = mm;
                    *si = ss;
                }
            });
    });
    check.check()?;
    let mut st = RowStates {
        max_log_weight: Array1::from(mw),
        sum: Array1::from(sum),
        weighted: Array2::from_shape_vec((m, q), u).expect("m·q entries"), // ok: allocated so
    };
    st.normalize_empty();
    Ok(st)
}

/// Row `i`'s state `(m, s)` from the `f32` blocks, `u` its weighted
/// values (zeroed here); `s = 0` when no key has weight.
fn row(pass: &VariablePass<'_>, i: usize, u: &mut [f64], lw: &mut [f32; BLOCK]) -> (f32, f64) {
    u.fill(0.0);
    let qrow = pass.queries.row_range(i, i + 1);
    let sigma = pass.scales.row(i);
    let n = pass.keys.rows();
    let q = u.len();
    let mut m = f64::NEG_INFINITY;
    let mut s = 0.0f64;
    let mut ub = vec![0.0f32; q];
    for j0 in (0..n).step_by(BLOCK) {
        let j1 = (j0 + BLOCK).min(n);
        let mut bmax = f32::NEG_INFINITY;
        for (j, l) in (j0..j1).zip(lw.iter_mut()) {
            let sc = sigma * pass.scales.key(j);
            let x = pass.keys.row_range(j, j + 1);
            let mut t = 0.0f32;
            for (&a, &b) in x.iter().zip(qrow) {
                let d = (a - b) * sc;
                t += d * d;
            }
            let v = log_weight_f32(pass.profile, t) + pass.scales.log_weight(j);
            *l = v;
            bmax = bmax.max(v);
        }
        if bmax == f32::NEG_INFINITY {
            continue;
        }
        let mut sb = 0.0f32;
        ub.fill(0.0);
        for (j, &l) in (j0..j1).zip(lw.iter()) {
            let w = (l - bmax).exp();
            if w == 0.0 {
                continue;
            }
            sb += w;
            if let Some(v) = pass.values {
                for (o, &y) in ub.iter_mut().zip(v.row_range(j, j + 1)) {
                    *o += w * y;
                }
            }
        }
        // Merge the block (bmax, sb, ub) into the row's state.
        let b = f64::from(bmax);
        let m2 = m.max(b);
        let (fa, fb) = ((m - m2).exp(), (b - m2).exp());
        s = s * fa + f64::from(sb) * fb;
        for (o, &v) in u.iter_mut().zip(&ub) {
            *o = *o * fa + f64::from(v) * fb;
        }
        m = m2;
    }
    if s > 0.0 {
        (m as f32, s)
    } else {
        (f32::NEG_INFINITY, 0.0)
    }
}

/// The key side of variable-bandwidth passes on the CPU: the rows
/// themselves (borrowed for a call, copied for a key set and charged to
/// the engine's budget).
#[derive(Debug)]
pub(crate) struct CpuVariable<'a> {
    keys: VariableKeys<'a>,
    threads: Threads,
    held: Option<Reservation>,
}

impl CpuVariable<'static> {
    /// A key set's: a copy of `keys`, charged to `budget`.
    pub(crate) fn kept(
        budget: &Arc<MemoryBudget>,
        threads: &Threads,
        keys: VariableKeys<'_>,
    ) -> Result<Self> {
        let held = budget.reserve("prepare", "resident keys and values", keys.bytes())?;
        Ok(CpuVariable {
            keys: keys.into_owned("prepare")?,
            threads: threads.clone(),
            held: Some(held),
        })
    }
}

impl<'a> CpuVariable<'a> {
    /// A call's: the rows borrowed.
    pub(crate) fn for_call(threads: &Threads, keys: VariableKeys<'a>) -> Self {
        CpuVariable {
            keys,
            threads: threads.clone(),
            held: None,
        }
    }
}

impl PreparedVariable for CpuVariable<'_> {
    fn states(
        &self,
        op: &'static str,
        profile: Profile,
        queries: (&Matrix<'_>, Option<&[f32]>),
        with_values: bool,
    ) -> Result<RowStates> {
        variable_states(
            &self.keys.pass(op, profile, queries, with_values),
            &self.threads,
        )
    }

    fn bytes(&self) -> u64 {
        self.held.as_ref().map_or(0, Reservation::bytes)
    }
}

//! The linear feature local mean `Φ(ΨᵀV) ⊘ Φ(Ψᵀ1)` on the CPU, in `O(N)`:
//! chunk sums of `ψ_j v_jᵀ` in `f64`, and for causal rows their prefix.
//!
//! Imports: `super::super::simd`, `crate::error`, `crate::matrix`,
//! `crate::types`.

use rayon::prelude::*;

use super::super::simd::Avx2Fma;
use crate::cancel::Checkpoint;
use crate::error::Result;
use crate::matrix::alloc_output;
use crate::types::Heads;

/// Sums over a range of keys: `s = Σ ψ_j v_jᵀ` (`d × q`) and `z = Σ ψ_j`.
#[derive(Clone)]
struct FeatureSums {
    s: Vec<f64>,
    z: Vec<f64>,
    q: usize,
}

impl FeatureSums {
    fn zero(d: usize, q: usize) -> Self {
        FeatureSums {
            s: vec![0.0; d * q],
            z: vec![0.0; d],
            q,
        }
    }

    #[inline(always)]
    fn add_key(&mut self, psi: &[f32], v: &[f64]) {
        for (k, &w) in psi.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let w = f64::from(w);
            self.z[k] += w;
            for (s, &x) in self.s[k * self.q..(k + 1) * self.q].iter_mut().zip(v) {
                *s += w * x;
            }
        }
    }

    fn add(&mut self, other: &FeatureSums) {
        for (a, b) in self.s.iter_mut().zip(&other.s) {
            *a += b;
        }
        for (a, b) in self.z.iter_mut().zip(&other.z) {
            *a += b;
        }
    }

    /// `φᵀs / φᵀz` into `out` (NaN when `φᵀz = 0`); returns 1 for an empty row.
    #[inline(always)]
    fn apply(&self, phi: &[f32], num: &mut [f64], out: &mut [f32]) -> usize {
        num.fill(0.0);
        let mut den = 0.0f64;
        for (k, &w) in phi.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let w = f64::from(w);
            den += w * self.z[k];
            for (a, &s) in num.iter_mut().zip(&self.s[k * self.q..(k + 1) * self.q]) {
                *a += w * s;
            }
        }
        if den > 0.0 {
            let inv = 1.0 / den;
            for (o, &a) in out.iter_mut().zip(num.iter()) {
                *o = (a * inv) as f32;
            }
            0
        } else {
            out.fill(f32::NAN);
            1
        }
    }
}

/// Linear feature local means of every batch, row-major `(B·M) × q`, and
/// the count of empty rows.
pub(crate) fn feature_local_mean(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    causal: bool,
) -> Result<(Vec<f32>, usize)> {
    feature_local_mean_on(phi, psi, values, causal, Avx2Fma::detect())
}

/// [`feature_local_mean`] on the AVX2 + FMA build when `isa` holds the
/// token, else on the portable one (`None` forces it).
pub(crate) fn feature_local_mean_on(
    phi: &Heads<'_>,
    psi: &Heads<'_>,
    values: &Heads<'_>,
    causal: bool,
    isa: Option<Avx2Fma>,
) -> Result<(Vec<f32>, usize)> {
    let (nb, m, q) = (phi.batch, phi.rows, values.cols());
    let mut out = alloc_output("feature_local_mean", "output", nb * m, q)?;
    // Read on the calling thread, before the batches fan out.
    let cp = Checkpoint::current("feature_local_mean");
    let empty = out
        .par_chunks_mut(m * q)
        .enumerate()
        .map(|(b, ob)| {
            if cp.is_cancelled() {
                return 0;
            }
            let args = FeatureBatch {
                phi: phi.batch_slice(b),
                psi: psi.batch_slice(b),
                v: values.batch_slice(b),
                m,
                n: psi.rows,
                d: phi.cols(),
                q,
                causal,
                isa,
            };
            args.run(ob)
        })
        .sum();
    cp.check()?;
    Ok((out, empty))
}

/// One batch of the feature local mean.
#[derive(Clone, Copy)]
struct FeatureBatch<'a> {
    phi: &'a [f32],
    psi: &'a [f32],
    v: &'a [f32],
    m: usize,
    n: usize,
    d: usize,
    q: usize,
    causal: bool,
    /// The AVX2 + FMA token, when that build is to run.
    isa: Option<Avx2Fma>,
}

impl FeatureBatch<'_> {
    /// Keys `k0..k1` added to `st`; with `emit`, after each key `t` the row
    /// of the query whose limit is `t` is written into `out` (which starts
    /// at query row `row0`). Returns the number of empty rows written.
    fn scan(
        &self,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.isa {
            // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
            // detection found AVX2 and FMA.
            return unsafe { self.scan_avx2(isa, st, k0, k1, emit) };
        }
        self.scan_impl(st, k0, k1, emit)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn scan_avx2(
        &self,
        _isa: Avx2Fma,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        self.scan_impl(st, k0, k1, emit)
    }

    #[inline(always)]
    fn scan_impl(
        &self,
        st: &mut FeatureSums,
        k0: usize,
        k1: usize,
        mut emit: Option<(usize, &mut [f32])>,
    ) -> usize {
        let (d, q) = (self.d, self.q);
        let off = self.n - self.m.min(self.n);
        let mut v = vec![0.0f64; q];
        let mut num = vec![0.0f64; q];
        let mut empty = 0;
        for t in k0..k1 {
            for (a, &x) in v.iter_mut().zip(&self.v[t * q..(t + 1) * q]) {
                *a = f64::from(x);
            }
            st.add_key(&self.psi[t * d..(t + 1) * d], &v);
            if let Some((row0, out)) = emit.as_mut()
                && t >= off
            {
                let i = t - off;
                let o = &mut out[(i - *row0) * q..(i - *row0 + 1) * q];
                empty += st.apply(&self.phi[i * d..(i + 1) * d], &mut num, o);
            }
        }
        empty
    }

    fn apply_rows(&self, st: &FeatureSums, out: &mut [f32]) -> usize {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.isa {
            // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
            // detection found AVX2 and FMA.
            return unsafe { self.apply_rows_avx2(isa, st, out) };
        }
        self.apply_rows_impl(st, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn apply_rows_avx2(&self, _isa: Avx2Fma, st: &FeatureSums, out: &mut [f32]) -> usize {
        self.apply_rows_impl(st, out)
    }

    #[inline(always)]
    fn apply_rows_impl(&self, st: &FeatureSums, out: &mut [f32]) -> usize {
        let mut num = vec![0.0f64; self.q];
        out.chunks_exact_mut(self.q)
            .zip(self.phi.chunks_exact(self.d))
            .map(|(o, f)| st.apply(f, &mut num, o))
            .sum()
    }

    /// Runs the batch into `out` (`M × q`); returns the empty rows.
    fn run(&self, out: &mut [f32]) -> usize {
        let (n, d, q) = (self.n, self.d, self.q);
        // At most 64 chunks per batch: few prefix states, enough tasks; and
        // fewer when the states are large (each chunk holds a sum and,
        // causal, a prefix of d·(q+1) f64), so a batch's states stay within
        // about 32 MiB.
        let state_bytes = d.saturating_mul(q + 1).saturating_mul(16).max(1);
        let max_chunks = ((32usize << 20) / state_bytes).clamp(1, 64);
        let chunk = 256usize.max(n.div_ceil(max_chunks));
        let ranges: Vec<(usize, usize)> = (0..n.div_ceil(chunk))
            .map(|c| (c * chunk, ((c + 1) * chunk).min(n)))
            .collect();
        let sums: Vec<FeatureSums> = ranges
            .par_iter()
            .map(|&(k0, k1)| {
                let mut st = FeatureSums::zero(d, q);
                self.scan(&mut st, k0, k1, None);
                st
            })
            .collect();
        if !self.causal {
            let mut total = FeatureSums::zero(d, q);
            for s in &sums {
                total.add(s);
            }
            return out
                .par_chunks_mut(64 * q)
                .enumerate()
                .map(|(blk, o)| {
                    let rows = FeatureBatch {
                        phi: &self.phi[blk * 64 * d..],
                        ..*self
                    };
                    rows.apply_rows(&total, o)
                })
                .sum();
        }
        // Causal: exclusive prefix of the chunk sums, then each chunk scans
        // its keys from its prefix and writes the queries whose limit
        // (i + N − M) falls in it.
        let off = n - self.m;
        let mut prefix = Vec::with_capacity(sums.len());
        let mut run = FeatureSums::zero(d, q);
        for s in &sums {
            prefix.push(run.clone());
            run.add(s);
        }
        let mut pieces = Vec::with_capacity(ranges.len());
        let mut rest = out;
        for (c, &(k0, k1)) in ranges.iter().enumerate() {
            let r0 = k0.max(off) - off;
            let r1 = k1.max(off) - off;
            let (mine, tail) = rest.split_at_mut((r1 - r0) * q);
            rest = tail;
            pieces.push((c, r0, mine));
        }
        pieces
            .into_par_iter()
            .zip(prefix)
            .map(|((c, r0, o), mut st)| {
                let (k0, k1) = ranges[c];
                self.scan(&mut st, k0, k1, Some((r0, o)))
            })
            .sum()
    }
}

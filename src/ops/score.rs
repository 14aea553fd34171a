//! Score estimates `∇ log f̂` of the kernel density (paper §9.2) and the
//! Tweedie denoising step built on them.

use std::ops::Range;

use ndarray::{Array1, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{Kernel, Profile};
use crate::matrix::{Matrix, alloc_output};
use crate::types::{MomentLayout, RowNormalized};

use super::call;

/// The shadow of a profile: `−k′(t) = κ·g(t)` with `g` a profile (as a
/// function of `t = r²`), so that `∇ log f̂(q) = (2κ/h²)·(Σ g / Σ k)·
/// (m_g(q) − q)`, `m_g` the local mean under `g`.
fn shadow(p: Profile) -> Result<(Profile, f64)> {
    match p {
        // −d/dt e^{−t/2} = ½ e^{−t/2}.
        Profile::Gaussian => Ok((Profile::Gaussian, 0.5)),
        // −d/dt (1 − t)₊ = 1[t < 1].
        Profile::Epanechnikov => Ok((Profile::Uniform, 1.0)),
        // −d/dt (1 − t)₊² = 2(1 − t)₊.
        Profile::Biweight => Ok((Profile::Epanechnikov, 2.0)),
        other => Err(Error::InvalidParameter {
            name: "kernel",
            reason: format!(
                "the score of a {} density estimate is not a local mean: it needs a profile \
                 whose derivative is again a profile (gaussian, epanechnikov, biweight); {}",
                other.name(),
                match other {
                    Profile::Uniform => "a uniform estimate is flat between jumps",
                    Profile::Triangular | Profile::Laplacian =>
                        "this one has no derivative at r = 0",
                    Profile::Cosine =>
                        "cosine's derivative sin(πr/2)/r (in t = r²) is not one of the profiles",
                    _ => "cauchy's derivative 1/(1 + r²)² is not one of the profiles",
                }
            ),
        }),
    }
}

/// Per block of the kernel (one over every coordinate for a radial kernel):
/// its coordinates, its shadow kernel (the kernel with the block's profile
/// replaced by its shadow: `∂/∂q_b` of a product differentiates that block
/// only) and κ.
fn shadow_parts(kernel: &Kernel, d: usize) -> Result<Vec<(Range<usize>, Kernel, f64)>> {
    let Some(bs) = kernel.blocks() else {
        let (g, kappa) = shadow(kernel.profile())?;
        return Ok(vec![(0..d, Kernel::new(g, kernel.bandwidth())?, kappa)]);
    };
    let spec: Vec<(usize, Profile, f32)> = bs
        .iter()
        .map(|b| (b.dims, b.profile, b.bandwidth))
        .collect();
    let mut start = 0;
    let mut parts = Vec::with_capacity(bs.len());
    for (i, b) in bs.iter().enumerate() {
        let (g, kappa) = shadow(b.profile)?;
        let mut s = spec.clone();
        s[i].1 = g;
        parts.push((start..start + b.dims, Kernel::product(s)?, kappa));
        start += b.dims;
    }
    Ok(parts)
}

impl Engine {
    /// The score `∇ log f̂(q)` of the kernel density estimate of `keys`
    /// (`N × d`) at each query (`M × d`), through local means (paper §9.2):
    /// `(m(q) − q)/h²` for the gaussian kernel, and for a profile `k` with
    /// `−k′ = κ·g` (epanechnikov: `g` uniform, κ = 1; biweight: `g`
    /// epanechnikov, κ = 2) `(2κ/h²)·(Σ g/Σ k)·(m_g(q) − q)`. The offsets
    /// `m − q` are formed per key, not as a difference of two large means.
    /// For a product kernel each block takes its own shadow (the other
    /// blocks unchanged) and its own bandwidth; gaussian blocks share one
    /// pass.
    ///
    /// Rows where the estimate is zero are NaN and counted; an entry beyond
    /// the `f32` range (a tiny bandwidth far from the keys) is `±inf`.
    ///
    /// # Errors
    /// The input errors of [`local_mean`](Self::local_mean), and
    /// [`Error::InvalidParameter`] for the profiles with no such form
    /// (uniform, triangular, laplacian, cauchy, cosine) or coordinates above
    /// [`MAX_LOCAL_MAGNITUDE`](crate::MAX_LOCAL_MAGNITUDE).
    pub fn score(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        self.score_as(kernel, queries, keys, None)
    }

    /// One Tweedie denoising step (paper §9.2): `q + σ²·∇ log f̂(q)`, the
    /// posterior mean of a clean point under gaussian noise of standard
    /// deviation `noise_std`, with the density of the noisy `keys`
    /// estimated by `kernel` ([`score`](Self::score)); formed in `f64`
    /// from the same local moments. With the gaussian kernel and `σ = h`
    /// it is the local mean `m(q)`.
    ///
    /// # Errors
    /// Those of [`score`](Self::score), and a `noise_std` that is not
    /// positive and finite.
    pub fn denoise(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        noise_std: f32,
    ) -> Result<RowNormalized> {
        if !(noise_std.is_finite() && noise_std > 0.0) {
            return Err(Error::InvalidParameter {
                name: "noise_std",
                reason: format!("must be positive and finite, got {noise_std}"),
            });
        }
        self.score_as(kernel, queries, keys, Some(f64::from(noise_std)))
    }

    /// The score, or with `sigma` the denoised points `q + σ²·score`.
    fn score_as(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        sigma: Option<f64>,
    ) -> Result<RowNormalized> {
        let op = if sigma.is_some() { "denoise" } else { "score" };
        let super::Inputs { q, x, .. } =
            super::Inputs::check(op, Some(kernel), queries, keys, None)?;
        let parts = shadow_parts(kernel, x.cols())?;
        super::local_fit::check_local(&q, &x, None)?;
        let (m, d) = (q.rows(), q.cols());
        let h = kernel.coordinate_bandwidths(d);
        let backend = self.backend_impl();
        let layout = MomentLayout {
            d,
            qy: 0,
            second: false,
        };
        let mut out = alloc_output(op, "scores", m, d)?;
        let mut empty_row = vec![false; m];
        // ln Σ k per row, once, where some block's shadow is not k itself.
        let ln_sum_k: Option<Array1<f64>> = if parts.iter().any(|p| p.1 != *kernel) {
            Some(call::row_states(backend, kernel, &q, (&x, None), false)?.log_sum())
        } else {
            None
        };
        // One pass per distinct shadow kernel: its blocks' coordinates.
        let mut done = vec![false; parts.len()];
        for (i, (_, gk, _)) in parts.iter().enumerate() {
            if done[i] {
                continue;
            }
            let mine: Vec<usize> = (i..parts.len()).filter(|&j| parts[j].1 == *gk).collect();
            mine.iter().for_each(|&j| done[j] = true);
            // Σ g / Σ k per row (1 when g is k itself).
            let ratio: Option<Vec<f64>> = match &ln_sum_k {
                Some(lk) if gk != kernel => {
                    let sg = call::row_states(backend, gk, &q, (&x, None), false)?;
                    Some(
                        sg.log_sum()
                            .iter()
                            .zip(lk.iter())
                            .map(|(lg, lk)| (lg - lk).exp())
                            .collect(),
                    )
                }
                _ => None,
            };
            let pass = |qm: &Matrix<'_>, l: MomentLayout| {
                call::local_moments(backend, gk, qm, (&x, None), l)
            };
            // E[(x − q)/h] under g: the offsets about the query itself.
            let centres = super::local_fit::Centres::AtQuery;
            super::local_fit::moment_chunks(op, &q, (&h, layout), centres, &pass, |r0, mom, _| {
                for (i, mo) in mom.chunks_exact(d).enumerate() {
                    let r = r0 + i;
                    let ratio = ratio.as_ref().map_or(1.0, |v| v[r]);
                    if mo[0].is_nan() || !ratio.is_finite() {
                        empty_row[r] = true;
                        continue;
                    }
                    let qr = q.row_range(r, r + 1);
                    let row = &mut out[r * d..(r + 1) * d];
                    for &j in &mine {
                        let (range, _, kappa) = &parts[j];
                        for a in range.clone() {
                            // (2κ/h²)·(Σg/Σk)·E[x − q] = (2κ/h)·(Σg/Σk)·E[(x − q)/h].
                            let score = 2.0 * kappa / h[a] * ratio * mo[a];
                            row[a] = match sigma {
                                None => score as f32,
                                Some(s) => (f64::from(qr[a]) + s * s * score) as f32,
                            };
                        }
                    }
                }
                Ok(())
            })?;
        }
        let mut empty = 0;
        for (r, &e) in empty_row.iter().enumerate() {
            if e {
                out[r * d..(r + 1) * d].fill(f32::NAN);
                empty += 1;
            }
        }
        Ok(RowNormalized::from_parts(m, d, out, empty))
    }
}

//! Local linear regression and local PCA (paper §6): both read the local
//! moments of one fused pass over the keys (docs/numerics.md, "Local
//! moments"), then solve a small symmetric problem per query in `f64`.

use ndarray::{Array2, Array3, ArrayView2};
use rayon::prelude::*;

use super::linalg::sym_eigen;
use super::{Inputs, call};
use crate::cpu::Threads;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::matrix::{Matrix, alloc_output, reserve};
use crate::types::{MomentLayout, RowNormalized};

/// Largest dimension of the local models: their second moments grow as
/// `d²/2` columns per query.
pub const MAX_LOCAL_DIM: usize = 64;
/// Largest coordinate or value magnitude the local models accept: their
/// products and sums must stay finite `f32` over any key tile.
pub const MAX_LOCAL_MAGNITUDE: f32 = 1e12;
/// A local design direction whose variance is at most this fraction of
/// the keys' second moment about the moments' centre (their local mean,
/// `E‖x − c‖²`) counts as absent (rank-deficient): below it the `f32`
/// moments cannot resolve it.
pub const RANK_TOLERANCE: f64 = 1e-5;
/// Moments held per query chunk (bytes): bounds the memory of a call.
const CHUNK_BYTES: usize = 64 << 20;

/// Result of [`Engine::local_polynomial`].
#[derive(Debug, Clone, PartialEq)]
pub struct LocalFit {
    /// The fitted values `ŷ(q_i)` (`M × q`; NaN rows for an empty
    /// neighbourhood).
    pub fitted: Array2<f32>,
    /// Degree 1: the fitted local slopes `∂ŷ_c/∂x_a` (`M × q × d`), the
    /// estimate of the regression function's gradient (NaN rows for an
    /// empty neighbourhood). `None` for degree 0.
    pub slopes: Option<Array3<f32>>,
    /// Rows with no kernel mass (NaN).
    pub empty_rows: usize,
    /// Degree 1: rows whose local design does not span all `d` directions
    /// (too few keys, or keys on a lower-dimensional set). They are solved
    /// in the directions the keys span (the minimum-norm least-squares
    /// slopes, zero across the others); with no direction at all the fit
    /// is the local mean and the slopes are 0.
    pub rank_deficient_rows: usize,
}

/// Result of [`Engine::local_pca`].
#[derive(Debug, Clone, PartialEq)]
pub struct LocalPca {
    /// The kernel-weighted mean of the keys around each query (`M × d`).
    pub means: Array2<f32>,
    /// The leading eigenvalues of the kernel-weighted covariance, in
    /// descending order (`M × k`; never negative).
    pub variances: Array2<f32>,
    /// Their unit eigenvectors (`M × k × d`), each signed so that its
    /// largest-magnitude entry is positive.
    pub components: Array3<f32>,
    /// Rows with no kernel mass (NaN in every output).
    pub empty_rows: usize,
}

impl Engine {
    /// Local polynomial regression of `values` (`N × q`) on `keys`
    /// (`N × d`) at `queries` (`M × d`): `degree = 0` is the Nadaraya–Watson
    /// local mean, `degree = 1` local linear regression — per query the
    /// weighted least-squares fit of `y ≈ a + bᵀ(x − q)` with weights
    /// `K(q, x_j)`, giving `ŷ(q) = a` and the slopes `b`.
    ///
    /// One fused pass over the keys forms the kernel-weighted moments of
    /// `x − q` and `y` about each query (so no moment about a distant
    /// origin is subtracted); a small `d × d` eigenproblem per query then
    /// solves the local design in `f64`. It is statsmodels'
    /// `KernelReg(reg_type="ll")` and R's `locpoly` without robustness
    /// iterations, on both backends.
    ///
    /// # Errors
    /// The input errors of [`local_mean`](Self::local_mean);
    /// [`Error::InvalidParameter`] for a degree other than 0 or 1, a
    /// dimension above [`MAX_LOCAL_DIM`] or entries above
    /// [`MAX_LOCAL_MAGNITUDE`] (degree 1).
    pub fn local_polynomial(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
        degree: usize,
    ) -> Result<LocalFit> {
        const OP: &str = "local_polynomial";
        if check_degree(degree)? == 0 {
            return Ok(self.local_mean(kernel, queries, keys, values)?.into());
        }
        let i = Inputs::check(OP, Some(kernel), queries, keys, Some(values))?;
        let (q, x, y) = (&i.q, &i.x, i.values());
        check_local(q, x, Some(y))?;
        let (d, qy) = (x.cols(), y.cols());
        // Values centred on their mean: the cross moments then carry the
        // local variation, not the offset.
        let centre: Vec<f64> = (0..qy)
            .map(|c| {
                let col = y.as_slice().iter().skip(c).step_by(qy);
                col.map(|&v| f64::from(v)).sum::<f64>() / y.rows() as f64
            })
            .collect();
        let mut yc = reserve::<f32>(OP, "centred values", (y.rows() * qy) as u64)?;
        yc.extend(
            y.as_slice()
                .iter()
                .enumerate()
                .map(|(e, &v)| (f64::from(v) - centre[e % qy]) as f32),
        );
        let yc = Array2::from_shape_vec((y.rows(), qy), yc).expect("rows·q entries"); // ok: sized above
        let yc = Matrix::check(OP, "values", yc.view())?;
        let backend = self.backend_impl();
        let h = kernel.coordinate_bandwidths(d);
        let mean = |qm: &Matrix<'_>| Ok(call::local_mean(backend, kernel, qm, (x, x))?.values);
        let pass = |qm: &Matrix<'_>, layout: MomentLayout| {
            let y = (layout.qy > 0).then_some(&yc);
            call::local_moments(backend, kernel, qm, (x, y), layout)
        };
        fit_linear(
            (OP, self.threads_impl()),
            q,
            (&h, d, qy),
            &centre,
            (Centres::LocalMean(&mean), &pass),
        )
    }

    /// Local PCA (paper §6): at each query, the kernel-weighted mean and
    /// covariance of the keys around it, and the covariance's leading
    /// `components` eigenvalues and unit eigenvectors (the local principal
    /// directions: tangent directions of a manifold the keys lie on).
    ///
    /// # Errors
    /// The input errors of [`local_mean`](Self::local_mean); `components`
    /// outside `1..=d`, a dimension above [`MAX_LOCAL_DIM`] or coordinates
    /// above [`MAX_LOCAL_MAGNITUDE`] ([`Error::InvalidParameter`]).
    pub fn local_pca(
        &self,
        kernel: &Kernel,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        components: usize,
    ) -> Result<LocalPca> {
        const OP: &str = "local_pca";
        let Inputs { q, x, .. } = Inputs::check(OP, Some(kernel), queries, keys, None)?;
        check_local(&q, &x, None)?;
        let backend = self.backend_impl();
        let h = kernel.coordinate_bandwidths(x.cols());
        let mean = |qm: &Matrix<'_>| Ok(call::local_mean(backend, kernel, qm, (&x, &x))?.values);
        let pass =
            |qm: &Matrix<'_>, layout| call::local_moments(backend, kernel, qm, (&x, None), layout);
        let op = (OP, self.threads_impl());
        fit_pca(op, &q, (&h, components), (Centres::LocalMean(&mean), &pass))
    }
}

/// A local-moment pass over some keys: the moments of `layout` at a chunk
/// of query rows `[q | c]` (far rows finished by the backend).
pub(crate) type MomentPass<'a> = dyn Fn(&Matrix<'_>, MomentLayout) -> Result<RowNormalized> + 'a;

/// Where the moments of a chunk of queries are centred.
pub(crate) enum Centres<'a> {
    /// At each query itself.
    AtQuery,
    /// At the keys' local mean around each query (`rows × d`, NaN rows:
    /// no mass), as this function gives it (one-shot calls: the fast local
    /// mean of the keys).
    LocalMean(&'a dyn Fn(&Matrix<'_>) -> Result<Array2<f32>>),
    /// At the keys' local mean, from a first-moment pass of the moments'
    /// own pass (key sets, whose keys are not a value matrix).
    FirstMoments,
}

/// Local linear fits of `qy` value columns at `q` (dimension `d`) from the
/// moments `pass` gives (values centred on `centre`, added back); `h` is
/// the bandwidth of each coordinate.
pub(crate) fn fit_linear(
    (op, threads): (&'static str, &Threads),
    q: &Matrix<'_>,
    (h, d, qy): (&[f64], usize, usize),
    centre: &[f64],
    (centres, pass): (Centres<'_>, &MomentPass<'_>),
) -> Result<LocalFit> {
    let m = q.rows();
    let layout = MomentLayout {
        d,
        qy,
        second: true,
    };
    let mut fitted = alloc_output(op, "fitted", m, qy)?;
    let mut slopes = alloc_output(op, "slopes", m, qy * d)?;
    let (mut empty, mut deficient) = (0, 0);
    let p = layout.cols();
    moment_chunks(op, q, (h, layout), centres, pass, |r0, mom, rows| {
        let r1 = r0 + mom.len() / p;
        let (fit, slope) = (
            &mut fitted[r0 * qy..r1 * qy],
            &mut slopes[r0 * qy * d..r1 * qy * d],
        );
        let kinds: Vec<RowKind> = threads.install(|| {
            fit.par_chunks_mut(qy)
                .zip(slope.par_chunks_mut(qy * d))
                .zip(mom.par_chunks(p))
                .zip(rows.par_chunks(2 * d))
                .map(|(((fit, slope), mo), row)| {
                    let shift: Vec<f64> = (0..d)
                        .map(|a| f64::from(row[d + a]) - f64::from(row[a]))
                        .collect();
                    linear_row(&layout, mo, (h, &shift), centre, fit, slope)
                })
                .collect()
        });
        empty += kinds.iter().filter(|&&k| k == RowKind::Empty).count();
        deficient += kinds.iter().filter(|&&k| k == RowKind::Deficient).count();
        Ok(())
    })?;
    Ok(LocalFit {
        fitted: Array2::from_shape_vec((m, qy), fitted).expect("m·q entries"), // ok: sized above
        slopes: Some(Array3::from_shape_vec((m, qy, d), slopes).expect("m·q·d entries")), // ok: sized above
        empty_rows: empty,
        rank_deficient_rows: deficient,
    })
}

/// Local PCA with `k` components at `q` from the moments `pass` gives.
pub(crate) fn fit_pca(
    (op, threads): (&'static str, &Threads),
    q: &Matrix<'_>,
    (h, k): (&[f64], usize),
    (centres, pass): (Centres<'_>, &MomentPass<'_>),
) -> Result<LocalPca> {
    let (m, d) = (q.rows(), q.cols());
    if !(1..=d).contains(&k) {
        return Err(Error::InvalidParameter {
            name: "components",
            reason: format!("needs 1 ≤ components ≤ d = {d}, got {k}"),
        });
    }
    let layout = MomentLayout {
        d,
        qy: 0,
        second: true,
    };
    let mut means = alloc_output(op, "means", m, d)?;
    let mut variances = alloc_output(op, "variances", m, k)?;
    let mut vectors = alloc_output(op, "components", m, k * d)?;
    let mut empty = 0;
    let p = layout.cols();
    moment_chunks(op, q, (h, layout), centres, pass, |r0, mom, rows| {
        let r1 = r0 + mom.len() / p;
        let mean = &mut means[r0 * d..r1 * d];
        let (var, vecs) = (
            &mut variances[r0 * k..r1 * k],
            &mut vectors[r0 * k * d..r1 * k * d],
        );
        empty += threads.install(|| {
            mean.par_chunks_mut(d)
                .zip(var.par_chunks_mut(k))
                .zip(vecs.par_chunks_mut(k * d))
                .zip(mom.par_chunks(p))
                .zip(rows.par_chunks(2 * d))
                .map(|((((mean, var), vecs), mo), row)| {
                    pca_row(&layout, mo, (h, &row[d..]), mean, var, vecs)
                })
                .filter(|&ok| !ok)
                .count()
        });
        Ok(())
    })?;
    Ok(LocalPca {
        means: Array2::from_shape_vec((m, d), means).expect("m·d entries"), // ok: sized above
        variances: Array2::from_shape_vec((m, k), variances).expect("m·k entries"), // ok: sized above
        components: Array3::from_shape_vec((m, k, d), vectors).expect("m·k·d entries"), // ok: sized above
        empty_rows: empty,
    })
}

/// Runs `pass` for `layout` over query chunks (bounded memory) and hands
/// each chunk's moments (`rows × layout.cols()` row-major, NaN rows empty)
/// to `each` with the chunk's first query row and its pass rows `[q | c]`
/// (`rows × 2d`), centred as `centres` says (`q` itself for a row without
/// mass); `h` is the bandwidth of each coordinate.
pub(crate) fn moment_chunks(
    op: &'static str,
    q: &Matrix<'_>,
    (h, layout): (&[f64], MomentLayout),
    centres: Centres<'_>,
    pass: &MomentPass<'_>,
    mut each: impl FnMut(usize, &[f64], &[f32]) -> Result<()>,
) -> Result<()> {
    let (p, d) = (layout.cols(), layout.d);
    // Moments (f32 and f64) and the rows [q | c] of one chunk.
    let per_row = 12 * p + 8 * d;
    let chunk = (CHUNK_BYTES / per_row).max(1);
    for r0 in (0..q.rows()).step_by(chunk) {
        let r1 = (r0 + chunk).min(q.rows());
        let qc = q.row_range(r0, r1);
        let mut rows = reserve::<f32>(op, "query rows", ((r1 - r0) * 2 * d) as u64)?;
        for qi in qc.chunks_exact(d) {
            rows.extend_from_slice(qi);
            rows.extend_from_slice(qi);
        }
        let centre_at = match centres {
            Centres::AtQuery => None,
            Centres::LocalMean(mean) => {
                let qv = ArrayView2::from_shape((r1 - r0, d), qc).expect("rows·d entries"); // ok: a row range
                Some(mean(&Matrix::check(op, "queries", qv)?)?)
            }
            Centres::FirstMoments => {
                let first = MomentLayout {
                    d,
                    qy: 0,
                    second: false,
                };
                let v =
                    ArrayView2::from_shape((r1 - r0, 2 * d), &rows[..]).expect("rows·2d entries"); // ok: sized above
                let mut c = pass(&Matrix::check(op, "queries", v)?, first)?.values;
                // c = q + h·E[(x − q)/h].
                for (mut row, qi) in c.rows_mut().into_iter().zip(qc.chunks_exact(d)) {
                    for ((v, &qa), &ha) in row.iter_mut().zip(qi).zip(h) {
                        *v = (f64::from(qa) + ha * f64::from(*v)) as f32;
                    }
                }
                Some(c)
            }
        };
        if let Some(centres) = centre_at {
            for (row, c) in rows.chunks_exact_mut(2 * d).zip(centres.rows()) {
                if c.iter().all(|v| v.is_finite()) {
                    row[d..].copy_from_slice(c.as_slice().expect("row-major")); // ok: a standard-layout row
                }
            }
        }
        let v = ArrayView2::from_shape((r1 - r0, 2 * d), &rows[..]).expect("rows·2d entries"); // ok: sized above
        let got = pass(&Matrix::check(op, "queries", v)?, layout)?;
        let mom: Vec<f64> = got.values.iter().map(|&v| f64::from(v)).collect();
        each(r0, &mom, &rows)?;
    }
    Ok(())
}

impl From<RowNormalized> for LocalFit {
    /// The degree-0 fit: the local means.
    fn from(r: RowNormalized) -> Self {
        LocalFit {
            fitted: r.values,
            slopes: None,
            empty_rows: r.empty_rows,
            rank_deficient_rows: 0,
        }
    }
}

/// `degree` when it is 0 or 1.
pub(crate) fn check_degree(degree: usize) -> Result<usize> {
    if degree > 1 {
        return Err(Error::InvalidParameter {
            name: "degree",
            reason: format!("local regression has degree 0 or 1, got {degree}"),
        });
    }
    Ok(degree)
}

/// The local models' own limits on their inputs.
pub(super) fn check_local(q: &Matrix<'_>, x: &Matrix<'_>, y: Option<&Matrix<'_>>) -> Result<()> {
    let big = [Some(q), Some(x), y]
        .into_iter()
        .flatten()
        .map(|m| m.max_abs())
        .fold(0.0f32, f32::max);
    check_limits(x.cols(), big)
}

/// The local models' limits: the dimension `d`, and `big`, the largest
/// magnitude among the queries, keys and values.
pub(crate) fn check_limits(d: usize, big: f32) -> Result<()> {
    if d > MAX_LOCAL_DIM {
        return Err(Error::InvalidParameter {
            name: "dimension",
            reason: format!(
                "local models take d ≤ {MAX_LOCAL_DIM} (their moments grow as d²/2 per query), got {d}"
            ),
        });
    }
    check_magnitude("local models take coordinates and values", big)
}

/// Fails when `big`, the largest magnitude of an op's inputs, exceeds
/// [`MAX_LOCAL_MAGNITUDE`] (`what`: who takes which inputs).
pub(crate) fn check_magnitude(what: &str, big: f32) -> Result<()> {
    if big > MAX_LOCAL_MAGNITUDE {
        return Err(Error::InvalidParameter {
            name: "inputs",
            reason: format!(
                "{what} of magnitude ≤ {MAX_LOCAL_MAGNITUDE:e} (their products must stay finite \
                 in f32), got {big:e}; rescale the data"
            ),
        });
    }
    Ok(())
}

/// How a row of a local fit came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowKind {
    Full,
    Deficient,
    Empty,
}

/// The local covariance `S = E[r rᵀ] − μμᵀ` of a moment row (`d × d`),
/// with `μ = E[r]`, and `E‖r‖²`.
fn local_covariance(layout: &MomentLayout, mo: &[f64]) -> (Vec<f64>, f64) {
    let d = layout.d;
    let mut cov = vec![0.0; d * d];
    let mut second = 0.0;
    for a in 0..d {
        second += mo[layout.pair(a, a)];
        for b in a..d {
            let v = mo[layout.pair(a, b)] - mo[a] * mo[b];
            cov[a * d + b] = v;
            cov[b * d + a] = v;
        }
    }
    (cov, second)
}

/// Solves one query's local linear fit from its moments `mo` (of the
/// offsets `r_a = (x_a − c_a)/h_a` from the row's centre `c`); `shift` is `c − q`
/// in `f64`, `centre` the values' mean (added back). Writes `fit` (`q`)
/// and `slope` (`q × d`).
fn linear_row(
    layout: &MomentLayout,
    mo: &[f64],
    (h, shift): (&[f64], &[f64]),
    centre: &[f64],
    fit: &mut [f32],
    slope: &mut [f32],
) -> RowKind {
    if mo[0].is_nan() {
        fit.fill(f32::NAN);
        slope.fill(f32::NAN);
        return RowKind::Empty;
    }
    let (d, qy) = (layout.d, layout.qy);
    let (mut cov, second) = local_covariance(layout, mo);
    let (mut lam, mut vecs) = (vec![0.0; d], vec![0.0; d * d]);
    sym_eigen(&mut cov, d, &mut lam, &mut vecs);
    let tau = RANK_TOLERANCE * second;
    let kept = lam.iter().take_while(|&&l| l > tau).count();
    for c in 0..qy {
        // C = E[r y_c] − μ E[y_c]; b = Σ_k v_k (v_kᵀ C) / λ_k over the kept
        // directions.
        let ey = mo[layout.value(c)];
        let cross: Vec<f64> = (0..d)
            .map(|a| mo[layout.cross(a, c)] - mo[a] * ey)
            .collect();
        let mut b = vec![0.0; d];
        for k in 0..kept {
            let v = &vecs[k * d..(k + 1) * d];
            let proj: f64 = v.iter().zip(&cross).map(|(vi, ci)| vi * ci).sum::<f64>() / lam[k];
            for (ba, va) in b.iter_mut().zip(v) {
                *ba += proj * va;
            }
        }
        // In x's units: slopes b_a/h_a; the keys' mean offset from q is
        // E[x − q] = h·E[r] + (c − q); ŷ(q) = E[y] − bᵀE[x − q].
        let offset = |a: usize| h[a] * mo[a] + shift[a];
        let a = ey - (0..d).map(|k| b[k] / h[k] * offset(k)).sum::<f64>();
        fit[c] = (a + centre[c]) as f32;
        for ((o, &ba), &ha) in slope[c * d..(c + 1) * d].iter_mut().zip(&b).zip(h) {
            *o = (ba / ha) as f32;
        }
    }
    if kept < d {
        RowKind::Deficient
    } else {
        RowKind::Full
    }
}

/// One query's local PCA from its moments; `false` (NaN outputs) when the
/// row is empty.
fn pca_row(
    layout: &MomentLayout,
    mo: &[f64],
    (h, centre): (&[f64], &[f32]),
    mean: &mut [f32],
    var: &mut [f32],
    vecs_out: &mut [f32],
) -> bool {
    if mo[0].is_nan() {
        mean.fill(f32::NAN);
        var.fill(f32::NAN);
        vecs_out.fill(f32::NAN);
        return false;
    }
    let d = layout.d;
    for (a, o) in mean.iter_mut().enumerate() {
        *o = (f64::from(centre[a]) + h[a] * mo[a]) as f32;
    }
    // The covariance of the offsets r_a = (x_a − c_a)/h_a, in x's units:
    // each entry times h_a·h_b (a product kernel's blocks differ).
    let (mut cov, _) = local_covariance(layout, mo);
    for a in 0..d {
        for b in 0..d {
            cov[a * d + b] *= h[a] * h[b];
        }
    }
    let (mut lam, mut vecs) = (vec![0.0; d], vec![0.0; d * d]);
    sym_eigen(&mut cov, d, &mut lam, &mut vecs);
    for (k, v) in var.iter_mut().enumerate() {
        *v = lam[k].max(0.0) as f32;
        let row = &vecs[k * d..(k + 1) * d];
        let big = row
            .iter()
            .copied()
            .fold(0.0f64, |m, x| if x.abs() > m.abs() { x } else { m });
        let sign = if big < 0.0 { -1.0 } else { 1.0 };
        for (o, &x) in vecs_out[k * d..(k + 1) * d].iter_mut().zip(row) {
            *o = (sign * x) as f32;
        }
    }
    true
}

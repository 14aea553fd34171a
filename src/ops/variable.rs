//! Variable bandwidths (docs/numerics.md, "Variable bandwidths"):
//! sample-point (one bandwidth per key) and balloon (one per query) local
//! means and densities. The bandwidth rules that set them are in
//! `adaptive.rs`.

use ndarray::{Array1, ArrayView2};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::{MAX_BANDWIDTH, MIN_BANDWIDTH, Profile};
use crate::matrix::Matrix;
use crate::types::{RowNormalized, RowStates, VariableKeys};

use super::Inputs;
use super::kde::ln_normalizer;

/// Bandwidths that vary from key to key or from query to query.
///
/// * **Sample-point** ([`PerKey`](Self::PerKey)): key `j` spreads its mass
///   with its own `h_j`, `K_ij = h_j^{−d}·k(‖q_i − x_j‖²/h_j²)`. The factor
///   `h_j^{−d}` is each key's own normalizer: the density
///   `p̂(q) = Σ_j k(‖q − x_j‖²/h_j²) / (N·c_k·h_j^d)` integrates to 1, and a
///   local mean weighs with the same `h_j^{−d}·k(…)`, so it is the ratio of
///   two such densities (`Σ_j K_ij y_j / Σ_j K_ij`, the Nadaraya–Watson
///   estimator consistent with that KDE).
/// * **Balloon** ([`PerQuery`](Self::PerQuery)): query `i` looks with its own
///   `h_i`, `K_ij = k(‖q_i − x_j‖²/h_i²)`; the density divides by
///   `N·c_k·h_i^d`, which cancels in a local mean.
///
/// Every bandwidth is finite and within `[1e-18, 1e18]`; there is one per
/// key (per query).
#[derive(Debug, Clone, PartialEq)]
pub enum VariableBandwidth {
    /// One bandwidth per key, `h_j` (sample-point, Breiman–Meisel–Purcell).
    PerKey(Vec<f32>),
    /// One bandwidth per query, `h_i` (balloon, Loftsgaarden–Quesenberry).
    PerQuery(Vec<f32>),
}

impl VariableBandwidth {
    /// The bandwidths.
    pub fn values(&self) -> &[f32] {
        match self {
            VariableBandwidth::PerKey(h) | VariableBandwidth::PerQuery(h) => h,
        }
    }
}

/// Checks `h` as the bandwidths of `n` rows (`what`: "keys" or "queries").
pub(crate) fn check_bandwidths(h: &[f32], n: usize, what: &str) -> Result<()> {
    if h.len() != n {
        return Err(Error::InvalidParameter {
            name: "bandwidths",
            reason: format!("{} bandwidths for {n} {what}: one per row", h.len()),
        });
    }
    if let Some((i, &v)) = h
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && (MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(*v)))
    {
        return Err(Error::InvalidParameter {
            name: "bandwidths",
            reason: format!(
                "bandwidth {i} is {v}; every bandwidth must be finite and within [{MIN_BANDWIDTH:e}, {MAX_BANDWIDTH:e}]"
            ),
        });
    }
    Ok(())
}

/// The key side of variable-bandwidth passes over `x` (and `values`) for
/// `m` queries, and what each pass's states need after it: per-key
/// bandwidths `h_j` weigh by `h_j^{−power}` (`power` = d for densities and
/// local means, d + 2 for MeanShift), their log-weights sent relative to
/// their largest (`c_j − max c`, so `f32` keeps them small) and that
/// offset returned, to be added back to `m` in `f64` ([`with_offset`]);
/// per-query bandwidths come back as the rows' scales `1/h_i` (no per-key
/// factor, offset 0).
pub(crate) fn variable_keys<'a>(
    bandwidths: &VariableBandwidth,
    m: usize,
    (x, values): (&'a Matrix<'_>, Option<&'a Matrix<'_>>),
    power: f64,
) -> Result<(VariableKeys<'a>, Vec<f32>, f64)> {
    let n = x.rows();
    let inv = |h: &[f32]| -> Vec<f32> { h.iter().map(|&v| (1.0 / f64::from(v)) as f32).collect() };
    let keys = |inv, log_weights| VariableKeys {
        keys: x.view(),
        values: values.map(Matrix::view),
        inv,
        log_weights,
    };
    match bandwidths {
        VariableBandwidth::PerKey(h) => {
            check_bandwidths(h, n, "keys")?;
            let c: Vec<f64> = h.iter().map(|&v| -power * f64::from(v).ln()).collect();
            let top = c.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lw = c.iter().map(|&v| (v - top) as f32).collect();
            Ok((keys(inv(h), lw), Vec::new(), top))
        }
        VariableBandwidth::PerQuery(h) => {
            check_bandwidths(h, m, "queries")?;
            Ok((keys(Vec::new(), Vec::new()), inv(h), 0.0))
        }
    }
}

/// `st` with the per-key log-weights' `offset` added back to `m` in `f64`
/// (−inf, no mass, and `f32::MIN`, below the `f32` range, stay as they
/// are).
pub(crate) fn with_offset(mut st: RowStates, offset: f64) -> RowStates {
    if offset != 0.0 {
        st.max_log_weight.mapv_inplace(|v| {
            if v == f32::NEG_INFINITY || v == f32::MIN {
                v
            } else {
                let s = f64::from(v) + offset;
                if s < f64::from(f32::MIN) {
                    f32::MIN
                } else {
                    s as f32
                }
            }
        });
    }
    st
}

/// Row states of `queries` over `keys` (and `values`) under `bandwidths`
/// ([`variable_keys`]), in one call: the keys go to the backend for this
/// call only. The states' `m` includes the per-key factor exactly.
pub(crate) fn variable_states(
    engine: &Engine,
    op: &'static str,
    profile: Profile,
    bandwidths: &VariableBandwidth,
    (q, x, values): (&Matrix<'_>, &Matrix<'_>, Option<&Matrix<'_>>),
    power: f64,
) -> Result<RowStates> {
    let (keys, rows, offset) = variable_keys(bandwidths, q.rows(), (x, values), power)?;
    let with_values = values.is_some();
    let prepared = engine.backend_impl().prepare_variable_call(op, keys)?;
    let rows = (!rows.is_empty()).then_some(&rows[..]);
    let st = prepared.states(op, profile, (q, rows), with_values)?;
    Ok(with_offset(st, offset))
}

impl Engine {
    /// Local means `ŷ(q_i) = Σ_j K_ij y_j / Σ_j K_ij` with variable
    /// bandwidths ([`VariableBandwidth`]): per key,
    /// `K_ij = h_j^{−d}·k(‖q_i − x_j‖²/h_j²)` (the weights of the
    /// sample-point density); per query, `K_ij = k(‖q_i − x_j‖²/h_i²)`.
    ///
    /// Every profile is accumulated in the log domain with a running
    /// maximum, so tiny bandwidths and large `h_j^{−d}` neither underflow
    /// nor overflow; rows whose keys all lie beyond the `f32` range of `t`
    /// are finished in `f64` (docs/numerics.md, "Variable bandwidths").
    /// Rows without mass are NaN and counted.
    ///
    /// ```
    /// use locus::{Engine, Profile, VariableBandwidth};
    /// use ndarray::array;
    /// let keys = array![[0.0f32], [1.0], [10.0]];
    /// let values = array![[0.0f32], [1.0], [5.0]];
    /// let h = VariableBandwidth::PerKey(vec![0.5, 0.5, 20.0]);
    /// let q = array![[0.5f32]];
    /// let means = Engine::cpu().local_mean_variable(Profile::Gaussian, &h, q.view(), keys.view(), values.view())?;
    /// assert!(means.values[[0, 0]] > 0.4 && means.values[[0, 0]] < 0.6);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`local_mean`](Self::local_mean); [`Error::InvalidParameter`]
    /// for bandwidths of the wrong length (one per key, or per query),
    /// non-finite, or outside `[1e-18, 1e18]`.
    pub fn local_mean_variable(
        &self,
        profile: Profile,
        bandwidths: &VariableBandwidth,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
        values: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        const OP: &str = "local_mean_variable";
        let i = Inputs::check(OP, None, queries, keys, Some(values))?;
        let d = i.x.cols() as f64;
        let st = variable_states(
            self,
            OP,
            profile,
            bandwidths,
            (&i.q, &i.x, Some(i.values())),
            d,
        )?;
        Ok(st.means())
    }

    /// Kernel density estimate with variable bandwidths; see
    /// [`log_density_variable`](Self::log_density_variable).
    ///
    /// # Errors
    /// As [`log_density_variable`](Self::log_density_variable).
    pub fn density_variable(
        &self,
        profile: Profile,
        bandwidths: &VariableBandwidth,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
    ) -> Result<Array1<f64>> {
        Ok(self
            .log_density_variable(profile, bandwidths, queries, keys)?
            .mapv(f64::exp))
    }

    /// `ln p̂(q)` with variable bandwidths, each kernel normalized by its
    /// own bandwidth so the estimate integrates to 1: per key (sample
    /// point), `p̂(q) = (1/N) Σ_j k(‖q − x_j‖²/h_j²) / (c_k h_j^d)`; per query
    /// (balloon), `p̂(q_i) = Σ_j k(‖q_i − x_j‖²/h_i²) / (N c_k h_i^d)`, with
    /// `c_k` the profile's constant ([`ln_normalizer`]).
    ///
    /// In the log domain throughout: the per-key factors `h_j^{−d}` join
    /// the log-weights, so `h_j` from `10⁻³` to `10³` at `d = 8` (factors
    /// across 48 decades) lose nothing. Compact profiles give −inf outside
    /// every key's support.
    ///
    /// # Errors
    /// As [`local_mean_variable`](Self::local_mean_variable), and the
    /// cauchy profile in `d ≥ 2` ([`Error::Unsupported`]).
    pub fn log_density_variable(
        &self,
        profile: Profile,
        bandwidths: &VariableBandwidth,
        queries: ArrayView2<'_, f32>,
        keys: ArrayView2<'_, f32>,
    ) -> Result<Array1<f64>> {
        const OP: &str = "density_variable";
        let i = Inputs::check(OP, None, queries, keys, None)?;
        let d = i.x.cols();
        ln_normalizer(profile, d)?;
        let st = variable_states(self, OP, profile, bandwidths, (&i.q, &i.x, None), d as f64)?;
        let per_query = match bandwidths {
            VariableBandwidth::PerKey(_) => None,
            VariableBandwidth::PerQuery(h) => Some(&h[..]),
        };
        log_density_of(&st, profile, (i.x.rows(), d), per_query)
    }
}

/// `ln p̂` from the row sums `st` of a variable-bandwidth pass over `n`
/// keys in `d` dimensions (per-key factors in `m`): `ln Σ − ln N − ln c_k`,
/// less `d·ln h_i` per query for balloon bandwidths (`per_query`).
///
/// # Errors
/// The cauchy profile in `d ≥ 2` ([`ln_normalizer`]).
pub(crate) fn log_density_of(
    st: &RowStates,
    profile: Profile,
    (n, d): (usize, usize),
    per_query: Option<&[f32]>,
) -> Result<Array1<f64>> {
    let base = (n as f64).ln() + ln_normalizer(profile, d)?;
    let mut out = st.log_sum();
    match per_query {
        None => out.mapv_inplace(|l| l - base),
        Some(h) => {
            for (l, &hi) in out.iter_mut().zip(h) {
                *l -= base + d as f64 * f64::from(hi).ln();
            }
        }
    }
    Ok(out)
}

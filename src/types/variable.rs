//! Variable bandwidths as a backend takes them (docs/numerics.md,
//! "Variable bandwidths"): per-query and per-key scales of the
//! differences and per-key log-weights, and the `f64` state of a row the
//! `f32` pass leaves without weight (a far row).

use crate::kernel::Profile;
use crate::kernel::exact::{self, CAUCHY_EXACT_BELOW};
use crate::matrix::Matrix;

/// The scales of one variable-bandwidth pass. A key `j` at query `i` has
/// the scaled squared distance `t_ij = Σ_k ((x_jk − q_ik)·σ_i·τ_j)²` and
/// the log-weight `ln k(t_ij) + c_j`: a per-key bandwidth `h_j` is
/// `τ_j = 1/h_j` (with `c_j` its normalizer), a per-query one `σ_i = 1/h_i`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scales<'a> {
    /// `σ_i = 1/h_i` per query row (`None`: 1).
    pub rows: Option<&'a [f32]>,
    /// `τ_j = 1/h_j` per key (`None`: 1).
    pub keys: Option<&'a [f32]>,
    /// `c_j` per key, natural-log units, finite (`None`: 0).
    pub log_weights: Option<&'a [f32]>,
}

impl Scales<'_> {
    /// `σ_i`.
    #[inline]
    pub(crate) fn row(&self, i: usize) -> f32 {
        self.rows.map_or(1.0, |r| r[i])
    }

    /// `τ_j`.
    #[inline]
    pub(crate) fn key(&self, j: usize) -> f32 {
        self.keys.map_or(1.0, |k| k[j])
    }

    /// `c_j`.
    #[inline]
    pub(crate) fn log_weight(&self, j: usize) -> f32 {
        self.log_weights.map_or(0.0, |c| c[j])
    }
}

/// One variable-bandwidth pass as a backend takes it: row states
/// `(m, s, u)` of the queries over the keys (with the values' columns, if
/// any) under the profile and the scales. Inputs arrive validated
/// (finite, one dimension, one scale per row or key, scales positive and
/// finite, log-weights finite), Euclidean.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VariablePass<'a> {
    /// The op, as its errors name it.
    pub op: &'static str,
    /// The profile.
    pub profile: Profile,
    /// The queries (`M × d`).
    pub queries: &'a Matrix<'a>,
    /// The keys (`N × d`).
    pub keys: &'a Matrix<'a>,
    /// The values (`N × q`), or none (row sums only).
    pub values: Option<&'a Matrix<'a>>,
    /// The scales and log-weights.
    pub scales: Scales<'a>,
}

/// The key side of variable-bandwidth passes, prepared once and queried
/// many times (a MeanShift run, a key set): the keys, their values, and
/// per key `τ_j = 1/h_j` and the log-weight `c_j` (both empty for
/// balloon passes, whose scales belong to the queries).
#[derive(Debug, Clone)]
pub(crate) struct VariableKeys<'a> {
    /// The keys (`N × d`).
    pub keys: Matrix<'a>,
    /// The values (`N × q`), if any.
    pub values: Option<Matrix<'a>>,
    /// `τ_j` per key (empty: 1).
    pub inv: Vec<f32>,
    /// `c_j` per key (empty: 0).
    pub log_weights: Vec<f32>,
}

impl VariableKeys<'_> {
    /// The pass of `queries` (with per-query scales `rows`) over these
    /// keys; with their values when `with_values`, else row sums only.
    pub(crate) fn pass<'b>(
        &'b self,
        op: &'static str,
        profile: Profile,
        (queries, rows): (&'b Matrix<'b>, Option<&'b [f32]>),
        with_values: bool,
    ) -> VariablePass<'b> {
        let some = |v: &'b [f32]| (!v.is_empty()).then_some(v);
        VariablePass {
            op,
            profile,
            queries,
            keys: &self.keys,
            values: if with_values {
                self.values.as_ref()
            } else {
                None
            },
            scales: Scales {
                rows,
                keys: some(&self.inv),
                log_weights: some(&self.log_weights),
            },
        }
    }

    /// The same keys in memory of their own.
    ///
    /// # Errors
    /// [`Error::MemoryLimit`](crate::Error::MemoryLimit) when a copy
    /// cannot be allocated.
    pub(crate) fn into_owned(
        self,
        op: &'static str,
    ) -> crate::error::Result<VariableKeys<'static>> {
        Ok(VariableKeys {
            keys: self.keys.into_owned(op, "keys")?,
            values: self
                .values
                .map(|v| v.into_owned(op, "values"))
                .transpose()?,
            inv: self.inv,
            log_weights: self.log_weights,
        })
    }

    /// Host bytes of the keys, values and scales.
    pub(crate) fn bytes(&self) -> u64 {
        let floats = self.keys.as_slice().len()
            + self.values.as_ref().map_or(0, |v| v.as_slice().len())
            + self.inv.len()
            + self.log_weights.len();
        4 * floats as u64
    }
}

impl VariablePass<'_> {
    /// Value columns `q` (0 without values).
    pub(crate) fn cols(&self) -> usize {
        self.values.map_or(0, Matrix::cols)
    }

    /// Whether a row state `(m, s)` of the `f32` pass must be recomputed
    /// in `f64`: under a full-support profile, a row left without weight
    /// (every key at `t ≥ T_FAR`, or overflowing `f32`), or a cauchy row
    /// whose largest log-weight lies below `ln 10⁻²⁸`: the keys the pass
    /// dropped beyond `T_FAR` weigh up to `1/(1 + 10³⁷)` (times at most
    /// `e⁰`: the log-weights arrive relative to their largest), which
    /// is then not negligible beside it. A compact profile's empty row is
    /// empty in exact arithmetic too.
    pub(crate) fn needs_exact(&self, m: f32, s: f64) -> bool {
        let empty = s.is_nan() || s <= 0.0;
        match self.profile {
            p if p.is_compact() => false,
            Profile::Cauchy => empty || f64::from(m) < CAUCHY_EXACT_BELOW.ln(),
            _ => empty,
        }
    }

    /// The state `(m, s)` of query row `i` over every key in `f64`
    /// (differences, scales and log-weights widened before use), `u` (its
    /// `q` entries, zeroed here) the weighted values; `m` as `f32`,
    /// `f32::MIN` when it lies below the `f32` range (the local mean stays
    /// exact; the log-sum is then −inf, as for fixed bandwidths), −inf
    /// with `s = 0` when no key has weight.
    pub(crate) fn exact_row(&self, i: usize, u: &mut [f64]) -> (f32, f64) {
        let q = self.queries.row_range(i, i + 1);
        let si = f64::from(self.scales.row(i));
        let lws: Vec<(usize, f64)> = (0..self.keys.rows())
            .map(|j| {
                let sc = si * f64::from(self.scales.key(j));
                let t: f64 = self
                    .keys
                    .row_range(j, j + 1)
                    .iter()
                    .zip(q)
                    .map(|(&x, &y)| {
                        let d = (f64::from(x) - f64::from(y)) * sc;
                        d * d
                    })
                    .sum();
                let l = exact::log_weight(self.profile, t) + f64::from(self.scales.log_weight(j));
                (j, l)
            })
            .filter(|&(_, l)| l > f64::NEG_INFINITY)
            .collect();
        let value = |j: usize, c: usize| self.values.map_or(0.0, |v| v.row_range(j, j + 1)[c]);
        exact::state_of(&lws, value, u)
    }
}

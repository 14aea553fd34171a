//! A key set's per-key (sample-point) bandwidths: the keys, their scales
//! `1/h_j`, log-weights `−d·ln h_j` and values prepared once on the backend
//! in the variable-bandwidth pass's layout ([`PreparedVariable`]), so each
//! request pays only for its own rows, as the fixed-kernel ops do.

use std::sync::Arc;

use ndarray::{Array1, ArrayView1, ArrayView2};

use super::KeySet;
use crate::backend::PreparedVariable;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kernel::Profile;
use crate::matrix::Matrix;
use crate::ops::{VariableBandwidth, log_density_of, variable_keys, with_offset};
use crate::types::{RowNormalized, RowStates};

/// The prepared keys of a key set built with bandwidths.
#[derive(Debug)]
pub(super) struct Variable {
    prepared: Arc<dyn PreparedVariable>,
    /// The largest log-weight, sent as 0 (added back to each row's `m`).
    offset: f64,
    bandwidths: Array1<f32>,
}

impl Variable {
    /// Checks `h` (one per key, finite, within the bandwidth range) and
    /// prepares the keys (and `values`) with it.
    pub(super) fn prepare(
        engine: &Engine,
        keys: &Matrix<'_>,
        values: Option<&Matrix<'_>>,
        h: ArrayView1<'_, f32>,
    ) -> Result<Self> {
        let bw = VariableBandwidth::PerKey(h.iter().copied().collect());
        let d = keys.cols() as f64;
        let (vk, _, offset) = variable_keys(&bw, 0, (keys, values), d)?;
        Ok(Variable {
            prepared: engine.backend_impl().prepare_variable(vk)?,
            offset,
            bandwidths: h.to_owned(),
        })
    }

    /// Bytes the backend holds for them.
    pub(super) fn bytes(&self) -> u64 {
        self.prepared.bytes()
    }
}

impl KeySet {
    /// The per-key bandwidths the set was built with
    /// ([`KeySetBuilder::bandwidths`](super::KeySetBuilder::bandwidths)).
    pub fn bandwidths(&self) -> Option<ArrayView1<'_, f32>> {
        self.inner.variable.as_ref().map(|v| v.bandwidths.view())
    }

    fn variable(&self) -> Result<&Variable> {
        self.inner
            .variable
            .as_ref()
            .ok_or_else(|| Error::InvalidParameter {
                name: "bandwidths",
                reason: "this key set was prepared without bandwidths (KeySetBuilder::bandwidths)"
                    .into(),
            })
    }

    /// The states of `queries` under the set's per-key bandwidths.
    fn variable_states(
        &self,
        op: &'static str,
        profile: Profile,
        queries: ArrayView2<'_, f32>,
        with_values: bool,
    ) -> Result<RowStates> {
        let v = self.variable()?;
        let q = self.queries(op, queries)?;
        let st = v.prepared.states(op, profile, (&q, None), with_values)?;
        Ok(with_offset(st, v.offset))
    }

    /// Local means of the values at `queries` under the set's per-key
    /// bandwidths, as [`Engine::local_mean_variable`] with
    /// [`VariableBandwidth::PerKey`]: `K_ij = h_j^{−d}·k(‖q_i − x_j‖²/h_j²)`.
    /// Requests run as they come (not coalesced).
    ///
    /// # Errors
    /// No values or no bandwidths in this key set; empty or non-finite
    /// queries, wrong dimension, too many rows; backend failures.
    pub fn local_mean_variable(
        &self,
        profile: Profile,
        queries: ArrayView2<'_, f32>,
    ) -> Result<RowNormalized> {
        const OP: &str = "local_mean_variable";
        self.set(self.inner.values_set, "values", "values")?;
        Ok(self.variable_states(OP, profile, queries, true)?.means())
    }

    /// `ln p̂(q)` per query under the set's per-key bandwidths, as
    /// [`Engine::log_density_variable`] with [`VariableBandwidth::PerKey`]
    /// (each kernel normalized by its own bandwidth: the estimate
    /// integrates to 1).
    ///
    /// # Errors
    /// No bandwidths in this key set; the cauchy profile in `d ≥ 2`;
    /// otherwise as [`local_mean_variable`](Self::local_mean_variable).
    pub fn log_density_variable(
        &self,
        profile: Profile,
        queries: ArrayView2<'_, f32>,
    ) -> Result<Array1<f64>> {
        const OP: &str = "density_variable";
        crate::ops::ln_normalizer(profile, self.inner.d)?;
        let st = self.variable_states(OP, profile, queries, false)?;
        log_density_of(&st, profile, (self.inner.n, self.inner.d), None)
    }

    /// The density under the set's per-key bandwidths; see
    /// [`log_density_variable`](Self::log_density_variable).
    ///
    /// # Errors
    /// As [`log_density_variable`](Self::log_density_variable).
    pub fn density_variable(
        &self,
        profile: Profile,
        queries: ArrayView2<'_, f32>,
    ) -> Result<Array1<f64>> {
        Ok(self.log_density_variable(profile, queries)?.mapv(f64::exp))
    }
}

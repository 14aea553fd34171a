//! [`AttentionSet`]: attention keys and values prepared once on an
//! engine's backend and attended to by many query batches, as a
//! [`KeySet`](crate::KeySet) does for local means.
//!
//! Decoding, retrieval over a fixed memory and serving the same context to
//! many requests all query one `Ψ, V` repeatedly. A prepared set keeps them
//! where the backend wants them (GPU: key tiles in device buffers the set
//! owns; CPU: the packed layout its kernels stream), so a call uploads and
//! computes only its own queries.

use std::sync::Arc;

use ndarray::{Array, ArrayView, Dimension};

use crate::backend::PreparedAttention;
use crate::engine::Engine;
use crate::error::Result;
use crate::ops::{OnAttention, SoftmaxParams};

/// Attention keys `Ψ` (`(B, N, d)`) and values `V` (`(B, N, q)`) kept on an
/// engine's backend for many [`attend`](Self::attend) calls; results equal
/// [`Engine::kernel_softmax`] on the same data (within `f32` rounding of a
/// different tiling).
///
/// The keys and values count against the engine's memory limit and are
/// freed when the last clone is dropped. An `AttentionSet` is
/// `Send + Sync` and cheap to clone.
///
/// ```
/// use locus::{Engine, SoftmaxParams};
/// use ndarray::array;
/// let psi = array![[10.0f32, 0.0], [0.0, 10.0]];
/// let v = array![[1.0f32], [2.0]];
/// let set = Engine::cpu().prepare_attention(psi.view(), v.view())?;
/// let phi = array![[1.0f32, 0.0], [0.0, 1.0]];
/// let out = set.attend(phi.view(), &SoftmaxParams::new())?;
/// assert!((out[[0, 0]] - 1.0).abs() < 1e-3 && (out[[1, 0]] - 2.0).abs() < 1e-3);
/// assert_eq!((set.batches(), set.keys(), set.dim(), set.value_cols()), (1, 2, 2, 1));
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct AttentionSet {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The backend's copy (it keeps its device or memory budget alive).
    prepared: Arc<dyn PreparedAttention>,
    /// Batches, keys per batch, dimension, value columns.
    shape: (usize, usize, usize, usize),
    /// The keys' largest row norm (for the logit range check).
    key_norm: f64,
    /// The factor of the outputs (values beyond `2⁶⁴` are kept divided by
    /// a power of 2).
    v_scale: f32,
}

impl Engine {
    /// Prepares attention keys `psi` (`(B, N, d)`, or `(N, d)` for one
    /// batch) and their `values` (`(B, N, q)` / `(N, q)`) for repeated
    /// [`AttentionSet::attend`] calls.
    ///
    /// # Errors
    /// Inputs that are not 2-D or 3-D, empty or non-finite, values of a
    /// different batch size or not one row per key, sizes the GPU shaders
    /// cannot index, and [`Error::MemoryLimit`](crate::Error::MemoryLimit) when the set does not fit
    /// under the engine's memory limit.
    pub fn prepare_attention<D: Dimension>(
        &self,
        psi: ArrayView<'_, f32, D>,
        values: ArrayView<'_, f32, D>,
    ) -> Result<AttentionSet> {
        let (k, v, norm_scale) = OnAttention::inputs("prepare_attention", psi, values)?;
        let prepared = self.backend_impl().prepare_attention(&k, &v)?;
        let on = OnAttention::of(&*prepared, &k, &v, norm_scale);
        let (shape, key_norm, v_scale) = (on.shape, on.key_norm, on.v_scale);
        Ok(AttentionSet {
            inner: Arc::new(Inner {
                prepared,
                shape,
                key_norm,
                v_scale,
            }),
        })
    }
}

impl AttentionSet {
    /// The ops' view of the prepared keys.
    fn on(&self) -> OnAttention<'_> {
        OnAttention {
            prepared: &*self.inner.prepared,
            shape: self.inner.shape,
            key_norm: self.inner.key_norm,
            v_scale: self.inner.v_scale,
        }
    }

    /// `softmax(s·ΦΨᵀ)V` of every batch against the prepared keys and
    /// values, as [`Engine::kernel_softmax`]: `phi` is `(B, M, d)` with the
    /// set's `B` (or `(M, d)` when it holds one batch) and gives
    /// `(B, M, q)` (or `(M, q)`). The causal mask sees query `i` the keys
    /// `j ≤ i + (N − M)`.
    ///
    /// # Errors
    /// `phi` not 2-D or 3-D, empty or non-finite, of another batch size or
    /// dimension than the set, a non-finite scale, logits that could leave
    /// the `f32` range, a causal mask with `M > N`, and backend failures.
    pub fn attend<D: Dimension>(
        &self,
        phi: ArrayView<'_, f32, D>,
        params: &SoftmaxParams,
    ) -> Result<Array<f32, D>> {
        self.on().attend_checked(phi, params)
    }

    /// Batches `B`.
    pub fn batches(&self) -> usize {
        self.inner.shape.0
    }

    /// Keys per batch `N`.
    pub fn keys(&self) -> usize {
        self.inner.shape.1
    }

    /// Feature dimension `d`.
    pub fn dim(&self) -> usize {
        self.inner.shape.2
    }

    /// Value columns `q`.
    pub fn value_cols(&self) -> usize {
        self.inner.shape.3
    }

    /// Bytes the backend holds for the keys and values.
    pub fn bytes(&self) -> u64 {
        self.inner.prepared.bytes()
    }
}

//! Inner-product kernels over feature maps (docs/numerics.md, "The quantities"): the kernel softmax
//! `softmax(s·ΦΨᵀ)V` (attention), its weight matrix, the linear feature
//! local mean `(ΦΨᵀV) ⊘ (ΦΨᵀ1)`, and the helper that splits and merges
//! attention heads.
//!
//! Every op is batched: `phi` is `(B, M, d)`, `psi` `(B, N, d)`, `values`
//! `(B, N, q)`, where `B` counts heads × batch; 2-D inputs are one batch
//! (`B = 1`) and give 2-D results.
//!
//! **Causal mask.** Query `i` of a batch sees the keys `j ≤ i + (N − M)`:
//! with `M = N` the usual "key index ≤ query index"; with `M < N` the
//! queries are the last `M` positions of a sequence of `N` (decoding).
//! `M > N` is an error ([`Error::CausalShape`]).

use ndarray::{
    Array, Array2, Array3, ArrayView, ArrayView2, ArrayView3, Axis, Dimension, Ix2, IxDyn,
};

use crate::backend::PreparedAttention;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::matrix::{Matrix, try_collect};
use crate::types::{Attention, Heads};

/// Logits (and the scaled queries) must stay below this size, so that a
/// dot product, its partial sums and differences of two logits are finite
/// `f32` numbers (the largest is about 3.4·10³⁸).
pub(crate) const LOGIT_LIMIT: f64 = 1e37;

/// Parameters of [`Engine::kernel_softmax`] and [`Engine::softmax_matrix`].
///
/// ```
/// use locus::SoftmaxParams;
/// let p = SoftmaxParams::new().with_causal(true).with_scale(0.125);
/// assert_eq!((p.scale, p.causal), (Some(0.125), true));
/// assert_eq!(SoftmaxParams::default().scale, None); // 1/√d
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SoftmaxParams {
    /// Logit scale `s` in `softmax(s·ΦΨᵀ)`; `None` is `1/√d`. Any finite
    /// value is accepted (0 gives uniform weights, a negative one favours
    /// dissimilar keys).
    pub scale: Option<f32>,
    /// Restrict query `i` to the keys `j ≤ i + (N − M)` (see the module
    /// documentation).
    pub causal: bool,
}

impl SoftmaxParams {
    /// Scale `1/√d`, no mask.
    pub fn new() -> Self {
        SoftmaxParams::default()
    }

    /// The same parameters with logit scale `scale`.
    pub fn with_scale(self, scale: f32) -> Self {
        SoftmaxParams {
            scale: Some(scale),
            ..self
        }
    }

    /// The same parameters with the causal mask on or off.
    pub fn with_causal(self, causal: bool) -> Self {
        SoftmaxParams { causal, ..self }
    }
}

/// The result of [`Engine::feature_local_mean`]: local means shaped like
/// the queries (`(B, M, q)` or `(M, q)`) and the number of rows whose
/// weights `⟨φ_i, ψ_j⟩` are all zero. Such a row has no defined average; it
/// is NaN and counted, as in [`RowNormalized`](crate::RowNormalized).
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureLocalMean<D: Dimension> {
    /// The local means.
    pub values: Array<f32, D>,
    /// Rows (over all batches) with no kernel mass, filled with NaN.
    pub empty_rows: usize,
}

impl Engine {
    /// The kernel softmax (attention) `softmax(s·ΦΨᵀ)V`, per batch: row `i`
    /// of the result is `Σ_j w_ij v_j` with `w_ij ∝ exp(s·⟨φ_i, ψ_j⟩)` over
    /// the keys the mask allows.
    ///
    /// One pass on both backends: an online softmax keeps a running maximum
    /// and sum per query row (docs/numerics.md, "Row states and their merge"), so logits of any size (up to the
    /// `f32` range) neither overflow nor underflow to 0/0, and the `M × N`
    /// scores are never stored. Shapes: `phi` `(B, M, d)`, `psi`
    /// `(B, N, d)`, `values` `(B, N, q)` → `(B, M, q)`; 2-D inputs are one
    /// batch.
    ///
    /// ```
    /// use locus::{Engine, SoftmaxParams};
    /// use ndarray::array;
    /// let phi = array![[1.0f32, 0.0], [0.0, 1.0]];
    /// let psi = array![[10.0f32, 0.0], [0.0, 10.0]];
    /// let v = array![[1.0f32], [2.0]];
    /// let out = Engine::cpu().kernel_softmax(phi.view(), psi.view(), v.view(), &SoftmaxParams::new())?;
    /// assert!((out[[0, 0]] - 1.0).abs() < 1e-3 && (out[[1, 0]] - 2.0).abs() < 1e-3);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// Inputs that are not 2-D or 3-D, empty, non-finite, of different
    /// batch sizes, `phi`/`psi` dimension mismatch, `values` rows ≠ `psi`
    /// rows, a non-finite scale, logits that could leave the `f32` range,
    /// a causal mask with `M > N`, and backend failures.
    pub fn kernel_softmax<D: Dimension>(
        &self,
        phi: ArrayView<'_, f32, D>,
        psi: ArrayView<'_, f32, D>,
        values: ArrayView<'_, f32, D>,
        params: &SoftmaxParams,
    ) -> Result<Array<f32, D>> {
        const OP: &str = "kernel_softmax";
        let (p, k) = pair(OP, phi, psi)?;
        let v = heads(OP, "values", values)?;
        check_values(OP, &k, &v)?;
        let key_norm = max_row_norm(&k.data);
        let attn = attention_for(OP, &p, (k.rows, key_norm), params)?;
        let (v, v_scale) = safe_values(OP, v)?;
        let prepared = self.backend_impl().prepare_attention_call(&k, &v)?;
        OnAttention::of(&*prepared, &k, &v, (key_norm, v_scale)).attend(&p, &attn)
    }

    /// The normalized attention weights `softmax(s·ΦΨᵀ)` (`(B, M, N)`, or
    /// `(M, N)` for 2-D inputs), for inspection and pictures; masked
    /// entries are 0 and every row sums to 1.
    ///
    /// Tiled like [`kernel_matrix`](Self::kernel_matrix): on the GPU a row
    /// pass finds each row's maximum and sum, then the entries are written
    /// block by block.
    ///
    /// # Errors
    /// As [`kernel_softmax`](Self::kernel_softmax), and an output too large
    /// to allocate.
    pub fn softmax_matrix<D: Dimension>(
        &self,
        phi: ArrayView<'_, f32, D>,
        psi: ArrayView<'_, f32, D>,
        params: &SoftmaxParams,
    ) -> Result<Array<f32, D>> {
        const OP: &str = "softmax_matrix";
        let (p, k) = pair(OP, phi, psi)?;
        let attn = attention(OP, &p, &k, params)?;
        let out = self.backend_impl().softmax_matrix(&p, &k, &attn)?;
        shaped(p.batch, p.rows, k.rows, p.ndim, out)
    }

    /// The linear feature local mean `(ΦΨᵀV) ⊘ (ΦΨᵀ1)`: row `i` is
    /// `Σ_j ⟨φ_i, ψ_j⟩ v_j / Σ_j ⟨φ_i, ψ_j⟩` over the keys the mask allows.
    ///
    /// Computed as `Φ(ΨᵀV) ⊘ Φ(Ψᵀ1)` in `O((M + N)·d·q)`, never forming
    /// `ΦΨᵀ`; with `causal`, from prefix sums of `ψ_j v_jᵀ` and `ψ_j` over
    /// the keys. Features must be non-negative so the weights form a
    /// kernel. A row whose weights are all zero is NaN and counted.
    ///
    /// ```
    /// use locus::Engine;
    /// use ndarray::array;
    /// let phi = array![[1.0f32, 0.0], [0.0, 0.0]];
    /// let psi = array![[1.0f32, 0.0], [3.0, 0.0]];
    /// let v = array![[2.0f32], [6.0]];
    /// let m = Engine::cpu().feature_local_mean(phi.view(), psi.view(), v.view(), false)?;
    /// assert_eq!(m.values[[0, 0]], 5.0); // (1·2 + 3·6) / (1 + 3)
    /// assert!(m.values[[1, 0]].is_nan()); // φ = 0: no weight at all
    /// assert_eq!(m.empty_rows, 1);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`kernel_softmax`](Self::kernel_softmax) (without the scale
    /// checks), and [`Error::NegativeFeature`] for a negative entry of
    /// `phi` or `psi`.
    pub fn feature_local_mean<D: Dimension>(
        &self,
        phi: ArrayView<'_, f32, D>,
        psi: ArrayView<'_, f32, D>,
        values: ArrayView<'_, f32, D>,
        causal: bool,
    ) -> Result<FeatureLocalMean<D>> {
        const OP: &str = "feature_local_mean";
        let (p, k) = pair(OP, phi, psi)?;
        let v = heads(OP, "values", values)?;
        check_values(OP, &k, &v)?;
        non_negative(OP, "phi", &p)?;
        non_negative(OP, "psi", &k)?;
        check_causal(OP, &p, k.rows, causal)?;
        let (v, v_scale) = safe_values(OP, v)?;
        let (mut out, empty_rows) = self.backend_impl().feature_local_mean(&p, &k, &v, causal)?;
        scale_back(&mut out, v_scale);
        let values = shaped(p.batch, p.rows, v.cols(), p.ndim, out)?;
        Ok(FeatureLocalMean { values, empty_rows })
    }
}

/// Splits attention heads: `(T, H·d)` → `(H, T, d)`, head `h` taking the
/// columns `h·d .. (h+1)·d`.
///
/// ```
/// use locus::{merge_heads, split_heads};
/// use ndarray::array;
/// let x = array![[1.0f32, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]];
/// let h = split_heads(x.view(), 2)?;
/// assert_eq!(h.dim(), (2, 2, 2));
/// assert_eq!(h[[1, 0, 0]], 3.0);
/// assert_eq!(merge_heads(h.view()), x);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// # Errors
/// [`Error::InvalidParameter`] when `heads` is 0 or does not divide the
/// number of columns.
pub fn split_heads(x: ArrayView2<'_, f32>, heads: usize) -> Result<Array3<f32>> {
    let (t, cols) = x.dim();
    if heads == 0 || cols % heads != 0 {
        return Err(Error::InvalidParameter {
            name: "heads",
            reason: format!("{heads} heads do not divide {cols} columns"),
        });
    }
    let d = cols / heads;
    Ok(Array3::from_shape_fn((heads, t, d), |(h, i, k)| {
        x[[i, h * d + k]]
    }))
}

/// Merges attention heads: `(H, T, d)` → `(T, H·d)`, the inverse of
/// [`split_heads`].
pub fn merge_heads(x: ArrayView3<'_, f32>) -> Array2<f32> {
    let (h, t, d) = x.dim();
    let mut out = Array2::zeros((t, h * d));
    for (hi, head) in x.axis_iter(Axis(0)).enumerate() {
        out.slice_mut(ndarray::s![.., hi * d..(hi + 1) * d])
            .assign(&head);
    }
    out
}

/// Attention keys and values prepared on a backend, and what queries are
/// checked against: the one path of [`Engine::kernel_softmax`] (keys
/// prepared for its call) and [`AttentionSet`](crate::AttentionSet) (kept).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OnAttention<'a> {
    /// The backend's keys and values.
    pub prepared: &'a dyn PreparedAttention,
    /// Batches `B`, keys per batch `N`, dimension `d`, value columns `q`.
    pub shape: (usize, usize, usize, usize),
    /// The keys' largest row norm (the logit range check).
    pub key_norm: f64,
    /// What the outputs are multiplied by: 1, or the power of 2 the values
    /// were divided by ([`OnAttention::inputs`]).
    pub v_scale: f32,
}

impl<'a> OnAttention<'a> {
    /// `prepared` holding keys `psi` (of largest row norm `key_norm`) and
    /// their `values` (divided by `v_scale`).
    pub(crate) fn of(
        prepared: &'a dyn PreparedAttention,
        psi: &Heads<'_>,
        values: &Heads<'_>,
        (key_norm, v_scale): (f64, f32),
    ) -> Self {
        OnAttention {
            prepared,
            shape: (psi.batch, psi.rows, psi.cols(), values.cols()),
            key_norm,
            v_scale,
        }
    }

    /// Checks attention keys `psi` and their `values` for `op` (2-D or
    /// 3-D, finite, one value row per key, batch by batch); the values as
    /// the backends take them, and what [`of`](Self::of) needs besides:
    /// the keys' largest row norm and the factor of the outputs
    /// ([`safe_values`]).
    pub(crate) fn inputs<'v, D: Dimension>(
        op: &'static str,
        psi: ArrayView<'v, f32, D>,
        values: ArrayView<'v, f32, D>,
    ) -> Result<(Heads<'v>, Heads<'v>, (f64, f32))> {
        let k = heads(op, "psi", psi)?;
        let v = heads(op, "values", values)?;
        check_values(op, &k, &v)?;
        let (v, v_scale) = safe_values(op, v)?;
        let key_norm = max_row_norm(&k.data);
        Ok((k, v, (key_norm, v_scale)))
    }

    /// `softmax(s·ΦΨᵀ)V` of queries `phi` against the prepared keys, with
    /// parameters checked against them.
    pub(crate) fn attend_checked<D: Dimension>(
        &self,
        phi: ArrayView<'_, f32, D>,
        params: &SoftmaxParams,
    ) -> Result<Array<f32, D>> {
        const OP: &str = "kernel_softmax";
        let (batch, n, d, _) = self.shape;
        let p = heads(OP, "phi", phi)?;
        check_keys(OP, &p, ("prepared keys", batch, d))?;
        let attn = attention_for(OP, &p, (n, self.key_norm), params)?;
        self.attend(&p, &attn)
    }

    /// `softmax(s·ΦΨᵀ)V` of checked queries `p`, shaped like them.
    fn attend<D: Dimension>(&self, p: &Heads<'_>, attn: &Attention) -> Result<Array<f32, D>> {
        let mut out = self.prepared.attend(p, attn)?;
        scale_back(&mut out, self.v_scale);
        shaped(p.batch, p.rows, self.shape.3, p.ndim, out)
    }
}

/// Values whose largest magnitude passes this (`2⁶⁴`) are divided by a
/// power of 2 before a backend sees them, and the outputs multiplied back:
/// the backends add weights times values in `f32` (attention's tiles of up
/// to 512 keys on the CPU, whose weights reach `e⁵`; `f32` states and the
/// linear feature sums on the GPU), which must not overflow where the
/// answer, an average of the values, is within range.
const VALUES_SAFE: f32 = 18_446_744_073_709_551_616.0;

/// `values` as the backends take them: the same, borrowed, when within
/// [`VALUES_SAFE`], else a copy divided by `2^k`, the smallest power of 2
/// that brings them within it (exact, but for values under `2⁻¹²⁶·2^k`,
/// far below the outputs' precision); and the factor `2^k` (1 for none).
fn safe_values<'v>(op: &'static str, v: Heads<'v>) -> Result<(Heads<'v>, f32)> {
    let top = v.data.max_abs();
    if top <= VALUES_SAFE {
        return Ok((v, 1.0));
    }
    let k = (top.log2().ceil() as i32 - 64).max(1);
    let down = 2.0f32.powi(-k);
    let scaled = v.data.as_slice().iter().map(|&x| x * down);
    let data = try_collect(op, "scaled values", v.data.as_slice().len(), scaled)?;
    let data = Matrix::check_owned(op, "values", (v.data.rows(), v.data.cols()), data)?;
    Ok((Heads { data, ..v }, 2.0f32.powi(k)))
}

/// Multiplies averages of values divided by `f` ([`safe_values`]) back
/// by `f`. An average of values within the `f32` range is within it; only
/// its last rounding could step past `f32::MAX`, hence the clamp (NaN, an
/// empty row, stays NaN).
fn scale_back(out: &mut [f32], f: f32) {
    if f != 1.0 {
        out.iter_mut()
            .for_each(|x| *x = (*x * f).clamp(-f32::MAX, f32::MAX));
    }
}

/// Checks one input and stacks its batches along the rows.
fn heads<'a, D: Dimension>(
    op: &'static str,
    what: &'static str,
    view: ArrayView<'a, f32, D>,
) -> Result<Heads<'a>> {
    let shape = view.shape().to_vec();
    let (batch, rows, cols) = match *shape.as_slice() {
        [r, c] => (1, r, c),
        [b, r, c] => (b, r, c),
        _ => {
            return Err(Error::Rank {
                op,
                what,
                ndim: shape.len(),
            });
        }
    };
    let stacked = batch.checked_mul(rows).ok_or(Error::TooLarge {
        op,
        what,
        bytes: u64::MAX,
    })?;
    let data = if view.is_standard_layout() {
        let flat = view
            .into_dyn()
            .into_shape_with_order(IxDyn(&[stacked, cols]))
            .and_then(|v| v.into_dimensionality::<Ix2>())
            .map_err(|e| Error::InvalidParameter {
                name: what,
                reason: e.to_string(),
            })?;
        Matrix::check(op, what, flat)?
    } else {
        // Logical (row-major) order, copied.
        let owned = try_collect(op, what, view.len(), view.iter().copied())?;
        Matrix::check_owned(op, what, (stacked, cols), owned)?
    };
    Ok(Heads {
        data,
        batch,
        rows,
        ndim: shape.len(),
    })
}

/// Checks `phi` and `psi`: same batch size (a matrix is one batch) and dimension.
fn pair<'a, D: Dimension>(
    op: &'static str,
    phi: ArrayView<'a, f32, D>,
    psi: ArrayView<'a, f32, D>,
) -> Result<(Heads<'a>, Heads<'a>)> {
    let p = heads(op, "phi", phi)?;
    let k = heads(op, "psi", psi)?;
    check_keys(op, &p, ("psi", k.batch, k.cols()))?;
    Ok((p, k))
}

/// Checks that keys `what` of `batch` batches in `cols` dimensions suit
/// the queries `p`: the same batch count and dimension.
fn check_keys(
    op: &'static str,
    p: &Heads<'_>,
    (what, batch, cols): (&'static str, usize, usize),
) -> Result<()> {
    if p.batch != batch {
        return Err(Error::BatchMismatch {
            op,
            what,
            expected: p.batch,
            got: batch,
        });
    }
    if p.cols() != cols {
        return Err(Error::DimensionMismatch {
            op,
            queries: p.cols(),
            keys: cols,
        });
    }
    Ok(())
}

/// Checks that `values` has one row per key, batch by batch.
fn check_values(op: &'static str, keys: &Heads<'_>, values: &Heads<'_>) -> Result<()> {
    if values.batch != keys.batch {
        return Err(Error::BatchMismatch {
            op,
            what: "values",
            expected: keys.batch,
            got: values.batch,
        });
    }
    if values.rows != keys.rows {
        return Err(Error::RowMismatch {
            op,
            keys: keys.rows,
            values: values.rows,
        });
    }
    Ok(())
}

fn check_causal(op: &'static str, p: &Heads<'_>, key_rows: usize, causal: bool) -> Result<()> {
    if causal && p.rows > key_rows {
        return Err(Error::CausalShape {
            op,
            queries: p.rows,
            keys: key_rows,
        });
    }
    Ok(())
}

/// Validates the softmax parameters against the data: a finite scale, a
/// causal mask that leaves every query a key, and logits within range.
fn attention(
    op: &'static str,
    p: &Heads<'_>,
    k: &Heads<'_>,
    params: &SoftmaxParams,
) -> Result<Attention> {
    attention_for(op, p, (k.rows, max_row_norm(&k.data)), params)
}

/// [`attention`] against keys known by their rows per batch and their
/// largest row norm (a prepared set's).
fn attention_for(
    op: &'static str,
    p: &Heads<'_>,
    (key_rows, key_norm): (usize, f64),
    params: &SoftmaxParams,
) -> Result<Attention> {
    let scale = params
        .scale
        .unwrap_or_else(|| 1.0 / (p.cols() as f32).sqrt());
    if !scale.is_finite() {
        return Err(Error::InvalidParameter {
            name: "scale",
            reason: format!("must be finite, got {scale}"),
        });
    }
    check_causal(op, p, key_rows, params.causal)?;
    // |s·⟨φ, ψ⟩| ≤ |s|·‖φ‖·‖ψ‖, and every partial sum of the dot product
    // obeys the same bound (Cauchy–Schwarz on a subset of coordinates).
    let s = f64::from(scale.abs());
    let (np, nk) = (max_row_norm(&p.data), key_norm);
    let bound = (s * np * nk).max(s * np);
    if bound > LOGIT_LIMIT {
        return Err(Error::LogitOverflow { op, bound });
    }
    Ok(Attention {
        scale,
        causal: params.causal,
    })
}

fn max_row_norm(m: &Matrix<'_>) -> f64 {
    m.as_slice()
        .chunks_exact(m.cols())
        .map(|r| r.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>())
        .fold(0.0f64, f64::max)
        .sqrt()
}

fn non_negative(op: &'static str, what: &'static str, h: &Heads<'_>) -> Result<()> {
    let d = h.cols();
    match h.data.as_slice().iter().position(|&x| x < 0.0) {
        Some(pos) => Err(Error::NegativeFeature {
            op,
            what,
            row: pos / d,
            col: pos % d,
            value: h.data.as_slice()[pos],
        }),
        None => Ok(()),
    }
}

/// Shapes a backend's row-major result `(B·rows) × cols` like the inputs.
fn shaped<D: Dimension>(
    batch: usize,
    rows: usize,
    cols: usize,
    ndim: usize,
    data: Vec<f32>,
) -> Result<Array<f32, D>> {
    let shape: Vec<usize> = if ndim == 2 {
        vec![rows, cols]
    } else {
        vec![batch, rows, cols]
    };
    Array::from_shape_vec(IxDyn(&shape), data)
        .and_then(|a| a.into_dimensionality::<D>())
        .map_err(|e| Error::InvalidParameter {
            name: "output shape",
            reason: e.to_string(),
        })
}

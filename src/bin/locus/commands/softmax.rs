//! `locus softmax`: the kernel softmax (attention) `softmax(s·ΦΨᵀ)V`, or
//! with `--linear` the feature local mean `(ΦΨᵀV) ⊘ (ΦΨᵀ1)`, per head.

use std::path::{Path, PathBuf};

use locus::{Engine, SoftmaxParams, merge_heads, split_heads};
use ndarray::{Array3, ArrayView3, Axis};
use serde_json::json;

use super::Job;
use crate::args::Compute;
use crate::error::{CliError, CliResult};
use crate::io;
use crate::report::Summary;
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus softmax`.
#[derive(Debug, clap::Args)]
pub struct SoftmaxArgs {
    /// Query features Φ: M×d (one head) or B×M×d (.npy, heads first).
    #[arg(long, value_name = "A")]
    phi: PathBuf,
    /// Key features Ψ: N×d or B×N×d.
    #[arg(long, value_name = "B")]
    psi: PathBuf,
    /// Values V: N×q or B×N×q, one row per key.
    #[arg(long, value_name = "V")]
    values: PathBuf,
    /// Logit scale s (default 1/√d). Any finite number.
    #[arg(
        long,
        value_name = "S",
        allow_hyphen_values = true,
        conflicts_with = "linear"
    )]
    scale: Option<f32>,
    /// Causal mask: query i sees the keys j ≤ i + (N − M) (with M = N: the
    /// keys up to its own position).
    #[arg(long)]
    causal: bool,
    /// The linear feature local mean (ΦΨᵀV) ⊘ (ΦΨᵀ1) instead of the
    /// softmax, in O((M+N)·d·q); features must be non-negative, and a row
    /// with no weight is NaN.
    #[arg(long)]
    linear: bool,
    /// Treat 2-D inputs as H heads side by side, (T, H·d) → (H, T, d); the
    /// output is merged back to (M, H·q).
    #[arg(long, value_name = "H")]
    heads: Option<usize>,
    /// Where to write the local means: M×q, or B×M×q for 3-D inputs (.npy;
    /// a .csv file only takes a matrix result).
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    /// Also write the attention weights softmax(s·ΦΨᵀ): M×N, or B×M×N
    /// (rows sum to 1, masked entries 0). Stores the whole matrix.
    #[arg(long, value_name = "W", conflicts_with = "linear")]
    weights: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// One input, as a stack of heads.
struct Stack {
    flag: &'static str,
    path: PathBuf,
    data: Array3<f32>,
    /// Axes in the file (2 for a matrix, 3 for a stack).
    ndim: usize,
}

impl Stack {
    fn load(flag: &'static str, path: &Path, heads: Option<usize>) -> CliResult<Stack> {
        let (data, ndim) = io::read_stack(flag, path)?;
        let data = match heads {
            None => data,
            Some(h) if ndim == 2 => split_heads(data.index_axis(Axis(0), 0), h).map_err(|e| {
                CliError::input(format!("--heads {h}: {flag} {}: {e}", path.display()))
            })?,
            Some(h) => {
                return Err(CliError::input(format!(
                    "--heads {h}: {flag} {} is already 3-D (heads first); --heads splits 2-D inputs",
                    path.display()
                )));
            }
        };
        Ok(Stack {
            flag,
            path: path.to_path_buf(),
            data,
            ndim,
        })
    }

    fn view(&self) -> ArrayView3<'_, f32> {
        self.data.view()
    }

    fn describe(&self) -> String {
        let (b, r, c) = self.data.dim();
        format!("{} {} ({b}×{r}×{c})", self.flag, self.path.display())
    }
}

/// Runs `locus softmax`.
pub fn run(a: &SoftmaxArgs) -> CliResult<()> {
    io::check_outputs(&[
        ("--output", Some(&a.output)),
        ("--weights", a.weights.as_deref()),
    ])?;
    if a.heads == Some(0) {
        return Err(CliError::input("--heads must be at least 1"));
    }
    let phi = Stack::load("--phi", &a.phi, a.heads)?;
    let psi = Stack::load("--psi", &a.psi, a.heads)?;
    let values = Stack::load("--values", &a.values, a.heads)?;
    check_shapes(&phi, &psi, &values)?;

    let (b, m, d) = phi.data.dim();
    let (n, q) = (psi.data.dim().1, values.data.dim().2);
    // Layout of the results: 3-D inputs give stacks (heads first); with
    // --heads the output is merged back to (M, H·q) and the weights are a
    // stack; otherwise both are matrices.
    let stacked = a.heads.is_none() && [&phi, &psi, &values].iter().any(|s| s.ndim == 3);
    needs_npy("--output", &a.output, stacked)?;
    if let Some(w) = &a.weights {
        needs_npy("--weights", w, stacked || a.heads.is_some())?;
    }

    let params = SoftmaxParams {
        scale: a.scale,
        causal: a.causal,
    };
    let (linear, causal, with_weights) = (a.linear, a.causal, a.weights.is_some());
    let (x, y, v) = (phi.view(), psi.view(), values.view());
    // The local means, the count of rows with no weight (--linear), and
    // the weights when asked for.
    type Out = (Array3<f32>, usize, Option<Array3<f32>>);
    let op = |e: &Engine| -> locus::Result<Out> {
        let (r, empty) = if linear {
            let r = e.feature_local_mean(x, y, v, causal)?;
            (r.values, r.empty_rows)
        } else {
            (e.kernel_softmax(x, y, v, &params)?, 0)
        };
        let w = match with_weights {
            true => Some(e.softmax_matrix(x, y, &params)?),
            false => None,
        };
        Ok((r, empty, w))
    };

    let command = if linear {
        "softmax --linear"
    } else {
        "softmax"
    };
    let mut job = Job::open(command, &a.common)?;
    let (result, empty_rows, weights) = job.run(op)?;
    let seconds = job.seconds();
    let scale = v.iter().fold(0.0f32, |s, x| s.max(x.abs()));
    job.verify(op, |(other, _, other_w)| {
        let dev = Deviation::between(result.view(), other.view(), Tolerance::local_mean(scale));
        match (&weights, other_w) {
            (Some(w), Some(ow)) => worse(
                dev,
                Deviation::between(w.view(), ow.view(), Tolerance::MATRIX),
            ),
            _ => dev,
        }
    })?;

    // Query–key pairs the mask lets through, per head.
    let visible: f64 = if causal {
        (0..m).map(|i| (i + 1 + (n - m)) as f64).sum()
    } else {
        (m * n) as f64
    };
    let pairs = b as f64 * visible;
    let mut fields = vec![
        ("causal", json!(causal)),
        ("linear", json!(linear)),
        ("pairs_per_second", json!(pairs / seconds.max(1e-9))),
    ];
    if linear {
        fields.push(("empty_rows", json!(empty_rows)));
    } else {
        let s = a.scale.unwrap_or(1.0 / (d as f32).sqrt());
        fields.push(("scale", json!(s)));
        // Two multiply-adds per (pair, feature): scores Φψ and weights × V.
        fields.push((
            "flops_per_second",
            json!(2.0 * pairs * (d + q) as f64 / seconds.max(1e-9)),
        ));
    }
    let mut outputs = vec![("output", a.output.clone())];
    if let Some(w) = &a.weights {
        outputs.push(("weights", w.clone()));
    }
    let summary = Summary {
        kernel: None,
        sizes: vec![("B", b), ("M", m), ("N", n), ("d", d), ("q", q)],
        fields,
        outputs,
    };
    let heads = a.heads;
    job.finish(summary, || {
        write_stack("--output", &a.output, result.view(), stacked, heads)?;
        if let (Some(path), Some(w)) = (&a.weights, &weights) {
            write_stack(
                "--weights",
                path,
                w.view(),
                stacked || heads.is_some(),
                None,
            )?;
        }
        Ok(())
    })
}

/// Writes a result: a stack as is, merged heads as `(M, H·q)`, else the
/// one matrix.
fn write_stack(
    flag: &str,
    path: &Path,
    a: ArrayView3<'_, f32>,
    stacked: bool,
    heads: Option<usize>,
) -> CliResult<()> {
    if heads.is_some() {
        io::write_array(flag, path, merge_heads(a).view())
    } else if stacked {
        io::write_array(flag, path, a)
    } else {
        io::write_array(flag, path, a.index_axis(Axis(0), 0))
    }
}

/// Fails unless a 3-D result goes to a `.npy` file.
fn needs_npy(flag: &str, path: &Path, three_d: bool) -> CliResult<()> {
    if three_d && io::Format::of(flag, path)? == io::Format::Csv {
        return Err(CliError::input(format!(
            "{flag} {}: the result is 3-D (heads first), which needs a .npy file",
            path.display()
        )));
    }
    Ok(())
}

/// The deviation to report of two: a failing one, else the larger.
fn worse(a: Deviation, b: Deviation) -> Deviation {
    match (a.ok, b.ok) {
        (false, _) => a,
        (true, false) => b,
        _ if b.max_rel > a.max_rel => b,
        _ => a,
    }
}

/// The shape rules of the op, as messages that name the files.
fn check_shapes(phi: &Stack, psi: &Stack, values: &Stack) -> CliResult<()> {
    let (bp, _, dp) = phi.data.dim();
    let (bk, nk, dk) = psi.data.dim();
    let (bv, nv, _) = values.data.dim();
    let mismatch = |what: String| Err(CliError::input(format!("shape mismatch: {what}")));
    if bk != bp || bv != bp {
        let other = if bk != bp { psi } else { values };
        return mismatch(format!(
            "{} and {} have different numbers of heads",
            phi.describe(),
            other.describe()
        ));
    }
    if dk != dp {
        return mismatch(format!(
            "{} and {} must have the same number of columns",
            phi.describe(),
            psi.describe()
        ));
    }
    if nv != nk {
        return mismatch(format!(
            "{} needs one row per row of {}",
            values.describe(),
            psi.describe()
        ));
    }
    Ok(())
}

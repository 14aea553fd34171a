//! `locus kernel-matrix`: `K`, `D⁻¹K`, or the graph Laplacians `D − K`
//! and `I − D⁻¹K`.

use std::path::PathBuf;

use clap::ValueEnum;
use locus::{Engine, LaplacianKind};
use ndarray::Array2;
use serde_json::json;

use super::{Job, pairs_per_second};
use crate::args::{Compute, KernelArgs};
use crate::error::CliResult;
use crate::io;
use crate::points::{self, Shift};
use crate::report::Summary;
use crate::verify::{Deviation, Tolerance};

/// `--normalize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Normalize {
    /// The kernel values themselves.
    None,
    /// Rows divided by their sums: `D⁻¹K` (rows sum to 1).
    Rows,
}

/// Arguments of `locus kernel-matrix`.
#[derive(Debug, clap::Args)]
pub struct KernelMatrixArgs {
    /// Query points, M×d (default: the keys).
    #[arg(long, value_name = "Q", conflicts_with = "laplacian")]
    queries: Option<PathBuf>,
    /// Keys, N×d.
    #[arg(long, value_name = "X")]
    keys: PathBuf,
    #[command(flatten)]
    kernel: KernelArgs,
    /// Row normalization: `none` gives K, `rows` gives D⁻¹K with D = diag(K·1).
    #[arg(long, value_enum, default_value_t = Normalize::None)]
    normalize: Normalize,
    /// The graph Laplacian of the keys instead (N×N): D − K, or I − D⁻¹K
    /// with `--normalize rows`.
    #[arg(long)]
    laplacian: bool,
    /// Where to write the M×N matrix (.npy or .csv). With `--normalize
    /// rows`, a row with no key within reach of a compact kernel is NaN.
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    common: Compute,
}

/// The matrix asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Raw,
    RowNormalized,
    Laplacian(LaplacianKind),
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Raw => "K",
            Which::RowNormalized => "D^-1 K",
            Which::Laplacian(LaplacianKind::Unnormalized) => "D - K",
            Which::Laplacian(LaplacianKind::RandomWalk) => "I - D^-1 K",
        }
    }
}

/// Runs `locus kernel-matrix`.
pub fn run(a: &KernelMatrixArgs) -> CliResult<()> {
    io::check_output("--output", &a.output)?;
    let kernel = a.kernel.kernel()?;
    let (_, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::Invariant)?;
    let which = match (a.laplacian, a.normalize) {
        (false, Normalize::None) => Which::Raw,
        (false, Normalize::Rows) => Which::RowNormalized,
        (true, Normalize::None) => Which::Laplacian(LaplacianKind::Unnormalized),
        (true, Normalize::Rows) => Which::Laplacian(LaplacianKind::RandomWalk),
    };
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    // The matrix and its count of empty rows (row-normalized only).
    let op = |e: &Engine| -> locus::Result<(Array2<f32>, Option<usize>)> {
        Ok(match which {
            Which::Raw => (e.kernel_matrix(&kernel, q, x)?, None),
            Which::RowNormalized => {
                let r = e.normalized_kernel_matrix(&kernel, q, x)?;
                (r.values, Some(r.empty_rows))
            }
            Which::Laplacian(kind) => (e.laplacian(&kernel, x, kind)?, None),
        })
    };

    let mut job = Job::open("kernel-matrix", &a.common)?;
    let (matrix, empty_rows) = job.run(op)?;
    let tolerance = match which {
        Which::Laplacian(LaplacianKind::Unnormalized) => {
            Tolerance::unnormalized_laplacian(x.nrows())
        }
        _ => Tolerance::MATRIX,
    };
    job.verify(op, |(other, _)| {
        Deviation::between(matrix.view(), other.view(), tolerance)
    })?;

    let (m, n) = (q.nrows(), x.nrows());
    let mut fields = vec![
        ("matrix", json!(which.name())),
        (
            "nonzero_entries",
            json!(matrix.iter().filter(|&&v| v != 0.0).count()),
        ),
    ];
    if let Some(e) = empty_rows {
        fields.push(("empty_rows", json!(e)));
    }
    fields.push((
        "pairs_per_second",
        json!(pairs_per_second(m, n, job.seconds())),
    ));
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("M", m), ("N", n), ("d", x.ncols())],
        fields,
        outputs: vec![("output", a.output.clone())],
    };
    job.finish(summary, || {
        io::write_array("--output", &a.output, matrix.view())
    })
}

//! `locus local-pca`: at each query, the kernel-weighted mean and the
//! leading principal directions and variances of the keys around it.

use std::path::PathBuf;

use serde_json::json;

use super::{Job, pairs_per_second};
use crate::args::{Compute, KernelArgs};
use crate::error::{CliError, CliResult};
use crate::io;
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus local-pca`.
#[derive(Debug, clap::Args)]
pub struct LocalPcaArgs {
    /// Query points, M×d (default: the keys).
    #[arg(long, value_name = "Q")]
    queries: Option<PathBuf>,
    /// Keys, N×d.
    #[arg(long, value_name = "X")]
    keys: PathBuf,
    #[command(flatten)]
    kernel: KernelArgs,
    /// Number of leading components, 1 ≤ k ≤ d.
    #[arg(long, default_value_t = 1, value_name = "K")]
    components: usize,
    /// Where to write the components: unit vectors, M×k×d in .npy, M rows
    /// of k·d in .csv (each signed so its largest entry is positive).
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    /// Where to write the local variances (M×k, descending).
    #[arg(long, value_name = "V")]
    variances: Option<PathBuf>,
    /// Where to write the local (kernel-weighted) means (M×d).
    #[arg(long, value_name = "MU")]
    means: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus local-pca`.
pub fn run(a: &LocalPcaArgs) -> CliResult<()> {
    io::check_outputs(&[
        ("--output", Some(&a.output)),
        ("--variances", a.variances.as_deref()),
        ("--means", a.means.as_deref()),
    ])?;
    let kernel = a.kernel.kernel()?;
    let (centring, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::Invariant)?;
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    let d = x.ncols();
    if !(1..=d).contains(&a.components) {
        return Err(CliError::input(format!(
            "--components must lie in 1..={d} (the keys' dimension), got {}",
            a.components
        )));
    }
    let op = |e: &locus::Engine| e.local_pca(&kernel, q, x, a.components);

    let mut job = Job::open("local-pca", &a.common)?;
    let result = job.run(op)?;
    // The variances and means are compared: eigenvectors of nearly equal
    // eigenvalues may legitimately differ between backends.
    // Means on the coordinates' scale; variances on the square of the
    // widest coordinate range (their own scale, whatever the offset).
    let scale = x.iter().fold(0.0f32, |s, v| s.max(v.abs()));
    let range = x
        .columns()
        .into_iter()
        .map(|c| {
            let (lo, hi) = c
                .iter()
                .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            hi - lo
        })
        .fold(0.0f32, f32::max);
    job.verify(op, |other| {
        let means = Deviation::between(
            result.means.view(),
            other.means.view(),
            Tolerance::local_mean(scale),
        );
        let vars = Deviation::between(
            result.variances.view(),
            other.variances.view(),
            Tolerance::local_mean(range * range),
        );
        if means.ok { vars } else { means }
    })?;

    let (m, n) = (q.nrows(), x.nrows());
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("M", m), ("N", n), ("d", d), ("k", a.components)],
        fields: vec![
            ("empty_rows", json!(result.empty_rows)),
            (
                "pairs_per_second",
                json!(pairs_per_second(m, n, job.seconds())),
            ),
        ],
        outputs: report::outputs(&[
            ("output", Some(&a.output)),
            ("variances", a.variances.as_deref()),
            ("means", a.means.as_deref()),
        ]),
    };
    job.finish(summary, || {
        io::write_array_3d("--output", &a.output, result.components.view())?;
        io::write_if(
            "--variances",
            a.variances.as_deref(),
            result.variances.view(),
        )?;
        // Positions: the offset comes back.
        points::write_positions_if(
            "--means",
            a.means.as_deref(),
            result.means.view(),
            &centring,
        )
    })
}

//! `locus kde`: kernel density estimates (or log-densities) at queries.

use std::path::PathBuf;

use locus::{Kernel, Profile};
use ndarray::Array1;
use serde_json::json;

use super::Job;
use super::variable::KernelArgs;
use crate::args::{Compute, MetricArgs};
use crate::error::{CliError, CliResult};
use crate::io::{self, Input};
use crate::points::{self, Shift};
use crate::report::Summary;
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus kde`.
#[derive(Debug, clap::Args)]
pub struct KdeArgs {
    /// Query points, M×d (default: the keys).
    #[arg(long, value_name = "Q")]
    queries: Option<PathBuf>,
    /// Sample points, N×d.
    #[arg(long, value_name = "X")]
    keys: PathBuf,
    /// Optional per-key weights (N values, non-negative).
    #[arg(long, value_name = "W")]
    weights: Option<PathBuf>,
    /// The kernel, or variable bandwidths (`--bandwidths`, `--adaptive-k`,
    /// `--abramson`, `--balloon`).
    #[command(flatten)]
    kernel: KernelArgs,
    #[command(flatten)]
    metric: MetricArgs,
    /// Write ln p̂ instead of p̂ (finite far from the data for the gaussian,
    /// laplacian and cauchy profiles; −inf outside a compact support).
    #[arg(long)]
    log: bool,
    /// Where to write the M densities (.npy or .csv).
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus kde`.
pub fn run(a: &KdeArgs) -> CliResult<()> {
    io::check_output("--output", &a.output)?;
    if a.kernel.variable() {
        return run_variable(a);
    }
    let metric = a.metric.metric()?;
    let kernel = a.kernel.fixed()?.with_metric(metric)?;
    let (_, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::of_metric(metric))?;
    let weights = a
        .weights
        .as_deref()
        .map(|p| Input::load("--weights", p))
        .transpose()?;
    if let Some(w) = &weights {
        io::same_rows(w, &keys)?;
        io::one_column(w)?;
    }
    let x = keys.data.view();
    // A profile with no finite integral in this dimension has no density:
    // a usage error, found before any work.
    kernel.check_dim("kde", x.ncols())?;
    let parts: Vec<(Profile, usize)> = match kernel.blocks() {
        None => vec![(kernel.profile(), x.ncols())],
        Some(bs) => bs.iter().map(|b| (b.profile, b.dims)).collect(),
    };
    for (p, d) in parts {
        if locus::ln_normalizer(p, d).is_err() {
            return Err(CliError::input(format!(
                "--kernel {p}: the profile has no finite integral in d = {d} (the keys' columns, or its block's), so it cannot be normalized into a density; use another kernel",
            )));
        }
    }
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    let w = weights.as_ref().map(|w| w.data.column(0));
    let op = |e: &locus::Engine| e.log_density(&kernel, q, x, w);
    let sizes = vec![("M", q.nrows()), ("N", x.nrows()), ("d", x.ncols())];
    let fields = vec![("weighted", json!(w.is_some()))];
    estimate(a, op, Some(kernel), sizes, fields)
}

/// `locus kde` with variable bandwidths (`--bandwidths`, `--adaptive-k`,
/// `--abramson`): one radial profile, Euclidean, no weights.
fn run_variable(a: &KdeArgs) -> CliResult<()> {
    let rule = a.kernel.rule(&[
        ("--weights", a.weights.is_some()),
        (
            "--metric other than euclidean",
            !a.metric.metric()?.is_euclidean(),
        ),
    ])?;
    let profile = rule.profile();
    // Euclidean only (refused above otherwise).
    let (_, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::Invariant)?;
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    if locus::ln_normalizer(profile, x.ncols()).is_err() {
        return Err(CliError::input(format!(
            "--kernel {profile}: the profile has no finite integral in d = {}, so it cannot be normalized into a density; use another kernel",
            x.ncols()
        )));
    }
    rule.check_rows(q.nrows(), x.nrows())?;
    let op = |e: &locus::Engine| {
        let bw = rule.bandwidths(e, q, x)?;
        e.log_density_variable(profile, &bw, q, x)
    };
    let sizes = vec![("M", q.nrows()), ("N", x.nrows()), ("d", x.ncols())];
    estimate(a, op, rule.pilot().cloned(), sizes, rule.fields())
}

/// Runs `op` (log densities at the queries), checks it with `--verify`,
/// and writes the densities (or their logs).
fn estimate(
    a: &KdeArgs,
    op: impl Fn(&locus::Engine) -> locus::Result<Array1<f64>>,
    kernel: Option<Kernel>,
    sizes: Vec<(&'static str, usize)>,
    mut fields: Vec<(&'static str, serde_json::Value)>,
) -> CliResult<()> {
    let mut job = Job::open("kde", &a.common)?;
    let log_p = job.run(&op)?;
    let shown = |l: &Array1<f64>| -> Array1<f32> {
        if a.log {
            l.mapv(|v| v as f32)
        } else {
            l.mapv(|v| v.exp() as f32)
        }
    };
    let result = shown(&log_p);
    // Compare what is written; −inf (zero density) on both sides agrees.
    let comparable = |v: &Array1<f32>| v.mapv(|x| if x.is_infinite() { f32::NAN } else { x });
    let scale = result
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f32, |s, v| s.max(v.abs()));
    job.verify(&op, |other| {
        Deviation::between(
            comparable(&result).view(),
            comparable(&shown(other)).view(),
            Tolerance {
                rtol: 1e-4,
                atol: if a.log { 1e-5 } else { 1e-6 * f64::from(scale) },
            },
        )
    })?;
    fields.insert(0, ("log", json!(a.log)));
    fields.push((
        "max_log_density",
        json!(log_p.iter().cloned().fold(f64::NEG_INFINITY, f64::max)),
    ));
    let summary = Summary {
        kernel,
        sizes,
        fields,
        outputs: vec![("output", a.output.clone())],
    };
    job.finish(summary, || {
        io::write_array("--output", &a.output, result.view())
    })
}

//! `locus local-mean`: Nadaraya–Watson local means `K̃Y` of values at
//! queries, or the self-local mean `K̃X`; with `--degree 1` local linear
//! regression and its slopes.

use std::path::PathBuf;

use ndarray::ArrayView2;
use serde_json::json;

use super::variable::KernelArgs;
use super::{Job, pairs_per_second};
use crate::args::Compute;
use locus::LocalFit;

use crate::error::{CliError, CliResult};
use crate::io::{self, Input};
use crate::points::{self, Centring, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus local-mean`.
#[derive(Debug, clap::Args)]
pub struct LocalMeanArgs {
    /// Query points, M×d (default: the keys).
    #[arg(long, value_name = "Q")]
    queries: Option<PathBuf>,
    /// Keys, N×d.
    #[arg(long, value_name = "X")]
    keys: PathBuf,
    /// Values, N×q, one row per key (default: the keys; with the queries
    /// also omitted this is the self-local mean K̃X, one MeanShift step).
    #[arg(long, value_name = "Y")]
    values: Option<PathBuf>,
    /// The kernel, or variable bandwidths (`--bandwidths`, `--adaptive-k`,
    /// `--abramson`, `--balloon`).
    #[command(flatten)]
    kernel: KernelArgs,
    /// Where to write the M×q local means (.npy or .csv). Rows with no key
    /// within reach of a compact kernel are NaN.
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    /// Local polynomial degree: 0 is the local mean (Nadaraya–Watson), 1
    /// local linear regression (no boundary bias for linear trends).
    #[arg(long, default_value_t = 0, value_name = "0|1")]
    degree: usize,
    /// With --degree 1: where to write the fitted local slopes, the
    /// gradient estimate (M×q×d in .npy; M×(q·d) rows in .csv).
    #[arg(long, value_name = "S")]
    slopes: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus local-mean`.
pub fn run(a: &LocalMeanArgs) -> CliResult<()> {
    io::check_outputs(&[
        ("--output", Some(&a.output)),
        ("--slopes", a.slopes.as_deref()),
    ])?;
    if a.slopes.is_some() && a.degree != 1 {
        return Err(CliError::input(
            "--slopes needs --degree 1 (local linear regression)",
        ));
    }
    if a.degree > 1 {
        return Err(CliError::input(format!(
            "--degree is 0 (local mean) or 1 (local linear), got {}",
            a.degree
        )));
    }
    if a.kernel.variable() {
        return run_variable(a);
    }
    let kernel = a.kernel.fixed()?;
    let (centring, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::Invariant)?;
    let values = a
        .values
        .as_deref()
        .map(|p| Input::load("--values", p))
        .transpose()?;
    if let Some(v) = &values {
        io::same_rows(v, &keys)?;
    }
    let self_mean = queries.is_none() && values.is_none() && a.degree == 0;
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    let y = values.as_ref().map_or(x, |v| v.data.view());
    let op = |e: &locus::Engine| {
        if self_mean {
            e.self_local_mean(&kernel, x).map(LocalFit::from)
        } else {
            e.local_polynomial(&kernel, q, x, y, a.degree)
        }
    };

    let mut job = Job::open("local-mean", &a.common)?;
    let result = job.run(op)?;
    let scale = y.iter().fold(0.0f32, |s, v| s.max(v.abs()));
    // The fitted values, then (degree 1) the slopes, whose scale is their
    // own.
    job.verify(op, |other| {
        let fit = Deviation::between(
            result.fitted.view(),
            other.fitted.view(),
            Tolerance::local_mean(scale),
        );
        match (&result.slopes, &other.slopes) {
            (Some(a), Some(b)) if fit.ok => {
                let s = a
                    .iter()
                    .filter(|v| v.is_finite())
                    .fold(0.0f32, |m, v| m.max(v.abs()));
                let tolerance = Tolerance {
                    rtol: 1e-3,
                    atol: 1e-3 * f64::from(s),
                };
                Deviation::between(a.view(), b.view(), tolerance)
            }
            _ => fit,
        }
    })?;

    let (m, n) = (q.nrows(), x.nrows());
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("M", m), ("N", n), ("d", x.ncols()), ("q", y.ncols())],
        fields: vec![
            ("self_local_mean", json!(self_mean)),
            ("degree", json!(a.degree)),
            ("empty_rows", json!(result.empty_rows)),
            ("rank_deficient_rows", json!(result.rank_deficient_rows)),
            (
                "pairs_per_second",
                json!(pairs_per_second(m, n, job.seconds())),
            ),
        ],
        outputs: report::outputs(&[("output", Some(&a.output)), ("slopes", a.slopes.as_deref())]),
    };
    job.finish(summary, || {
        write_fit(a, result.fitted.view(), values.is_none(), &centring)?;
        if let (Some(path), Some(slopes)) = (&a.slopes, &result.slopes) {
            io::write_array_3d("--slopes", path, slopes.view())?;
        }
        Ok(())
    })
}

/// `locus local-mean` with variable bandwidths: one radial profile,
/// Euclidean, degree 0.
fn run_variable(a: &LocalMeanArgs) -> CliResult<()> {
    let rule = a.kernel.rule(&[("--degree 1", a.degree != 0)])?;
    let profile = rule.profile();
    let (centring, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::Invariant)?;
    let values = a
        .values
        .as_deref()
        .map(|p| Input::load("--values", p))
        .transpose()?;
    if let Some(v) = &values {
        io::same_rows(v, &keys)?;
    }
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    let y = values.as_ref().map_or(x, |v| v.data.view());
    rule.check_rows(q.nrows(), x.nrows())?;
    let op = |e: &locus::Engine| {
        let bw = rule.bandwidths(e, q, x)?;
        e.local_mean_variable(profile, &bw, q, x, y)
    };
    let mut job = Job::open("local-mean", &a.common)?;
    let result = job.run(op)?;
    let scale = y.iter().fold(0.0f32, |s, v| s.max(v.abs()));
    job.verify(op, |other| {
        Deviation::between(
            result.values.view(),
            other.values.view(),
            Tolerance::local_mean(scale),
        )
    })?;
    let (m, n) = (q.nrows(), x.nrows());
    let mut fields = rule.fields();
    fields.extend([
        ("empty_rows", json!(result.empty_rows)),
        (
            "pairs_per_second",
            json!(pairs_per_second(m, n, job.seconds())),
        ),
    ]);
    let summary = Summary {
        kernel: rule.pilot().cloned(),
        sizes: vec![("M", m), ("N", n), ("d", x.ncols()), ("q", y.ncols())],
        fields,
        outputs: report::outputs(&[("output", Some(&a.output))]),
    };
    job.finish(summary, || {
        write_fit(a, result.values.view(), values.is_none(), &centring)
    })
}

/// Writes the fitted values; without `--values` they are local means of
/// the keys, positions: the offset comes back.
fn write_fit(
    a: &LocalMeanArgs,
    fit: ArrayView2<'_, f32>,
    of_keys: bool,
    centring: &Centring,
) -> CliResult<()> {
    match of_keys {
        true => points::write_positions("--output", &a.output, fit, centring, None),
        false => io::write_array("--output", &a.output, fit),
    }
}

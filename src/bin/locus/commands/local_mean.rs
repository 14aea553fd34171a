//! `locus local-mean`: Nadaraya–Watson local means `K̃Y` of values at
//! queries, or the self-local mean `K̃X`.

use std::path::PathBuf;

use serde_json::json;

use super::{Job, pairs_per_second};
use crate::args::{Compute, KernelArgs};
use crate::error::CliResult;
use crate::io::{self, Input};
use crate::report::Summary;
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
    #[command(flatten)]
    kernel: KernelArgs,
    /// Where to write the M×q local means (.npy or .csv). Rows with no key
    /// within reach of a compact kernel are NaN.
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus local-mean`.
pub fn run(a: &LocalMeanArgs) -> CliResult<()> {
    io::check_output("--output", &a.output)?;
    let kernel = a.kernel.kernel()?;
    let keys = Input::load("--keys", &a.keys)?;
    let queries = a
        .queries
        .as_deref()
        .map(|p| Input::load("--queries", p))
        .transpose()?;
    let values = a
        .values
        .as_deref()
        .map(|p| Input::load("--values", p))
        .transpose()?;
    if let Some(q) = &queries {
        io::same_cols(q, &keys)?;
    }
    if let Some(v) = &values {
        io::same_rows(v, &keys)?;
    }
    let self_mean = queries.is_none() && values.is_none();
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    let y = values.as_ref().map_or(x, |v| v.data.view());
    let op = |e: &locus::Engine| {
        if self_mean {
            e.self_local_mean(&kernel, x)
        } else {
            e.local_mean(&kernel, q, x, y)
        }
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
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("M", m), ("N", n), ("d", x.ncols()), ("q", y.ncols())],
        fields: vec![
            ("self_local_mean", json!(self_mean)),
            ("empty_rows", json!(result.empty_rows)),
            (
                "pairs_per_second",
                json!(pairs_per_second(m, n, job.seconds())),
            ),
        ],
        outputs: vec![("output", a.output.clone())],
    };
    job.finish(summary, || {
        io::write_array("--output", &a.output, result.values.view())
    })
}

//! `locus knn`: the k nearest keys of each query.

use std::path::PathBuf;

use serde_json::json;

use super::{Job, pairs_per_second};
use crate::args::{Compute, MetricArgs};
use crate::error::{CliError, CliResult};
use crate::io;
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus knn`.
#[derive(Debug, clap::Args)]
pub struct KnnArgs {
    /// Query points, M×d (default: the keys).
    #[arg(long, value_name = "Q")]
    queries: Option<PathBuf>,
    /// Keys, N×d.
    #[arg(long, value_name = "X")]
    keys: PathBuf,
    /// Neighbours per query (1 ≤ k ≤ N).
    #[arg(long, short)]
    k: usize,
    /// Where to write the M×k key indices (i64, nearest first, ties to the
    /// lower index).
    #[arg(long, short, value_name = "IDX")]
    output: PathBuf,
    /// Where to write the M×k distances (under --metric).
    #[arg(long, value_name = "D")]
    distances: Option<PathBuf>,
    #[command(flatten)]
    metric: MetricArgs,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus knn`.
pub fn run(a: &KnnArgs) -> CliResult<()> {
    let distances = a.distances.as_deref();
    let metric = a.metric.metric()?;
    io::check_outputs(&[("--output", Some(&a.output)), ("--distances", distances)])?;
    let (_, keys, queries) =
        points::keys_and_queries(&a.keys, a.queries.as_deref(), Shift::of_metric(metric))?;
    if a.k == 0 || a.k > keys.rows() {
        return Err(CliError::input(format!(
            "--k {}: must be between 1 and the number of keys ({} in {})",
            a.k,
            keys.rows(),
            keys.path.display()
        )));
    }
    let x = keys.data.view();
    let q = queries.as_ref().map_or(x, |q| q.data.view());
    metric.check_dim("knn", x.ncols())?;
    let op = |e: &locus::Engine| e.knn_metric(q, x, a.k, metric);

    let mut job = Job::open("knn", &a.common)?;
    let nb = job.run(op)?;
    // Distances are compared: at exact ties the indices are fixed by the
    // rule, at near-ties rounding may legitimately order them differently.
    job.verify(op, |other| {
        Deviation::between(
            nb.distances.view(),
            other.distances.view(),
            Tolerance {
                rtol: 1e-5,
                atol: 1e-6,
            },
        )
    })?;
    let summary = Summary {
        kernel: None,
        sizes: vec![
            ("M", q.nrows()),
            ("N", x.nrows()),
            ("d", x.ncols()),
            ("k", a.k),
        ],
        fields: vec![(
            "pairs_per_second",
            json!(pairs_per_second(q.nrows(), x.nrows(), job.seconds())),
        )],
        outputs: report::outputs(&[("output", Some(&a.output)), ("distances", distances)]),
    };
    job.finish(summary, || {
        io::write_array("--output", &a.output, nb.indices.view())?;
        io::write_if("--distances", distances, nb.distances.view())
    })
}

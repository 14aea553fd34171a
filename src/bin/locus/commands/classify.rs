//! `locus classify`: local-mode classification (the class with the
//! largest kernel vote), with class probabilities.

use std::path::PathBuf;

use serde_json::json;

use super::Job;
use crate::args::{Compute, KernelArgs};
use crate::error::{CliError, CliResult};
use crate::io;
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus classify`.
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// Training points, N×d.
    #[arg(long, value_name = "X")]
    train: PathBuf,
    /// Training labels: N non-negative integers (one column; .npy of any
    /// integer type or whole floats). The classes are the distinct labels
    /// present, in increasing order (the columns of --proba).
    #[arg(long, value_name = "L")]
    labels: PathBuf,
    /// Points to classify, M×d.
    #[arg(long, value_name = "Q")]
    queries: PathBuf,
    #[command(flatten)]
    kernel: KernelArgs,
    /// Queries with no training point in reach (compact kernels) get the
    /// nearest training point's label instead of −1.
    #[arg(long)]
    nearest_fallback: bool,
    /// Where to write the M predicted labels (i64; −1 unassigned).
    #[arg(long, short, value_name = "PRED")]
    output: PathBuf,
    /// Where to write the M×C class probabilities.
    #[arg(long, value_name = "P")]
    proba: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus classify`.
pub fn run(a: &ClassifyArgs) -> CliResult<()> {
    io::check_outputs(&[
        ("--output", Some(&a.output)),
        ("--proba", a.proba.as_deref()),
    ])?;
    let kernel = a.kernel.kernel()?;
    let points::Loaded {
        keys: train,
        others: [queries],
        ..
    } = points::load(
        ("--train", &a.train),
        [("--queries", Some(&a.queries))],
        Shift::Invariant,
        false,
    )?;
    let queries = queries.ok_or_else(|| CliError::compute("--queries was not read"))?;
    let labels = io::read_labels("--labels", &a.labels)?;
    if labels.len() != train.rows() {
        return Err(CliError::input(format!(
            "shape mismatch: --labels {} has {} labels; {train} needs one per row",
            a.labels.display(),
            labels.len()
        )));
    }
    let fallback = if a.nearest_fallback {
        locus::EmptyFallback::NearestNeighbour
    } else {
        locus::EmptyFallback::Unassigned
    };
    let (x, q) = (train.data.view(), queries.data.view());
    let op = |e: &locus::Engine| {
        let clf = e
            .fit_classifier(&kernel, x, labels.view(), None)?
            .with_fallback(fallback);
        Ok((clf.predict(q)?, clf.predict_proba(q)?))
    };

    let mut job = Job::open("classify", &a.common)?;
    let (pred, proba) = job.run(op)?;
    job.verify(op, |other| {
        Deviation::between(
            proba.values.view(),
            other.1.values.view(),
            Tolerance::local_mean(1.0),
        )
    })?;
    let classes = proba.values.ncols();
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![
            ("M", q.nrows()),
            ("N", x.nrows()),
            ("d", x.ncols()),
            ("classes", classes),
        ],
        fields: vec![("empty_rows", json!(pred.empty_rows))],
        outputs: report::outputs(&[("output", Some(&a.output)), ("proba", a.proba.as_deref())]),
    };
    job.finish(summary, || {
        io::write_array("--output", &a.output, pred.labels.view())?;
        io::write_if("--proba", a.proba.as_deref(), proba.values.view())
    })
}

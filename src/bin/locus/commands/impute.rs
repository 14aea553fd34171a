//! `locus impute`: fills missing entries (NaN; empty or `NA` in CSV) with
//! kernel-weighted local means over the rows that observe them.

use std::path::PathBuf;

use serde_json::json;

use super::Job;
use crate::args::{Compute, KernelArgs};
use crate::error::{CliError, CliResult};
use crate::io::{self, Points};
use crate::points::{self, Shift};
use crate::report::Summary;
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus impute`.
#[derive(Debug, clap::Args)]
pub struct ImputeArgs {
    /// Rows to fill, M×d: NaN in .npy; an empty field, NA or nan in .csv.
    #[arg(long, short, value_name = "X")]
    input: PathBuf,
    /// Rows to impute from (default: the input's own rows), N×d, which may
    /// have missing entries too.
    #[arg(long, value_name = "R")]
    reference: Option<PathBuf>,
    #[command(flatten)]
    kernel: KernelArgs,
    /// Rounds: the first measures distances over the coordinates both rows
    /// observe, each further one between the completed rows.
    #[arg(long, default_value_t = 1, value_name = "N")]
    iterations: usize,
    /// Where to write the filled M×d rows (.npy or .csv).
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus impute`.
pub fn run(a: &ImputeArgs) -> CliResult<()> {
    io::check_output("--output", &a.output)?;
    if a.iterations == 0 {
        return Err(CliError::input("--iterations must be at least 1"));
    }
    let kernel = a.kernel.kernel()?;
    let given = io::read_points("--input", &a.input, true)?;
    let reference = a
        .reference
        .as_deref()
        .map(|p| io::read_points("--reference", p, true))
        .transpose()?;
    if let Some(r) = &reference
        && r.dim().1 != given.dim().1
    {
        return Err(CliError::input(format!(
            "shape mismatch: --input has {} columns but --reference has {}",
            given.dim().1,
            r.dim().1
        )));
    }
    // Centred on the reference's mean (or the input's), missing entries
    // left out.
    let all: Vec<&Points> = std::iter::once(&given).chain(&reference).collect();
    let centring = points::centring_for(
        reference.as_ref().unwrap_or(&given),
        &all,
        Shift::Invariant,
        true,
    );
    // The observed entries are written as given.
    let offset = centring.offset();
    let observed = (given.is_wide() || offset.is_some()).then(|| given.clone());
    let data = points::rounded("--input", &a.input, given, offset)?;
    let reference = match (reference, a.reference.as_deref()) {
        (Some(r), Some(path)) => Some(points::rounded("--reference", path, r, offset)?),
        _ => None,
    };
    let op = |e: &locus::Engine| match &reference {
        Some(r) => e.impute_from(&kernel, data.view(), r.view(), a.iterations),
        None => e.impute(&kernel, data.view(), a.iterations),
    };
    let mut job = Job::open("impute", &a.common)?;
    let result = job.run(op)?;
    let scale = data
        .iter()
        .filter(|v| !v.is_nan())
        .fold(0.0f32, |s, v| s.max(v.abs()));
    job.verify(op, |other| {
        Deviation::between(
            result.values.view(),
            other.values.view(),
            Tolerance::local_mean(scale),
        )
    })?;
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![
            ("M", data.nrows()),
            ("N", reference.as_ref().map_or(data.nrows(), |r| r.nrows())),
            ("d", data.ncols()),
        ],
        fields: vec![
            ("iterations", json!(a.iterations)),
            ("imputed", json!(result.imputed)),
            ("column_mean_fallbacks", json!(result.fallback)),
        ],
        outputs: vec![("output", a.output.clone())],
    };
    // Imputed entries are positions (the offset comes back); observed
    // ones are written as given.
    job.finish(summary, || {
        points::write_positions(
            "--output",
            &a.output,
            result.values.view(),
            &centring,
            observed.as_ref(),
        )
    })
}

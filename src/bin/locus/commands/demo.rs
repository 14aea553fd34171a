//! `locus demo`: the README's main job. Generates 2-D blobs, takes one
//! MeanShift step (the self-local mean `K̃X`) on the best backend, and
//! prints the backend and the time; runs with no GPU at all.

use std::path::PathBuf;

use locus::{Engine, Kernel, Profile};
use ndarray::{Array1, Array2};
use serde_json::json;

use super::{Job, pairs_per_second};
use crate::args::{Compute, parse_bandwidth, parse_profile};
use crate::data::{self, BLOBS};
use crate::error::CliResult;
use crate::plot::{self, Scatter};
use crate::report::Summary;
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Number of points.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    points: u32,
    /// Kernel profile.
    #[arg(long, value_name = "K", default_value = "gaussian", value_parser = parse_profile)]
    kernel: Profile,
    /// Bandwidth.
    #[arg(long, value_name = "H", default_value = "0.5", value_parser = parse_bandwidth, allow_negative_numbers = true)]
    bandwidth: f32,
    /// Also draw the smoothed points, coloured by blob, to this PNG.
    #[arg(long, value_name = "PNG")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus demo`.
pub fn run(a: &DemoArgs) -> CliResult<()> {
    if let Some(p) = &a.plot {
        plot::check_path("--plot", p)?;
    }
    let kernel = Kernel::new(a.kernel, a.bandwidth)?;
    let n = a.points as usize;
    let x = data::blobs(n);
    let op = |e: &Engine| e.self_local_mean(&kernel, x.view());

    let mut job = Job::open("demo", &a.common)?;
    // The first call also compiles shaders (GPU); the reported time is the second's.
    job.run(op)?;
    let first_call = job.seconds();
    let m = job.run(op)?;
    job.verify(op, |other| {
        Deviation::between(
            m.values.view(),
            other.values.view(),
            Tolerance::local_mean(8.0),
        )
    })?;

    // Mean distance each point moved toward its blob's centre.
    let moved = (&m.values - &x)
        .rows()
        .into_iter()
        .filter(|r| r.iter().all(|v| v.is_finite()))
        .map(|r| f64::from(r.dot(&r)).sqrt())
        .sum::<f64>()
        / n as f64;
    let mut summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("N", n), ("d", 2)],
        fields: vec![
            (
                "op",
                json!("self local mean (one MeanShift step) of generated blobs"),
            ),
            ("blobs", json!(BLOBS)),
            ("first_call_seconds", json!(first_call)),
            (
                "pairs_per_second",
                json!(pairs_per_second(n, n, job.seconds())),
            ),
            ("mean_shift_length", json!(moved)),
            ("empty_rows", json!(m.empty_rows)),
        ],
        outputs: Vec::new(),
    };
    if let Some(p) = &a.plot {
        summary.outputs.push(("plot", p.clone()));
    }
    job.finish(summary, || match &a.plot {
        Some(p) => {
            let labels = Array1::from_shape_fn(n, |i| (i % BLOBS) as i64);
            let centres = Array2::from_shape_fn((BLOBS, 2), |(k, j)| data::blob_centre(k)[j]);
            let title = format!("one local-mean step of {n} blob points, {kernel}");
            plot::write_png(
                "--plot",
                p,
                &Scatter {
                    points: m.values.view(),
                    labels: labels.view(),
                    marked: Some((centres.view(), "blob centres")),
                    title: &title,
                },
            )
        }
        None => Ok(()),
    })
}

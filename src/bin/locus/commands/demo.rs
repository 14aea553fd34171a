//! `locus demo`: the README's main job. Generates 2-D blobs, clusters them
//! with MeanShift on the best backend (bin seeding, flat kernel), prints
//! the clusters found, the time and the backend, and draws `demo.png`;
//! runs with no GPU at all.

use std::path::PathBuf;

use locus::{Engine, MeanShiftParams, Profile, Seeds};
use serde_json::json;

use super::Job;
use super::mean_shift::compare;
use crate::args::{Compute, kernel_from, parse_bandwidth, parse_profile};
use crate::data::{self, BLOBS};
use crate::error::{CliError, CliResult};
use crate::plot::{self, Scatter};
use crate::report::Summary;

/// Arguments of `locus demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Number of points.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    points: u32,
    /// Kernel profile (with --blocks: one per block, or one for all).
    #[arg(long, value_name = "K", default_value = "uniform", value_parser = parse_profile, value_delimiter = ',')]
    kernel: Vec<Profile>,
    /// Bandwidth (with --blocks: one per block).
    #[arg(long, value_name = "H", default_value = "1.0", value_parser = parse_bandwidth, allow_hyphen_values = true, value_delimiter = ',')]
    bandwidth: Vec<f32>,
    /// A product kernel over the two coordinates: --blocks 1,1.
    #[arg(long, value_name = "D", value_delimiter = ',')]
    blocks: Option<Vec<usize>>,
    /// Where to draw the points coloured by cluster, modes marked.
    #[arg(long, value_name = "PNG", default_value = "demo.png")]
    plot: PathBuf,
    /// Do not draw the plot.
    #[arg(long)]
    no_plot: bool,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus demo`.
pub fn run(a: &DemoArgs) -> CliResult<()> {
    let plot_path = (!a.no_plot).then_some(&a.plot);
    if let Some(p) = plot_path {
        plot::check_path("--plot", p)?;
    }
    let kernel = kernel_from(&a.kernel, &a.bandwidth, a.blocks.as_deref())?;
    kernel.check_dim("demo", 2)?;
    // The verification's scale: the bandwidth, or a product's smallest.
    let h = kernel
        .coordinate_bandwidths(2)
        .into_iter()
        .fold(f64::INFINITY, f64::min) as f32;
    let n = a.points as usize;
    let x = data::try_blobs(n).ok_or_else(|| {
        CliError::input(format!(
            "--points {n}: {} bytes of points do not fit in memory",
            n as u64 * 8
        ))
    })?;
    let params = MeanShiftParams::new()
        .kernel(kernel)
        .seeds(Seeds::Binned { min_bin_freq: 1 })
        .check()
        .map_err(CliError::input)?;

    let mut job = Job::open("demo", &a.common)?;
    let fit = job.run_observed(300, |e: &Engine, bar| {
        e.mean_shift_with_progress(&params, x.view(), |_| bar.inc(1))
    })?;
    job.verify(
        |e: &Engine| e.mean_shift(&params, x.view()),
        |other| compare(&fit, other, h),
    )?;

    let clusters = fit.modes.nrows();
    let sizes = fit.cluster_sizes();
    if !a.common.output.json && !a.common.output.quiet {
        println!("MeanShift found {clusters} clusters in {n} points drawn around {BLOBS} centres:");
        for (c, (mode, size)) in fit.modes.rows().into_iter().zip(&sizes).enumerate() {
            println!(
                "  cluster {c}: mode ({:7.3}, {:7.3}), {size} points",
                mode[0], mode[1]
            );
        }
    }
    let mut summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("N", n), ("d", 2)],
        fields: vec![
            ("op", json!("MeanShift (bin seeding) of generated blobs")),
            ("blobs", json!(BLOBS)),
            ("clusters", json!(clusters)),
            ("cluster_sizes", json!(sizes)),
            ("iterations", json!(fit.iterations)),
            ("converged", json!(fit.converged)),
        ],
        outputs: Vec::new(),
    };
    if let Some(p) = plot_path {
        summary.outputs.push(("plot", p.clone()));
    }
    job.finish(summary, || match plot_path {
        Some(p) => {
            let title = format!("MeanShift of {n} blob points, {kernel}: {clusters} clusters");
            plot::write_png(
                "--plot",
                p,
                &Scatter {
                    points: x.view(),
                    labels: fit.labels.view(),
                    marked: Some((fit.modes.view(), "modes")),
                    title: &title,
                    origin: [0.0, 0.0],
                },
            )
        }
        None => Ok(()),
    })
}

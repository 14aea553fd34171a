//! `locus generate`: new points like the input's by local-mean diffusion
//! (iterated local means under a Gaussian noise schedule, paper §9.3).

use std::path::PathBuf;

use clap::ValueEnum;
use locus::{DiffusionParams, Engine, LevelBandwidths, NoiseSchedule, Profile, Spacing};
use ndarray::Array1;
use serde_json::json;

use super::Job;
use crate::args::{Compute, parse_profile};
use crate::error::{CliError, CliResult};
use crate::io;
use crate::plot::{self, Scatter};
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// `--schedule`: how the noise levels are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    /// Equal ratios from --sigma-min to --sigma-max.
    Geometric,
    /// Equal differences.
    Linear,
}

/// Arguments of `locus generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Data to imitate, N×d.
    #[arg(long, value_name = "X")]
    input: PathBuf,
    /// Where to write the generated samples×d points (.npy or .csv).
    #[arg(long, short, value_name = "OUT")]
    output: PathBuf,
    /// How many points to generate (default: N).
    #[arg(long, value_name = "N")]
    samples: Option<usize>,
    /// Number of noise levels T (local-mean steps).
    #[arg(long, value_name = "T", default_value_t = locus::DEFAULT_STEPS, conflicts_with = "sigmas")]
    steps: usize,
    /// Spacing of the noise levels.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Geometric, conflicts_with = "sigmas")]
    schedule: ScheduleArg,
    /// Smallest noise level σ_1 (default: 0.01 × the data's RMS distance to its mean).
    #[arg(
        long,
        value_name = "S",
        allow_hyphen_values = true,
        conflicts_with = "sigmas"
    )]
    sigma_min: Option<f64>,
    /// Largest noise level σ_T (default: 0.5 × the same scale).
    #[arg(
        long,
        value_name = "S",
        allow_hyphen_values = true,
        conflicts_with = "sigmas"
    )]
    sigma_max: Option<f64>,
    /// The noise levels themselves, σ_1,…,σ_T.
    #[arg(
        long,
        value_name = "S",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    sigmas: Option<Vec<f64>>,
    /// Kernel profile of the local means.
    #[arg(long, value_name = "K", default_value = "gaussian", value_parser = parse_profile)]
    kernel: Profile,
    /// Bandwidth of level t as a multiple of σ_t (1: the gaussian kernel is
    /// the noising step's transition density).
    #[arg(
        long,
        value_name = "C",
        default_value_t = 1.0,
        allow_hyphen_values = true,
        conflicts_with = "bandwidths"
    )]
    bandwidth_factor: f64,
    /// The bandwidths themselves, h_1,…,h_T.
    #[arg(
        long,
        value_name = "H",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    bandwidths: Option<Vec<f64>>,
    /// Seed of every random draw (same seed, same points).
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    seed: u64,
    /// Draw the data (grey) and the generated points (crosses) to this PNG.
    #[arg(long, value_name = "PNG")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus generate`.
pub fn run(a: &GenerateArgs) -> CliResult<()> {
    io::check_outputs(&[("--output", Some(&a.output))])?;
    if let Some(p) = &a.plot {
        plot::check_path("--plot", p)?;
    }
    let points::Loaded {
        centring,
        keys: input,
        others: [],
    } = points::load(("--input", &a.input), [], Shift::Invariant, false)?;
    let schedule = match &a.sigmas {
        Some(s) => NoiseSchedule::Given(s.clone()),
        None => NoiseSchedule::Spaced {
            spacing: match a.schedule {
                ScheduleArg::Geometric => Spacing::Geometric,
                ScheduleArg::Linear => Spacing::Linear,
            },
            steps: a.steps,
            min: a.sigma_min,
            max: a.sigma_max,
        },
    };
    let bandwidths = match &a.bandwidths {
        Some(h) => LevelBandwidths::Given(h.clone()),
        None => LevelBandwidths::Noise {
            factor: a.bandwidth_factor,
        },
    };
    let mut params = DiffusionParams::new()
        .schedule(schedule)
        .bandwidths(bandwidths)
        .profile(a.kernel)
        .seed(a.seed);
    if let Some(m) = a.samples {
        params = params.samples(m);
    }
    // Bad parameters (and data they cannot use) are reported before any work.
    let params = params.check().map_err(CliError::input)?;
    let x = input.data.view();
    let plan = params
        .resolve(x)
        .map_err(|e| CliError::input(format!("--input {}: {e}", input.path.display())))?;
    let steps = plan.steps();

    let mut job = Job::open("generate", &a.common)?;
    let out = job.run_observed(steps as u64, |e: &Engine, bar| {
        e.generate_with_progress(&params, x, |done, steps| {
            bar.inc(1);
            bar.set_message(format!("generate: step {done} of {steps}"));
        })
    })?;
    // The runs agree step by step to local-mean accuracy; end to end, the
    // last (smallest) level turns rounding at near ties into moves of
    // about 1e-4 of the largest level.
    let sigma_max = plan.sigmas().iter().fold(0.0f64, |m, &s| m.max(s));
    job.verify(
        |e: &Engine| e.generate(&params, x),
        |other| {
            Deviation::between(
                out.samples.view(),
                other.samples.view(),
                Tolerance {
                    rtol: 1e-3,
                    atol: 2e-3 * sigma_max,
                },
            )
        },
    )?;

    let summary = Summary {
        kernel: None,
        sizes: vec![
            ("N", x.nrows()),
            ("d", x.ncols()),
            ("samples", out.samples.nrows()),
            ("T", steps),
        ],
        fields: vec![
            ("profile", json!(a.kernel.name())),
            ("seed", json!(a.seed)),
            ("sigmas", json!(out.sigmas)),
            ("bandwidths", json!(out.bandwidths)),
            ("empty_rows", json!(out.empty_rows)),
        ],
        outputs: report::outputs(&[("output", Some(&a.output)), ("plot", a.plot.as_deref())]),
    };
    job.finish(summary, || {
        // Positions: the offset comes back.
        points::write_positions("--output", &a.output, out.samples.view(), &centring, None)?;
        if let Some(p) = &a.plot {
            let labels = Array1::from_elem(x.nrows(), -1i64);
            let title = format!(
                "local-mean diffusion, {} {steps} steps: {} points",
                a.kernel.name(),
                out.samples.nrows()
            );
            plot::write_png(
                "--plot",
                p,
                &Scatter {
                    points: x,
                    labels: labels.view(),
                    marked: Some((out.samples.view(), "generated")),
                    title: &title,
                    origin: points::plot_origin(&centring),
                },
            )?;
        }
        Ok(())
    })
}

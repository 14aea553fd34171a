//! `locus medoid-shift`: MedoidShift clustering; every cluster centre is a
//! sample point.

use std::path::PathBuf;

use locus::{Engine, MedoidShiftParams};
use ndarray::{Array1, Axis};
use serde_json::json;

use super::Job;
use crate::args::{Compute, KernelArgs};
use crate::error::{CliError, CliResult};
use crate::io::{self, Input};
use crate::plot::{self, Scatter};
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus medoid-shift`.
#[derive(Debug, clap::Args)]
pub struct MedoidShiftArgs {
    /// Points to cluster, N×d.
    #[arg(long, value_name = "X")]
    input: PathBuf,
    #[command(flatten)]
    kernel: KernelArgs,
    /// Most rounds of jumps.
    #[arg(long, value_name = "N", default_value_t = 300)]
    max_iter: usize,
    /// Where to write the N labels (i64).
    #[arg(long, value_name = "L")]
    labels: PathBuf,
    /// Where to write the medoids' coordinates (C×d), most populated first.
    #[arg(long, value_name = "M")]
    medoids: Option<PathBuf>,
    /// Draw the points coloured by cluster, medoids marked, to this PNG.
    #[arg(long, value_name = "PNG")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus medoid-shift`.
pub fn run(a: &MedoidShiftArgs) -> CliResult<()> {
    let medoids = a.medoids.as_deref();
    io::check_outputs(&[("--labels", Some(&a.labels)), ("--medoids", medoids)])?;
    if let Some(p) = &a.plot {
        plot::check_path("--plot", p)?;
    }
    let given = io::read_points("--input", &a.input, false)?;
    let centring = points::centring_for(&given, &[&given], Shift::Invariant, false);
    // Medoids are input points: written as given.
    let as_given = given.is_wide().then(|| given.to_f64());
    let input = Input {
        flag: "--input",
        path: a.input.clone(),
        data: points::rounded("--input", &a.input, given, centring.offset())?,
    };
    let kernel = a.kernel.kernel()?;
    kernel.check_dim("medoid-shift", input.data.ncols())?;
    let params = MedoidShiftParams::new()
        .kernel(kernel)
        .max_iter(a.max_iter)
        .check()
        .map_err(CliError::input)?;
    let x = input.data.view();
    let op = |e: &Engine| e.medoid_shift(&params, x);

    let mut job = Job::open("medoid-shift", &a.common)?;
    let fit = job.run(op)?;
    job.verify(op, |other| {
        let as_f32 = |l: &Array1<i64>| l.mapv(|v| v as f32);
        let mut d = Deviation::between(
            as_f32(&fit.labels).view(),
            as_f32(&other.labels).view(),
            Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
        );
        if fit.medoids != other.medoids {
            d.ok = false;
        }
        d
    })?;
    let clusters = fit.medoids.len();
    let summary = Summary {
        kernel: Some(kernel),
        sizes: vec![("N", x.nrows()), ("d", x.ncols())],
        fields: vec![
            ("clusters", json!(clusters)),
            ("medoid_indices", json!(fit.medoids)),
            ("populations", json!(fit.populations)),
            ("iterations", json!(fit.iterations)),
            ("converged", json!(fit.converged)),
        ],
        outputs: report::outputs(&[
            ("labels", Some(&a.labels)),
            ("medoids", medoids),
            ("plot", a.plot.as_deref()),
        ]),
    };
    job.finish(summary, || {
        io::write_array("--labels", &a.labels, fit.labels.view())?;
        match &as_given {
            Some(x) => io::write_if("--medoids", medoids, x.select(Axis(0), &fit.medoids).view())?,
            None => io::write_if("--medoids", medoids, fit.modes.view())?,
        }
        if let Some(p) = &a.plot {
            let title = format!("MedoidShift, {kernel}: {clusters} clusters");
            plot::write_png(
                "--plot",
                p,
                &Scatter {
                    points: x,
                    labels: fit.labels.view(),
                    marked: Some((fit.modes.view(), "medoids")),
                    title: &title,
                    origin: points::plot_origin(&centring),
                },
            )?;
        }
        Ok(())
    })
}

//! `locus select-bandwidth`: the bandwidth with the least leave-one-out
//! error of the local mean, one scalar from candidates, or with
//! `--per-feature` one per feature (a diagonal metric) by bounded
//! quasi-Newton on the error's gradient.

use std::path::PathBuf;

use ndarray::Array2;
use serde_json::json;

use super::Job;
use crate::args::{Compute, parse_bandwidth, parse_profile};
use crate::error::{CliError, CliResult};
use crate::io::{self, Input};
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};
use locus::{Engine, PerFeatureOptions, Profile};

/// Arguments of `locus select-bandwidth`.
#[derive(Debug, clap::Args)]
pub struct SelectBandwidthArgs {
    /// Points, N×d.
    #[arg(long, short, value_name = "X")]
    points: PathBuf,
    /// Targets, N×q, one row per point (default: the points themselves,
    /// self-supervised).
    #[arg(long, value_name = "Y")]
    values: Option<PathBuf>,
    /// Kernel profile (any but uniform with --per-feature).
    #[arg(long, value_name = "K", default_value = "gaussian", value_parser = parse_profile)]
    kernel: Profile,
    /// Scalar candidates h1,h2,… (default: Scott's bandwidth times
    /// 2^(k/2), k = −8…4).
    #[arg(long, value_name = "H", value_parser = parse_bandwidth, value_delimiter = ',', conflicts_with = "per_feature")]
    candidates: Option<Vec<f32>>,
    /// One bandwidth per feature, by bounded quasi-Newton (L-BFGS-B) on
    /// ln h from each feature's spread.
    #[arg(long)]
    per_feature: bool,
    /// With --per-feature: most quasi-Newton iterations.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100,
        requires = "per_feature"
    )]
    max_iter: usize,
    /// Where to write the chosen bandwidth(s), one row (.npy or .csv).
    #[arg(long, short, value_name = "OUT")]
    output: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// What either mode chose.
struct Chosen {
    bandwidths: Vec<f32>,
    error: f64,
    empty_rows: usize,
    fields: Vec<(&'static str, serde_json::Value)>,
}

/// Runs `locus select-bandwidth`.
pub fn run(a: &SelectBandwidthArgs) -> CliResult<()> {
    io::check_outputs(&[("--output", a.output.as_deref())])?;
    if a.max_iter == 0 {
        return Err(CliError::input("--max-iter must be at least 1"));
    }
    if a.per_feature && a.kernel == Profile::Uniform {
        return Err(CliError::input(
            "--per-feature needs a differentiable profile: the uniform's error is a step \
             function of the bandwidths",
        ));
    }
    let points::Loaded { keys: points, .. } =
        points::load(("--points", &a.points), [], Shift::Invariant, false)?;
    let values = a
        .values
        .as_deref()
        .map(|p| Input::load("--values", p))
        .transpose()?;
    if let Some(v) = &values {
        io::same_rows(v, &points)?;
    }
    let x = points.data.view();
    let y = values.as_ref().map(|v| v.data.view());
    let candidates = match &a.candidates {
        Some(c) => c.clone(),
        None if a.per_feature => Vec::new(),
        None => {
            let h = locus::scott_bandwidth(x)?;
            (-8..=4).map(|k| h * 2f32.powf(k as f32 / 2.0)).collect()
        }
    };
    let options = PerFeatureOptions {
        max_iterations: a.max_iter,
        ..PerFeatureOptions::default()
    };
    let op = |e: &Engine| -> locus::Result<Chosen> {
        if a.per_feature {
            let s = e.select_bandwidths_per_feature(a.kernel, x, y, &options)?;
            Ok(Chosen {
                fields: vec![
                    ("initial", json!(s.initial)),
                    ("iterations", json!(s.iterations)),
                    ("evaluations", json!(s.evaluations)),
                    ("converged", json!(s.converged)),
                ],
                bandwidths: s.bandwidths,
                error: s.error,
                empty_rows: s.empty_rows,
            })
        } else {
            let s = e.select_bandwidth(a.kernel, x, y, &candidates)?;
            let best = s
                .curve
                .iter()
                .find(|c| c.bandwidth == s.best)
                .copied()
                .expect("the best is a candidate"); // ok: select_bandwidth picks from the curve
            let curve: Vec<_> = s
                .curve
                .iter()
                .map(|c| json!({"bandwidth": c.bandwidth, "error": c.error, "empty_rows": c.empty_rows}))
                .collect();
            Ok(Chosen {
                bandwidths: vec![s.best],
                error: best.error,
                empty_rows: best.empty_rows,
                fields: vec![("curve", json!(curve))],
            })
        }
    };
    let mut job = Job::open("select-bandwidth", &a.common)?;
    let chosen = job.run(op)?;
    // The backends may stop at slightly different bandwidths: their
    // errors are compared.
    job.verify(op, |other| {
        let one = |c: &Chosen| Array2::from_elem((1, 1), c.error as f32);
        let tolerance = Tolerance {
            rtol: 1e-3,
            atol: 0.0,
        };
        Deviation::between(one(&chosen).view(), one(other).view(), tolerance)
    })?;
    let mut fields = vec![
        (
            "mode",
            json!(if a.per_feature {
                "per-feature"
            } else {
                "scalar"
            }),
        ),
        ("profile", json!(a.kernel.name())),
        ("bandwidths", json!(chosen.bandwidths)),
        ("error", json!(chosen.error)),
        ("empty_rows", json!(chosen.empty_rows)),
    ];
    fields.extend(chosen.fields.iter().cloned());
    let summary = Summary {
        kernel: None,
        sizes: vec![
            ("N", x.nrows()),
            ("d", x.ncols()),
            ("q", y.map_or(x.ncols(), |v| v.ncols())),
        ],
        fields,
        outputs: report::outputs(&[("output", a.output.as_deref())]),
    };
    let row = Array2::from_shape_vec((1, chosen.bandwidths.len()), chosen.bandwidths.clone())
        .expect("one row"); // ok: the shape is the vector's length
    job.finish(summary, || match &a.output {
        Some(path) => io::write_array("--output", path, row.view()),
        None => Ok(()),
    })
}

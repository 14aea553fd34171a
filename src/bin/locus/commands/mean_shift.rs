//! `locus mean-shift`: MeanShift clustering (scikit-learn's semantics, any
//! kernel, classic or blurring), with labels, modes and a plot.

use std::cell::RefCell;
use std::path::PathBuf;

use clap::ValueEnum;
use locus::{AdaptiveBandwidth, Bandwidth, Engine, MeanShiftFit, MeanShiftParams, Profile, Seeds};
use serde_json::json;

use super::Job;
use crate::args::{Compute, kernel_from, parse_bandwidth, parse_profile};
use crate::error::{CliError, CliResult};
use crate::io::{self, Input};
use crate::plot::{self, Scatter};
use crate::points::{self, Shift};
use crate::report::{self, Summary};
use crate::verify::{Deviation, Tolerance};

/// `--seeds`: where the iterations start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeedsArg {
    /// Every point is a seed.
    All,
    /// One seed per occupied grid bin of side h (scikit-learn's bin seeding).
    Binned,
}

/// Arguments of `locus mean-shift`.
#[derive(Debug, clap::Args)]
pub struct MeanShiftArgs {
    /// Points to cluster, N×d.
    #[arg(long, value_name = "X")]
    input: PathBuf,
    /// Bandwidth h (without it, estimated from --quantile); with --blocks,
    /// one per block (h1,h2,…).
    #[arg(long, value_name = "H", value_parser = parse_bandwidth, allow_hyphen_values = true, conflicts_with = "quantile", value_delimiter = ',')]
    bandwidth: Option<Vec<f32>>,
    /// Joint MeanShift with a product kernel over consecutive coordinate
    /// blocks of these sizes (d1,d2,…; e.g. 2,3 for pixels as row, col,
    /// L, u, v), each with its own --bandwidth and --kernel; tol and the
    /// unassigned reach are then in units of the blocks' bandwidths.
    #[arg(long, value_name = "D", value_delimiter = ',', requires = "bandwidth")]
    blocks: Option<Vec<usize>>,
    /// Estimate h as the mean distance to the ⌊quantile·N⌋-th neighbour
    /// (scikit-learn's estimate_bandwidth; default 0.3); the estimate is reported.
    #[arg(long, value_name = "Q", allow_hyphen_values = true)]
    quantile: Option<f64>,
    /// Kernel profile (default: uniform, scikit-learn's flat kernel); with
    /// --blocks, one per block or one for all.
    #[arg(long, value_name = "K", default_value = "uniform", value_parser = parse_profile, value_delimiter = ',')]
    kernel: Vec<Profile>,
    /// Seeds: every point, or one per grid bin.
    #[arg(long, value_enum, default_value_t = SeedsArg::All)]
    seeds: SeedsArg,
    /// With --seeds binned: fewest points a bin needs to give a seed.
    #[arg(long, value_name = "N", default_value_t = 1)]
    min_bin_freq: usize,
    /// Most iterations.
    #[arg(long, value_name = "N", default_value_t = 300)]
    max_iter: usize,
    /// A seed stops when it moves at most tol·h.
    #[arg(
        long,
        value_name = "T",
        default_value_t = 1e-3,
        allow_hyphen_values = true
    )]
    tol: f64,
    /// Move the points themselves (blurring MeanShift).
    #[arg(long)]
    blurring: bool,
    /// Variable-bandwidth MeanShift (Comaniciu–Ramesh–Meer) with these
    /// per-point bandwidths (N values, .npy or .csv).
    #[arg(long, value_name = "B", conflicts_with_all = ["bandwidth", "quantile", "adaptive_k", "blocks", "blurring"])]
    bandwidths: Option<PathBuf>,
    /// Variable-bandwidth MeanShift with h_j = alpha × the distance from
    /// point j to its K-th nearest other point; tol, the modes' merging
    /// and the unassigned reach use each seed's or mode's own h.
    #[arg(long, value_name = "K", conflicts_with_all = ["bandwidth", "quantile", "blocks", "blurring"])]
    adaptive_k: Option<usize>,
    /// The factor of --adaptive-k.
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_hyphen_values = true,
        requires = "adaptive_k"
    )]
    alpha: f32,
    /// Label points farther than h from every mode −1 instead of assigning
    /// them to the nearest.
    #[arg(long)]
    no_cluster_all: bool,
    /// Where to write the N labels (i64; −1 unassigned).
    #[arg(long, value_name = "L")]
    labels: PathBuf,
    /// Where to write the C×d modes, most populated first.
    #[arg(long, value_name = "M")]
    modes: Option<PathBuf>,
    /// Draw the points coloured by cluster, modes marked, to this PNG.
    #[arg(long, value_name = "PNG")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    common: Compute,
}

/// Runs `locus mean-shift`.
pub fn run(a: &MeanShiftArgs) -> CliResult<()> {
    io::check_outputs(&[
        ("--labels", Some(&a.labels)),
        ("--modes", a.modes.as_deref()),
    ])?;
    if let Some(p) = &a.plot {
        plot::check_path("--plot", p)?;
    }
    // Per-point bandwidths, first: binned seeds use their median.
    let given_bandwidths = a
        .bandwidths
        .as_deref()
        .map(|p| Input::load("--bandwidths", p))
        .transpose()?;
    if let Some(b) = &given_bandwidths {
        io::one_column(b)?;
    }
    let shift = match a.seeds {
        SeedsArg::All => Shift::Invariant,
        // The bins are cells of side h from the origin: the points move by
        // whole cells, or not at all where the cell is found by the run
        // (--quantile, --adaptive-k) or differs per block (--blocks).
        SeedsArg::Binned => match (&given_bandwidths, a.bandwidth.as_deref(), &a.blocks) {
            (Some(b), _, None) => {
                let mut hs = b.data.column(0).to_vec();
                hs.sort_by(f32::total_cmp);
                Shift::WholeCells(points::as_written(hs[hs.len() / 2]))
            }
            // The cell as written (0.7, not the f32 nearest it): far from
            // the origin the difference would add up to whole cells.
            (None, Some([h]), None) if a.adaptive_k.is_none() => {
                Shift::WholeCells(points::as_written(*h))
            }
            _ => Shift::Matters,
        },
    };
    let points::Loaded {
        centring,
        keys: mut input,
        others: [],
    } = points::load(("--input", &a.input), [], shift, false)?;
    // A product kernel (--blocks), or the one profile of a radial kernel.
    let product = match &a.blocks {
        Some(dims) => {
            let k = kernel_from(&a.kernel, a.bandwidth.as_deref().unwrap_or(&[]), Some(dims))?;
            k.check_dim("mean-shift", input.data.ncols())?;
            Some(k)
        }
        None => None,
    };
    let profile = match (&product, a.kernel.as_slice()) {
        (Some(_), _) => Profile::Gaussian,
        (None, [p]) => *p,
        (None, ps) => {
            return Err(CliError::input(format!(
                "--kernel gives {} profiles without --blocks; a radial kernel takes one",
                ps.len()
            )));
        }
    };
    let rule = match (a.bandwidth.as_deref(), a.quantile) {
        (Some(_), _) if product.is_some() => Bandwidth::Fixed(1.0),
        (Some([h]), _) => Bandwidth::Fixed(*h),
        (Some(hs), _) => {
            return Err(CliError::input(format!(
                "--bandwidth gives {} bandwidths without --blocks; a radial kernel takes one",
                hs.len()
            )));
        }
        (None, q) => Bandwidth::Quantile {
            quantile: q.unwrap_or(0.3),
            n_samples: None,
        },
    };
    let seeds = match a.seeds {
        SeedsArg::All => Seeds::All,
        SeedsArg::Binned => Seeds::Binned {
            min_bin_freq: a.min_bin_freq,
        },
    };
    let adaptive = match (&given_bandwidths, a.adaptive_k) {
        (Some(b), _) => {
            io::same_rows(b, &input)?;
            Some(AdaptiveBandwidth::PerPoint(b.data.column(0).to_vec()))
        }
        (None, Some(k)) => Some(AdaptiveBandwidth::Knn { k, alpha: a.alpha }),
        (None, None) => None,
    };
    let build = |rule: Bandwidth| {
        let p = MeanShiftParams::new().profile(profile).bandwidth_rule(rule);
        let p = match &adaptive {
            Some(ad) => p.adaptive_bandwidth(ad.clone()),
            None => p,
        };
        match product {
            Some(k) => p.kernel(k),
            None => p,
        }
        .seeds(seeds.clone())
        .max_iter(a.max_iter)
        .tol(a.tol)
        .blurring(a.blurring)
        .cluster_all(!a.no_cluster_all)
        .check()
        .map_err(CliError::input)
    };
    // Bad parameters are reported before any work.
    build(rule)?;
    let (n, d) = input.data.dim();

    let mut job = Job::open("mean-shift", &a.common)?;
    // The bandwidth is resolved once, so both backends of --verify use it
    // (variable bandwidths: resolved by each run, the same on both).
    let h = match rule {
        Bandwidth::Fixed(h) => h,
        _ if adaptive.is_some() => 1.0,
        _ => {
            let q = a.quantile.unwrap_or(0.3);
            job.engine()
                .estimate_bandwidth(input.data.view(), q, None)
                .map_err(|e| quantile_error(e, q, n, &input))?
        }
    };
    let params = build(Bandwidth::Fixed(h))?;
    // When nothing needs the points afterwards (no plot, no second run),
    // they are handed to the library, which centres them in place: large
    // inputs then cost one copy of the data, not two.
    let handed_over = (a.plot.is_none() && !a.common.verify)
        .then(|| RefCell::new(Some(std::mem::take(&mut input.data))));
    let x = input.data.view();
    let fit = job.run_observed(a.max_iter as u64, |e: &Engine, bar| {
        let report = |p: &locus::Progress| {
            bar.inc(1);
            bar.set_message(format!(
                "mean-shift: iteration {}, {} moving, max shift {:.2e}",
                p.iteration, p.moving, p.max_shift
            ));
        };
        match handed_over.as_ref().and_then(|c| c.borrow_mut().take()) {
            Some(points) => e.mean_shift_owned(&params, points, report),
            None => e.mean_shift_with_progress(&params, x, report),
        }
    })?;
    job.verify(
        |e: &Engine| e.mean_shift(&params, x),
        // A product's modes are compared in units of each block's
        // bandwidth (where the shift ran).
        |other| match product {
            Some(k) => {
                let hs = k.coordinate_bandwidths(d);
                let unit = |f: &MeanShiftFit| {
                    let mut g = f.clone();
                    for mut row in g.modes.rows_mut() {
                        for (v, &hk) in row.iter_mut().zip(&hs) {
                            *v = (f64::from(*v) / hk) as f32;
                        }
                    }
                    g
                };
                compare(&unit(&fit), &unit(other), 1.0)
            }
            None if adaptive.is_some() => compare(&fit, other, fit.bandwidth),
            None => compare(&fit, other, h),
        },
    )?;

    // Variable bandwidths: the median of the points' bandwidths.
    let h = if adaptive.is_some() { fit.bandwidth } else { h };
    let clusters = fit.modes.nrows();
    let summary = Summary {
        kernel: Some(match product {
            Some(k) => k,
            None => locus::Kernel::new(profile, h)?,
        }),
        sizes: vec![("N", n), ("d", d)],
        fields: vec![
            // A product kernel's bandwidths are its blocks' (under "kernel").
            (
                "bandwidth",
                if product.is_some() {
                    json!(null)
                } else {
                    json!(h)
                },
            ),
            (
                "bandwidth_estimated",
                json!(a.bandwidth.is_none() && adaptive.is_none()),
            ),
            (
                "adaptive",
                match (&a.bandwidths, a.adaptive_k) {
                    (Some(_), _) => json!("per-point bandwidths from --bandwidths"),
                    (None, Some(k)) => json!(format!("knn k={k} alpha={}", a.alpha)),
                    (None, None) => json!(null),
                },
            ),
            ("clusters", json!(clusters)),
            ("populations", json!(fit.populations)),
            ("iterations", json!(fit.iterations)),
            ("converged", json!(fit.converged)),
            (
                "unassigned",
                json!(fit.labels.iter().filter(|&&l| l < 0).count()),
            ),
        ],
        outputs: report::outputs(&[
            ("labels", Some(&a.labels)),
            ("modes", a.modes.as_deref()),
            ("plot", a.plot.as_deref()),
        ]),
    };
    job.finish(summary, || {
        io::write_array("--labels", &a.labels, fit.labels.view())?;
        // Positions: the offset comes back.
        points::write_positions_if("--modes", a.modes.as_deref(), fit.modes.view(), &centring)?;
        if let Some(p) = &a.plot {
            let kernel = match product {
                Some(k) => k.to_string(),
                None => format!("{profile} h={h:.3}"),
            };
            let title = format!(
                "MeanShift{}, {kernel}: {clusters} clusters",
                if a.blurring { " (blurring)" } else { "" },
            );
            plot::write_png(
                "--plot",
                p,
                &Scatter {
                    points: x,
                    labels: fit.labels.view(),
                    marked: Some((fit.modes.view(), "modes")),
                    title: &title,
                    origin: points::plot_origin(&centring),
                },
            )?;
        }
        Ok(())
    })
}

/// The error of a failed bandwidth estimate: a quantile too small for the
/// number of points is the quantile's fault, not the data's.
fn quantile_error(e: locus::Error, q: f64, n: usize, input: &Input) -> CliError {
    let k = (q * n as f64) as u64;
    if matches!(e, locus::Error::Cluster(_)) && (0.0..=1.0).contains(&q) && k < 2 {
        return CliError::input(format!(
            "--quantile {q:?}: too small for {n} points: the estimate averages the distance to the ⌊quantile·N⌋ = {k}-th nearest neighbour, and the nearest is the point itself (distance 0); use a quantile of at least 2/N = {:.3e}, or --bandwidth",
            2.0 / n as f64
        ));
    }
    CliError::input(format!("--input {}: {e}", input.path.display()))
}

/// Modes within 1e-4·h (same count) and identical labels.
pub fn compare(a: &MeanShiftFit, b: &MeanShiftFit, h: f32) -> Deviation {
    let mut d = Deviation::between(
        a.modes.view(),
        b.modes.view(),
        Tolerance {
            rtol: 0.0,
            atol: 1e-4 * f64::from(h),
        },
    );
    if a.labels != b.labels {
        d.ok = false;
    }
    d
}

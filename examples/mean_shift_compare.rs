//! Runs the MeanShift benchmark scenarios once per backend, prints the
//! times and writes the data, labels and modes as `.npy` files, so another
//! implementation can be timed and compared on the very same points
//! (`benches/compare_sklearn.py` does that for scikit-learn).
//!
//! ```sh
//! cargo run --release --example mean_shift_compare -- --out /tmp/ms all5k bin100k
//! ```
//!
//! Scenarios (8 blob centres in [−10, 10]², standard deviation 0.6,
//! bandwidth 1.0):
//! `all5k` (5000 points, every point a seed, flat kernel),
//! `bin100k` (10⁵ points, bin seeding, flat), `bin1m` (10⁶, bin seeding,
//! flat), `gauss20k` (2·10⁴ points, every point a seed, gaussian kernel).
//! Options: `--backends cpu,gpu` (default `cpu`), `--repeat R` (best of R,
//! default 3), `--progress` (print every iteration).

#[path = "../benches/support/blobs.rs"]
mod blobs;

use std::path::PathBuf;
use std::time::Instant;

use locus::{Device, Engine, EngineOptions, MeanShiftParams, Profile, Seeds};

struct Scenario {
    name: &'static str,
    n: usize,
    profile: Profile,
    seeds: Seeds,
}

fn scenarios() -> Vec<Scenario> {
    let binned = Seeds::Binned { min_bin_freq: 1 };
    vec![
        Scenario {
            name: "all5k",
            n: 5000,
            profile: Profile::Uniform,
            seeds: Seeds::All,
        },
        Scenario {
            name: "bin100k",
            n: 100_000,
            profile: Profile::Uniform,
            seeds: binned.clone(),
        },
        Scenario {
            name: "bin1m",
            n: 1_000_000,
            profile: Profile::Uniform,
            seeds: binned,
        },
        Scenario {
            name: "gauss20k",
            n: 20_000,
            profile: Profile::Gaussian,
            seeds: Seeds::All,
        },
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = PathBuf::from("mean_shift_compare");
    let mut backends = "cpu".to_string();
    let mut repeat = 3usize;
    let mut show = false;
    let mut chosen = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = PathBuf::from(args.next().ok_or("--out needs a directory")?),
            "--backends" => backends = args.next().ok_or("--backends needs a list")?,
            "--repeat" => repeat = args.next().ok_or("--repeat needs a number")?.parse()?,
            "--progress" => show = true,
            other => chosen.push(other.to_string()),
        }
    }
    let mut engines = Vec::new();
    for b in backends.split(',') {
        match b {
            "cpu" => engines.push(("cpu", Engine::cpu())),
            "gpu" => engines.push((
                "gpu",
                Engine::with_options(EngineOptions::new(Device::Gpu))?,
            )),
            other => return Err(format!("unknown backend {other}").into()),
        }
    }
    let mut times = String::new();
    for sc in scenarios() {
        if !chosen.is_empty() && !chosen.iter().any(|c| c == sc.name) {
            continue;
        }
        let dir = out.join(sc.name);
        std::fs::create_dir_all(&dir)?;
        let (x, _) = blobs::blobs(sc.n, 2, 8, 0.6, 42);
        blobs::write_npy_f32(&dir.join("data.npy"), &x)?;
        let params = MeanShiftParams::new()
            .bandwidth(1.0)
            .profile(sc.profile)
            .seeds(sc.seeds.clone())
            .check()?;
        for (name, engine) in &engines {
            let mut best = f64::INFINITY;
            let mut fit = None;
            for _ in 0..repeat {
                let t = Instant::now();
                let f = engine.mean_shift_with_progress(&params, x.view(), |p| {
                    if show {
                        eprintln!(
                            "  {:7.2} s  iteration {:3}: {:7} seeds moving, largest shift {:.2e}",
                            t.elapsed().as_secs_f64(),
                            p.iteration,
                            p.moving,
                            p.max_shift
                        );
                    }
                })?;
                best = best.min(t.elapsed().as_secs_f64());
                fit = Some(f);
            }
            let fit = fit.ok_or("--repeat must be at least 1")?;
            println!(
                "{:9} {:4} n={:8} modes={:3} iterations={:3} converged={} best of {repeat}: {best:.4} s  ({})",
                sc.name,
                name,
                sc.n,
                fit.modes.nrows(),
                fit.iterations,
                fit.converged,
                engine.backend()
            );
            blobs::write_npy_i64(
                &dir.join(format!("labels_{name}.npy")),
                fit.labels.as_slice().unwrap_or(&[]),
            )?;
            blobs::write_npy_f32(&dir.join(format!("modes_{name}.npy")), &fit.modes)?;
            times.push_str(&format!("{}\t{name}\t{best}\n", sc.name));
        }
    }
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("times.tsv"), times)?;
    Ok(())
}

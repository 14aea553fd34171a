//! The `locus` command-line tool: parses arguments, loads files, calls the
//! library, writes results. Nothing here computes an op.
//!
//! Layout: `args` (shared options), `io` (.npy/.csv in and out), `commands`
//! (one file per subcommand, and the `Job` every compute subcommand runs
//! through), `report` (text and `--json`), `verify` (tolerances and
//! deviations), `progress` (the stderr bar), `plot` (PNG scatter plots),
//! `data` (generated data), `error` (messages and exit codes).

mod args;
mod commands;
mod data;
mod error;
mod io;
mod plot;
mod progress;
mod report;
mod verify;

use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{
    bench, classify, demo, info, kde, kernel_matrix, knn, local_mean, mean_shift, medoid_shift,
    softmax,
};
use error::{CliResult, EXIT_COMPUTE};

#[derive(Parser)]
#[command(
    name = "locus",
    version,
    about = "Localization methods (local means, MeanShift, kernel matrices, KDE, classification, kNN, attention) on the GPU (wgpu) and CPU (rayon)",
    after_help = "Inputs: .npy (f32/f64, C or Fortran order, 1-D = one column; 3-D = heads first for softmax) or .csv (optional header, # comments).\n\
                  Outputs by extension: .npy (f32) or .csv. Exit status: 0 ok, 2 bad usage or input, 1 failure while computing."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List GPU adapters, the backend `auto` chooses, limits and features.
    Info(info::InfoArgs),
    /// Nadaraya–Watson local means K̃Y of values at queries (default: the
    /// self-local mean K̃X).
    LocalMean(local_mean::LocalMeanArgs),
    /// The kernel matrix K, D⁻¹K, or a graph Laplacian D − K, I − D⁻¹K.
    KernelMatrix(kernel_matrix::KernelMatrixArgs),
    /// Kernel density estimates (or log-densities) at query points.
    Kde(kde::KdeArgs),
    /// Local-mode classification: the class with the largest kernel vote.
    Classify(classify::ClassifyArgs),
    /// The k nearest keys of each query (indices and distances).
    Knn(knn::KnnArgs),
    /// MeanShift clustering: labels, modes, plot.
    MeanShift(mean_shift::MeanShiftArgs),
    /// MedoidShift clustering: labels, medoids (sample points), plot.
    MedoidShift(medoid_shift::MedoidShiftArgs),
    /// Kernel softmax (attention) softmax(s·ΦΨᵀ)V per head, or the linear
    /// feature local mean (ΦΨᵀV) ⊘ (ΦΨᵀ1).
    Softmax(softmax::SoftmaxArgs),
    /// Every op on generated data on the GPU and the CPU: times, speed-ups,
    /// pair evaluations per second, deviations.
    Bench(bench::BenchArgs),
    /// Cluster generated 2-D blobs with MeanShift on the best backend; print
    /// the clusters, backend and time; draw demo.png.
    Demo(demo::DemoArgs),
}

fn run(command: &Command) -> CliResult<()> {
    match command {
        Command::Info(a) => info::run(a),
        Command::LocalMean(a) => local_mean::run(a),
        Command::KernelMatrix(a) => kernel_matrix::run(a),
        Command::Kde(a) => kde::run(a),
        Command::Classify(a) => classify::run(a),
        Command::Knn(a) => knn::run(a),
        Command::MeanShift(a) => mean_shift::run(a),
        Command::MedoidShift(a) => medoid_shift::run(a),
        Command::Softmax(a) => softmax::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Demo(a) => demo::run(a),
    }
}

fn main() -> ExitCode {
    // Mesa's device-select layer prints a warning in every process without
    // XDG_RUNTIME_DIR; it has no bearing on compute. Silence it for users.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    // A bug must still end in one line on stderr, never a backtrace.
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        // A closed stdout (`locus info | head -1`) is not worth a word.
        if !msg.contains("Broken pipe") {
            let at = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            eprintln!("error: internal error{at}: {}", error::one_line(&msg));
        }
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return error::clap_exit(e),
    };
    match panic::catch_unwind(AssertUnwindSafe(|| run(&cli.command))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => e.report(),
        Err(_) => ExitCode::from(EXIT_COMPUTE),
    }
}

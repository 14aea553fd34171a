//! The `locus` command-line tool: parses arguments, loads files, calls the
//! library, writes results. Nothing here computes an op.
//!
//! Layout: `args` (shared options), `io` (.npy/.csv in and out by
//! format, over the `npy` and `delimited` readers and writers), `atomic`
//! (output paths checked up front, outputs written to temporary files and
//! put in place together), `commands` (one file per subcommand, and the
//! `Job` every compute subcommand runs through), `report` (text and
//! `--json`), `verify` (tolerances and deviations), `progress` (the stderr
//! bar), `plot` (PNG scatter plots), `data` (generated data), `error`
//! (messages and exit codes), `serve` (`locus serve`, the HTTP service;
//! feature `serve`).

mod args;
mod atomic;
mod commands;
mod data;
mod delimited;
mod error;
mod io;
mod npy;
mod npy_write;
mod plot;
mod points;
mod progress;
mod report;
#[cfg(feature = "serve")]
mod serve;
mod verify;

use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use commands::{
    bench, classify, demo, generate, impute, info, kde, kernel_matrix, knn, local_mean, local_pca,
    mean_shift, medoid_shift, select_bandwidth, softmax,
};
use error::{CliResult, EXIT_COMPUTE};

#[derive(Parser)]
#[command(
    name = "locus",
    version,
    about = "Localization methods (local means, MeanShift, kernel matrices, KDE, classification, kNN, attention) on the GPU (wgpu) and CPU (rayon)",
    after_help = "Inputs: .npy (f32/f64, C or Fortran order, 1-D = one column; 3-D = heads first for softmax; labels: any integer type or whole floats) or .csv (header row detected, or set with --header/--no-header; # comments).\n\
                  Outputs by extension: .npy (f32) or .csv. Exit status: 0 ok, 2 bad usage or input, 1 failure while computing.",
    arg_required_else_help = true
)]
struct Cli {
    /// CSV inputs: the first row is a header (skipped). Without this or
    /// --no-header, a first row is a header when none of its fields is a
    /// number, and a row that is partly numbers is an error.
    #[arg(long, global = true, conflicts_with = "no_header")]
    header: bool,
    /// CSV inputs: the first row is data.
    #[arg(long, global = true)]
    no_header: bool,
    #[command(subcommand)]
    command: Command,
}

// One value per process, parsed once: the size of its largest variant
// (`serve`'s many options) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// List GPU adapters, the backend `auto` chooses, limits and features.
    Info(info::InfoArgs),
    /// Nadaraya–Watson local means K̃Y of values at queries (default: the
    /// self-local mean K̃X).
    LocalMean(local_mean::LocalMeanArgs),
    /// Fill missing entries (NaN) with local means over the rows that
    /// observe them.
    Impute(impute::ImputeArgs),
    /// Local PCA: kernel-weighted means, principal directions and variances
    /// of the keys around each query.
    LocalPca(local_pca::LocalPcaArgs),
    /// The kernel matrix K, D⁻¹K, or a graph Laplacian D − K, I − D⁻¹K.
    KernelMatrix(kernel_matrix::KernelMatrixArgs),
    /// Kernel density estimates (or log-densities) at query points.
    Kde(kde::KdeArgs),
    /// The bandwidth with the least leave-one-out error of the local
    /// mean: one from candidates, or one per feature (--per-feature).
    SelectBandwidth(select_bandwidth::SelectBandwidthArgs),
    /// Local-mode classification: the class with the largest kernel vote.
    Classify(classify::ClassifyArgs),
    /// The k nearest keys of each query (indices and distances).
    Knn(knn::KnnArgs),
    /// MeanShift clustering: labels, modes, plot.
    MeanShift(mean_shift::MeanShiftArgs),
    /// MedoidShift clustering: labels, medoids (sample points), plot.
    MedoidShift(medoid_shift::MedoidShiftArgs),
    /// New points like the input's by local-mean diffusion: iterated local
    /// means under a Gaussian noise schedule.
    Generate(generate::GenerateArgs),
    /// Kernel softmax (attention) softmax(s·ΦΨᵀ)V per head, or the linear
    /// feature local mean (ΦΨᵀV) ⊘ (ΦΨᵀ1).
    Softmax(softmax::SoftmaxArgs),
    /// Every op on generated data on the GPU and the CPU: times, speed-ups,
    /// pair evaluations per second, deviations.
    Bench(bench::BenchArgs),
    /// Cluster generated 2-D blobs with MeanShift on the best backend; print
    /// the clusters, backend and time; draw demo.png.
    Demo(demo::DemoArgs),
    /// Serve the ops over HTTP on named key sets (JSON and .npy; API keys,
    /// metrics, readiness, back-pressure): see docs/serve.md.
    #[cfg(feature = "serve")]
    Serve(serve::ServeArgs),
}

fn run(command: &Command, matches: &ArgMatches) -> CliResult<()> {
    let _ = matches;
    match command {
        Command::Info(a) => info::run(a),
        Command::LocalMean(a) => local_mean::run(a),
        Command::LocalPca(a) => local_pca::run(a),
        Command::Impute(a) => impute::run(a),
        Command::KernelMatrix(a) => kernel_matrix::run(a),
        Command::Kde(a) => kde::run(a),
        Command::SelectBandwidth(a) => select_bandwidth::run(a),
        Command::Classify(a) => classify::run(a),
        Command::Knn(a) => knn::run(a),
        Command::MeanShift(a) => mean_shift::run(a),
        Command::MedoidShift(a) => medoid_shift::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Softmax(a) => softmax::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Demo(a) => demo::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(a, matches.subcommand_matches("serve")),
    }
}

/// On SIGINT, SIGTERM and SIGHUP: remove this run's named temporary files,
/// then end as the signal would have.
fn clean_up_on_signals() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        // A thread that cannot be started (a memory cap) leaves the
        // default handlers: an interrupted run may then leave a named
        // temporary file behind, never a panic.
        let _ = std::thread::Builder::new().spawn(move || {
            if let Some(signal) = signals.forever().next() {
                atomic::remove_temporary_files();
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        });
    }
}

fn main() -> ExitCode {
    // Mesa's device-select layer connects to the display server to pick a
    // default GPU; without a valid XDG_RUNTIME_DIR that prints a warning in
    // every process, and it has no bearing on compute. Silence it for
    // users: off unless asked for, and always off where it cannot work
    // (no runtime folder) and no device was chosen through it.
    let runtime_dir_ok = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| !d.is_empty() && std::path::Path::new(&d).is_dir());
    let chosen = std::env::var_os("MESA_VK_DEVICE_SELECT").is_some();
    if std::env::var_os("NODEVICE_SELECT").is_none() || (!runtime_dir_ok && !chosen) {
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
    // The matches too: `serve` groups its set flags by their positions.
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(p) => p,
        Err(e) => return error::clap_exit(e),
    };
    io::set_header_rule(match (cli.header, cli.no_header) {
        (true, _) => delimited::HeaderRule::Header,
        (_, true) => delimited::HeaderRule::NoHeader,
        _ => delimited::HeaderRule::Auto,
    });
    // `serve` handles SIGTERM and SIGINT itself (it drains, then exits 0)
    // and writes no files.
    #[cfg(feature = "serve")]
    let serving = matches!(cli.command, Command::Serve(_));
    #[cfg(not(feature = "serve"))]
    let serving = false;
    if !serving {
        clean_up_on_signals();
    }
    match panic::catch_unwind(AssertUnwindSafe(|| run(&cli.command, &matches))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => e.report(),
        Err(_) => ExitCode::from(EXIT_COMPUTE),
    }
}

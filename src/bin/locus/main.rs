//! The `locus` command-line tool: a thin layer that parses arguments,
//! builds an engine, calls the library and prints the result.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use locus::{Device, Engine, EngineOptions, Kernel, Profile};
use ndarray::Array2;

#[derive(Parser)]
#[command(
    name = "locus",
    version,
    about = "Localization methods on the GPU (wgpu) and CPU (rayon)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List GPU adapters and the backend `auto` would choose.
    Info,
    /// Smooth generated 2-D blobs with a local mean and report backend and time.
    Demo(DemoArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    /// A hardware GPU if present, else the CPU.
    Auto,
    /// Any GPU adapter (a software one if it is all there is).
    Gpu,
    /// The rayon CPU path.
    Cpu,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// Number of points.
    #[arg(long, default_value_t = 20_000)]
    points: usize,
    /// Kernel profile.
    #[arg(long, default_value = "gaussian")]
    kernel: String,
    /// Bandwidth.
    #[arg(long, default_value_t = 0.5)]
    bandwidth: f32,
}

fn engine(backend: BackendArg) -> locus::Result<Engine> {
    Ok(match backend {
        BackendArg::Auto => Engine::new(),
        BackendArg::Cpu => Engine::cpu(),
        BackendArg::Gpu => Engine::with_options(EngineOptions::new(Device::Gpu))?,
    })
}

/// Points around five centres on a circle of radius 4, deterministic.
fn blobs(n: usize) -> Array2<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut x = Array2::zeros((n, 2));
    for i in 0..n {
        let c = (i % 5) as f32 * std::f32::consts::TAU / 5.0;
        // Box–Muller for a standard normal offset.
        let (u1, u2) = (uniform().max(1e-7), uniform());
        let r = (-2.0 * u1.ln()).sqrt();
        let a = std::f32::consts::TAU * u2;
        x[[i, 0]] = 4.0 * c.cos() + 0.6 * r * a.cos();
        x[[i, 1]] = 4.0 * c.sin() + 0.6 * r * a.sin();
    }
    x
}

fn demo(args: &DemoArgs) -> locus::Result<()> {
    let engine = engine(args.backend)?;
    let profile: Profile = args.kernel.parse()?;
    let kernel = Kernel::new(profile, args.bandwidth)?;
    let x = blobs(args.points);
    println!("backend: {}", engine.backend());
    if let Some(why) = engine.fallback_reason() {
        println!("(GPU found but not usable: {why})");
    }
    // The first call compiles shaders (GPU); time a second one too.
    let t0 = Instant::now();
    let first = engine.self_local_mean(&kernel, x.view())?;
    let cold = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let m = engine.self_local_mean(&kernel, x.view())?;
    let warm = t1.elapsed().as_secs_f64();
    debug_assert_eq!(first, m);
    let n = args.points as f64;
    let shift: f64 = (&m.values - &x)
        .rows()
        .into_iter()
        .map(|r| f64::from(r.dot(&r)).sqrt())
        .sum::<f64>()
        / n;
    println!(
        "self local mean of {} points (d=2), {kernel}: {:.3} s ({:.3} s first call), {:.2e} pairs/s",
        args.points,
        warm,
        cold,
        n * n / warm
    );
    println!(
        "mean shift toward the blob centres: {shift:.4}; empty neighbourhoods: {}",
        m.empty_rows
    );
    Ok(())
}

fn info() {
    let adapters = Engine::adapters();
    if adapters.is_empty() {
        println!("GPU adapters: none (install a Vulkan driver, e.g. mesa-vulkan-drivers)");
    } else {
        println!("GPU adapters:");
        for a in &adapters {
            println!("  {a}");
        }
    }
    let e = Engine::new();
    println!("auto backend: {}", e.backend());
    if let Some(why) = e.fallback_reason() {
        println!("  (GPU not usable: {why})");
    }
}

fn main() -> ExitCode {
    // Mesa's device-select layer prints a warning in every process without
    // XDG_RUNTIME_DIR; it has no bearing on compute. Silence it for users.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Info => {
            info();
            Ok(())
        }
        Command::Demo(args) => demo(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

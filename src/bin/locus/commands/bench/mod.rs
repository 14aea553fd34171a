//! `locus bench`: every op on generated data, on the GPU and on the CPU,
//! same data, one process; a table of times (end to end, and the GPU's
//! kernel time from timestamp queries), speed-ups, pair evaluations per
//! second and the deviation between the two results; with `--cold-start`,
//! the GPU engine's cold and warm start.

mod cases;
mod cold_start;
mod plan;

use std::time::Instant;

use locus::{Device, Engine, EngineOptions};
use ndarray::{Array2, s};
use serde_json::{Map, Value, json};

use crate::args::Output;
use crate::commands::info::engine_json;
use crate::error::{CliError, CliResult};
use crate::progress::Progress;
use crate::report::backend_fields;
use crate::verify::Deviation;

use cases::Case;
use cold_start::ColdStart;
use plan::{OpKind, Overrides, Size};

/// A backend `--backends` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendName {
    /// The GPU adapter `--backend gpu` would open (`LOCUS_ADAPTER` chooses).
    Gpu,
    /// The rayon CPU path.
    Cpu,
}

/// Arguments of `locus bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Problem sizes: tiny (a check that every case runs, seconds on any
    /// adapter), quick, default (suits a hardware GPU; minutes on a
    /// software one), large (a data-centre GPU's sizes).
    #[arg(long, value_enum, default_value_t = Size::Default)]
    size: Size,
    /// Same as `--size quick`.
    #[arg(long, conflicts_with = "size")]
    quick: bool,
    /// Only these op families (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    ops: Vec<OpKind>,
    /// Query rows of the distance ops (local-mean, kernel-matrix, kde, knn).
    #[arg(long)]
    m: Option<usize>,
    /// Key rows of the distance ops.
    #[arg(long)]
    n: Option<usize>,
    /// Dimension of the distance ops.
    #[arg(long)]
    d: Option<usize>,
    /// Backends to run (comma-separated; default both). Naming `gpu` makes
    /// a missing GPU an error rather than a note in the table.
    #[arg(long, value_enum, value_delimiter = ',')]
    backends: Vec<BackendName>,
    /// Skip the CPU run of a case whose work (pairs × dimension) exceeds
    /// this; the GPU result is then checked against the CPU on its first
    /// rows where the op allows [default: 5e10].
    #[arg(long, value_name = "WORK")]
    cpu_max_work: Option<f64>,
    /// Timed calls per case after a warm-up, at most [default: by size].
    #[arg(long)]
    repeats: Option<usize>,
    /// Seconds after which a case's timed calls stop (one at least)
    /// [default: by size].
    #[arg(long)]
    budget: Option<f64>,
    /// Also time the GPU engine's start, cold (no pipeline cache) and warm
    /// (the cache the cold run wrote): opening it and the first call of
    /// each selected op at `--size tiny`, twice in this process.
    #[arg(long)]
    cold_start: bool,
    #[command(flatten)]
    output: Output,
}

/// One backend's run of a case.
struct Timing {
    /// Median wall time of the timed calls (after a warm-up), seconds.
    seconds: f64,
    /// Fastest timed call, seconds.
    best: f64,
    /// Median device time of the compute passes per call (timestamp
    /// queries), when the GPU reports it.
    kernel_seconds: Option<f64>,
    /// Timed calls made.
    calls: usize,
    /// The warm-up's result.
    result: Array2<f32>,
}

/// How a GPU result was checked against the CPU.
enum Check {
    /// Every entry, against the CPU's full run.
    Full(Deviation),
    /// The first rows, recomputed on the CPU alone.
    Rows(usize, Deviation),
    /// Not checked (why).
    None(String),
}

impl Check {
    fn deviation(&self) -> Option<&Deviation> {
        match self {
            Check::Full(d) | Check::Rows(_, d) => Some(d),
            Check::None(_) => None,
        }
    }
}

/// One row of the table.
struct Row {
    case: Case,
    /// `Err` when the GPU run failed, was not asked for, or there is no GPU.
    gpu: Result<Timing, String>,
    /// `Err` when the CPU run was skipped or not asked for (why).
    cpu: Result<Timing, String>,
    check: Check,
}

/// Repeats, budget and CPU cap of a size.
fn defaults(size: Size) -> (usize, f64) {
    match size {
        Size::Tiny => (2, 0.1),
        Size::Quick => (3, 0.2),
        Size::Default => (5, 1.0),
        Size::Large => (3, 10.0),
    }
}

/// Runs `locus bench`.
pub fn run(a: &BenchArgs) -> CliResult<()> {
    let size = if a.quick { Size::Quick } else { a.size };
    let (repeats, budget) = defaults(size);
    let repeats = a.repeats.unwrap_or(repeats).max(1);
    let budget = a.budget.unwrap_or(budget);
    let cpu_max_work = a.cpu_max_work.unwrap_or(5e10);
    if !(budget >= 0.0 && cpu_max_work >= 0.0) {
        return Err(CliError::input(
            "--budget and --cpu-max-work must be numbers ≥ 0",
        ));
    }
    let want = |b| a.backends.is_empty() || a.backends.contains(&b);
    let gpu_options = if want(BackendName::Gpu) {
        gpu_options()
    } else {
        Err("not asked for (--backends)".to_string())
    };
    let gpu = gpu_options
        .clone()
        .and_then(|o| Engine::with_options(o).map_err(|e| e.to_string()));
    if let (Err(why), true) = (&gpu, a.backends.contains(&BackendName::Gpu)) {
        return Err(CliError::compute(format!("bench: --backends gpu: {why}")));
    }
    // Before the cases: their pipelines are not yet built in this process.
    let cold_start: Option<Result<ColdStart, String>> = match (&gpu_options, &gpu) {
        _ if !a.cold_start => None,
        (Ok(o), Ok(_)) => Some(Ok(cold_start::measure(o, &a.ops)?)),
        (Err(why), _) | (_, Err(why)) => Some(Err(why.clone())),
    };
    let cpu = Engine::cpu();
    let overrides = Overrides {
        m: a.m,
        n: a.n,
        d: a.d,
    };
    if [a.m, a.n, a.d].contains(&Some(0)) {
        return Err(CliError::input("--m, --n and --d must be at least 1"));
    }
    let cases = cases::cases(size, &a.ops, overrides)?;
    let progress = Progress::bar(a.output.progress(), 2 * cases.len() as u64, "bench");
    let mut rows = Vec::new();
    for case in cases {
        progress.set_message(format!("{} on gpu", case.op));
        let g = match &gpu {
            Ok(e) => time(e, &case, repeats, budget).map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        };
        progress.inc(1);
        progress.set_message(format!("{} on cpu", case.op));
        let c = if !want(BackendName::Cpu) {
            Err("not asked for (--backends)".to_string())
        } else if case.work > cpu_max_work {
            Err(format!(
                "skipped: work {:.1e} > --cpu-max-work {cpu_max_work:.1e}",
                case.work
            ))
        } else {
            Ok(time(&cpu, &case, repeats, budget)?)
        };
        progress.inc(1);
        let check = check(&case, &g, &c, &cpu)?;
        rows.push(Row {
            case,
            gpu: g,
            cpu: c,
            check,
        });
    }
    drop(progress);

    if a.output.json {
        let mut o = to_json(size, repeats, budget, &gpu, &cpu, &rows);
        if let Value::Object(m) = &mut o {
            let cold = match &cold_start {
                Some(Ok(c)) => c.to_json(),
                Some(Err(why)) => json!({ "error": why }),
                None => Value::Null,
            };
            m.insert("cold_start".into(), cold);
        }
        println!("{o}");
    } else if !a.output.quiet {
        print_table(&gpu, &cpu, &rows, repeats);
        match &cold_start {
            Some(Ok(c)) => println!("\n{}", c.line()),
            Some(Err(why)) => println!("\ncold start: not measured ({why})"),
            None => {}
        }
    }
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.check.deviation().is_some_and(|d| !d.ok))
        .map(|r| r.case.op.as_str())
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(CliError::compute(format!(
            "bench: GPU and CPU disagree beyond the tolerance on {}",
            bad.join(", ")
        )))
    }
}

/// The options of the GPU engine `--backend gpu` would open, timing its
/// kernels.
fn gpu_options() -> Result<EngineOptions, String> {
    let mut o = EngineOptions::from_env(Device::Gpu).map_err(|e| e.to_string())?;
    o.gpu_timing = true;
    Ok(o)
}

/// Compares the GPU's result with the CPU's: in full when the CPU ran,
/// else on the case's sample rows recomputed on the CPU.
fn check(
    case: &Case,
    gpu: &Result<Timing, String>,
    cpu_run: &Result<Timing, String>,
    cpu: &Engine,
) -> CliResult<Check> {
    let g = match gpu {
        Ok(g) => g,
        Err(_) => return Ok(Check::None("no GPU result".into())),
    };
    if let Ok(c) = cpu_run {
        return Ok(Check::Full(Deviation::between(
            g.result.view(),
            c.result.view(),
            case.tolerance,
        )));
    }
    let Some(sample) = &case.sample else {
        return Ok(Check::None("no CPU run".into()));
    };
    let want = (sample.run)(cpu)?;
    let rows = sample.rows.min(g.result.nrows());
    Ok(Check::Rows(
        rows,
        Deviation::between(
            g.result.slice(s![..rows, ..]),
            want.slice(s![..rows, ..]),
            case.tolerance,
        ),
    ))
}

/// One warm-up (kept for the comparison), then up to `repeats` timed calls
/// within `budget` seconds.
fn time(engine: &Engine, case: &Case, repeats: usize, budget: f64) -> locus::Result<Timing> {
    let result = (case.run)(engine)?;
    engine.take_gpu_time()?;
    let mut times = Vec::with_capacity(repeats);
    let mut kernel = Vec::with_capacity(repeats);
    let start = Instant::now();
    while times.is_empty() || (times.len() < repeats && start.elapsed().as_secs_f64() < budget) {
        let t = Instant::now();
        (case.run)(engine)?;
        times.push(t.elapsed().as_secs_f64());
        if let Some(k) = engine.take_gpu_time()? {
            kernel.push(k.as_secs_f64());
        }
    }
    let calls = times.len();
    Ok(Timing {
        seconds: median(&mut times),
        best: times[0],
        kernel_seconds: (!kernel.is_empty()).then(|| median(&mut kernel)),
        calls,
        result,
    })
}

/// Median of a non-empty list (sorting it).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn sizes_text(sizes: &[(&str, usize)]) -> String {
    let s: Vec<String> = sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    s.join(" ")
}

fn rate(pairs: Option<f64>, seconds: Option<f64>) -> String {
    match (pairs, seconds) {
        (Some(p), Some(s)) if s > 0.0 => format!("{:.2e}", p / s),
        _ => "-".into(),
    }
}

fn print_table(gpu: &Result<Engine, String>, cpu: &Engine, rows: &[Row], repeats: usize) {
    let software = gpu.as_ref().is_ok_and(|e| e.backend().is_software());
    match gpu {
        Ok(e) => println!("{}", e.backend()),
        Err(why) => println!("gpu: none ({why})"),
    }
    if software {
        println!(
            "     a software adapter: its shaders run on the CPU, so its times say nothing about a GPU"
        );
    }
    println!("{}", cpu.backend());
    println!(
        "times: median wall time of up to {repeats} calls after a warm-up, transfers included; \
         kernel: device time of the compute passes (timestamp queries)\n"
    );
    let w = rows
        .iter()
        .map(|r| r.case.op.chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    println!(
        "{:<w$} {:<28} {:>10} {:>10} {:>10} {:>9} {:>12} {:>12} {:>12} {:>9} {:>9} {:>7}",
        "op",
        "sizes",
        if software { "gpu [sw] s" } else { "gpu s" },
        "kernel s",
        "cpu s",
        "speed-up",
        "gpu pairs/s",
        "kernel p/s",
        "cpu pairs/s",
        "max |Δ|",
        "max rel",
        "checked"
    );
    for r in rows {
        let g = r.gpu.as_ref().ok();
        let c = r.cpu.as_ref().ok();
        let secs = |t: Option<f64>| t.map_or("-".into(), |s| format!("{s:.4}"));
        let speed = match (g, c) {
            (Some(g), Some(c)) => format!("{:.2}x", c.seconds / g.seconds),
            _ => "-".into(),
        };
        let (dabs, drel, checked, verdict) = match &r.check {
            Check::Full(d) | Check::Rows(_, d) => (
                format!("{:.1e}", d.max_abs),
                format!("{:.1e}", d.max_rel),
                match &r.check {
                    Check::Rows(n, _) => format!("{n} rows"),
                    _ => "all".into(),
                },
                if d.ok { "" } else { "  EXCEEDED" },
            ),
            Check::None(_) => ("-".into(), "-".into(), "no".into(), ""),
        };
        println!(
            "{:<w$} {:<28} {:>10} {:>10} {:>10} {:>9} {:>12} {:>12} {:>12} {:>9} {:>9} {:>7}{verdict}",
            r.case.op,
            sizes_text(&r.case.sizes),
            secs(g.map(|t| t.seconds)),
            secs(g.and_then(|t| t.kernel_seconds)),
            secs(c.map(|t| t.seconds)),
            speed,
            rate(r.case.pairs, g.map(|t| t.seconds)),
            rate(r.case.pairs, g.and_then(|t| t.kernel_seconds)),
            rate(r.case.pairs, c.map(|t| t.seconds)),
            dabs,
            drel,
            checked,
        );
        if let (Err(why), Ok(_)) = (&r.gpu, gpu) {
            println!("    gpu failed: {why}");
        }
        if let Err(why) = &r.cpu
            && why.starts_with("skipped")
        {
            println!("    cpu {why}");
        }
    }
}

fn timing_json(t: &Result<Timing, String>, pairs: Option<f64>, gpu: bool) -> Value {
    match t {
        Ok(t) => {
            let mut o = Map::new();
            o.insert("seconds".into(), json!(t.seconds));
            o.insert("best_seconds".into(), json!(t.best));
            o.insert("calls".into(), json!(t.calls));
            o.insert(
                "pairs_per_second".into(),
                json!(pairs.map(|p| p / t.seconds)),
            );
            if gpu {
                o.insert("kernel_seconds".into(), json!(t.kernel_seconds));
                o.insert(
                    "kernel_pairs_per_second".into(),
                    json!(pairs.zip(t.kernel_seconds).map(|(p, k)| p / k)),
                );
            }
            Value::Object(o)
        }
        Err(why) => json!({ "error": why }),
    }
}

fn to_json(
    size: Size,
    repeats: usize,
    budget: f64,
    gpu: &Result<Engine, String>,
    cpu: &Engine,
    rows: &[Row],
) -> Value {
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let sizes: Map<String, Value> = r
                .case
                .sizes
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            let check = match &r.check {
                Check::Full(d) => json!({"rows": "all", "deviation": d.to_json()}),
                Check::Rows(n, d) => json!({"rows": n, "deviation": d.to_json()}),
                Check::None(why) => json!({"rows": 0, "why": why}),
            };
            let speedup = match (&r.gpu, &r.cpu) {
                (Ok(g), Ok(c)) => json!(c.seconds / g.seconds),
                _ => Value::Null,
            };
            json!({
                "op": r.case.op,
                "family": format!("{:?}", r.case.kind),
                "sizes": sizes,
                "params": r.case.params,
                "pairs": r.case.pairs,
                "work": r.case.work,
                "gpu": timing_json(&r.gpu, r.case.pairs, true),
                "cpu": timing_json(&r.cpu, r.case.pairs, false),
                "speedup": speedup,
                "check": check,
            })
        })
        .collect();
    let gpu_json = match gpu {
        Ok(e) => {
            let mut o = match engine_json(e) {
                Value::Object(o) => o,
                _ => backend_fields(e.backend()),
            };
            o.insert(
                "kernel_timing".into(),
                json!(
                    rows.iter()
                        .any(|r| r.gpu.as_ref().is_ok_and(|t| t.kernel_seconds.is_some()))
                ),
            );
            Value::Object(o)
        }
        Err(_) => Value::Null,
    };
    json!({
        "command": "bench",
        "size": format!("{size:?}").to_lowercase(),
        "max_timed_calls": repeats,
        "budget_seconds": budget,
        "gpu": gpu_json,
        "gpu_software": gpu.as_ref().is_ok_and(|e| e.backend().is_software()),
        "gpu_unavailable": gpu.as_ref().err(),
        "cpu": engine_json(cpu),
        "results": results,
    })
}

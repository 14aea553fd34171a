//! `locus bench`: every op on generated data, on the GPU and on the CPU,
//! same data, one process; a table of times, speed-ups, pair evaluations
//! per second and the deviation between the two results.

use std::time::Instant;

use locus::{BackendInfo, Engine, Kernel, LaplacianKind, Profile};
use ndarray::Array2;
use serde_json::{Map, Value, json};

use crate::args::Output;
use crate::data;
use crate::error::{CliError, CliResult};
use crate::progress::Progress;
use crate::report::backend_fields;
use crate::verify::{Deviation, Tolerance};

/// Arguments of `locus bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Small sizes: seconds in all. The default sizes suit a hardware GPU;
    /// on a software adapter (lavapipe) they take minutes.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    output: Output,
}

/// A call that returns a matrix to compare between backends.
type Call = Box<dyn Fn(&Engine) -> locus::Result<Array2<f32>>>;

/// One op on generated data.
struct Case {
    /// Op name, as the subcommand calls it.
    op: &'static str,
    /// Sizes, in the order printed.
    sizes: Vec<(&'static str, usize)>,
    /// Pair evaluations per run (`M·N`).
    pairs: f64,
    /// Tolerance between the two backends.
    tolerance: Tolerance,
    /// The call, returning a matrix to compare.
    run: Call,
}

/// The cases, sized for `quick` or not. A new op adds its case here.
fn cases(quick: bool) -> CliResult<Vec<Case>> {
    let pick = |q: usize, full: usize| if quick { q } else { full };
    let gauss = Kernel::new(Profile::Gaussian, 0.2)?;
    let epan = Kernel::new(Profile::Epanechnikov, 0.2)?;
    let mut v = Vec::new();

    let (m, n, d, q) = (pick(2_000, 16_384), pick(4_000, 32_768), 3, 2);
    let (queries, keys, values) = (
        data::uniform(m, d, 1),
        data::uniform(n, d, 2),
        data::uniform(n, q, 3),
    );
    v.push(Case {
        op: "local-mean",
        sizes: vec![("M", m), ("N", n), ("d", d), ("q", q)],
        pairs: (m * n) as f64,
        tolerance: Tolerance::local_mean(1.0),
        run: Box::new(move |e: &Engine| {
            Ok(
                e.local_mean(&gauss, queries.view(), keys.view(), values.view())?
                    .values,
            )
        }),
    });

    let n = pick(3_000, 20_000);
    let points = data::uniform(n, 2, 4);
    v.push(Case {
        op: "local-mean (self, epanechnikov)",
        sizes: vec![("N", n), ("d", 2)],
        pairs: (n * n) as f64,
        tolerance: Tolerance::local_mean(1.0),
        run: Box::new(move |e: &Engine| Ok(e.self_local_mean(&epan, points.view())?.values)),
    });

    let (m, n, d) = (pick(1_000, 4_000), pick(1_500, 6_000), 3);
    let (queries, keys) = (data::uniform(m, d, 5), data::uniform(n, d, 6));
    let (q2, k2) = (queries.clone(), keys.clone());
    v.push(Case {
        op: "kernel-matrix",
        sizes: vec![("M", m), ("N", n), ("d", d)],
        pairs: (m * n) as f64,
        tolerance: Tolerance::MATRIX,
        run: Box::new(move |e: &Engine| e.kernel_matrix(&gauss, queries.view(), keys.view())),
    });
    v.push(Case {
        op: "kernel-matrix --normalize rows",
        sizes: vec![("M", m), ("N", n), ("d", d)],
        pairs: (m * n) as f64,
        tolerance: Tolerance::MATRIX,
        run: Box::new(move |e: &Engine| {
            Ok(e.normalized_kernel_matrix(&gauss, q2.view(), k2.view())?
                .values)
        }),
    });

    let n = pick(1_200, 5_000);
    let points = data::uniform(n, 3, 7);
    v.push(Case {
        op: "kernel-matrix --laplacian",
        sizes: vec![("N", n), ("d", 3)],
        pairs: (n * n) as f64,
        tolerance: Tolerance::unnormalized_laplacian(n),
        run: Box::new(move |e: &Engine| {
            e.laplacian(&gauss, points.view(), LaplacianKind::Unnormalized)
        }),
    });
    let (m, n, d) = (pick(1_000, 8_192), pick(2_000, 32_768), 3);
    let (queries, keys) = (data::uniform(m, d, 8), data::uniform(n, d, 9));
    v.push(Case {
        op: "kde (log-density)",
        sizes: vec![("M", m), ("N", n), ("d", d)],
        pairs: (m * n) as f64,
        tolerance: Tolerance {
            rtol: 1e-4,
            atol: 1e-5,
        },
        run: Box::new(move |e: &Engine| {
            let l = e.log_density(&gauss, queries.view(), keys.view(), None)?;
            Ok(l.mapv(|v| v as f32).insert_axis(ndarray::Axis(1)))
        }),
    });

    let (m, n, d, k) = (pick(500, 2_048), pick(4_000, 65_536), 16, 16);
    let (queries, keys) = (data::uniform(m, d, 10), data::uniform(n, d, 11));
    v.push(Case {
        op: "knn (distances, k=16)",
        sizes: vec![("M", m), ("N", n), ("d", d), ("k", k)],
        pairs: (m * n) as f64,
        tolerance: Tolerance {
            rtol: 1e-5,
            atol: 1e-6,
        },
        run: Box::new(move |e: &Engine| Ok(e.knn(queries.view(), keys.view(), k)?.distances)),
    });

    // Causal attention over B heads: about B·T²/2 (query, key) pairs.
    let (b, t, d) = (pick(4, 8), pick(512, 2_048), 64);
    let stack = |seed| {
        let m = data::uniform(b * t, d, seed).mapv(|x| 2.0 * x - 1.0);
        m.into_shape_with_order((b, t, d))
            .map_err(crate::error::CliError::compute)
    };
    let (phi, psi, values) = (stack(12)?, stack(13)?, stack(14)?);
    let causal = locus::SoftmaxParams::new().with_causal(true);
    v.push(Case {
        op: "softmax (causal attention)",
        sizes: vec![("B", b), ("T", t), ("d", d), ("q", d)],
        pairs: (b * t * (t + 1) / 2) as f64,
        tolerance: Tolerance::local_mean(1.0),
        run: Box::new(move |e: &Engine| {
            let out = e.kernel_softmax(phi.view(), psi.view(), values.view(), &causal)?;
            Ok(Array2::from_shape_fn((b * t, d), |(r, c)| {
                out[[r / t, r % t, c]]
            }))
        }),
    });

    // MeanShift, every point a seed, exactly `iters` iterations (a tolerance
    // no seed reaches): iters·N² pair evaluations.
    let (n, iters) = (pick(1_500, 16_384), 10usize);
    let points = data::blobs(n);
    let params = locus::MeanShiftParams::new()
        .profile(Profile::Gaussian)
        .bandwidth(0.8)
        .max_iter(iters)
        .tol(1e-12)
        .check()?;
    v.push(Case {
        op: "mean-shift (gaussian, 10 iterations)",
        sizes: vec![("N", n), ("d", 2)],
        pairs: (iters * n * n) as f64,
        tolerance: Tolerance {
            rtol: 0.0,
            atol: 1e-4 * 0.8,
        },
        run: Box::new(move |e: &Engine| Ok(e.mean_shift(&params, points.view())?.modes)),
    });
    Ok(v)
}

/// Timed calls stop after this many seconds (at least one is made):
/// `--quick`, and the default.
const TIME_BUDGET: [f64; 2] = [0.2, 1.0];

/// One backend's run of a case.
struct Timing {
    /// Median wall time of the timed runs (after a warm-up), seconds.
    seconds: f64,
    /// The warm-up's result.
    result: Array2<f32>,
}

/// One row of the table.
struct Row {
    case: Case,
    cpu: Timing,
    /// `Err` when the GPU run failed (or there is no GPU).
    gpu: Result<Timing, String>,
}

impl Row {
    fn deviation(&self) -> Option<Deviation> {
        let g = self.gpu.as_ref().ok()?;
        Some(Deviation::between(
            g.result.view(),
            self.cpu.result.view(),
            self.case.tolerance,
        ))
    }
}

/// Runs `locus bench`.
pub fn run(a: &BenchArgs) -> CliResult<()> {
    let repeats = if a.quick { 3 } else { 5 };
    let budget = TIME_BUDGET[usize::from(!a.quick)];
    let cpu = Engine::cpu();
    let gpu = Engine::gpu().map_err(|e| e.to_string());
    let cases = cases(a.quick)?;
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
        let c = time(&cpu, &case, repeats, budget)?;
        progress.inc(1);
        rows.push(Row {
            case,
            cpu: c,
            gpu: g,
        });
    }
    drop(progress);

    let gpu_info = gpu.as_ref().ok().map(|e| e.backend().clone());
    if a.output.json {
        println!(
            "{}",
            to_json(a.quick, repeats, gpu_info.as_ref(), &gpu, &cpu, &rows)
        );
    } else if !a.output.quiet {
        print_table(gpu_info.as_ref(), &gpu, &cpu, &rows, repeats);
    }
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.deviation().is_some_and(|d| !d.ok))
        .map(|r| r.case.op)
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

/// One warm-up (kept for the comparison), then up to `repeats` timed calls
/// within `budget` seconds.
fn time(engine: &Engine, case: &Case, repeats: usize, budget: f64) -> locus::Result<Timing> {
    let result = (case.run)(engine)?;
    let mut times = Vec::with_capacity(repeats);
    let start = Instant::now();
    while times.is_empty() || (times.len() < repeats && start.elapsed().as_secs_f64() < budget) {
        let t = Instant::now();
        (case.run)(engine)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(Timing {
        seconds: times[times.len() / 2],
        result,
    })
}

fn sizes_text(sizes: &[(&str, usize)]) -> String {
    let s: Vec<String> = sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    s.join(" ")
}

fn print_table(
    gpu_info: Option<&BackendInfo>,
    gpu: &Result<Engine, String>,
    cpu: &Engine,
    rows: &[Row],
    repeats: usize,
) {
    let software = gpu_info.is_some_and(BackendInfo::is_software);
    match gpu {
        Ok(e) => println!("gpu: {}", e.backend()),
        Err(why) => println!("gpu: none ({why})"),
    }
    if software {
        println!(
            "     a software adapter: its shaders run on the CPU, so its times say nothing about a GPU"
        );
    }
    println!("cpu: {}", cpu.backend());
    println!(
        "times: median wall time of up to {repeats} calls after a warm-up, transfers included\n"
    );
    let gpu_col = if software {
        "gpu [software] s"
    } else {
        "gpu s"
    };
    let w = rows
        .iter()
        .map(|r| r.case.op.chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    println!(
        "{:<w$} {:<24} {:>16} {:>10} {:>9} {:>12} {:>12} {:>9} {:>9}",
        "op",
        "sizes",
        gpu_col,
        "cpu s",
        "speed-up",
        "gpu pairs/s",
        "cpu pairs/s",
        "max |Δ|",
        "max rel"
    );
    for r in rows {
        let cpu_rate = r.case.pairs / r.cpu.seconds;
        let (gs, speed, grate) = match &r.gpu {
            Ok(g) => (
                format!("{:.4}", g.seconds),
                format!("{:.2}x", r.cpu.seconds / g.seconds),
                format!("{:.2e}", r.case.pairs / g.seconds),
            ),
            Err(_) => ("-".into(), "-".into(), "-".into()),
        };
        let (dabs, drel, verdict) = match r.deviation() {
            Some(d) => (
                format!("{:.1e}", d.max_abs),
                format!("{:.1e}", d.max_rel),
                if d.ok { "" } else { "  EXCEEDED" },
            ),
            None => ("-".into(), "-".into(), ""),
        };
        println!(
            "{:<w$} {:<24} {:>16} {:>10.4} {:>9} {:>12} {:>12.2e} {:>9} {:>9}{verdict}",
            r.case.op,
            sizes_text(&r.case.sizes),
            gs,
            r.cpu.seconds,
            speed,
            grate,
            cpu_rate,
            dabs,
            drel
        );
        if let (Err(why), Ok(_)) = (&r.gpu, gpu) {
            println!("    gpu failed: {why}");
        }
    }
}

fn to_json(
    quick: bool,
    repeats: usize,
    gpu_info: Option<&BackendInfo>,
    gpu: &Result<Engine, String>,
    cpu: &Engine,
    rows: &[Row],
) -> Value {
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut o = Map::new();
            o.insert("op".into(), json!(r.case.op));
            o.insert(
                "sizes".into(),
                Value::Object(
                    r.case
                        .sizes
                        .iter()
                        .map(|(k, v)| (k.to_string(), json!(v)))
                        .collect(),
                ),
            );
            o.insert("pairs".into(), json!(r.case.pairs));
            o.insert("cpu_seconds".into(), json!(r.cpu.seconds));
            o.insert(
                "cpu_pairs_per_second".into(),
                json!(r.case.pairs / r.cpu.seconds),
            );
            match &r.gpu {
                Ok(g) => {
                    o.insert("gpu_seconds".into(), json!(g.seconds));
                    o.insert(
                        "gpu_pairs_per_second".into(),
                        json!(r.case.pairs / g.seconds),
                    );
                    o.insert("speedup".into(), json!(r.cpu.seconds / g.seconds));
                }
                Err(why) => {
                    o.insert("gpu_seconds".into(), Value::Null);
                    o.insert("gpu_error".into(), json!(why));
                }
            }
            o.insert(
                "deviation".into(),
                r.deviation().map_or(Value::Null, Deviation::to_json),
            );
            Value::Object(o)
        })
        .collect();
    json!({
        "command": "bench",
        "quick": quick,
        "max_timed_calls": repeats,
        "gpu": gpu_info.map(|b| Value::Object(backend_fields(b))),
        "gpu_software": gpu_info.is_some_and(BackendInfo::is_software),
        "gpu_unavailable": gpu.as_ref().err(),
        "cpu": Value::Object(backend_fields(cpu.backend())),
        "results": results,
    })
}

//! `locus info`: the GPU adapters found, the backend `auto` chooses, the
//! limits and features of the backends, and the GPU pipeline cache.

use locus::{
    ADAPTER_ENV, BackendInfo, Engine, GpuLimits, PIPELINE_CACHE_ENV, PipelineCacheStatus,
    REQUIRE_HARDWARE_ENV,
};
use serde_json::{Map, Value, json};

use crate::args::Output;
use crate::error::CliResult;
use crate::report::{adapter_json, backend_fields};

/// Arguments of `locus info`.
#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    #[command(flatten)]
    output: Output,
}

/// Runs `locus info`.
pub fn run(a: &InfoArgs) -> CliResult<()> {
    let adapters = Engine::adapters();
    let auto = Engine::new();
    // The GPU engine `--backend gpu` would open (a software adapter
    // included), unless `auto` already is one.
    let gpu = if auto.backend().is_gpu() {
        Ok(auto.clone())
    } else if adapters.is_empty() {
        Err("no adapter".to_string())
    } else {
        Engine::gpu().map_err(|e| e.to_string())
    };
    let cpu = Engine::cpu();

    if a.output.json {
        let mut o = Map::new();
        o.insert(
            "adapters".into(),
            adapters
                .iter()
                .enumerate()
                .map(|(i, ad)| {
                    let mut v = adapter_json(ad);
                    if let Value::Object(m) = &mut v {
                        m.insert("index".into(), json!(i));
                    }
                    v
                })
                .collect(),
        );
        o.insert("env".into(), env_json());
        o.insert("auto".into(), engine_json(&auto));
        o.insert("auto_fallback_reason".into(), json!(auto.fallback_reason()));
        o.insert(
            "gpu".into(),
            match &gpu {
                Ok(g) => engine_json(g),
                Err(_) => Value::Null,
            },
        );
        o.insert("cpu".into(), engine_json(&cpu));
        println!("{}", Value::Object(o));
        return Ok(());
    }
    if a.output.quiet {
        return Ok(());
    }
    if adapters.is_empty() {
        println!("GPU adapters: none (install a Vulkan driver, e.g. mesa-vulkan-drivers)");
    } else {
        println!("GPU adapters (best first; {ADAPTER_ENV}=INDEX or =NAME picks one):");
        for (i, ad) in adapters.iter().enumerate() {
            println!("  {i}: {ad}");
        }
    }
    for var in [ADAPTER_ENV, REQUIRE_HARDWARE_ENV, PIPELINE_CACHE_ENV] {
        if let Some(v) = std::env::var_os(var) {
            println!("{var}={}", v.to_string_lossy());
        }
    }
    println!("auto backend: {}", auto.backend());
    if let Some(why) = auto.fallback_reason() {
        println!("  (GPU found but not usable: {why})");
    } else if !auto.backend().is_gpu() && adapters.iter().any(BackendInfo::is_software) {
        println!(
            "  (software adapters are not chosen by auto: the CPU path is faster; --backend gpu takes one)"
        );
    }
    match &gpu {
        Ok(g) => {
            println!("gpu backend (--backend gpu): {}", g.backend());
            if let Some(l) = g.gpu_limits() {
                print_limits(l);
            }
            if let Some(c) = g.pipeline_cache() {
                let hint = match c {
                    PipelineCacheStatus::Off => format!(" ({PIPELINE_CACHE_ENV}=DIR keeps one)"),
                    _ => String::new(),
                };
                println!("  pipeline cache: {c}{hint}");
            }
        }
        Err(e) => println!("gpu backend (--backend gpu): unavailable ({e})"),
    }
    println!("cpu backend (--backend cpu): {}", cpu.backend());
    Ok(())
}

/// The adapter-choosing environment variables that are set.
fn env_json() -> Value {
    [ADAPTER_ENV, REQUIRE_HARDWARE_ENV, PIPELINE_CACHE_ENV]
        .into_iter()
        .filter_map(|var| {
            std::env::var_os(var).map(|v| (var.to_string(), json!(v.to_string_lossy())))
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// An engine as JSON: backend, adapter, and for a GPU its limits and features.
pub fn engine_json(e: &Engine) -> Value {
    let mut o = backend_fields(e.backend());
    if let BackendInfo::Cpu { threads, simd } = e.backend() {
        o.insert("threads".into(), json!(threads));
        o.insert("simd".into(), json!(simd));
    }
    if let Some(l) = e.gpu_limits() {
        o.insert(
            "limits".into(),
            json!({
                "max_buffer_size": l.max_buffer_size,
                "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
                "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
                "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
                "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
            }),
        );
        o.insert("features".into(), json!(l.adapter_features));
    }
    if let Some(c) = e.pipeline_cache() {
        o.insert("pipeline_cache".into(), pipeline_cache_json(c));
    }
    Value::Object(o)
}

/// The GPU pipeline cache as JSON: `status` (`active`, `off`,
/// `unsupported`, `unavailable`) and what goes with it.
pub fn pipeline_cache_json(c: &PipelineCacheStatus) -> Value {
    match c {
        PipelineCacheStatus::Active {
            path,
            loaded_bytes,
            ignored,
        } => json!({
            "status": "active",
            "path": path.to_string_lossy(),
            "loaded_bytes": loaded_bytes,
            "ignored": ignored,
        }),
        PipelineCacheStatus::Unsupported { reason } => {
            json!({ "status": "unsupported", "reason": reason })
        }
        PipelineCacheStatus::Unavailable { path, reason } => json!({
            "status": "unavailable",
            "path": path.to_string_lossy(),
            "reason": reason,
        }),
        _ => json!({ "status": "off" }),
    }
}

fn print_limits(l: &GpuLimits) {
    println!("  max buffer: {}", bytes(l.max_buffer_size));
    println!(
        "  max storage binding: {}",
        bytes(l.max_storage_buffer_binding_size)
    );
    println!(
        "  max workgroups per dimension: {}",
        l.max_compute_workgroups_per_dimension
    );
    println!(
        "  max invocations per workgroup: {}",
        l.max_compute_invocations_per_workgroup
    );
    println!(
        "  workgroup memory: {}",
        bytes(u64::from(l.max_compute_workgroup_storage_size))
    );
    if l.adapter_features.is_empty() {
        println!("  adapter features: none");
    } else {
        println!("  adapter features: {}", l.adapter_features.join(", "));
    }
}

/// Bytes in binary units.
fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {} ({b} bytes)", UNITS[u])
    }
}

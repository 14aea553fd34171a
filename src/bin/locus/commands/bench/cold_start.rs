//! `locus bench --cold-start`: how long a GPU engine takes to open and
//! build the pipelines of its first calls, cold (an empty pipeline cache)
//! and warm (the cache the cold run wrote), both in this process.
//!
//! Each run opens an engine on a pipeline-cache directory of its own
//! (a fresh temporary one, shared by the two runs) and makes the first
//! call of every selected op at `--size tiny`: what a new process pays
//! before its first result. The driver's own shader caches (Mesa's
//! `~/.cache/mesa_shader_cache`, NVIDIA's `~/.nv`) are not cleared: for a
//! cold figure without them, run with `MESA_SHADER_CACHE_DISABLE=true` or
//! `__GL_SHADER_DISK_CACHE=0`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use locus::{Engine, EngineOptions, PipelineCacheStatus};
use serde_json::{Value, json};

use crate::commands::info::pipeline_cache_json;
use crate::error::{CliError, CliResult};

use super::cases::{self, Case};
use super::plan::{OpKind, Overrides, Size};

/// One start: opening the engine, then the first calls.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// Seconds to open the engine (adapter, device, layouts, cache load).
    pub open: f64,
    /// Seconds of the first call of each op (pipeline builds included).
    pub calls: f64,
}

impl Start {
    /// Both, seconds.
    pub fn total(&self) -> f64 {
        self.open + self.calls
    }

    /// What starting cost beyond `steady` calls: opening the engine and
    /// building the pipelines, seconds.
    pub fn overhead(&self, steady: f64) -> f64 {
        self.open + (self.calls - steady).max(0.0)
    }

    fn to_json(self, steady: f64) -> Value {
        json!({
            "seconds": self.total(),
            "open_seconds": self.open,
            "first_calls_seconds": self.calls,
            "start_overhead_seconds": self.overhead(steady),
        })
    }
}

/// Cold and warm start of one adapter.
#[derive(Debug)]
pub struct ColdStart {
    /// Without a pipeline cache file.
    pub cold: Start,
    /// With the file the cold run wrote.
    pub warm: Start,
    /// First calls made in each run (one per tiny case).
    pub calls: usize,
    /// Seconds of the same calls again on the warm engine (pipelines
    /// built): what the first calls cost beyond starting.
    pub steady: f64,
    /// The warm engine's pipeline cache (what it loaded, or why none).
    pub cache: PipelineCacheStatus,
    /// Bytes of the cache file after the warm run.
    pub cache_bytes: u64,
}

impl ColdStart {
    /// The JSON field of `locus bench --json`.
    pub fn to_json(&self) -> Value {
        json!({
            "cold": self.cold.to_json(self.steady),
            "warm": self.warm.to_json(self.steady),
            "speedup": self.cold.total() / self.warm.total(),
            "first_calls": self.calls,
            "steady_calls_seconds": self.steady,
            "pipeline_cache": pipeline_cache_json(&self.cache),
            "cache_file_bytes": self.cache_bytes,
        })
    }

    /// The line of the table.
    pub fn line(&self) -> String {
        let cache = match &self.cache {
            PipelineCacheStatus::Active { .. } => {
                format!("pipeline cache {} bytes", self.cache_bytes)
            }
            other => format!("pipeline cache {other}"),
        };
        format!(
            "cold start: {:.3} s (open {:.3} s + {} first calls {:.3} s); warm: {:.3} s (open {:.3} s + {:.3} s), {:.2}x; \
             the calls again: {:.3} s, so starting cost {:.3} s cold, {:.3} s warm; {cache}",
            self.cold.total(),
            self.cold.open,
            self.calls,
            self.cold.calls,
            self.warm.total(),
            self.warm.open,
            self.warm.calls,
            self.cold.total() / self.warm.total(),
            self.steady,
            self.cold.overhead(self.steady),
            self.warm.overhead(self.steady),
        )
    }
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> CliResult<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("locus-cold-start-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::compute(format!("cold start: {}: {e}", dir.display())))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Seconds of one call of each of `cases` on `engine`.
fn call_all(engine: &Engine, cases: &[Case]) -> CliResult<f64> {
    let t = Instant::now();
    for case in cases {
        (case.run)(engine)
            .map_err(|e| CliError::compute(format!("cold start: {}: {e}", case.op)))?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Opens an engine with `options` keeping its pipelines in `dir`, then
/// makes the first call of each tiny case of `ops`; the engine and its
/// cases are returned for more calls.
fn start(
    options: &EngineOptions,
    dir: &Path,
    ops: &[OpKind],
) -> CliResult<(Start, Engine, Vec<Case>)> {
    // Fresh cases (and data) each run: nothing prepared on another engine.
    let cases = cases::cases(Size::Tiny, ops, Overrides::default())?;
    let mut options = options.clone();
    options.pipeline_cache = Some(dir.to_path_buf());
    let t = Instant::now();
    let engine =
        Engine::with_options(options).map_err(|e| CliError::compute(format!("cold start: {e}")))?;
    let open = t.elapsed().as_secs_f64();
    let calls = call_all(&engine, &cases)?;
    Ok((Start { open, calls }, engine, cases))
}

/// Cold then warm start of the GPU engine `options` open, on the tiny
/// cases of `ops`.
///
/// # Errors
/// The temporary directory cannot be made, the engine does not open, or
/// a call fails.
pub fn measure(options: &EngineOptions, ops: &[OpKind]) -> CliResult<ColdStart> {
    let dir = TempDir::new()?;
    let (cold, engine, _) = start(options, &dir.0, ops)?;
    drop(engine);
    let (warm, engine, cases) = start(options, &dir.0, ops)?;
    let steady = call_all(&engine, &cases)?;
    let cache = engine
        .pipeline_cache()
        .cloned()
        .unwrap_or(PipelineCacheStatus::Off);
    let cache_bytes = cache
        .path()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    Ok(ColdStart {
        cold,
        warm,
        calls: cases.len(),
        steady,
        cache,
        cache_bytes,
    })
}

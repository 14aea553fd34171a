//! The engine: picks a backend, owns it, exposes the ops (in `ops/`).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, BackendInfo, GpuLimits, PipelineCacheStatus};
use crate::cpu::{CpuBackend, Threads};
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::gpu::adapter::{self, AdapterChoice, AdapterPolicy};
use crate::gpu::context::GpuContext;
use crate::gpu::plan::TileLimits;

/// Which backend an engine should run on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Device {
    /// A hardware GPU when wgpu finds one, else the CPU. A software adapter
    /// (lavapipe) is taken only with [`EngineOptions::allow_software_gpu`],
    /// because the rayon path is faster on a CPU.
    #[default]
    Auto,
    /// The best GPU adapter, hardware first, software if it is the only
    /// one; an error when there is none.
    Gpu,
    /// The rayon CPU path.
    Cpu,
}

/// How to build an [`Engine`].
///
/// ```
/// use locus::{Device, EngineOptions};
/// let opts = EngineOptions::new(Device::Cpu);
/// assert_eq!(opts.device, Device::Cpu);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    /// Backend choice.
    pub device: Device,
    /// With [`Device::Auto`], also accept a software GPU adapter.
    pub allow_software_gpu: bool,
    /// Caps on GPU tile sizes (tests force tiny tiles with these).
    pub tile_limits: TileLimits,
    /// Fill every GPU output buffer with this value before an op writes
    /// it, so an entry the shaders fail to write shows up (verification).
    pub output_sentinel: Option<f32>,
    /// Bytes of idle GPU buffers kept for reuse.
    pub buffer_pool_bytes: u64,
    /// Most bytes the engine may hold (`None`: no limit). On a GPU: every
    /// device buffer (key sets, running calls, idle buffers, which are
    /// freed first); on the CPU: key sets and their requests' working
    /// memory. An allocation that can never fit under it — more than the
    /// limit less the resident key sets — fails at once with
    /// [`Error::MemoryLimit`](crate::Error::MemoryLimit) and changes
    /// nothing; one that would fit once running calls give their memory
    /// back waits for it (see [`memory_wait`](Self::memory_wait)).
    pub memory_limit: Option<u64>,
    /// Under a [`memory_limit`](Self::memory_limit): how long a request or
    /// key set that does not fit beside running calls' memory waits for
    /// it (default [`DEFAULT_MEMORY_WAIT`], 10 s; zero: it fails at once).
    /// Waiters are served in arrival order, so a large request is never
    /// passed forever by small ones; a waiter whose thread's
    /// [`CancelToken`](crate::CancelToken) is cancelled stops with
    /// [`Error::Cancelled`](crate::Error::Cancelled) within 50 ms; when the
    /// wait runs out the charge fails with
    /// [`Error::MemoryLimit`](crate::Error::MemoryLimit). Resident key sets
    /// are not waited for: a request that fits only if one is dropped
    /// fails at once.
    pub memory_wait: Duration,
    /// The GPU adapter to open (`None`: the best one). Indices count in the
    /// order of [`Engine::adapters`] (best first), as `locus info` lists
    /// them. With [`Device::Auto`] a chosen adapter is taken even when it
    /// is a software one; with [`Device::Cpu`] it is ignored.
    pub adapter: Option<AdapterChoice>,
    /// Refuse a software adapter (lavapipe, WARP): opening one fails with
    /// [`Error::SoftwareAdapter`], so a measurement can never run on a CPU
    /// posing as a GPU. With [`Device::Auto`] and no hardware adapter the
    /// engine still runs on the CPU path, which is not a GPU.
    pub require_hardware: bool,
    /// Time every GPU compute pass with timestamp queries, when the adapter
    /// has `TIMESTAMP_QUERY` (see [`Engine::take_gpu_time`]). Costs one small
    /// readback per submission; meant for benchmarks.
    pub gpu_timing: bool,
    /// Directory where a GPU engine keeps the driver's compiled pipelines
    /// between processes (`None`: not kept), one file per adapter model,
    /// where the adapter supports it (Vulkan's pipeline caches): a second
    /// process on the same adapter and driver compiles nothing. Defaults
    /// to [`default_pipeline_cache_dir`]; see
    /// [`Engine::pipeline_cache`] for what became of it.
    pub pipeline_cache: Option<PathBuf>,
    /// CPU threads the engine's work runs on (`None`: rayon's global pool,
    /// sized by `RAYON_NUM_THREADS` or the machine's cores). With a count,
    /// the engine builds a pool of its own, once, and every op of a CPU
    /// engine runs in it — one-shot calls, key sets, their micro-batches
    /// and attention sets alike — as does a GPU engine's host-side work
    /// (MeanShift's seeding and post-processing, the local models' solves,
    /// imputation, bandwidth estimation). A call's
    /// [`CancelToken`](crate::CancelToken) reaches the pool's threads.
    pub threads: Option<NonZeroUsize>,
}

/// How long a request waits for memory under a limit unless told
/// otherwise ([`EngineOptions::memory_wait`]).
pub const DEFAULT_MEMORY_WAIT: Duration = Duration::from_secs(10);

/// Environment variable choosing the GPU adapter (see [`AdapterChoice`]).
pub const ADAPTER_ENV: &str = "LOCUS_ADAPTER";
/// Environment variable that, set to `1` (or `true`, `yes`, `on`), refuses
/// software adapters (see [`EngineOptions::require_hardware`]).
pub const REQUIRE_HARDWARE_ENV: &str = "LOCUS_REQUIRE_HARDWARE";
/// Environment variable naming the directory of the GPU pipeline cache;
/// set empty, no cache is kept (see [`default_pipeline_cache_dir`]).
pub const PIPELINE_CACHE_ENV: &str = "LOCUS_PIPELINE_CACHE";

/// The directory GPU engines keep compiled pipelines in unless told
/// otherwise ([`EngineOptions::pipeline_cache`]): `LOCUS_PIPELINE_CACHE`
/// when set (empty: none), else the user's cache directory's `locus`
/// (`$XDG_CACHE_HOME/locus`, else `~/.cache/locus`; on macOS
/// `~/Library/Caches/locus`; on Windows `%LOCALAPPDATA%\locus`); `None`
/// when there is no such directory.
pub fn default_pipeline_cache_dir() -> Option<PathBuf> {
    let env = |var| std::env::var_os(var).filter(|v| !v.is_empty());
    if let Some(dir) = std::env::var_os(PIPELINE_CACHE_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = if cfg!(windows) {
        env("LOCALAPPDATA").map(PathBuf::from)
    } else if cfg!(target_os = "macos") {
        env("HOME").map(|h| PathBuf::from(h).join("Library/Caches"))
    } else {
        env("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
    };
    base.map(|b| b.join("locus"))
}

impl EngineOptions {
    /// Defaults for `device`.
    pub fn new(device: Device) -> Self {
        EngineOptions {
            device,
            allow_software_gpu: false,
            tile_limits: TileLimits::default(),
            output_sentinel: None,
            buffer_pool_bytes: 256 << 20,
            memory_limit: None,
            memory_wait: DEFAULT_MEMORY_WAIT,
            adapter: None,
            require_hardware: false,
            gpu_timing: false,
            pipeline_cache: default_pipeline_cache_dir(),
            threads: None,
        }
    }

    /// Defaults for `device`, then `LOCUS_ADAPTER` and
    /// `LOCUS_REQUIRE_HARDWARE` from the environment.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] when either variable holds something
    /// that cannot be read (an empty adapter, a flag that is not 0/1).
    pub fn from_env(device: Device) -> Result<Self> {
        let mut o = EngineOptions::new(device);
        if let Some(v) = std::env::var_os(ADAPTER_ENV) {
            let v = v.to_string_lossy();
            o.adapter = Some(v.parse().map_err(|e| match e {
                Error::InvalidParameter { reason, .. } => Error::InvalidParameter {
                    name: ADAPTER_ENV,
                    reason,
                },
                e => e,
            })?);
        }
        if let Some(v) = std::env::var_os(REQUIRE_HARDWARE_ENV) {
            o.require_hardware =
                parse_flag(&v.to_string_lossy()).ok_or_else(|| Error::InvalidParameter {
                    name: REQUIRE_HARDWARE_ENV,
                    reason: format!("{v:?} is not a flag; use 1 or 0"),
                })?;
        }
        Ok(o)
    }
}

/// Reads an on/off environment flag.
fn parse_flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "" | "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions::new(Device::Auto)
    }
}

/// A compute engine on one backend. Cheap to clone and share between
/// threads (`Send + Sync`); the device, shader modules, pipelines, layouts
/// and buffer pool are created once and reused by every call.
///
/// ```
/// use locus::{Engine, Kernel};
/// use ndarray::array;
/// let engine = Engine::cpu();
/// let x = array![[0.0f32], [1.0], [10.0]];
/// let y = array![[1.0f32], [3.0], [100.0]];
/// let k = Kernel::gaussian(0.5)?;
/// let m = engine.local_mean(&k, x.view(), x.view(), y.view())?;
/// assert!((m.values[[0, 0]] - 1.24).abs() < 0.01);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Engine {
    backend: Arc<dyn Backend>,
    /// Where the engine's CPU work runs (shared with a CPU backend).
    threads: Threads,
    fallback: Option<Arc<str>>,
}

impl Engine {
    /// The best backend: a hardware GPU if present, else the CPU. Never
    /// fails; if a GPU was found but could not be opened (or
    /// `LOCUS_ADAPTER` / `LOCUS_REQUIRE_HARDWARE` cannot be read or
    /// matched), the engine runs on the CPU and
    /// [`fallback_reason`](Self::fallback_reason) says why.
    pub fn new() -> Engine {
        Engine::from_env(Device::Auto).unwrap_or_else(|e| Engine {
            fallback: Some(e.to_string().into()),
            ..Engine::cpu()
        })
    }

    /// The rayon CPU backend.
    pub fn cpu() -> Engine {
        Engine {
            backend: Arc::new(CpuBackend::new()),
            threads: Threads::default(),
            fallback: None,
        }
    }

    /// The best GPU adapter, including a software one if it is all there
    /// is, or the one `LOCUS_ADAPTER` names; a software adapter is refused
    /// when `LOCUS_REQUIRE_HARDWARE=1`.
    ///
    /// # Errors
    /// [`Error::NoAdapter`] when wgpu finds no adapter at all;
    /// [`Error::AdapterNotFound`], [`Error::SoftwareAdapter`] as the
    /// environment asks; [`Error::DeviceRequest`] when it cannot be opened.
    pub fn gpu() -> Result<Engine> {
        Engine::from_env(Device::Gpu)
    }

    /// An engine on `device` with [`EngineOptions::from_env`]. With
    /// [`Device::Auto`], a GPU that is found but cannot be opened gives a
    /// CPU engine whose [`fallback_reason`](Self::fallback_reason) says why.
    ///
    /// # Errors
    /// The environment cannot be read or matched; with [`Device::Gpu`],
    /// as [`Engine::gpu`].
    pub fn from_env(device: Device) -> Result<Engine> {
        let options = EngineOptions::from_env(device)?;
        match Engine::with_options(options) {
            Err(e @ Error::DeviceRequest { .. }) if device == Device::Auto => Ok(Engine {
                fallback: Some(e.to_string().into()),
                ..Engine::cpu()
            }),
            r => r,
        }
    }

    /// An engine built from `options`.
    ///
    /// # Errors
    /// Invalid tile limits; an adapter asked for that is not found or is
    /// refused ([`Error::AdapterNotFound`], [`Error::SoftwareAdapter`]);
    /// with [`Device::Gpu`], no adapter or a device that cannot be opened;
    /// [`Error::ThreadPool`] when the [`threads`](EngineOptions::threads)
    /// cannot be started.
    pub fn with_options(options: EngineOptions) -> Result<Engine> {
        options.tile_limits.validate()?;
        let threads = Threads::new(options.threads)?;
        let cpu = || Engine {
            backend: Arc::new(CpuBackend::with_memory_limit(
                options.memory_limit,
                options.memory_wait,
                threads.clone(),
            )),
            threads: threads.clone(),
            fallback: None,
        };
        if options.device == Device::Cpu {
            return Ok(cpu());
        }
        let policy = AdapterPolicy {
            choice: options.adapter.as_ref(),
            require_hardware: options.require_hardware,
            accept_software: options.device == Device::Gpu || options.allow_software_gpu,
            required: options.device == Device::Gpu,
        };
        let Some(adapter) = adapter::choose(&policy)? else {
            return Ok(cpu());
        };
        let ctx = GpuContext::open(
            &adapter,
            options.tile_limits,
            options.output_sentinel,
            options.buffer_pool_bytes,
            options.gpu_timing,
            options.pipeline_cache.as_deref(),
        )?;
        ctx.pool.set_limit(options.memory_limit);
        ctx.pool.set_wait(options.memory_wait);
        Ok(Engine {
            backend: Arc::new(GpuBackend::new(ctx)),
            threads,
            fallback: None,
        })
    }

    /// The backend this engine runs on (for a GPU: adapter name, graphics
    /// API and device type).
    pub fn backend(&self) -> &BackendInfo {
        self.backend.info()
    }

    /// Limits and features of the GPU device this engine runs on; `None`
    /// on the CPU.
    pub fn gpu_limits(&self) -> Option<&GpuLimits> {
        self.backend.gpu_limits()
    }

    /// What became of the GPU pipeline cache
    /// ([`EngineOptions::pipeline_cache`]): the file read and written, or
    /// why there is none; `None` on the CPU.
    pub fn pipeline_cache(&self) -> Option<&PipelineCacheStatus> {
        self.backend.pipeline_cache()
    }

    /// Why [`Engine::new`] fell back to the CPU although a GPU was found.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Device time spent in compute passes since the last call, measured
    /// with GPU timestamp queries: what the kernels took, without uploads,
    /// readbacks, host work or queue waits. `None` on the CPU, or when the
    /// engine was built without [`EngineOptions::gpu_timing`] or the
    /// adapter lacks `TIMESTAMP_QUERY`. Calls running at the same time on
    /// one engine are summed together.
    ///
    /// # Errors
    /// The timestamps cannot be read back (a lost device).
    pub fn take_gpu_time(&self) -> Result<Option<std::time::Duration>> {
        self.backend.take_gpu_time()
    }

    /// Every GPU adapter wgpu can see, best first (for `locus info`).
    pub fn adapters() -> Vec<BackendInfo> {
        adapter::describe_all()
    }

    /// How many CPU threads the engine's work runs on: its own pool's
    /// ([`EngineOptions::threads`]), else rayon's global pool's.
    pub fn threads(&self) -> usize {
        self.threads.count()
    }

    pub(crate) fn backend_impl(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The engine's CPU threads.
    pub(crate) fn threads_impl(&self) -> &Threads {
        &self.threads
    }

    /// Runs `f` on the engine's CPU threads, with the calling thread's
    /// cancellation token (host-side parallel work of an op; the CPU
    /// backend's kernels enter the pool themselves). Never wraps a wait
    /// for memory.
    pub(crate) fn install<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.threads.install(f)
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_is_send_sync_and_cheap_to_clone() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Engine>();
        assert_send_sync::<EngineOptions>();
    }

    use crate::cancel::CancelToken;
    use crate::kernel::{Kernel, Profile};
    use ndarray::Array2;

    fn on_threads(n: usize) -> Engine {
        let mut o = EngineOptions::new(Device::Cpu);
        o.threads = NonZeroUsize::new(n);
        Engine::with_options(o).unwrap()
    }

    fn points(rows: usize, d: usize, seed: u64) -> Array2<f32> {
        Array2::from_shape_vec((rows, d), crate::cpu::test_data(rows * d, seed)).unwrap()
    }

    /// The threads a probe token saw, less the calling thread (which
    /// checks the token between iterations and waits for the pool).
    fn workers(token: &CancelToken) -> Vec<Option<String>> {
        let me = std::thread::current().name().map(str::to_owned);
        let mut seen: Vec<_> = token
            .threads_seen()
            .into_iter()
            .filter(|n| *n != me)
            .collect();
        seen.sort();
        seen
    }

    #[test]
    fn an_engine_of_one_thread_runs_every_op_there() {
        let engine = on_threads(1);
        assert_eq!(engine.threads(), 1);
        assert!(matches!(
            engine.backend(),
            BackendInfo::Cpu { threads: 1, .. }
        ));
        let (q, x) = (points(300, 3, 1), points(2000, 3, 2));
        let k = Kernel::new(Profile::Gaussian, 0.5).unwrap();
        let token = CancelToken::probe();
        token
            .run(|| -> Result<()> {
                engine.local_mean(&k, q.view(), x.view(), x.view())?;
                engine.knn(q.view(), x.view(), 5)?;
                engine.kernel_matrix(&k, q.view(), x.view())?;
                engine.local_pca(&k, q.view(), x.view(), 2)?;
                let set = engine.prepare(x.view()).values(x.view()).build()?;
                set.local_mean(&k, q.view())?;
                Ok(())
            })
            .unwrap();
        assert_eq!(workers(&token), [Some("locus-cpu-0".to_owned())]);
    }

    #[test]
    fn an_engine_of_two_threads_uses_its_own_and_no_others() {
        let engine = on_threads(2);
        let (q, x) = (points(400, 3, 3), points(3000, 3, 4));
        let k = Kernel::new(Profile::Gaussian, 0.5).unwrap();
        let token = CancelToken::probe();
        token
            .run(|| engine.local_mean(&k, q.view(), x.view(), x.view()))
            .unwrap();
        let seen = workers(&token);
        assert!(!seen.is_empty());
        assert!(
            seen.iter()
                .all(|n| matches!(n.as_deref(), Some("locus-cpu-0" | "locus-cpu-1"))),
            "{seen:?}"
        );
    }

    #[test]
    fn results_are_the_same_on_any_number_of_threads() {
        // Enough queries that no op splits the keys across threads.
        let (q, x) = (points(2000, 3, 5), points(2500, 3, 6));
        let k = Kernel::new(Profile::Gaussian, 0.3).unwrap();
        let run = |e: &Engine| {
            let m = e.local_mean(&k, q.view(), x.view(), x.view()).unwrap();
            let nn = e.knn(q.view(), x.view(), 4).unwrap();
            (m.values, nn.indices, nn.distances)
        };
        let one = run(&on_threads(1));
        assert_eq!(one, run(&on_threads(2)));
        assert_eq!(one, run(&on_threads(3)));
        assert_eq!(one, run(&Engine::cpu()));
    }

    #[test]
    fn a_long_op_on_one_thread_is_cancelled() {
        let engine = on_threads(1);
        // ~1.6·10⁹ pairs: seconds on one thread, so the deadline comes first.
        let x = points(40_000, 3, 7);
        let k = Kernel::new(Profile::Gaussian, 0.5).unwrap();
        let token = CancelToken::with_timeout(Duration::from_millis(50));
        let out = token.run(|| engine.local_mean(&k, x.view(), x.view(), x.view()));
        assert!(
            matches!(
                out,
                Err(Error::Cancelled {
                    op: "local_mean",
                    ..
                })
            ),
            "{out:?}"
        );
        // Ops that read the token inside the pool see it too.
        let cancelled = CancelToken::new();
        cancelled.cancel();
        let small = points(50, 3, 8);
        let out = cancelled.run(|| engine.kernel_matrix(&k, small.view(), small.view()));
        assert!(matches!(out, Err(Error::Cancelled { .. })), "{out:?}");
        let out = cancelled.run(|| engine.local_pca(&k, small.view(), small.view(), 1));
        assert!(matches!(out, Err(Error::Cancelled { .. })), "{out:?}");
        // The engine still works.
        assert!(engine.self_local_mean(&k, small.view()).is_ok());
    }

    #[test]
    fn too_many_threads_is_refused() {
        let mut o = EngineOptions::new(Device::Cpu);
        o.threads = NonZeroUsize::new(usize::MAX);
        assert!(matches!(
            Engine::with_options(o),
            Err(Error::InvalidParameter {
                name: "threads",
                ..
            })
        ));
    }
}

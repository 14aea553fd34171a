//! The wgpu device: adapter choice, creation, error capture.
//!
//! [`GpuContext`] owns its parts (the buffer pool, the pipeline cache, the
//! pass timing), which take the device, the queue or the limits they need
//! and never the context: the imports run one way, context → parts.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::backend::{BackendInfo, GpuLimits, PipelineCacheStatus};
use crate::cancel::Checkpoint;
use crate::error::{Error, Result};
use crate::gpu::plan::{DeviceLimits, TileLimits};

use super::pipeline_cache::{self, DiskCache};
use super::pipelines::{PipelineKey, Pipelines};
use super::pool::{BufferPool, Pooled};
use super::timing::Timing;

/// The native GPU APIs searched. GL is left out on purpose: wgpu would fall
/// back to it (llvmpipe through EGL) when Vulkan is missing, hiding the
/// missing driver behind a slow path.
pub(crate) const BACKENDS: wgpu::Backends = wgpu::Backends::VULKAN
    .union(wgpu::Backends::METAL)
    .union(wgpu::Backends::DX12);

/// Lists the adapters wgpu can see, best first: discrete, integrated,
/// virtual, other, then software (device type `Cpu`).
pub(crate) fn list_adapters() -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = BACKENDS;
    desc.flags = wgpu::InstanceFlags::empty().with_env();
    let instance = wgpu::Instance::new(desc);
    let mut adapters = pollster::block_on(instance.enumerate_adapters(BACKENDS));
    adapters.sort_by_key(|a| rank(a.get_info().device_type));
    adapters
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Whether an adapter is a software rasterizer (lavapipe, WARP, …).
pub(crate) fn is_software(info: &wgpu::AdapterInfo) -> bool {
    info.device_type == wgpu::DeviceType::Cpu
}

/// Describes an adapter as the engine reports it.
pub(crate) fn describe(info: &wgpu::AdapterInfo) -> BackendInfo {
    BackendInfo::Gpu {
        name: info.name.clone(),
        api: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
        software: is_software(info),
    }
}

/// An open device with everything built once and shared by all calls:
/// bind-group layouts, pipeline cache, buffer pool.
pub(crate) struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: BackendInfo,
    pub limits: DeviceLimits,
    /// The device's limits and the adapter's features, as reported.
    pub gpu_limits: GpuLimits,
    pub caps: TileLimits,
    /// Value written into every output buffer before an op runs, so a
    /// location the shaders fail to write cannot pass for a result.
    pub sentinel: Option<f32>,
    /// Alignment of dynamic uniform offsets.
    pub uniform_align: u64,
    pub pipelines: Pipelines,
    /// The driver's pipeline cache and the file it is kept in, when on.
    disk_cache: Option<DiskCache>,
    /// What became of the on-disk pipeline cache, for reports.
    pub pipeline_cache: PipelineCacheStatus,
    pub pool: BufferPool,
    /// Pass timestamps, when the engine times its kernels.
    pub timing: Option<Timing>,
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("info", &self.info)
            .field("limits", &self.limits)
            .field("caps", &self.caps)
            .field("pipeline_cache", &self.pipeline_cache)
            .finish_non_exhaustive()
    }
}

impl GpuContext {
    /// Opens `adapter` with every limit it offers; with `timing`, also
    /// timestamp queries when the adapter has them; with a `pipeline_cache`
    /// directory, the driver's pipeline cache kept there when the adapter
    /// has one (`pipeline_cache.rs`).
    pub(crate) fn open(
        adapter: &wgpu::Adapter,
        caps: TileLimits,
        sentinel: Option<f32>,
        pool_bytes: u64,
        timing: bool,
        pipeline_cache: Option<&Path>,
    ) -> Result<Self> {
        let ainfo = adapter.get_info();
        let timing = timing && adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let mut features = wgpu::Features::empty();
        if timing {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let cache_support = pipeline_cache.map(|_| pipeline_cache::support(adapter));
        if let Some(Ok(f)) = &cache_support {
            features |= *f;
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("locus"),
            required_features: features,
            required_limits: adapter.limits(),
            memory_hints: wgpu::MemoryHints::Performance,
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            Error::DeviceRequest {
                adapter: ainfo.name.clone(),
                reason: e.to_string(),
            }
        })?;
        let lost = Arc::new(Mutex::new(None));
        let l = Arc::clone(&lost);
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut g) = l.lock() {
                *g = Some(format!("{reason:?}: {msg}"));
            }
        });
        // Errors outside any scope (there should be none) are recorded, not
        // panicked on: the next op reports them.
        let uncaptured = Arc::new(Mutex::new(None));
        let u = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut g) = u.lock() {
                *g = Some(e.to_string());
            }
        }));
        let lim = device.limits();
        let limits = DeviceLimits::from_wgpu(&lim, is_software(&ainfo));
        let gpu_limits = GpuLimits {
            max_buffer_size: lim.max_buffer_size,
            max_storage_buffer_binding_size: lim.max_storage_buffer_binding_size,
            max_compute_workgroups_per_dimension: lim.max_compute_workgroups_per_dimension,
            max_compute_invocations_per_workgroup: lim.max_compute_invocations_per_workgroup,
            max_compute_workgroup_storage_size: lim.max_compute_workgroup_storage_size,
            adapter_features: adapter
                .features()
                .iter_names()
                .map(|(name, _)| name.to_string())
                .collect(),
        };
        let pipelines = Pipelines::new(&device)?;
        let (disk_cache, pipeline_cache) = match (pipeline_cache, cache_support) {
            (Some(dir), Some(Ok(_))) => DiskCache::open(&device, &ainfo, dir),
            (_, Some(Err(reason))) => (None, PipelineCacheStatus::Unsupported { reason }),
            _ => (None, PipelineCacheStatus::Off),
        };
        let timer = timing.then(|| Timing::new(queue.get_timestamp_period()));
        Ok(GpuContext {
            pool: BufferPool::new(pool_bytes, lim.max_buffer_size),
            uniform_align: u64::from(lim.min_uniform_buffer_offset_alignment),
            info: describe(&ainfo),
            device,
            queue,
            limits,
            gpu_limits,
            caps,
            sentinel,
            pipelines,
            disk_cache,
            pipeline_cache,
            timing: timer,
            lost,
            uncaptured,
        })
    }

    /// A buffer of at least `size` bytes with `usage`, from the pool.
    ///
    /// # Errors
    /// [`Error::TooLarge`] past the device's buffer size,
    /// [`Error::MemoryLimit`] past the pool's cap.
    pub(crate) fn buffer(
        &self,
        op: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Pooled<'_>> {
        self.pool.get(&self.device, op, size, usage)
    }

    /// The pipeline of `key` from the cache, compiled on first use inside
    /// an error scope of `op` (through the on-disk pipeline cache, which
    /// is then written back: failing to write it is not an error).
    ///
    /// # Errors
    /// [`Error::Gpu`] when the shader does not render or compile, or the
    /// cache's lock is poisoned; a lost device.
    pub(crate) fn pipeline(
        &self,
        op: &'static str,
        key: &PipelineKey,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.pipelines.get(op, key, || {
            let scope = self.scope(
                op,
                format!("compiling {} {:?}", key.shader.file(), key.template),
            )?;
            let cache = self.disk_cache.as_ref().map(DiskCache::cache);
            let pipeline = self.pipelines.compile(&self.device, op, key, cache)?;
            scope.finish(self)?;
            if let Some(disk) = &self.disk_cache {
                let _ = disk.save();
            }
            Ok(pipeline)
        })
    }

    /// Fails when the device was lost or an uncaptured error was recorded.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if let Some(reason) = self.lost.lock().ok().and_then(|g| g.clone()) {
            return Err(Error::DeviceLost { reason });
        }
        Ok(())
    }

    /// Starts capturing validation, out-of-memory and internal errors on
    /// this thread for one op, and reads the thread's cancellation token
    /// for it (checked before each submission and after each wait).
    pub(crate) fn scope(&self, op: &'static str, sizes: String) -> Result<ErrorScope> {
        self.check_alive()?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        Ok(ErrorScope {
            internal,
            validation,
            oom,
            op,
            sizes,
            cancel: Checkpoint::current(op),
        })
    }

    /// Takes (and clears) an error recorded outside any scope.
    fn take_uncaptured(&self) -> Option<String> {
        self.uncaptured.lock().ok().and_then(|mut g| g.take())
    }
}

/// Error scopes of one op, popped by [`finish`](Self::finish) before its
/// results are trusted.
/// Fields are declared innermost first: dropped on an early return, the
/// scopes pop in the reverse order of their pushes, as wgpu requires.
pub(crate) struct ErrorScope {
    internal: wgpu::ErrorScopeGuard,
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
    pub op: &'static str,
    pub sizes: String,
    /// The op's cancellation token, read where the op started.
    cancel: Checkpoint,
}

impl ErrorScope {
    /// `Err(Error::Cancelled)` once the op's token is cancelled: checked
    /// before work is submitted and after the device has run it, so a
    /// cancelled op stops within one submission (each bounded by the
    /// plan's per-dispatch work cap).
    pub(crate) fn check_cancelled(&self) -> Result<()> {
        self.cancel.check()
    }

    /// Pops the scopes (innermost first) and maps the first error found.
    pub(crate) fn finish(self, ctx: &GpuContext) -> Result<()> {
        let internal = pollster::block_on(self.internal.pop());
        let validation = pollster::block_on(self.validation.pop());
        let oom = pollster::block_on(self.oom.pop());
        ctx.check_alive()?;
        if oom.is_some() {
            return Err(Error::GpuOutOfMemory {
                op: self.op,
                sizes: self.sizes,
            });
        }
        if let Some(e) = validation.or(internal) {
            return Err(Error::Gpu {
                op: self.op,
                sizes: self.sizes,
                message: e.to_string(),
            });
        }
        if let Some(message) = ctx.take_uncaptured() {
            return Err(Error::Gpu {
                op: self.op,
                sizes: self.sizes,
                message,
            });
        }
        Ok(())
    }

    /// An error naming this op, for failures detected on the host side.
    pub(crate) fn error(&self, message: impl Into<String>) -> Error {
        Error::Gpu {
            op: self.op,
            sizes: self.sizes.clone(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;
    use crate::gpu::shaders::ShaderId;
    use crate::kernel::Profile;

    /// A context on any adapter (lavapipe included); `None` (skipped) when
    /// there is none, except under `CI=true`, where that fails. Its
    /// pipeline cache is its own: cold whatever other tests compiled.
    fn context() -> Option<GpuContext> {
        crate::gpu::adapter::test_context(None)
    }

    #[test]
    fn concurrent_cold_requests_compile_once() {
        let Some(ctx) = context() else { return };
        let pipelines = &ctx.pipelines;
        let key = PipelineKey {
            shader: ShaderId::KernelMatrix,
            template: vec![("D", 5)],
            profile: Some(Profile::Cauchy.shader_code()),
            product: None,
            metric: None,
        };
        const THREADS: usize = 8;
        let barrier = Barrier::new(THREADS);
        let got: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        ctx.pipeline("test", &key).expect("compiles")
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(pipelines.compilations(), 1);
        assert!(got.iter().all(|p| Arc::ptr_eq(p, &got[0])));
        // Cached: no more compilations; another key is another one.
        let again = ctx.pipeline("test", &key).unwrap();
        assert!(Arc::ptr_eq(&again, &got[0]));
        assert_eq!(pipelines.compilations(), 1);
        let other = PipelineKey {
            profile: Some(Profile::Gaussian.shader_code()),
            product: None,
            metric: None,
            ..key.clone()
        };
        let p = ctx.pipeline("test", &other).unwrap();
        assert!(!Arc::ptr_eq(&p, &got[0]));
        assert_eq!(pipelines.compilations(), 2);
    }

    #[test]
    fn failed_compilations_are_not_cached() {
        let Some(ctx) = context() else { return };
        let pipelines = &ctx.pipelines;
        // D = 0: zero-sized private arrays, which WGSL rejects.
        let bad = PipelineKey {
            shader: ShaderId::LocalMean,
            template: vec![
                ("D", 0),
                ("QT", 1),
                ("QA", 1),
                ("STAGE", 64),
                ("C", 16),
                ("MASKED", 0),
                ("R", 1),
                ("FORM", 0),
                ("EXCL", 0),
                ("SPANS", 0),
            ],
            profile: Some(Profile::Gaussian.shader_code()),
            product: None,
            metric: None,
        };
        for attempt in 1..=2 {
            let e = ctx.pipeline("test", &bad).err();
            assert!(matches!(e, Some(Error::Gpu { .. })), "{e:?}");
            assert_eq!(pipelines.compilations(), attempt);
        }
    }

    #[test]
    fn a_poisoned_cache_is_an_error() {
        let Some(ctx) = context() else { return };
        let pipelines = &ctx.pipelines;
        let key = PipelineKey::new(ShaderId::Fill, vec![]);
        // A thread that panics while it compiles the key poisons the lock
        // the cache holds over it.
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                pipelines.get("test", &key, || {
                    panic!("poisoning the cache lock on purpose")
                })
            })
            .join()
        });
        let e = ctx.pipeline("test", &key).err();
        assert!(
            matches!(&e, Some(Error::Gpu { message, .. }) if message.contains("poisoned")),
            "{e:?}"
        );
        assert_eq!(pipelines.compilations(), 0);
    }

    /// Compiles a few pipelines on `ctx` (a kernel matrix of each profile).
    fn compile_some(ctx: &GpuContext) {
        for p in Profile::ALL {
            let key = PipelineKey {
                shader: ShaderId::KernelMatrix,
                template: vec![("D", 3)],
                profile: Some(p.shader_code()),
                product: None,
                metric: None,
            };
            ctx.pipeline("test", &key).expect("compiles");
        }
    }

    /// The cache file of an active status.
    fn cache_file(status: &PipelineCacheStatus) -> std::path::PathBuf {
        match status {
            PipelineCacheStatus::Active { path, .. } => path.clone(),
            other => panic!("pipeline cache not active: {other}"),
        }
    }

    #[test]
    fn the_pipeline_cache_is_written_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let Some(cold) = crate::gpu::adapter::test_context(Some(dir.path())) else {
            return;
        };
        if let PipelineCacheStatus::Unsupported { reason } = &cold.pipeline_cache {
            eprintln!("SKIPPED: the adapter keeps no pipeline cache ({reason})");
            return;
        }
        let path = cache_file(&cold.pipeline_cache);
        assert!(path.starts_with(dir.path()));
        assert_eq!(
            cold.pipeline_cache,
            PipelineCacheStatus::Active {
                path: path.clone(),
                loaded_bytes: 0,
                ignored: None
            }
        );
        compile_some(&cold);
        let written = std::fs::read(&path).expect("the cache file is written");
        assert!(written.len() > 24, "{} bytes", written.len());
        drop(cold);
        // No temporary files are left behind.
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "{files:?}");

        // A second device loads it; compiling the same pipelines through
        // it adds nothing, so the file is not written again.
        let warm = crate::gpu::adapter::test_context(Some(dir.path())).expect("adapter");
        match &warm.pipeline_cache {
            PipelineCacheStatus::Active {
                loaded_bytes,
                ignored: None,
                ..
            } => assert_eq!(*loaded_bytes as usize, written.len() - 24),
            other => panic!("not loaded: {other}"),
        }
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        compile_some(&warm);
        assert_eq!(warm.pipelines.compilations(), Profile::ALL.len());
        let after = std::fs::read(&path).unwrap();
        if after == written {
            assert_eq!(
                std::fs::metadata(&path).unwrap().modified().unwrap(),
                modified
            );
        }
    }

    #[test]
    fn a_corrupt_or_foreign_pipeline_cache_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let Some(first) = crate::gpu::adapter::test_context(Some(dir.path())) else {
            return;
        };
        if !first.pipeline_cache.is_active() {
            eprintln!("SKIPPED: no pipeline cache ({})", first.pipeline_cache);
            return;
        }
        let path = cache_file(&first.pipeline_cache);
        compile_some(&first);
        let good = std::fs::read(&path).unwrap();
        drop(first);
        let mut truncated = good.clone();
        truncated.truncate(good.len() / 2);
        // Our header over bytes wgpu did not write: wgpu's header check.
        let foreign = super::pipeline_cache::tests::encoded(b"WGPUPLCH and some bytes");
        for (what, bytes) in [
            ("garbage", b"not a cache at all".to_vec()),
            ("truncated", truncated),
            ("foreign", foreign),
            ("empty", Vec::new()),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let ctx = crate::gpu::adapter::test_context(Some(dir.path())).expect("adapter");
            match &ctx.pipeline_cache {
                PipelineCacheStatus::Active {
                    loaded_bytes: 0,
                    ignored: Some(_),
                    ..
                } => {}
                other => panic!("{what}: {other:?}"),
            }
            // The device works and the file is replaced by a good one.
            compile_some(&ctx);
            ctx.check_alive().unwrap();
            assert!(ctx.take_uncaptured().is_none(), "{what}");
            let rewritten = std::fs::read(&path).unwrap();
            assert!(super::pipeline_cache::tests::decodes(&rewritten), "{what}");
        }
    }

    #[test]
    fn without_a_directory_there_is_no_pipeline_cache() {
        let Some(ctx) = context() else { return };
        assert_eq!(ctx.pipeline_cache, PipelineCacheStatus::Off);
        compile_some(&ctx);
    }
}

//! The engine: picks a backend, owns it, exposes the ops (in `ops/`).

use std::sync::Arc;

use crate::backend::{Backend, BackendInfo, GpuLimits};
use crate::cpu::CpuBackend;
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::gpu::context::{self, GpuContext};
use crate::plan::TileLimits;

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
    /// memory. An allocation past it fails with
    /// [`Error::MemoryLimit`](crate::Error::MemoryLimit) and changes nothing.
    pub memory_limit: Option<u64>,
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
        }
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
    fallback: Option<Arc<str>>,
}

impl Engine {
    /// The best backend: a hardware GPU if present, else the CPU. Never
    /// fails; if a GPU was found but could not be opened, the engine runs
    /// on the CPU and [`fallback_reason`](Self::fallback_reason) says why.
    pub fn new() -> Engine {
        Engine::with_options(EngineOptions::default()).unwrap_or_else(|e| Engine {
            backend: Arc::new(CpuBackend::new()),
            fallback: Some(e.to_string().into()),
        })
    }

    /// The rayon CPU backend.
    pub fn cpu() -> Engine {
        Engine {
            backend: Arc::new(CpuBackend::new()),
            fallback: None,
        }
    }

    /// The best GPU adapter, including a software one if it is all there is.
    ///
    /// # Errors
    /// [`Error::NoAdapter`] when wgpu finds no adapter at all;
    /// [`Error::DeviceRequest`] when it cannot be opened.
    pub fn gpu() -> Result<Engine> {
        Engine::with_options(EngineOptions::new(Device::Gpu))
    }

    /// An engine built from `options`.
    ///
    /// # Errors
    /// Invalid tile limits; with [`Device::Gpu`], no adapter or a device
    /// that cannot be opened.
    pub fn with_options(options: EngineOptions) -> Result<Engine> {
        options.tile_limits.validate()?;
        let cpu = || Engine {
            backend: Arc::new(CpuBackend::with_memory_limit(options.memory_limit)),
            fallback: None,
        };
        if options.device == Device::Cpu {
            return Ok(cpu());
        }
        let adapters = context::list_adapters();
        let chosen = adapters.iter().find(|a| {
            options.device == Device::Gpu
                || options.allow_software_gpu
                || !context::is_software(&a.get_info())
        });
        let Some(adapter) = chosen else {
            if options.device == Device::Gpu {
                return Err(Error::NoAdapter {
                    backends: format!("{:?}", context::BACKENDS),
                });
            }
            return Ok(cpu());
        };
        let ctx = GpuContext::open(
            adapter,
            options.tile_limits,
            options.output_sentinel,
            options.buffer_pool_bytes,
        )?;
        ctx.pool.set_limit(options.memory_limit);
        Ok(Engine {
            backend: Arc::new(GpuBackend::new(ctx)),
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

    /// Why [`Engine::new`] fell back to the CPU although a GPU was found.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Every GPU adapter wgpu can see, best first (for `locus info`).
    pub fn adapters() -> Vec<BackendInfo> {
        context::list_adapters()
            .iter()
            .map(|a| context::describe(&a.get_info()))
            .collect()
    }

    pub(crate) fn backend_impl(&self) -> &dyn Backend {
        &*self.backend
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
}

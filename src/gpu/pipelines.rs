//! Bind-group layouts (built once) and the pipeline cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

use super::context::GpuContext;
use super::shaders::ShaderId;

/// How a binding is used by a shader.
#[derive(Clone, Copy)]
enum Slot {
    /// Uniform parameters, bound with a dynamic offset.
    Params,
    ReadOnly,
    ReadWrite,
}

fn slots(id: ShaderId) -> &'static [Slot] {
    use Slot::*;
    match id {
        ShaderId::LocalMean => &[
            Params, ReadOnly, ReadOnly, ReadOnly, ReadWrite, ReadWrite, ReadWrite,
        ],
        ShaderId::KernelMatrix => &[Params, ReadOnly, ReadOnly, ReadOnly, ReadWrite],
        ShaderId::Fill => &[Params, ReadWrite],
        ShaderId::Knn => &[Params, ReadOnly, ReadOnly, ReadWrite, ReadWrite, ReadWrite],
        ShaderId::MeanShift => &[
            Params, ReadWrite, ReadOnly, ReadWrite, ReadWrite, ReadOnly, ReadWrite,
        ],
        ShaderId::Softmax => &[Params, ReadOnly, ReadOnly, ReadOnly, ReadWrite, ReadWrite],
        ShaderId::SoftmaxMatrix => &[Params, ReadOnly, ReadOnly, ReadOnly, ReadWrite],
        ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => &[
            Params, ReadOnly, ReadOnly, ReadOnly, ReadWrite, ReadWrite, ReadWrite,
        ],
    }
}

/// What identifies a compiled pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    pub shader: ShaderId,
    /// Placeholder values.
    pub template: Vec<(&'static str, u32)>,
    /// `PROFILE` override, for shaders that use profiles.
    pub profile: Option<u32>,
}

/// Layouts per shader, and compiled pipelines by key.
pub(crate) struct Pipelines {
    layouts: HashMap<ShaderId, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    cache: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl Pipelines {
    pub(crate) fn new(device: &wgpu::Device) -> Self {
        let layouts = ShaderId::ALL
            .into_iter()
            .map(|id| {
                let entries: Vec<_> = slots(id)
                    .iter()
                    .enumerate()
                    .map(|(i, s)| wgpu::BindGroupLayoutEntry {
                        binding: i as u32,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: match s {
                                Slot::Params => wgpu::BufferBindingType::Uniform,
                                Slot::ReadOnly => {
                                    wgpu::BufferBindingType::Storage { read_only: true }
                                }
                                Slot::ReadWrite => {
                                    wgpu::BufferBindingType::Storage { read_only: false }
                                }
                            },
                            has_dynamic_offset: matches!(s, Slot::Params),
                            min_binding_size: None,
                        },
                        count: None,
                    })
                    .collect();
                let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(id.file()),
                    entries: &entries,
                });
                let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(id.file()),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (id, (bgl, pl))
            })
            .collect();
        Pipelines {
            layouts,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The bind-group layout of a shader.
    pub(crate) fn layout(&self, id: ShaderId) -> &wgpu::BindGroupLayout {
        &self.layouts[&id].0
    }

    /// The pipeline for `key`, compiled on first use.
    pub(crate) fn get(
        &self,
        ctx: &GpuContext,
        op: &'static str,
        key: &PipelineKey,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.cache.lock().ok().and_then(|c| c.get(key).cloned()) {
            return Ok(p);
        }
        let src = key
            .shader
            .render(&key.template)
            .map_err(|message| Error::Gpu {
                op,
                sizes: format!("{:?}", key.template),
                message,
            })?;
        let device = &ctx.device;
        let scope = ctx.scope(
            op,
            format!("compiling {} {:?}", key.shader.file(), key.template),
        )?;
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        // Every loop in our shaders has a bound fixed by its uniforms; the
        // per-iteration guard wgpu would add costs 10–20% for nothing.
        checks.force_loop_bounding = false;
        // SAFETY: bounds checks stay on; only the loop guard is dropped, and
        // each loop of the registered shaders terminates (counted loops).
        let module = unsafe {
            device.create_shader_module_trusted(
                wgpu::ShaderModuleDescriptor {
                    label: Some(key.shader.file()),
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                },
                checks,
            )
        };
        let constants: Vec<(&str, f64)> = key
            .profile
            .map(|p| ("PROFILE", f64::from(p)))
            .into_iter()
            .collect();
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key.shader.file()),
            layout: Some(&self.layouts[&key.shader].1),
            module: &module,
            entry_point: Some(key.shader.entry()),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                // Every shader writes its workgroup arrays before reading them.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        scope.finish(ctx)?;
        let pipeline = Arc::new(pipeline);
        if let Ok(mut c) = self.cache.lock() {
            c.insert(key.clone(), Arc::clone(&pipeline));
        }
        Ok(pipeline)
    }
}

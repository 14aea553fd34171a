//! Bind-group layouts (reflected from the shaders, built once) and the
//! pipeline cache (in memory; the driver's machine code is also kept on
//! disk between processes, `pipeline_cache.rs`).
//!
//! The cache maps each [`PipelineKey`] to an entry of its own, a mutex over
//! the pipeline once compiled. The map's lock is held only to find or add
//! an entry; compilation runs under the entry's lock alone, so concurrent
//! requests for one cold key compile it once (the others wait for it),
//! different keys compile in parallel, and a failed compilation leaves the
//! entry empty for the next request to retry.
//!
//! Nothing here sees the context that owns the cache: the device is
//! passed in, and the error scope around a compilation is the caller's
//! (`GpuContext::pipeline`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::kernel::{Kernel, Metric};

use super::shaders::{ProductCode, ShaderId};

/// What identifies a compiled pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    pub shader: ShaderId,
    /// Placeholder values.
    pub template: Vec<(&'static str, u32)>,
    /// `PROFILE` override, for shaders that use profiles.
    pub profile: Option<u32>,
    /// A product kernel's blocks, for shaders that use profiles.
    pub product: Option<ProductCode>,
    /// The `METRIC` and `METRIC_P` overrides (code, bits of `p`), for the
    /// shaders that measure by a metric (`local_mean.wgsl`, `knn.wgsl`).
    pub metric: Option<(u32, u64)>,
}

impl PipelineKey {
    /// `shader` with its placeholder values, for a shader without profiles.
    pub(crate) fn new(shader: ShaderId, template: Vec<(&'static str, u32)>) -> Self {
        PipelineKey {
            shader,
            template,
            profile: None,
            product: None,
            metric: None,
        }
    }

    /// The same key, its `METRIC` overrides set for `metric` (a shader
    /// that declares them: `local_mean.wgsl`, `knn.wgsl`).
    pub(crate) fn with_metric(mut self, metric: &Metric) -> Self {
        self.metric = Some(metric.key());
        self
    }

    /// `shader` with its placeholder values, specialized for `kernel`'s
    /// profile (and a product kernel's blocks).
    pub(crate) fn for_kernel(
        shader: ShaderId,
        template: Vec<(&'static str, u32)>,
        kernel: &Kernel,
    ) -> Self {
        PipelineKey {
            shader,
            template,
            profile: Some(kernel.profile().shader_code()),
            product: ProductCode::of(kernel),
            metric: None,
        }
    }
}

/// A cache entry: empty until its pipeline compiles; locked while it does.
type Entry = Arc<Mutex<Option<Arc<wgpu::ComputePipeline>>>>;

/// Layouts per shader, and compiled pipelines by key.
pub(crate) struct Pipelines {
    layouts: HashMap<ShaderId, (wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    cache: Mutex<HashMap<PipelineKey, Entry>>,
    /// Compilations started (shader modules created), for tests.
    compilations: AtomicUsize,
}

/// A cache lock poisoned by a thread that panicked while holding it.
fn poisoned(op: &'static str, key: &PipelineKey) -> Error {
    Error::Gpu {
        op,
        sizes: format!("{} {:?}", key.shader.file(), key.template),
        message: "pipeline cache lock poisoned: a thread panicked while holding it".into(),
    }
}

impl Pipelines {
    /// The bind-group and pipeline layouts of every shader on `device`,
    /// from the bindings naga reflects ([`ShaderId::bindings`]): binding
    /// index, uniform (with a dynamic offset) or storage, read-only or
    /// read-write.
    ///
    /// # Errors
    /// [`Error::Gpu`] when a shader does not render, parse or reflect
    /// (a registry bug the tests catch).
    pub(crate) fn new(device: &wgpu::Device) -> Result<Self> {
        let mut layouts = HashMap::new();
        // One layout per bind-group shape: entries that share their base's
        // bind groups (the merge passes) use its layout.
        for id in ShaderId::ALL.into_iter().filter(|id| id.base() == *id) {
            let bindings = id.bindings().map_err(|message| Error::Gpu {
                op: "opening the GPU",
                sizes: format!("{} (entry {})", id.file(), id.entry()),
                message,
            })?;
            let entries: Vec<_> = bindings
                .iter()
                .enumerate()
                .map(|(i, access)| wgpu::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: access.binding_type(),
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
            layouts.insert(id, (bgl, pl));
        }
        Ok(Pipelines {
            layouts,
            cache: Mutex::new(HashMap::new()),
            compilations: AtomicUsize::new(0),
        })
    }

    /// The bind-group layout of a shader.
    pub(crate) fn layout(&self, id: ShaderId) -> &wgpu::BindGroupLayout {
        &self.layouts[&id.base()].0
    }

    /// Compilations started so far.
    #[cfg(test)]
    pub(crate) fn compilations(&self) -> usize {
        self.compilations.load(Ordering::SeqCst)
    }

    /// The pipeline for `key`, compiled by `compile` on first use, once:
    /// concurrent requests for a key being compiled wait for that
    /// compilation.
    ///
    /// # Errors
    /// `compile`'s error (nothing is cached: the next request tries
    /// again), or [`Error::Gpu`] when a cache lock was poisoned by a panic
    /// in another thread.
    pub(crate) fn get(
        &self,
        op: &'static str,
        key: &PipelineKey,
        compile: impl FnOnce() -> Result<wgpu::ComputePipeline>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let entry = {
            let mut map = self.cache.lock().map_err(|_| poisoned(op, key))?;
            match map.get(key) {
                Some(e) => Arc::clone(e),
                None => Arc::clone(map.entry(key.clone()).or_default()),
            }
        };
        // The map is unlocked: other keys are found and compiled meanwhile.
        let mut slot = entry.lock().map_err(|_| poisoned(op, key))?;
        if let Some(p) = slot.as_ref() {
            return Ok(Arc::clone(p));
        }
        let pipeline = Arc::new(compile()?);
        *slot = Some(Arc::clone(&pipeline));
        Ok(pipeline)
    }

    /// Renders and compiles the pipeline of `key` on `device`, for
    /// [`get`](Self::get), through the driver's pipeline `cache` when
    /// there is one (machine code found there is not compiled again; new
    /// code is added to it). Device errors (an invalid shader) surface in
    /// the caller's error scope.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the shader does not render.
    pub(crate) fn compile(
        &self,
        device: &wgpu::Device,
        op: &'static str,
        key: &PipelineKey,
        cache: Option<&wgpu::PipelineCache>,
    ) -> Result<wgpu::ComputePipeline> {
        let src = key
            .shader
            .render_for(&key.template, key.product.as_ref())
            .map_err(|message| Error::Gpu {
                op,
                sizes: format!("{:?}", key.template),
                message,
            })?;
        self.compilations.fetch_add(1, Ordering::SeqCst);
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
        let mut constants: Vec<(&str, f64)> = key
            .profile
            .map(|p| ("PROFILE", f64::from(p)))
            .into_iter()
            .collect();
        if let Some((code, p)) = key.metric {
            // `p` matters to Minkowski only; 2 keeps it finite otherwise.
            let p = if code == 3 { f64::from_bits(p) } else { 2.0 };
            constants.extend([("METRIC", f64::from(code)), ("METRIC_P", p)]);
        }
        Ok(
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(key.shader.file()),
                layout: Some(&self.layouts[&key.shader.base()].1),
                module: &module,
                entry_point: Some(key.shader.entry()),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    // Every shader writes its workgroup arrays before reading them.
                    zero_initialize_workgroup_memory: false,
                },
                cache,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::gpu::plan::softmax::{ATTEND_WG, FINISH_WG, MATRIX_WG as SOFTMAX_MATRIX_WG, SUM_WG};
    use crate::gpu::plan::{FILL_WG, LOCAL_MEAN_WG, MATRIX_WG};
    use crate::gpu::shaders::{Access, ConstValue, profile_const_name, samples};
    use crate::kernel::Profile;

    /// The workgroup size each entry point's dispatches divide by (the
    /// `plan/` constants its `WG` is generated from): what naga must read
    /// from the shader.
    fn dispatched(id: ShaderId) -> [usize; 3] {
        const TABLE: [(ShaderId, [usize; 3]); 23] = [
            (ShaderId::LocalMean, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::LocalMeanMerge, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::LocalMeanIp, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::LocalMeanIpMerge, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::LocalMoments, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::LocalMomentsMerge, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::Knn, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::KnnMerge, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::KnnIp, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::KnnIpMerge, [LOCAL_MEAN_WG, 1, 1]),
            (ShaderId::MeanShift, [LOCAL_MEAN_WG, 1, 1]),
            (
                ShaderId::VariableBandwidth,
                [crate::gpu::plan::variable::VARIABLE_WG, 1, 1],
            ),
            (ShaderId::KernelMatrix, [MATRIX_WG, MATRIX_WG, 1]),
            (ShaderId::Fill, [FILL_WG, 1, 1]),
            (ShaderId::Softmax, [ATTEND_WG, 1, 1]),
            (ShaderId::SoftmaxMerge, [ATTEND_WG, 1, 1]),
            (ShaderId::SoftmaxTiled, [ATTEND_WG, 1, 1]),
            (ShaderId::SoftmaxTiledMerge, [ATTEND_WG, 1, 1]),
            (
                ShaderId::SoftmaxMatrix,
                [SOFTMAX_MATRIX_WG, SOFTMAX_MATRIX_WG, 1],
            ),
            (ShaderId::FeatureSums, [SUM_WG, 1, 1]),
            (ShaderId::FeaturePrefix, [SUM_WG, 1, 1]),
            (ShaderId::FeatureFinish, [FINISH_WG, 1, 1]),
            (ShaderId::LooGrad, [LOCAL_MEAN_WG, 1, 1]),
        ];
        TABLE
            .iter()
            .find(|(t, _)| *t == id)
            .map(|&(_, wg)| wg)
            .unwrap_or_else(|| panic!("{id:?}: no dispatch workgroup size in the table"))
    }

    /// The access a global variable's address space declares, if it is a
    /// buffer binding.
    fn access_of(space: naga::AddressSpace) -> Option<Access> {
        match space {
            naga::AddressSpace::Uniform => Some(Access::Uniform),
            naga::AddressSpace::Storage { access }
                if access.contains(naga::StorageAccess::STORE) =>
            {
                Some(Access::ReadWrite)
            }
            naga::AddressSpace::Storage { .. } => Some(Access::ReadOnly),
            _ => None,
        }
    }

    /// A rendered shader, parsed and validated by naga.
    fn reflect(id: ShaderId, values: &[(&str, u32)]) -> (naga::Module, naga::valid::ModuleInfo) {
        let what = format!("{} {values:?}", id.file());
        let src = id.render(values).expect("placeholders filled");
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{what} does not parse:\n{}", e.emit_to_string(&src)));
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{what} does not validate:\n{}", e.emit_to_string(&src)));
        (module, info)
    }

    /// What the shaders declare and use, checked against the Rust side:
    /// entry points, bindings against the layouts reflected at run time
    /// (for every placeholder sample), generated constants against their
    /// Rust values, workgroup sizes against the dispatch constants.
    #[test]
    fn shaders_match_their_rust_interface() {
        // Bindings each file's entry points use, over all its shader ids.
        let mut used_by_file: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for id in ShaderId::ALL {
            for values in samples(id) {
                let what = format!("{} {values:?} (entry {})", id.file(), id.entry());
                let (module, info) = reflect(id, &values);

                // (a) The entry point exists and is a compute shader.
                let (index, ep) = module
                    .entry_points
                    .iter()
                    .enumerate()
                    .find(|(_, ep)| ep.name == id.entry())
                    .unwrap_or_else(|| panic!("{what}: no entry point {}", id.entry()));
                assert_eq!(ep.stage, naga::ShaderStage::Compute, "{what}");

                // (b) Declared bindings are exactly the slots of the layout.
                let mut declared = BTreeMap::new();
                let mut used = BTreeSet::new();
                let ep_info = info.get_entry_point(index);
                for (handle, var) in module.global_variables.iter() {
                    let Some(rb) = &var.binding else { continue };
                    let name = var.name.as_deref().unwrap_or("?");
                    assert_eq!(rb.group, 0, "{what}: {name} is not in group 0");
                    let slot = access_of(var.space).unwrap_or_else(|| {
                        panic!("{what}: {name} is not a buffer binding ({:?})", var.space)
                    });
                    assert!(
                        declared.insert(rb.binding, slot).is_none(),
                        "{what}: binding {} declared twice",
                        rb.binding
                    );
                    if !ep_info[handle].is_empty() {
                        used.insert(rb.binding);
                    }
                }
                let layout = id.bindings().expect("reflects").to_vec();
                let expected: BTreeMap<u32, Access> = layout
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| (i as u32, s))
                    .collect();
                assert_eq!(
                    declared, expected,
                    "{what}: shader bindings (left) differ from the reflected layout (right)"
                );
                // The parameter records: one uniform block, binding 0,
                // bound with the one dynamic offset of every dispatch.
                assert_eq!(layout.first(), Some(&Access::Uniform), "{what}");
                assert_eq!(
                    layout.iter().filter(|&&a| a == Access::Uniform).count(),
                    1,
                    "{what}: uniform blocks"
                );
                used_by_file.entry(id.file()).or_default().extend(used);

                // The `PROFILE` override exactly when the key sets it, and
                // `METRIC`, `METRIC_P` where `with_metric` sets them.
                let overrides: Vec<_> = module
                    .overrides
                    .iter()
                    .filter_map(|(_, o)| o.name.clone())
                    .collect();
                let mut want: Vec<String> = if id.uses_profiles() {
                    vec!["PROFILE".into()]
                } else {
                    vec![]
                };
                // The shaders that measure by a metric (PipelineKey::with_metric).
                if matches!(id.file(), "local_mean.wgsl" | "knn.wgsl") {
                    want.extend(["METRIC".into(), "METRIC_P".into()]);
                }
                assert_eq!(overrides, want, "{what}: override constants");

                // (c) Generated constants hold exactly the Rust values.
                let generated = id.consts();
                for c in &generated {
                    let (_, k) = module
                        .constants
                        .iter()
                        .find(|(_, k)| k.name.as_deref() == Some(c.name.as_str()))
                        .unwrap_or_else(|| panic!("{what}: no constant {}", c.name));
                    let got = match module.global_expressions[k.init] {
                        naga::Expression::Literal(naga::Literal::U32(v)) => ConstValue::U32(v),
                        naga::Expression::Literal(naga::Literal::F32(v)) => ConstValue::F32(v),
                        ref e => panic!("{what}: {} is not a u32/f32 literal: {e:?}", c.name),
                    };
                    let same = match (got, c.value) {
                        (ConstValue::U32(a), ConstValue::U32(b)) => a == b,
                        (ConstValue::F32(a), ConstValue::F32(b)) => a.to_bits() == b.to_bits(),
                        _ => false,
                    };
                    assert!(same, "{what}: {} = {got:?}, Rust has {:?}", c.name, c.value);
                }
                // The constants named in the Rust interface are among them.
                let value = |name: &str| {
                    generated
                        .iter()
                        .find(|c| c.name == name)
                        .map(|c| c.value)
                        .unwrap_or_else(|| panic!("{what}: {name} not generated"))
                };
                if id.uses_profiles() {
                    assert_eq!(value("T_FAR"), ConstValue::F32(crate::kernel::T_FAR));
                    for p in Profile::ALL {
                        let name = profile_const_name(p);
                        assert_eq!(value(&name), ConstValue::U32(p.shader_code()), "{what}");
                    }
                }
                if id == ShaderId::MeanShift {
                    assert_eq!(
                        value("SHIFT_FLOOR"),
                        ConstValue::F32(crate::types::SHIFT_FLOOR)
                    );
                }

                // (d) The workgroup size is the one the dispatches divide by.
                let wg = dispatched(id).map(|n| n as u32);
                assert_eq!(ep.workgroup_size, wg, "{what}: workgroup size");
                assert!(ep.workgroup_size_overrides.is_none(), "{what}");
            }
        }
        // Every declared binding is used by some entry point of its file
        // (one-entry files: by that entry).
        for id in ShaderId::ALL {
            let all: BTreeSet<u32> = (0..id.bindings().expect("reflects").len() as u32).collect();
            assert_eq!(
                used_by_file[id.file()],
                all,
                "{}: bindings used by its entry points (left) differ from those declared",
                id.file()
            );
        }
    }
}

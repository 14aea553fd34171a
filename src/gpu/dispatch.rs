//! The one dispatch path of the GPU ops.
//!
//! An op states what it dispatches and nothing of how it is recorded:
//!
//! - a [`Program`]: the shader's pipeline (from its [`PipelineKey`]) and,
//!   when its keys are split across workgroups, the merge pipeline with
//!   the workgroups of the merge dispatch that follows each dispatch;
//! - its [`Bindings`]: the uniform records, one per dispatch (binding 0,
//!   at a dynamic offset), and the bind groups over them, the other
//!   resources in binding order (one group per key tile where they
//!   differ);
//! - the [`Dispatch`]es: which group, which record, how many
//!   [`Workgroups`].
//!
//! [`Submission::record`] writes one compute pass of a program's
//! dispatches; [`Submission::dispatch`] is the single-dispatch case
//! (records, group and pass in one call). The submission keeps the
//! uniform records until its work is done (`sub.keep(bindings)`).

use std::sync::Arc;

use crate::error::Result;

use super::buffers::{Pooled, upload};
use super::context::GpuContext;
use super::keys::KeyTile;
use super::pipelines::PipelineKey;
use super::plan::FILL_WG;
use super::plan::check_u32;
use super::shaders::ShaderId;
use super::submission::Submission;

/// Workgroups of one dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Workgroups {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Workgroups {
    /// `x` workgroups along the first dimension only.
    pub(crate) fn x(x: u32) -> Self {
        Workgroups { x, y: 1, z: 1 }
    }

    /// Workgroups of `per_group` items each that cover `items`.
    ///
    /// # Errors
    /// [`Error::TooLarge`](crate::error::Error::TooLarge) past `u32`.
    pub(crate) fn cover(op: &'static str, items: usize, per_group: usize) -> Result<u32> {
        check_u32(op, "workgroups", items.div_ceil(per_group))
    }
}

/// A shader's pipeline ready to record: the cached pipeline of its key
/// and, for a key split, the merge that follows each dispatch.
pub(crate) struct Program {
    op: &'static str,
    shader: ShaderId,
    pipeline: Arc<wgpu::ComputePipeline>,
    merge: Option<Merge>,
}

/// The merge dispatch of a key split: the shader's `merge_splits` entry
/// over the same bind group.
struct Merge {
    pipeline: Arc<wgpu::ComputePipeline>,
    workgroups: Workgroups,
}

impl Program {
    /// The pipeline of `key` (compiled once, then cached) for `op`.
    ///
    /// # Errors
    /// The pipeline cache's ([`GpuContext::pipeline`]).
    pub(crate) fn new(ctx: &GpuContext, op: &'static str, key: &PipelineKey) -> Result<Self> {
        Ok(Program {
            op,
            shader: key.shader,
            pipeline: ctx.pipeline(op, key)?,
            merge: None,
        })
    }

    /// The pipeline of `key` with its keys split `splits` ways: with a
    /// split (`splits > 1`, a shader with a merge entry), each dispatch is
    /// followed by the merge entry's, over `merge` workgroups (same bind
    /// group, same template).
    ///
    /// # Errors
    /// The pipeline cache's ([`GpuContext::pipeline`]).
    pub(crate) fn split(
        ctx: &GpuContext,
        op: &'static str,
        key: &PipelineKey,
        splits: usize,
        merge: Workgroups,
    ) -> Result<Self> {
        let mut program = Program::new(ctx, op, key)?;
        if let Some(shader) = key.shader.merge().filter(|_| splits > 1) {
            let key = PipelineKey {
                shader,
                ..key.clone()
            };
            program.merge = Some(Merge {
                pipeline: ctx.pipeline(op, &key)?,
                workgroups: merge,
            });
        }
        Ok(program)
    }
}

/// A bind group of a [`Bindings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group(usize);

/// One dispatch: the bind group, the uniform record it reads, and its
/// workgroups.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dispatch {
    pub group: Group,
    pub record: usize,
    pub workgroups: Workgroups,
}

impl Dispatch {
    /// Dispatches of `workgroups` each over consecutive records from
    /// `first`, the i-th bound with the i-th of `groups`.
    pub(crate) fn in_order(
        groups: impl IntoIterator<Item = Group>,
        first: usize,
        workgroups: Workgroups,
    ) -> Vec<Dispatch> {
        groups
            .into_iter()
            .enumerate()
            .map(|(i, group)| Dispatch {
                group,
                record: first + i,
                workgroups,
            })
            .collect()
    }
}

/// The uniform records of a shader's dispatches and the bind groups over
/// them. Once recorded, they must stay on loan until the submission is
/// done: hand them to the [`Submission`] with `keep`.
pub(crate) struct Bindings<'p> {
    ctx: &'p GpuContext,
    shader: ShaderId,
    params: ParamBlock<'p>,
    groups: Vec<wgpu::BindGroup>,
}

impl<'p> Bindings<'p> {
    /// `records` (one per dispatch) for dispatches of `shader` (and of
    /// the entries sharing its bind-group layout); no bind group yet.
    ///
    /// # Errors
    /// The pool's, for the uniform buffer.
    pub(crate) fn new<T: bytemuck::Pod>(
        ctx: &'p GpuContext,
        op: &'static str,
        shader: ShaderId,
        records: &[T],
    ) -> Result<Self> {
        Ok(Bindings {
            ctx,
            shader,
            params: ParamBlock::new(ctx, op, records)?,
            groups: Vec::new(),
        })
    }

    /// A bind group of the records (binding 0) and `buffers` (bindings
    /// 1, 2, … in order).
    pub(crate) fn group(&mut self, buffers: &[&Pooled<'_>]) -> Group {
        let entries: Vec<_> = std::iter::once(self.params.binding())
            .chain(buffers.iter().map(|b| b.binding()))
            .enumerate()
            .map(|(i, resource)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource,
            })
            .collect();
        let group = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(self.shader.file()),
                layout: self.ctx.pipelines.layout(self.shader),
                entries: &entries,
            });
        self.groups.push(group);
        Group(self.groups.len() - 1)
    }

    /// One bind group per key tile, over `queries`, the tile's keys and
    /// values, then `rest` in order: the bindings of the shaders that sweep
    /// key tiles with their values (local means, row states and moments,
    /// attention, the feature local mean).
    pub(crate) fn per_key_tile<'k>(
        &mut self,
        key_tiles: impl IntoIterator<Item = &'k KeyTile<'k>>,
        queries: &Pooled<'_>,
        rest: &[&Pooled<'_>],
    ) -> Vec<Group> {
        key_tiles
            .into_iter()
            .map(|kt| {
                let mut buffers = vec![queries, &kt.keys, &kt.values];
                buffers.extend_from_slice(rest);
                self.group(&buffers)
            })
            .collect()
    }
}

impl<'p> From<Bindings<'p>> for Pooled<'p> {
    fn from(b: Bindings<'p>) -> Pooled<'p> {
        b.params.buf
    }
}

impl<'p> Submission<'p> {
    /// Records a fill of `buf` with the engine's sentinel, if one is set
    /// (its parameters are kept).
    pub(crate) fn fill_sentinel(
        &mut self,
        ctx: &'p GpuContext,
        op: &'static str,
        buf: &Pooled<'_>,
    ) -> Result<()> {
        let Some(value) = ctx.sentinel else {
            return Ok(());
        };
        let len = check_u32(op, "sentinel fill", (buf.len() / 4) as usize)?;
        let fill = Program::new(ctx, op, &PipelineKey::new(ShaderId::Fill, vec![]))?;
        let record = FillParams {
            len,
            value,
            _pad: [0; 2],
        };
        let workgroups = len.div_ceil(FILL_WG as u32).clamp(1, 4096);
        self.dispatch(ctx, &fill, &record, &[buf], Workgroups::x(workgroups))
    }

    /// Records `dispatches` of `program` in one compute pass, each with
    /// its bind group at its record's offset and, for a key split,
    /// followed by the merge dispatch (then back to the program's
    /// pipeline).
    pub(crate) fn record(
        &mut self,
        program: &Program,
        bindings: &Bindings<'_>,
        dispatches: &[Dispatch],
    ) {
        let mut pass = self.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(program.op),
            timestamp_writes: None,
        });
        pass.set_pipeline(&program.pipeline);
        for d in dispatches {
            debug_assert!(d.record < bindings.params.records);
            let offset = bindings.params.offset(d.record);
            pass.set_bind_group(0, &bindings.groups[d.group.0], &[offset]);
            let Workgroups { x, y, z } = d.workgroups;
            pass.dispatch_workgroups(x, y, z);
            if let Some(merge) = &program.merge {
                let Workgroups { x, y, z } = merge.workgroups;
                pass.set_pipeline(&merge.pipeline);
                pass.dispatch_workgroups(x, y, z);
                pass.set_pipeline(&program.pipeline);
            }
        }
    }

    /// Records one dispatch of `program` over `record` and `buffers`
    /// (bindings 1, 2, … in order), in a compute pass of its own; the
    /// record is kept until the submission is done.
    ///
    /// # Errors
    /// The pool's, for the uniform buffer.
    pub(crate) fn dispatch<T: bytemuck::Pod>(
        &mut self,
        ctx: &'p GpuContext,
        program: &Program,
        record: &T,
        buffers: &[&Pooled<'_>],
        workgroups: Workgroups,
    ) -> Result<()> {
        let mut bindings = Bindings::new(
            ctx,
            program.op,
            program.shader,
            std::slice::from_ref(record),
        )?;
        let group = bindings.group(buffers);
        self.record(
            program,
            &bindings,
            &[Dispatch {
                group,
                record: 0,
                workgroups,
            }],
        );
        self.keep(bindings);
        Ok(())
    }
}

/// The keys `a..b` of key tile `key_tile` that one dispatch sweeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub key_tile: usize,
    pub a: usize,
    pub b: usize,
}

impl Window {
    /// Every key tile's keys cut into windows of `dispatch_keys`, in order.
    pub(crate) fn all(tiles: &[KeyTile], dispatch_keys: usize) -> Vec<Window> {
        tiles
            .iter()
            .enumerate()
            .flat_map(|(key_tile, kt)| {
                super::plan::tiles(kt.len, dispatch_keys).map(move |(a, b)| Window {
                    key_tile,
                    a,
                    b,
                })
            })
            .collect()
    }

    /// Keys per workgroup of the window split `splits` ways.
    pub(crate) fn split_keys(&self, splits: usize) -> usize {
        (self.b - self.a).div_ceil(splits).max(1)
    }
}

/// The buffer of a key split's partial row states, `floats` of them split
/// `splits` ways; without a split, a 16-byte stand-in for the binding.
pub(crate) fn partial_states<'p>(
    ctx: &'p GpuContext,
    op: &'static str,
    splits: usize,
    floats: usize,
) -> Result<Pooled<'p>> {
    let bytes = if splits > 1 { floats * 4 } else { 16 };
    ctx.buffer(op, bytes as u64, wgpu::BufferUsages::STORAGE)
}

/// Uniform parameter records, one per dispatch, at the device's
/// dynamic-offset alignment.
struct ParamBlock<'p> {
    buf: Pooled<'p>,
    stride: u64,
    size: u64,
    records: usize,
}

impl<'p> ParamBlock<'p> {
    fn new<T: bytemuck::Pod>(ctx: &'p GpuContext, op: &'static str, records: &[T]) -> Result<Self> {
        let size = std::mem::size_of::<T>() as u64;
        let stride = size.next_multiple_of(ctx.uniform_align);
        let mut bytes = vec![0u8; (stride * records.len().max(1) as u64) as usize];
        for (i, r) in records.iter().enumerate() {
            let o = i * stride as usize;
            bytes[o..o + size as usize].copy_from_slice(bytemuck::bytes_of(r));
        }
        let buf = upload(ctx, op, &bytes, wgpu::BufferUsages::UNIFORM)?;
        Ok(ParamBlock {
            buf,
            stride,
            size,
            records: records.len(),
        })
    }

    /// Binding resource (bound with a dynamic offset per dispatch).
    fn binding(&self) -> wgpu::BindingResource<'_> {
        self.buf.binding_sized(self.size)
    }

    /// Dynamic offset of record `i`.
    fn offset(&self, i: usize) -> u32 {
        (i as u64 * self.stride) as u32
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FillParams {
    len: u32,
    value: f32,
    _pad: [u32; 2],
}

//! The scheduler: how an op is cut into tiles that fit the device, one
//! file per op family (`local_mean.rs`: local means and MeanShift;
//! `matrix.rs`: kernel matrices; `knn.rs`; `softmax.rs`: attention, its
//! weight matrix, the feature local mean; `resident.rs`: key sets); here,
//! the caps, the device limits, and the binding-size and loop-budget
//! rules every planner uses.
//!
//! Queries are tiled for dispatch limits and binding sizes, keys for the
//! storage-binding size, value columns for the register budget; partial
//! row states of different key tiles are merged with the one associative
//! rule of docs/numerics.md ([`merge_states`](crate::merge_states), mirrored by `merge_state` in the
//! shaders). Every limit can be lowered by [`TileLimits`], so tests force
//! many tiny tiles on small data.

pub(crate) mod knn;
pub(crate) mod local_mean;
pub(crate) mod matrix;
mod resident;
pub(crate) mod softmax;
pub(crate) mod variable;

pub(crate) use knn::{KnnPlan, MAX_GPU_K, plan_knn};
pub(crate) use local_mean::{
    LOCAL_MEAN_WG, LocalMeanPlan, plan_local_mean, plan_local_moments, plan_mean_shift,
};
// Kept at the path it had before the planner was split.
#[allow(unused_imports)]
pub(crate) use local_mean::MAX_VALUE_COLS;
pub(crate) use matrix::{MATRIX_WG, MatrixPlan, plan_kernel_matrix};
pub(crate) use resident::resident_key_tile;
pub(crate) use softmax::{
    AttendPlan, plan_attend, plan_attend_prepared, plan_feature, plan_softmax_matrix,
};

use crate::error::{Error, Result};

/// Invocations per workgroup of `fill.wgsl` (output sentinels).
pub(crate) const FILL_WG: usize = 256;

/// Caps on tile sizes, on top of what the device allows. `None` leaves a
/// dimension to the device limits. Used by tests (to force many small
/// tiles) and by services that want to bound a single dispatch.
///
/// ```
/// use locus::TileLimits;
/// let tiny = TileLimits { query_rows: Some(5), key_rows: Some(7), ..TileLimits::default() };
/// assert!(tiny.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TileLimits {
    /// Most query rows per dispatch.
    pub query_rows: Option<usize>,
    /// Most key rows per tile (one storage binding each).
    pub key_rows: Option<usize>,
    /// Most value columns accumulated per pass (capped by the shaders:
    /// local means 8 at d ≤ 8, 16 at d < 32, 32 beyond; local moments 8;
    /// attention 64).
    pub value_cols: Option<usize>,
    /// Largest storage buffer to bind, in bytes (device limit otherwise).
    pub buffer_bytes: Option<u64>,
    /// Workgroups that share one dispatch's keys in the local-mean family,
    /// attention and kNN (each sweeps a slice of the keys; a second small
    /// pass merges their row states or top-k lists). Otherwise chosen to fill the device when
    /// there are few queries (never on a software adapter).
    pub key_splits: Option<usize>,
    /// Most keys one local-mean-family, attention or kNN dispatch sweeps (a key
    /// tile is swept in windows of this many, or attention's key tiles are
    /// no longer), merged like key tiles, so no single dispatch runs
    /// unboundedly long. Otherwise the work cap of docs/tiling.md.
    pub dispatch_keys: Option<usize>,
}

impl TileLimits {
    /// Checks that every given cap is usable (non-zero, buffers ≥ 16 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] naming the bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidParameter {
                name,
                reason: reason.to_string(),
            })
        };
        if self.query_rows == Some(0) {
            return bad("tile_limits.query_rows", "must be at least 1");
        }
        if self.key_rows == Some(0) {
            return bad("tile_limits.key_rows", "must be at least 1");
        }
        if self.value_cols == Some(0) {
            return bad("tile_limits.value_cols", "must be at least 1");
        }
        if matches!(self.buffer_bytes, Some(b) if b < 16) {
            return bad("tile_limits.buffer_bytes", "must be at least 16 bytes");
        }
        if matches!(self.key_splits, Some(s) if s == 0 || s > MAX_KEY_SPLITS) {
            return bad(
                "tile_limits.key_splits",
                &format!("must be between 1 and {MAX_KEY_SPLITS}"),
            );
        }
        if self.dispatch_keys == Some(0) {
            return bad("tile_limits.dispatch_keys", "must be at least 1");
        }
        Ok(())
    }
}

/// What the device allows, as the planner needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceLimits {
    /// Largest storage buffer binding, bytes.
    pub binding_bytes: u64,
    /// Workgroups per dispatch dimension.
    pub workgroups_per_dim: u32,
    /// Workgroup memory, bytes.
    pub workgroup_bytes: u32,
    /// Loop iterations one invocation may execute in total, where the
    /// driver caps them. Mesa's llvmpipe (lavapipe) silently stops every
    /// loop of an invocation after 65535 iterations in all, which would
    /// drop keys from long tiles without any error; key tiles are sized to
    /// stay well inside the cap.
    pub loop_budget: Option<u32>,
    /// Workgroups a dispatch should have to keep the device busy; the
    /// local-mean planner splits the keys across workgroups when the
    /// queries alone give fewer. 0 (software adapters, whose "cores" are
    /// the host's few threads): never split.
    pub fill_workgroups: u32,
    /// Keys per register chunk of `local_mean.wgsl` (its template
    /// constant `C`): [`LOCAL_MEAN_CHUNK`](local_mean::LOCAL_MEAN_CHUNK) on
    /// a GPU, whose invocations hold a chunk's `R · C = 64` key values in
    /// registers; [`SOFTWARE_CHUNK`](local_mean::SOFTWARE_CHUNK) on a
    /// software adapter, which runs invocations as the SIMD lanes of a host
    /// core with 16 vector registers, where 64 values spill.
    pub chunk_keys: u32,
}

/// Largest storage binding the shaders may index, whatever the device
/// allows: they count elements in `u32`, and wgpu's Metal backend passes
/// binding sizes to the shaders as 32-bit byte counts.
pub(crate) const SHADER_BINDING_BYTES: u64 = u32::MAX as u64;

/// Bytes the shaders' bindings are aligned to: a whole number of `vec4`s.
const BINDING_ALIGN: u64 = 16;

impl DeviceLimits {
    /// What the planner may use of a device that reports `lim` (a software
    /// adapter when `software`): the largest storage binding the device
    /// allows (wgpu caps it at 2³¹ − 1 bytes on Vulkan), no larger than a
    /// buffer or [`SHADER_BINDING_BYTES`], in whole `vec4`s; its workgroup
    /// memory and workgroups per dispatch dimension as reported.
    pub(crate) fn from_wgpu(lim: &wgpu::Limits, software: bool) -> Self {
        DeviceLimits {
            binding_bytes: lim
                .max_storage_buffer_binding_size
                .min(lim.max_buffer_size)
                .min(SHADER_BINDING_BYTES)
                / BINDING_ALIGN
                * BINDING_ALIGN,
            workgroups_per_dim: lim.max_compute_workgroups_per_dimension,
            workgroup_bytes: lim.max_compute_workgroup_storage_size,
            // Software rasterizers (llvmpipe) cap loop iterations per
            // invocation at 65535; hardware drivers have no such cap.
            loop_budget: software.then_some(65_535),
            // Enough workgroups of 64 invocations for a large GPU (132
            // multiprocessors × 32 resident workgroups); a software
            // adapter runs workgroups on the host's threads: no split.
            fill_workgroups: if software { 0 } else { 4096 },
            chunk_keys: if software {
                local_mean::SOFTWARE_CHUNK
            } else {
                local_mean::LOCAL_MEAN_CHUNK
            } as u32,
        }
    }
}

/// Work one local-mean-family or attention dispatch may do, in pair-units
/// (a pair of a query and a key costs `2 + d + columns` units, about its
/// instructions): 2³⁶ is a few tens of milliseconds on a large GPU. A
/// longer sweep is cut into windows or key tiles, one dispatch each,
/// merged like key tiles, so no dispatch runs for minutes (display
/// watchdogs, cancellation).
pub(crate) const DISPATCH_WORK: u64 = 1 << 36;

/// (Query, key) pairs one dispatch may cover under [`DISPATCH_WORK`] when
/// a pair costs `units` pair-units.
pub(crate) fn dispatch_pairs(units: usize) -> usize {
    (DISPATCH_WORK / units.max(1) as u64).min(usize::MAX as u64) as usize
}

/// Keys one dispatch sweeps for a full query tile of `query_tile` rows,
/// `units` pair-units a pair: within [`DISPATCH_WORK`] (at least a stage
/// of keys), the key tile and the caps' window.
pub(crate) fn dispatch_window(
    caps: &TileLimits,
    units: usize,
    query_tile: usize,
    key_tile: usize,
) -> usize {
    (dispatch_pairs(units) / query_tile.max(1))
        .max(MAX_STAGED_KEYS)
        .min(key_tile)
        .min(caps.dispatch_keys.unwrap_or(usize::MAX))
        .max(1)
}

/// Most workgroups that may share one dispatch's keys.
pub(crate) const MAX_KEY_SPLITS: usize = 1024;

/// Workgroups that share one dispatch's `keys` keys when its rows give
/// `groups` workgroups: the caps' count, or, when that is fewer than the
/// device wants, enough to fill it with slices of at least `min_slice`
/// keys; 1 on software adapters (`fill_workgroups = 0`). Bounded by
/// [`MAX_KEY_SPLITS`], the dispatch dimension, the keys, and so that the
/// slices' partial states (`state_floats` a slice) fit one binding.
pub(crate) fn split_count(
    dev: &DeviceLimits,
    caps: &TileLimits,
    (groups, keys, min_slice): (usize, usize, usize),
    state_floats: usize,
) -> usize {
    let groups = groups.max(1);
    let fill = dev.fill_workgroups as usize;
    let wanted = match caps.key_splits {
        Some(s) => s,
        None if fill > groups => (fill / groups).min(keys / min_slice),
        None => 1,
    };
    wanted
        .min(MAX_KEY_SPLITS)
        .min(dev.workgroups_per_dim as usize)
        .min(keys)
        .min(binding_floats(dev, caps) / state_floats.max(1))
        .max(1)
}

/// Keys per chunk of the local-mean and attention shaders (`C`): the
/// running maximum moves once per chunk. A chunk always runs its `C` slots
/// (the missing keys weigh nothing), so staged keys are a multiple of it
/// where they can be, and loop budgets count whole chunks.
pub(crate) const CHUNK_KEYS: usize = 8;

/// Staged keys rounded down to whole chunks (when there is room for one).
fn whole_chunks(staged: usize) -> usize {
    if staged >= CHUNK_KEYS {
        staged / CHUNK_KEYS * CHUNK_KEYS
    } else {
        staged
    }
}

/// [`budget_keys`] for a shader that runs its keys in chunks of
/// `CHUNK_KEYS` slots, `staged` keys a stage: a stage of fewer than `C`
/// keys still runs `C` slots, and a key tile's last stage pads up to one
/// chunk more.
fn chunked_budget_keys(dev: &DeviceLimits, fixed: usize, per_key: usize, staged: usize) -> usize {
    let staged = staged.max(1);
    let slots = staged.div_ceil(CHUNK_KEYS) * CHUNK_KEYS;
    let per_key = (per_key * slots).div_ceil(staged);
    budget_keys(dev, fixed + per_key * CHUNK_KEYS, per_key)
}

/// Most keys staged in workgroup memory at once.
const MAX_STAGED_KEYS: usize = 256;
/// Matrix output bytes recorded into one submission before readback.
const BATCH_BYTES: u64 = 64 << 20;

/// Output bytes of matrix blocks recorded into one submission before they
/// are read back (kernel matrix, softmax weight matrix); the caps' binding
/// size lowers it too, so tests run many batches on small matrices.
pub(crate) fn batch_bytes(dev: &DeviceLimits, caps: &TileLimits) -> u64 {
    BATCH_BYTES
        .min(dev.binding_bytes.max(1 << 20))
        .min(caps.buffer_bytes.unwrap_or(u64::MAX))
}

/// Bytes of the largest storage binding an op may use: the device's, or
/// the caps' when lower.
fn binding_bytes(dev: &DeviceLimits, caps: &TileLimits) -> u64 {
    caps.buffer_bytes
        .map_or(dev.binding_bytes, |b| b.min(dev.binding_bytes))
}

/// Whole `f32`s in the largest storage binding an op may use.
pub(crate) fn binding_floats(dev: &DeviceLimits, caps: &TileLimits) -> usize {
    (binding_bytes(dev, caps) / 4).min(usize::MAX as u64) as usize
}

/// Loop iterations one invocation may run under the device's loop budget
/// (llvmpipe stops an invocation's loops after 65535 iterations in all),
/// with a margin; `None` where there is no cap.
fn loop_budget(dev: &DeviceLimits) -> Option<usize> {
    dev.loop_budget.map(|b| b as usize * 7 / 8)
}

/// Keys one dispatch may visit per invocation under the loop budget, when
/// each key costs up to `per_key` loop iterations and the invocation
/// `fixed` more once (nothing unrolled); at least 1.
fn budget_keys(dev: &DeviceLimits, fixed: usize, per_key: usize) -> usize {
    loop_budget(dev).map_or(usize::MAX, |b| {
        (b.saturating_sub(fixed) / per_key.max(1)).max(1)
    })
}

/// A binding of `bytes` too small for one row of `floats` floats.
fn too_small(bytes: u64, floats: usize) -> Error {
    Error::InvalidParameter {
        name: "tile_limits.buffer_bytes",
        reason: format!("{bytes} bytes cannot hold one row of {floats} floats"),
    }
}

/// `d` does not fit one key (of `per_key` floats) in workgroup memory.
fn no_room_for_a_key(op: &'static str, d: usize, dev: &DeviceLimits) -> Error {
    Error::Unsupported {
        op,
        backend: "gpu",
        reason: format!(
            "dimension d={d} does not fit one key in {} bytes of workgroup memory",
            dev.workgroup_bytes
        ),
    }
}

/// Ranges `0..len` cut into pieces of at most `tile`.
pub(crate) fn tiles(len: usize, tile: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(tile)).map(move |t| (t * tile, ((t + 1) * tile).min(len)))
}

/// The sizes an op is planned for: `m` queries against `n` keys in `d`
/// dimensions, with `q` value columns (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Query rows.
    pub m: usize,
    /// Key rows.
    pub n: usize,
    /// Coordinates per row.
    pub d: usize,
    /// Value columns.
    pub q: usize,
}

/// `Shape { m, n, d, q }`, for the planner's tests.
#[cfg(test)]
pub(crate) fn shape(m: usize, n: usize, d: usize, q: usize) -> Shape {
    Shape { m, n, d, q }
}

/// Sizes as the shaders index them: every count must fit a `u32`.
pub(crate) fn check_u32(op: &'static str, what: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooLarge {
        op,
        what,
        bytes: (n as u64).saturating_mul(4),
    })
}

/// The device limits of lavapipe, for the planners' tests.
#[cfg(test)]
pub(crate) const LAVAPIPE: DeviceLimits = DeviceLimits {
    binding_bytes: 128 << 20,
    workgroups_per_dim: 65535,
    workgroup_bytes: 32 << 10,
    loop_budget: None,
    fill_workgroups: 0,
    chunk_keys: local_mean::SOFTWARE_CHUNK as u32,
};

/// The limits wgpu 30 reports for an NVIDIA H200 through Vulkan, for the
/// planners' tests: storage bindings of 2³¹ − 1 bytes (wgpu's cap on
/// Vulkan), buffers as large as the driver allows (wgpu caps them at 2⁵²
/// on NVIDIA; the driver's own maximum is far above any binding), 48 KiB
/// of workgroup memory, 65535 workgroups per dimension.
#[cfg(test)]
pub(crate) fn h200_limits() -> wgpu::Limits {
    wgpu::Limits {
        max_storage_buffer_binding_size: (1 << 31) - 1,
        max_buffer_size: 1 << 40,
        max_compute_workgroup_storage_size: 48 << 10,
        max_compute_workgroups_per_dimension: 65535,
        max_compute_invocations_per_workgroup: 1024,
        ..wgpu::Limits::default()
    }
}

/// [`h200_limits`] as the planner sees them (a test checks that
/// [`DeviceLimits::from_wgpu`] gives these): bindings of 2³¹ − 16 bytes
/// (whole `vec4`s under 2³¹ − 1), 48 KiB of workgroup memory, 65535
/// workgroups per dimension, no loop cap, key splits to fill 4096
/// workgroups.
#[cfg(test)]
pub(crate) const H200: DeviceLimits = DeviceLimits {
    binding_bytes: (1 << 31) - 16,
    workgroups_per_dim: 65535,
    workgroup_bytes: 48 << 10,
    loop_budget: None,
    fill_workgroups: 4096,
    chunk_keys: local_mean::LOCAL_MEAN_CHUNK as u32,
};

/// [`LAVAPIPE`] with llvmpipe's loop cap, for the loop-budget tests.
#[cfg(test)]
pub(crate) const LOOP_CAPPED: DeviceLimits = DeviceLimits {
    loop_budget: Some(65535),
    ..LAVAPIPE
};

/// Caps of 5 query rows, 7 key rows and `value_cols` value columns a
/// pass, for the planners' tests.
#[cfg(test)]
pub(crate) fn small_caps(value_cols: usize) -> TileLimits {
    TileLimits {
        query_rows: Some(5),
        key_rows: Some(7),
        value_cols: Some(value_cols),
        buffer_bytes: None,
        ..TileLimits::default()
    }
}

#[cfg(test)]
mod tests;

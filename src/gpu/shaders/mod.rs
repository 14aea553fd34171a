//! The shader registry: every `shaders/*.wgsl` file, listed once, and the
//! constants the shaders share with the Rust side.
//!
//! Shaders are specialized two ways: pipeline `override` constants for
//! scalars (the kernel profile), and `{{NAME}}` placeholders for what
//! overrides cannot express (sizes of private and workgroup arrays).
//!
//! Constants that have a Rust twin (workgroup sizes the dispatches divide
//! by, flag bits and mode codes of the parameter blocks, profile codes,
//! `T_FAR`, `SHIFT_FLOOR`) are not written in the shader files: each is
//! printed from its Rust value into a generated prelude
//! ([`ShaderId::consts`]) prepended to the shaders that use it.

mod product;

pub(crate) use product::{ProductCode, block_scales};

use std::f32::consts::LOG2_E;
use std::fmt::Write as _;

use crate::backend::MatrixMode;
use crate::kernel::{Profile, T_FAR};
use crate::types::SHIFT_FLOOR;

use crate::gpu::plan::local_mean::{IP_CHUNK_DIMS, IP_STEP_KEYS, IP_TILE_ROWS};
use crate::gpu::plan::softmax::{ATTEND_WG, FINISH_WG, MATRIX_WG as SOFTMAX_MATRIX_WG, SUM_WG};
use crate::gpu::plan::{CHUNK_KEYS, FILL_WG, LOCAL_MEAN_WG, MATRIX_WG};

/// Shared kernel-profile functions, prepended to the distance-kernel shaders.
const PROFILES: &str = include_str!("../../../shaders/profiles.wgsl");
/// The row state, its merge and a key tile's end, shared by the
/// local-mean family (prepended like the profiles).
const ROW_STATE: &str = include_str!("../../../shaders/row_state.wgsl");
/// The attention row state, its merge, a key tile's end and the split
/// merge pass, shared by the two attention shaders.
const SOFTMAX_STATE: &str = include_str!("../../../shaders/softmax_state.wgsl");

/// Bit of `flags` (`local_mean.wgsl`, `knn.wgsl`, `softmax.wgsl`): the
/// first key tile (no state to merge with).
pub(crate) const FIRST_TILE: u32 = 1;
/// Bit of `flags`: the last key tile (finalize into the output).
pub(crate) const LAST_TILE: u32 = 2;
/// Bit of `flags` (`local_mean.wgsl`): leave each row's own key out.
pub(crate) const EXCLUDE_SELF: u32 = 4;
/// `local_mean.wgsl` with `MASKED = 1`: a coordinate at or above this
/// magnitude is missing. The host stores missing coordinates (NaN) as
/// `f32::MAX`; inputs of the masked ops are far below it.
pub(crate) const MISSING_FROM: f32 = 3.0e38;
/// The running maximum before any key of the shaders that weigh in log₂
/// units (local means, attention), generated as `M_START`.
pub(crate) const M_START: f32 = -1.0e38;
/// A finite stand-in for −inf, generated as `NEG_BIG`: the log-weight (or
/// logit) of a key without weight. `exp2` of it minus any maximum, and of
/// [`M_START`] minus any finite maximum, is exactly 0.
pub(crate) const NEG_BIG: f32 = -3.0e38;

/// Bit of `flags` (`softmax.wgsl`): the causal mask.
pub(crate) const CAUSAL: u32 = 4;

/// `mode` of `mean_shift.wgsl`: the moving seeds → a query tile.
pub(crate) const GATHER: u32 = 0;
/// `mode` of `mean_shift.wgsl`: move the listed seeds, list those still moving.
pub(crate) const FINISH: u32 = 1;
/// `mode` of `mean_shift.wgsl`: move every point (blurring), no list.
pub(crate) const FINISH_BLURRING: u32 = 2;

/// Every matrix mode with its WGSL name; the codes come from [`matrix_mode_code`].
const MATRIX_MODES: [(MatrixMode, &str); 5] = [
    (MatrixMode::Raw, "MODE_RAW"),
    (MatrixMode::RowNormalized, "MODE_ROW_NORMALIZED"),
    (MatrixMode::Laplacian, "MODE_LAPLACIAN"),
    (MatrixMode::NormalizedLaplacian, "MODE_NORMALIZED_LAPLACIAN"),
    (MatrixMode::SqDistance, "MODE_SQ_DISTANCE"),
];

/// The `mode` code of `kernel_matrix.wgsl` for a matrix mode.
pub(crate) fn matrix_mode_code(mode: MatrixMode) -> u32 {
    match mode {
        MatrixMode::Raw => 0,
        MatrixMode::RowNormalized => 1,
        MatrixMode::Laplacian => 2,
        MatrixMode::NormalizedLaplacian => 3,
        MatrixMode::SqDistance => 4,
    }
}

/// The WGSL name of a profile's code: `PROFILE_GAUSSIAN`, …
pub(crate) fn profile_const_name(profile: Profile) -> String {
    format!("PROFILE_{}", profile.name().to_ascii_uppercase())
}

/// The value of a generated constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ConstValue {
    /// `u32`, printed as `{v}u`.
    U32(u32),
    /// `f32`, printed with the shortest decimal that reads back as the
    /// same `f32` and an `f` suffix, so WGSL parses it as exactly this value.
    F32(f32),
}

/// A module-scope WGSL constant generated from a Rust value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GeneratedConst {
    /// WGSL name.
    pub name: String,
    pub value: ConstValue,
    /// The Rust item it comes from (a comment in the prelude).
    pub source: &'static str,
}

impl GeneratedConst {
    fn new(name: impl Into<String>, value: ConstValue, source: &'static str) -> Self {
        GeneratedConst {
            name: name.into(),
            value,
            source,
        }
    }

    fn u32(name: &'static str, value: u32, source: &'static str) -> Self {
        Self::new(name, ConstValue::U32(value), source)
    }

    /// A workgroup size (or side) as a `u32` constant.
    fn wg(name: &'static str, value: usize, source: &'static str) -> Self {
        let v = u32::try_from(value).expect("workgroup sizes fit u32");
        Self::new(name, ConstValue::U32(v), source)
    }

    /// The WGSL declaration, e.g. `const T_FAR: f32 = 1e37f;`.
    pub(crate) fn declaration(&self) -> String {
        match self.value {
            ConstValue::U32(v) => format!("const {}: u32 = {v}u;", self.name),
            ConstValue::F32(v) => {
                assert!(v.is_finite(), "{}: WGSL has no literal for {v}", self.name);
                format!("const {}: f32 = {v:?}f;", self.name)
            }
        }
    }
}

/// The constants of `profiles.wgsl`: `T_FAR`, `NEG_BIG` and the profile
/// codes.
fn profile_consts() -> Vec<GeneratedConst> {
    let mut out = vec![
        GeneratedConst::new("T_FAR", ConstValue::F32(T_FAR), "kernel::T_FAR"),
        neg_big_const(),
    ];
    out.extend(Profile::ALL.into_iter().map(|p| {
        GeneratedConst::new(
            profile_const_name(p),
            ConstValue::U32(p.shader_code()),
            "Profile::shader_code",
        )
    }));
    out
}

/// `NEG_BIG` (profiles.wgsl and the attention shaders).
fn neg_big_const() -> GeneratedConst {
    GeneratedConst::new("NEG_BIG", ConstValue::F32(NEG_BIG), "shaders::NEG_BIG")
}

/// The generated prelude of constants `consts`.
fn prelude(consts: &[GeneratedConst]) -> String {
    let mut src = String::from("// Generated from the Rust constants (src/gpu/shaders/).\n");
    for c in consts {
        let _ = writeln!(src, "{} // {}", c.declaration(), c.source);
    }
    src
}

/// One compute shader of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ShaderId {
    /// `shaders/local_mean.wgsl`: fused local mean / row sums.
    LocalMean,
    /// `shaders/local_moments.wgsl`: local moments (local linear
    /// regression, local PCA, scores).
    LocalMoments,
    /// `shaders/kernel_matrix.wgsl`: kernel-matrix blocks.
    KernelMatrix,
    /// `shaders/fill.wgsl`: output sentinels.
    Fill,
    /// `shaders/knn.wgsl`: k nearest neighbours.
    Knn,
    /// `shaders/mean_shift.wgsl`: MeanShift gather / move / compact.
    MeanShift,
    /// `shaders/softmax.wgsl`: kernel softmax (attention), one pass.
    Softmax,
    /// `shaders/softmax_matrix.wgsl`: softmax weight-matrix blocks.
    SoftmaxMatrix,
    /// `shaders/feature_mean.wgsl`, entry `chunk_sums`.
    FeatureSums,
    /// `shaders/feature_mean.wgsl`, entry `prefix`.
    FeaturePrefix,
    /// `shaders/feature_mean.wgsl`, entry `finish`.
    FeatureFinish,
    /// `shaders/local_mean.wgsl`, entry `merge_splits` (a key split's
    /// second pass).
    LocalMeanMerge,
    /// `shaders/local_moments.wgsl`, entry `merge_splits`.
    LocalMomentsMerge,
    /// `shaders/softmax.wgsl`, entry `merge_splits`.
    SoftmaxMerge,
    /// `shaders/local_mean_ip.wgsl`: local means from inner-product tiles
    /// (d ≥ 32, radial kernels).
    LocalMeanIp,
    /// `shaders/local_mean_ip.wgsl`, entry `merge_splits`.
    LocalMeanIpMerge,
    /// `shaders/softmax_tiled.wgsl`: attention in register tiles (passes
    /// with value columns, where the tiles fit).
    SoftmaxTiled,
    /// `shaders/softmax_tiled.wgsl`, entry `merge_splits`.
    SoftmaxTiledMerge,
}

impl ShaderId {
    /// Every shader.
    pub(crate) const ALL: [ShaderId; 18] = [
        ShaderId::LocalMean,
        ShaderId::LocalMoments,
        ShaderId::KernelMatrix,
        ShaderId::Fill,
        ShaderId::Knn,
        ShaderId::MeanShift,
        ShaderId::Softmax,
        ShaderId::SoftmaxMatrix,
        ShaderId::FeatureSums,
        ShaderId::FeaturePrefix,
        ShaderId::FeatureFinish,
        ShaderId::LocalMeanMerge,
        ShaderId::LocalMomentsMerge,
        ShaderId::SoftmaxMerge,
        ShaderId::LocalMeanIp,
        ShaderId::LocalMeanIpMerge,
        ShaderId::SoftmaxTiled,
        ShaderId::SoftmaxTiledMerge,
    ];

    /// The shader whose file, placeholders, constants and bindings an
    /// entry point shares (itself but for the merge entries, whose bind
    /// groups are their accumulate pass's).
    pub(crate) fn base(self) -> ShaderId {
        match self {
            ShaderId::LocalMeanMerge => ShaderId::LocalMean,
            ShaderId::LocalMomentsMerge => ShaderId::LocalMoments,
            ShaderId::SoftmaxMerge => ShaderId::Softmax,
            ShaderId::LocalMeanIpMerge => ShaderId::LocalMeanIp,
            ShaderId::SoftmaxTiledMerge => ShaderId::SoftmaxTiled,
            other => other,
        }
    }

    /// The merge entry of a shader with key splits.
    pub(crate) fn merge(self) -> Option<ShaderId> {
        match self {
            ShaderId::LocalMean => Some(ShaderId::LocalMeanMerge),
            ShaderId::LocalMoments => Some(ShaderId::LocalMomentsMerge),
            ShaderId::Softmax => Some(ShaderId::SoftmaxMerge),
            ShaderId::LocalMeanIp => Some(ShaderId::LocalMeanIpMerge),
            ShaderId::SoftmaxTiled => Some(ShaderId::SoftmaxTiledMerge),
            _ => None,
        }
    }

    /// File name under `shaders/`.
    pub(crate) fn file(self) -> &'static str {
        match self {
            ShaderId::LocalMean | ShaderId::LocalMeanMerge => "local_mean.wgsl",
            ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => "local_mean_ip.wgsl",
            ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => "local_moments.wgsl",
            ShaderId::KernelMatrix => "kernel_matrix.wgsl",
            ShaderId::Fill => "fill.wgsl",
            ShaderId::Knn => "knn.wgsl",
            ShaderId::MeanShift => "mean_shift.wgsl",
            ShaderId::Softmax | ShaderId::SoftmaxMerge => "softmax.wgsl",
            ShaderId::SoftmaxTiled | ShaderId::SoftmaxTiledMerge => "softmax_tiled.wgsl",
            ShaderId::SoftmaxMatrix => "softmax_matrix.wgsl",
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                "feature_mean.wgsl"
            }
        }
    }

    fn body(self) -> &'static str {
        match self {
            ShaderId::LocalMean | ShaderId::LocalMeanMerge => {
                include_str!("../../../shaders/local_mean.wgsl")
            }
            ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => {
                include_str!("../../../shaders/local_mean_ip.wgsl")
            }
            ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => {
                include_str!("../../../shaders/local_moments.wgsl")
            }
            ShaderId::KernelMatrix => include_str!("../../../shaders/kernel_matrix.wgsl"),
            ShaderId::Fill => include_str!("../../../shaders/fill.wgsl"),
            ShaderId::Knn => include_str!("../../../shaders/knn.wgsl"),
            ShaderId::MeanShift => include_str!("../../../shaders/mean_shift.wgsl"),
            ShaderId::Softmax | ShaderId::SoftmaxMerge => {
                include_str!("../../../shaders/softmax.wgsl")
            }
            ShaderId::SoftmaxTiled | ShaderId::SoftmaxTiledMerge => {
                include_str!("../../../shaders/softmax_tiled.wgsl")
            }
            ShaderId::SoftmaxMatrix => include_str!("../../../shaders/softmax_matrix.wgsl"),
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                include_str!("../../../shaders/feature_mean.wgsl")
            }
        }
    }

    /// Entry point.
    pub(crate) fn entry(self) -> &'static str {
        match self {
            ShaderId::LocalMean | ShaderId::LocalMoments => "accumulate",
            ShaderId::LocalMeanMerge
            | ShaderId::LocalMomentsMerge
            | ShaderId::SoftmaxMerge
            | ShaderId::SoftmaxTiledMerge
            | ShaderId::LocalMeanIpMerge => "merge_splits",
            ShaderId::LocalMeanIp => "accumulate",
            ShaderId::KernelMatrix => "entries",
            ShaderId::Fill => "fill",
            ShaderId::Knn => "nearest",
            ShaderId::MeanShift => "step",
            ShaderId::Softmax => "attend",
            ShaderId::SoftmaxTiled => "attend_tiled",
            ShaderId::SoftmaxMatrix => "entries",
            ShaderId::FeatureSums => "chunk_sums",
            ShaderId::FeaturePrefix => "prefix",
            ShaderId::FeatureFinish => "finish",
        }
    }

    /// Whether the shader uses `profiles.wgsl` (and its `PROFILE` override).
    pub(crate) fn uses_profiles(self) -> bool {
        matches!(
            self.base(),
            ShaderId::LocalMean
                | ShaderId::LocalMoments
                | ShaderId::LocalMeanIp
                | ShaderId::KernelMatrix
        )
    }

    /// The placeholders the shader needs.
    pub(crate) fn placeholders(self) -> &'static [&'static str] {
        match self {
            ShaderId::LocalMean | ShaderId::LocalMeanMerge => {
                &["D", "QT", "QA", "STAGE", "MASKED", "R"]
            }
            ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => &["D", "QT", "QA"],
            ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => {
                &["D", "QT", "QA", "QY", "YW", "YWA", "STAGE", "SECOND"]
            }
            ShaderId::KernelMatrix => &["D"],
            ShaderId::Fill | ShaderId::SoftmaxMatrix => &[],
            ShaderId::Knn => &["D", "K", "STAGE"],
            ShaderId::MeanShift => &["D"],
            ShaderId::Softmax
            | ShaderId::SoftmaxMerge
            | ShaderId::SoftmaxTiled
            | ShaderId::SoftmaxTiledMerge => &["D4", "QA4", "BK"],
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => &["QA"],
        }
    }

    /// The constants generated into this shader's prelude (with those of
    /// `profiles.wgsl` when it uses the profiles).
    pub(crate) fn consts(self) -> Vec<GeneratedConst> {
        use GeneratedConst as C;
        let tiles = || {
            [
                C::u32("FIRST_TILE", FIRST_TILE, "shaders::FIRST_TILE"),
                C::u32("LAST_TILE", LAST_TILE, "shaders::LAST_TILE"),
            ]
        };
        let log2e = || C::new("LOG2E", ConstValue::F32(LOG2_E), "f32::consts::LOG2_E");
        let m_start = || C::new("M_START", ConstValue::F32(M_START), "shaders::M_START");
        let mut out = if self.uses_profiles() {
            profile_consts()
        } else {
            Vec::new()
        };
        match self {
            ShaderId::LocalMean
            | ShaderId::LocalMeanMerge
            | ShaderId::LocalMeanIp
            | ShaderId::LocalMeanIpMerge => {
                out.push(C::wg("WG", LOCAL_MEAN_WG, "plan::LOCAL_MEAN_WG"));
                out.push(C::wg("C", CHUNK_KEYS, "plan::CHUNK_KEYS"));
                out.extend([log2e(), m_start()]);
                out.extend(tiles());
                out.push(C::u32(
                    "EXCLUDE_SELF",
                    EXCLUDE_SELF,
                    "shaders::EXCLUDE_SELF",
                ));
                if self.base() == ShaderId::LocalMeanIp {
                    out.push(C::wg("TQ", IP_TILE_ROWS, "plan::local_mean::IP_TILE_ROWS"));
                    out.push(C::wg("TK", IP_STEP_KEYS, "plan::local_mean::IP_STEP_KEYS"));
                    out.push(C::wg(
                        "KC",
                        IP_CHUNK_DIMS,
                        "plan::local_mean::IP_CHUNK_DIMS",
                    ));
                }
                // Masked distances: local_mean.wgsl only.
                if self.base() == ShaderId::LocalMean {
                    out.push(C::new(
                        "MISSING",
                        ConstValue::F32(MISSING_FROM),
                        "shaders::MISSING_FROM",
                    ));
                }
            }
            ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => {
                out.push(C::wg("WG", LOCAL_MEAN_WG, "plan::LOCAL_MEAN_WG"));
                out.extend(tiles());
            }
            ShaderId::KernelMatrix => {
                out.push(C::wg("WG", MATRIX_WG, "plan::MATRIX_WG"));
                out.extend(MATRIX_MODES.iter().map(|&(mode, name)| {
                    C::new(
                        name,
                        ConstValue::U32(matrix_mode_code(mode)),
                        "shaders::matrix_mode_code",
                    )
                }));
            }
            ShaderId::Fill => out.push(C::wg("WG", FILL_WG, "plan::FILL_WG")),
            ShaderId::Knn => {
                out.push(C::wg("WG", LOCAL_MEAN_WG, "plan::LOCAL_MEAN_WG"));
                out.extend(tiles());
            }
            ShaderId::MeanShift => {
                out.push(C::wg("WG", LOCAL_MEAN_WG, "plan::LOCAL_MEAN_WG"));
                out.push(C::new(
                    "SHIFT_FLOOR",
                    ConstValue::F32(SHIFT_FLOOR),
                    "types::SHIFT_FLOOR",
                ));
                out.push(C::u32("GATHER", GATHER, "shaders::GATHER"));
                out.push(C::u32("FINISH", FINISH, "shaders::FINISH"));
                out.push(C::u32(
                    "FINISH_BLURRING",
                    FINISH_BLURRING,
                    "shaders::FINISH_BLURRING",
                ));
            }
            ShaderId::Softmax
            | ShaderId::SoftmaxMerge
            | ShaderId::SoftmaxTiled
            | ShaderId::SoftmaxTiledMerge => {
                out.push(C::wg("WG", ATTEND_WG, "plan::softmax::ATTEND_WG"));
                if self.base() == ShaderId::Softmax {
                    out.push(C::wg("C", CHUNK_KEYS, "plan::CHUNK_KEYS"));
                }
                out.extend([log2e(), m_start(), neg_big_const()]);
                out.extend(tiles());
                out.push(C::u32("CAUSAL", CAUSAL, "shaders::CAUSAL"));
            }
            ShaderId::SoftmaxMatrix => {
                out.push(C::wg("WG", SOFTMAX_MATRIX_WG, "plan::softmax::MATRIX_WG"));
                out.push(log2e());
            }
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                out.push(C::wg("SUM_WG", SUM_WG, "plan::softmax::SUM_WG"));
                out.push(C::wg("FINISH_WG", FINISH_WG, "plan::softmax::FINISH_WG"));
            }
        }
        out
    }

    /// The workgroup size of the entry point: the constants its dispatches
    /// divide by (checked against the shader by the tests).
    #[cfg(test)]
    pub(crate) fn workgroup_size(self) -> [usize; 3] {
        match self {
            ShaderId::LocalMean
            | ShaderId::LocalMoments
            | ShaderId::LocalMeanIp
            | ShaderId::LocalMeanIpMerge
            | ShaderId::LocalMeanMerge
            | ShaderId::LocalMomentsMerge
            | ShaderId::Knn
            | ShaderId::MeanShift => [LOCAL_MEAN_WG, 1, 1],
            ShaderId::KernelMatrix => [MATRIX_WG, MATRIX_WG, 1],
            ShaderId::Fill => [FILL_WG, 1, 1],
            ShaderId::Softmax
            | ShaderId::SoftmaxMerge
            | ShaderId::SoftmaxTiled
            | ShaderId::SoftmaxTiledMerge => [ATTEND_WG, 1, 1],
            ShaderId::SoftmaxMatrix => [SOFTMAX_MATRIX_WG, SOFTMAX_MATRIX_WG, 1],
            ShaderId::FeatureSums | ShaderId::FeaturePrefix => [SUM_WG, 1, 1],
            ShaderId::FeatureFinish => [FINISH_WG, 1, 1],
        }
    }

    /// The full WGSL source: the generated constants, the profiles when
    /// used, the shader file, with the placeholders replaced.
    #[cfg(test)]
    pub(crate) fn render(self, values: &[(&str, u32)]) -> Result<String, String> {
        self.render_for(values, None)
    }

    /// [`render`](Self::render) for a product kernel's blocks (`None`:
    /// radial), which the profile-using shaders evaluate by generated
    /// functions.
    pub(crate) fn render_for(
        self,
        values: &[(&str, u32)],
        product: Option<&ProductCode>,
    ) -> Result<String, String> {
        let mut src = prelude(&self.consts());
        src.push('\n');
        if self.uses_profiles() {
            src.push_str(PROFILES);
            src.push('\n');
            src.push_str(&ProductCode::wgsl(product));
            src.push('\n');
        }
        if matches!(
            self.base(),
            ShaderId::LocalMean | ShaderId::LocalMoments | ShaderId::LocalMeanIp
        ) {
            src.push_str(ROW_STATE);
            src.push('\n');
        }
        if matches!(self.base(), ShaderId::Softmax | ShaderId::SoftmaxTiled) {
            src.push_str(SOFTMAX_STATE);
            src.push('\n');
        }
        src.push_str(self.body());
        for &name in self.placeholders() {
            let v = values
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("{}: no value for {{{{{name}}}}}", self.file()))?;
            src = src.replace(&format!("{{{{{name}}}}}", name = name), &v.1.to_string());
        }
        if let Some(pos) = src.find("{{") {
            let end = src[pos..].find("}}").map_or(src.len(), |e| pos + e + 2);
            return Err(format!(
                "{}: unknown placeholder {}",
                self.file(),
                &src[pos..end]
            ));
        }
        Ok(src)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::samples;

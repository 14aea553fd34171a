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

use std::fmt::Write as _;

use crate::backend::MatrixMode;
use crate::kernel::{Kernel, Profile, T_FAR};
use crate::types::SHIFT_FLOOR;

use super::plan::softmax::{ATTEND_WG, FINISH_WG, MATRIX_WG as SOFTMAX_MATRIX_WG, SUM_WG};
use super::plan::{CHUNK_KEYS, FILL_WG, LOCAL_MEAN_WG, MATRIX_WG};

/// Shared kernel-profile functions, prepended to the distance-kernel shaders.
const PROFILES: &str = include_str!("../../shaders/profiles.wgsl");
/// The row state, its merge and a key tile's end, shared by the
/// local-mean family (prepended like the profiles).
const ROW_STATE: &str = include_str!("../../shaders/row_state.wgsl");

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

/// A product kernel's block structure as its pipelines are compiled for
/// it: per block, its coordinates `start..end` and profile code. Part of
/// the pipeline key; the bandwidths are not (they travel in the uniform
/// block, [`block_scales`]), so a bandwidth search compiles nothing new.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ProductCode(Vec<[u32; 3]>);

// The uniform blocks hold eight block scales.
const _: () = assert!(crate::kernel::MAX_BLOCKS <= 8);

/// `1/h_b` of a product kernel's blocks as the shaders' uniform blocks
/// carry them (`block_inv_h`, two `vec4`s); zeros for a radial kernel.
pub(crate) fn block_scales(kernel: &Kernel) -> [[f32; 4]; 2] {
    let mut out = [[0.0f32; 4]; 2];
    if let Some(pb) = kernel.product_blocks() {
        for b in 0..pb.len {
            out[b / 4][b % 4] = pb.inv_h[b];
        }
    }
    out
}

impl ProductCode {
    /// The code of `kernel`; `None` for a radial kernel.
    pub(crate) fn of(kernel: &Kernel) -> Option<Self> {
        let pb = kernel.product_blocks()?;
        Some(ProductCode(
            (0..pb.len)
                .map(|b| {
                    [
                        pb.start[b] as u32,
                        pb.end[b] as u32,
                        pb.profile[b].shader_code(),
                    ]
                })
                .collect(),
        ))
    }

    /// The WGSL of the product's block functions (`PRODUCT`, `block_last`,
    /// `block_t`, `block_dims`, `coord_inv_h`; they read the shader's
    /// `block_inv_h(b)`); for `None`, their radial stand-ins, which the
    /// compiler folds away.
    fn wgsl(code: Option<&ProductCode>) -> String {
        let Some(ProductCode(blocks)) = code else {
            return "const PRODUCT: bool = false;\n\
                    fn block_last(k: u32) -> bool { return false; }\n\
                    fn block_t(k: u32, s: f32) -> f32 { return s; }\n\
                    fn block_dims(k: u32) -> u32 { return 1u; }\n\
                    fn coord_inv_h(k: u32) -> f32 { return 1.0; }\n"
                .into();
        };
        let last = |b: &[u32; 3]| b[1] - 1;
        let mut s = String::from(
            "// Generated: the product kernel's blocks (docs/numerics.md, \"Product kernels\").\n\
             const PRODUCT: bool = true;\n",
        );
        let ends: Vec<String> = blocks
            .iter()
            .map(|b| format!("k == {}u", last(b)))
            .collect();
        let _ = writeln!(
            s,
            "fn block_last(k: u32) -> bool {{ return {}; }}",
            ends.join(" || ")
        );
        s.push_str("fn block_t(k: u32, s: f32) -> f32 {\n");
        for b in blocks {
            let _ = writeln!(
                s,
                "    if k == {}u {{ return carrier_t({}u, s); }}",
                last(b),
                b[2]
            );
        }
        s.push_str("    return T_FAR;\n}\n");
        s.push_str("fn block_dims(k: u32) -> u32 {\n");
        for b in blocks {
            let _ = writeln!(s, "    if k == {}u {{ return {}u; }}", last(b), b[1] - b[0]);
        }
        s.push_str("    return 1u;\n}\n");
        s.push_str("fn coord_inv_h(k: u32) -> f32 {\n");
        for (i, b) in blocks.iter().enumerate() {
            let _ = writeln!(s, "    if k < {}u {{ return block_inv_h({i}u); }}", b[1]);
        }
        s.push_str("    return 1.0;\n}\n");
        s
    }
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

/// The constants of `profiles.wgsl`: `T_FAR` and the profile codes.
fn profile_consts() -> Vec<GeneratedConst> {
    let mut out = vec![GeneratedConst::new(
        "T_FAR",
        ConstValue::F32(T_FAR),
        "kernel::T_FAR",
    )];
    out.extend(Profile::ALL.into_iter().map(|p| {
        GeneratedConst::new(
            profile_const_name(p),
            ConstValue::U32(p.shader_code()),
            "Profile::shader_code",
        )
    }));
    out
}

/// The generated prelude of constants `consts`.
fn prelude(consts: &[GeneratedConst]) -> String {
    let mut src = String::from("// Generated from the Rust constants (src/gpu/shaders.rs).\n");
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
}

impl ShaderId {
    /// Every shader.
    pub(crate) const ALL: [ShaderId; 16] = [
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
            ShaderId::SoftmaxMatrix => "softmax_matrix.wgsl",
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                "feature_mean.wgsl"
            }
        }
    }

    fn body(self) -> &'static str {
        match self {
            ShaderId::LocalMean | ShaderId::LocalMeanMerge => {
                include_str!("../../shaders/local_mean.wgsl")
            }
            ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => {
                include_str!("../../shaders/local_mean_ip.wgsl")
            }
            ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => {
                include_str!("../../shaders/local_moments.wgsl")
            }
            ShaderId::KernelMatrix => include_str!("../../shaders/kernel_matrix.wgsl"),
            ShaderId::Fill => include_str!("../../shaders/fill.wgsl"),
            ShaderId::Knn => include_str!("../../shaders/knn.wgsl"),
            ShaderId::MeanShift => include_str!("../../shaders/mean_shift.wgsl"),
            ShaderId::Softmax | ShaderId::SoftmaxMerge => {
                include_str!("../../shaders/softmax.wgsl")
            }
            ShaderId::SoftmaxMatrix => include_str!("../../shaders/softmax_matrix.wgsl"),
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                include_str!("../../shaders/feature_mean.wgsl")
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
            | ShaderId::LocalMeanIpMerge => "merge_splits",
            ShaderId::LocalMeanIp => "accumulate",
            ShaderId::KernelMatrix => "entries",
            ShaderId::Fill => "fill",
            ShaderId::Knn => "nearest",
            ShaderId::MeanShift => "step",
            ShaderId::Softmax => "attend",
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
            ShaderId::Softmax | ShaderId::SoftmaxMerge => &["D4", "QA4", "BK"],
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
                out.extend(tiles());
                out.push(C::u32(
                    "EXCLUDE_SELF",
                    EXCLUDE_SELF,
                    "shaders::EXCLUDE_SELF",
                ));
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
            ShaderId::Softmax | ShaderId::SoftmaxMerge => {
                out.push(C::wg("WG", ATTEND_WG, "plan::softmax::ATTEND_WG"));
                out.push(C::wg("C", CHUNK_KEYS, "plan::CHUNK_KEYS"));
                out.extend(tiles());
                out.push(C::u32("CAUSAL", CAUSAL, "shaders::CAUSAL"));
            }
            ShaderId::SoftmaxMatrix => {
                out.push(C::wg("WG", SOFTMAX_MATRIX_WG, "plan::softmax::MATRIX_WG"));
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
            ShaderId::Softmax | ShaderId::SoftmaxMerge => [ATTEND_WG, 1, 1],
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

/// Values exercising each placeholder at small and large sizes.
#[cfg(test)]
pub(crate) fn samples(id: ShaderId) -> Vec<Vec<(&'static str, u32)>> {
    match id {
        ShaderId::LocalMean | ShaderId::LocalMeanMerge => vec![
            vec![
                ("D", 1),
                ("QT", 0),
                ("QA", 1),
                ("STAGE", 256),
                ("MASKED", 0),
                ("R", 4),
            ],
            vec![
                ("D", 3),
                ("QT", 3),
                ("QA", 3),
                ("STAGE", 256),
                ("MASKED", 1),
                ("R", 2),
            ],
            vec![
                ("D", 64),
                ("QT", 8),
                ("QA", 8),
                ("STAGE", 112),
                ("MASKED", 0),
                ("R", 1),
            ],
        ],
        ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => vec![
            vec![("D", 32), ("QT", 0), ("QA", 1)],
            vec![("D", 33), ("QT", 3), ("QA", 3)],
            vec![("D", 784), ("QT", 32), ("QA", 32)],
        ],
        ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => vec![
            vec![
                ("D", 1),
                ("QT", 2),
                ("QA", 2),
                ("QY", 0),
                ("YW", 0),
                ("YWA", 1),
                ("STAGE", 256),
                ("SECOND", 0),
            ],
            vec![
                ("D", 3),
                ("QT", 8),
                ("QA", 8),
                ("QY", 2),
                ("YW", 2),
                ("YWA", 2),
                ("STAGE", 256),
                ("SECOND", 1),
            ],
            vec![
                ("D", 64),
                ("QT", 8),
                ("QA", 8),
                ("QY", 4),
                ("YW", 4),
                ("YWA", 4),
                ("STAGE", 112),
                ("SECOND", 1),
            ],
        ],
        ShaderId::KernelMatrix => vec![vec![("D", 1)], vec![("D", 7)], vec![("D", 300)]],
        ShaderId::Fill | ShaderId::SoftmaxMatrix => vec![vec![]],
        ShaderId::Knn => vec![
            vec![("D", 1), ("K", 1), ("STAGE", 256)],
            vec![("D", 16), ("K", 16), ("STAGE", 256)],
            vec![("D", 7), ("K", 128), ("STAGE", 64)],
        ],
        ShaderId::MeanShift => vec![vec![("D", 1)], vec![("D", 2)], vec![("D", 64)]],
        ShaderId::Softmax | ShaderId::SoftmaxMerge => vec![
            vec![("D4", 1), ("QA4", 1), ("BK", 32)],
            vec![("D4", 1), ("QA4", 1), ("BK", 7)],
            vec![("D4", 16), ("QA4", 16), ("BK", 32)],
            vec![("D4", 20), ("QA4", 5), ("BK", 1)],
        ],
        ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
            vec![vec![("QA", 1)], vec![("QA", 16)]]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(name: &str, src: &str) {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name} does not parse:\n{}", e.emit_to_string(src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate:\n{}", e.emit_to_string(src)));
    }

    #[test]
    fn every_shader_file_is_registered_and_validates() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("shaders/ exists")
            .map(|e| {
                e.expect("readable entry")
                    .file_name()
                    .into_string()
                    .expect("utf-8 name")
            })
            .filter(|n| n.ends_with(".wgsl"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        for file in &files {
            if file == "profiles.wgsl" {
                validate(file, &format!("{}\n{PROFILES}", prelude(&profile_consts())));
                continue;
            }
            if file == "row_state.wgsl" {
                // Part of local_mean.wgsl and local_moments.wgsl, checked
                // with them.
                continue;
            }
            let id = ShaderId::ALL
                .into_iter()
                .find(|id| id.file() == file)
                .unwrap_or_else(|| panic!("shaders/{file} is not in the registry"));
            for values in samples(id) {
                let src = id.render(&values).expect("placeholders filled");
                validate(&format!("{file} {values:?}"), &src);
            }
        }
    }

    /// The planner's count of `local_mean_ip.wgsl`'s workgroup memory
    /// (which decides whether a device can run it) is the shader's.
    #[test]
    fn inner_product_workgroup_memory_is_what_the_planner_counts() {
        for cols in [0u32, 3, 32] {
            let values = [("D", 40), ("QT", cols), ("QA", cols.max(1))];
            let src = ShaderId::LocalMeanIp.render(&values).expect("placeholders");
            let module = naga::front::wgsl::parse_str(&src).expect("parses");
            let bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
                .map(|(_, v)| module.types[v.ty].inner.size(module.to_ctx()))
                .sum();
            assert_eq!(
                bytes as usize,
                crate::gpu::plan::local_mean::ip_workgroup_bytes(cols as usize),
                "QT = {cols}"
            );
        }
    }

    /// The profile-using shaders validate with a product kernel's generated
    /// block functions too (eight blocks, every profile).
    #[test]
    fn shaders_validate_with_product_blocks() {
        let blocks: Vec<(usize, Profile, f32)> = Profile::ALL
            .into_iter()
            .chain([Profile::Gaussian])
            .enumerate()
            .map(|(i, p)| (1 + i % 3, p, 0.5 + i as f32))
            .collect();
        let kernel = Kernel::product(blocks).unwrap();
        let code = ProductCode::of(&kernel).unwrap();
        let d = kernel.dims().unwrap() as u32;
        for id in [
            ShaderId::LocalMean,
            ShaderId::LocalMoments,
            ShaderId::KernelMatrix,
        ] {
            for mut values in samples(id) {
                for v in values.iter_mut().filter(|v| v.0 == "D") {
                    v.1 = d;
                }
                let src = id
                    .render_for(&values, Some(&code))
                    .expect("placeholders filled");
                validate(&format!("{} {values:?} product", id.file()), &src);
            }
        }
        assert_eq!(block_scales(&kernel)[1][3], (1.0 / 7.5f64) as f32);
        // The bandwidths are not part of the pipeline key; the structure is.
        let k =
            |h: f32, p: Profile| Kernel::product([(2, p, h), (1, Profile::Gaussian, h)]).unwrap();
        let g = Profile::Gaussian;
        assert_eq!(ProductCode::of(&k(0.5, g)), ProductCode::of(&k(3.0, g)));
        assert_ne!(
            ProductCode::of(&k(0.5, g)),
            ProductCode::of(&k(0.5, Profile::Uniform))
        );
        assert_eq!(ProductCode::of(&Kernel::gaussian(1.0).unwrap()), None);
    }

    /// Each generated `f32` constant reads back (through naga) as exactly
    /// the value it was printed from, for values without a short decimal.
    #[test]
    fn f32_declarations_round_trip_exactly() {
        let values = [
            T_FAR,
            SHIFT_FLOOR,
            0.1,
            -3.0e38,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            std::f32::consts::PI,
            16_777_217.0,
            1.0,
        ];
        let src: String = values
            .iter()
            .enumerate()
            .map(|(i, &v)| GeneratedConst::new(format!("C{i}"), ConstValue::F32(v), "test"))
            .map(|c| c.declaration() + "\n")
            .collect();
        let module = naga::front::wgsl::parse_str(&src).expect("declarations parse");
        for (i, v) in values.into_iter().enumerate() {
            let name = format!("C{i}");
            let (_, c) = module
                .constants
                .iter()
                .find(|(_, c)| c.name.as_deref() == Some(name.as_str()))
                .expect("declared");
            match module.global_expressions[c.init] {
                naga::Expression::Literal(naga::Literal::F32(got)) => {
                    assert_eq!(
                        got.to_bits(),
                        v.to_bits(),
                        "{name}: {v:?} read back as {got:?}"
                    );
                }
                ref e => panic!("{name}: not an f32 literal: {e:?}"),
            }
        }
    }

    #[test]
    fn matrix_modes_and_profiles_have_distinct_codes_and_names() {
        let mut codes: Vec<u32> = MATRIX_MODES
            .iter()
            .map(|&(m, _)| matrix_mode_code(m))
            .collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), MATRIX_MODES.len());
        let mut names: Vec<_> = MATRIX_MODES.iter().map(|&(_, n)| n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MATRIX_MODES.len());
        let mut codes: Vec<u32> = Profile::ALL.iter().map(|p| p.shader_code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Profile::ALL.len());
    }

    #[test]
    fn missing_placeholder_values_are_reported() {
        assert!(ShaderId::LocalMean.render(&[("D", 3)]).is_err());
    }
}

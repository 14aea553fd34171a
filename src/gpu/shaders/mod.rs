//! The shader registry: every `shaders/*.wgsl` file, listed once, and the
//! constants the shaders share with the Rust side.
//!
//! [`SHADERS`] has one entry per entry point ([`ShaderSpec`]): its file,
//! entry, merge entry, placeholders and generated constants. Shaders are
//! specialized two ways: pipeline `override` constants for scalars (the
//! kernel profile), and `{{NAME}}` placeholders for what overrides cannot
//! express (sizes of private and workgroup arrays).
//!
//! Each WGSL file names the modules it uses with `#import` lines at its
//! top ([`imports`]): the shared files ([`LIBRARY`]: `profiles`,
//! `metric`, `row_state`, `softmax_state`) and three modules generated from Rust
//! values. Constants that have a Rust twin (workgroup sizes the dispatches
//! divide by, flag bits and mode codes of the parameter blocks, profile
//! codes, `T_FAR`, `SHIFT_FLOOR`) are not written in the shader files:
//! each is printed from its Rust value into `consts` (the constant groups
//! of the importing shader's entry, [`ShaderSpec::consts`]) or
//! `profile_consts` (those of `profiles.wgsl`); `product` holds a product
//! kernel's block functions ([`ProductCode`]).
//!
//! Bind-group layouts are reflected from the rendered shaders by naga
//! ([`ShaderId::bindings`]), not written by hand.

#[cfg(test)]
pub(crate) mod cost;
mod id;
mod imports;
mod product;
mod reflect;

pub(crate) use id::ShaderId;
pub(crate) use product::{ProductCode, block_scales};
#[cfg(test)]
pub(crate) use reflect::Access;

use std::borrow::Cow;
use std::f32::consts::LOG2_E;
use std::fmt::Write as _;

use crate::backend::MatrixMode;
use crate::kernel::slope::COSINE_SLOPE_POLY;
use crate::kernel::{COSINE_POLY, Profile, T_FAR};
use crate::types::SHIFT_FLOOR;

use crate::gpu::plan::local_mean::{IP_CHUNK_DIMS, IP_STEP_KEYS, IP_TILE_ROWS};
use crate::gpu::plan::softmax::{ATTEND_WG, FINISH_WG, MATRIX_WG as SOFTMAX_MATRIX_WG, SUM_WG};
use crate::gpu::plan::variable::VARIABLE_WG;
use crate::gpu::plan::{CHUNK_KEYS, FILL_WG, LOCAL_MEAN_WG, MATRIX_WG};

/// A WGSL file under `shaders/`: its name and text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WgslFile {
    pub name: &'static str,
    pub text: &'static str,
}

/// The [`WgslFile`] of `shaders/<name>`.
macro_rules! wgsl {
    ($name:literal) => {
        WgslFile {
            name: $name,
            text: include_str!(concat!("../../../shaders/", $name)),
        }
    };
}

/// The shared files shaders import by name (the file's stem): the kernel
/// profiles; the distance metrics of the shaders that measure by
/// differences; the kNN shaders' top-k list, its windows and merge; the
/// local-mean family's row state, its merge and a key tile's end; the
/// attention row state, its merge, a key tile's end and
/// the split merge pass.
pub(crate) const LIBRARY: [(&str, WgslFile); 5] = [
    ("profiles", wgsl!("profiles.wgsl")),
    ("metric", wgsl!("metric.wgsl")),
    ("knn_list", wgsl!("knn_list.wgsl")),
    ("row_state", wgsl!("row_state.wgsl")),
    ("softmax_state", wgsl!("softmax_state.wgsl")),
];

/// Bit of `flags` (`local_mean.wgsl`, `knn.wgsl`, `softmax.wgsl`): the
/// first key tile (no state to merge with).
pub(crate) const FIRST_TILE: u32 = 1;
/// Bit of `flags`: the last key tile (finalize into the output).
pub(crate) const LAST_TILE: u32 = 2;
/// Bit of `flags` (`local_mean_ip.wgsl`): leave each row's own key out
/// (`local_mean.wgsl` takes it as its template constant `EXCL`).
pub(crate) const EXCLUDE_SELF: u32 = 4;

/// How `local_mean.wgsl` forms its weights, its template constant `FORM`
/// (the codes generated as `FORM_SCALED`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WeightForm {
    /// Gaussian, coordinates pre-scaled by `√(½·log₂e/h²)`: a pair's
    /// weight is `2^(V − t')` from its distance alone (the row maximum
    /// is `−V·ln 2`, to its rounding).
    Scaled,
    /// Gaussian of the unscaled `t` (radial, masked or a product's
    /// carrier): the row maximum is the nearest key's log-weight exactly
    /// as every other pass computes it.
    Exact,
    /// Laplacian (`√t` in the exponent), the row maximum exact likewise.
    Root,
    /// The plain-weight profiles: no row maximum.
    Plain,
}

impl WeightForm {
    /// Every form with its WGSL name.
    const ALL: [(WeightForm, &'static str); 4] = [
        (WeightForm::Scaled, "FORM_SCALED"),
        (WeightForm::Exact, "FORM_EXACT"),
        (WeightForm::Root, "FORM_ROOT"),
        (WeightForm::Plain, "FORM_PLAIN"),
    ];

    /// The code of `FORM`.
    pub(crate) fn code(self) -> u32 {
        match self {
            WeightForm::Scaled => 0,
            WeightForm::Exact => 1,
            WeightForm::Root => 2,
            WeightForm::Plain => 3,
        }
    }
}
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

/// The constants of `profiles.wgsl`: `T_FAR`, `NEG_BIG`, the profile
/// codes and the cosine profile's polynomial (`COSINE_P0` … `COSINE_P5`).
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
    out.extend(COSINE_POLY.iter().enumerate().map(|(i, &c)| {
        GeneratedConst::new(
            format!("COSINE_P{i}"),
            ConstValue::F32(c),
            "kernel::COSINE_POLY",
        )
    }));
    out
}

/// `NEG_BIG` (profiles.wgsl and the attention shaders).
fn neg_big_const() -> GeneratedConst {
    GeneratedConst::new("NEG_BIG", ConstValue::F32(NEG_BIG), "shaders::NEG_BIG")
}

/// The generated module of constants `consts`.
fn prelude(consts: &[GeneratedConst]) -> String {
    let mut src = String::from("// Generated from the Rust constants (src/gpu/shaders/).\n");
    for c in consts {
        let _ = writeln!(src, "{} // {}", c.declaration(), c.source);
    }
    src
}

/// A group of generated constants, as an entry of [`SHADERS`] lists them
/// for its module `consts`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Consts {
    /// A size from `plan/` (a workgroup size or side, keys per chunk, a
    /// tile side): WGSL name, value, the Rust item.
    Size(&'static str, usize, &'static str),
    /// `FIRST_TILE`, `LAST_TILE`: the key-tile bits of `flags`.
    TileFlags,
    /// `EXCLUDE_SELF`.
    ExcludeSelf,
    /// `LOG2E`.
    Log2e,
    /// `M_START`.
    MStart,
    /// `NEG_BIG`.
    NegBig,
    /// `MISSING` (masked distances).
    Missing,
    /// `MODE_*`, the matrix-mode codes.
    MatrixModes,
    /// `SHIFT_FLOOR` and the `mode` codes `GATHER`, `FINISH`,
    /// `FINISH_BLURRING`.
    MeanShift,
    /// `CAUSAL`.
    Causal,
    /// `FORM_SCALED`, `FORM_EXACT`, `FORM_ROOT`, `FORM_PLAIN`: the
    /// [`WeightForm`] codes.
    Forms,
    /// `COSINE_S0` … `COSINE_S6`: the cosine profile's slope polynomial
    /// (`kernel::slope::COSINE_SLOPE_POLY`).
    CosineSlope,
}

impl Consts {
    /// The group's constants.
    fn generate(self, out: &mut Vec<GeneratedConst>) {
        use GeneratedConst as C;
        match self {
            Consts::Size(name, value, source) => out.push(C::wg(name, value, source)),
            Consts::TileFlags => out.extend([
                C::u32("FIRST_TILE", FIRST_TILE, "shaders::FIRST_TILE"),
                C::u32("LAST_TILE", LAST_TILE, "shaders::LAST_TILE"),
            ]),
            Consts::ExcludeSelf => out.push(C::u32(
                "EXCLUDE_SELF",
                EXCLUDE_SELF,
                "shaders::EXCLUDE_SELF",
            )),
            Consts::Log2e => out.push(C::new(
                "LOG2E",
                ConstValue::F32(LOG2_E),
                "f32::consts::LOG2_E",
            )),
            Consts::MStart => out.push(C::new(
                "M_START",
                ConstValue::F32(M_START),
                "shaders::M_START",
            )),
            Consts::NegBig => out.push(neg_big_const()),
            Consts::Missing => out.push(C::new(
                "MISSING",
                ConstValue::F32(MISSING_FROM),
                "shaders::MISSING_FROM",
            )),
            Consts::MatrixModes => out.extend(MATRIX_MODES.iter().map(|&(mode, name)| {
                C::new(
                    name,
                    ConstValue::U32(matrix_mode_code(mode)),
                    "shaders::matrix_mode_code",
                )
            })),
            Consts::MeanShift => out.extend([
                C::new(
                    "SHIFT_FLOOR",
                    ConstValue::F32(SHIFT_FLOOR),
                    "types::SHIFT_FLOOR",
                ),
                C::u32("GATHER", GATHER, "shaders::GATHER"),
                C::u32("FINISH", FINISH, "shaders::FINISH"),
                C::u32(
                    "FINISH_BLURRING",
                    FINISH_BLURRING,
                    "shaders::FINISH_BLURRING",
                ),
            ]),
            Consts::Causal => out.push(C::u32("CAUSAL", CAUSAL, "shaders::CAUSAL")),
            Consts::CosineSlope => {
                out.extend(COSINE_SLOPE_POLY.iter().enumerate().map(|(i, &c)| {
                    C::new(
                        format!("COSINE_S{i}"),
                        ConstValue::F32(c),
                        "kernel::slope::COSINE_SLOPE_POLY",
                    )
                }))
            }
            Consts::Forms => out.extend(
                WeightForm::ALL
                    .iter()
                    .map(|&(f, name)| C::u32(name, f.code(), "shaders::WeightForm::code")),
            ),
        }
    }
}

/// One entry point of a shader file: everything the registry knows of it.
#[derive(Debug)]
pub(crate) struct ShaderSpec {
    /// Its key.
    pub id: ShaderId,
    /// The file under `shaders/`.
    pub file: WgslFile,
    /// Entry point.
    pub entry: &'static str,
    /// The entry that merges a key split's slices, with its key: same
    /// file, placeholders, constants and bind groups (`None`: the shader
    /// does not split keys).
    pub merge: Option<(ShaderId, &'static str)>,
    /// The `{{NAME}}` placeholders, each with a value the shader renders
    /// and validates with: its bind-group layout is reflected from that
    /// rendering ([`ShaderId::bindings`]).
    pub placeholders: &'static [(&'static str, u32)],
    /// The constants of its module `consts`.
    pub consts: &'static [Consts],
}

impl ShaderSpec {
    /// The constants of the module `consts`.
    fn generated(&self) -> Vec<GeneratedConst> {
        let mut out = Vec::new();
        for group in self.consts {
            group.generate(&mut out);
        }
        out
    }
}

/// `WG` from a plan constant.
const fn wg(value: usize, source: &'static str) -> Consts {
    Consts::Size("WG", value, source)
}

const LOCAL_WG: Consts = wg(LOCAL_MEAN_WG, "plan::LOCAL_MEAN_WG");
const CHUNK: Consts = Consts::Size("C", CHUNK_KEYS, "plan::CHUNK_KEYS");
const ATTEND: Consts = wg(ATTEND_WG, "plan::softmax::ATTEND_WG");
/// The constants of `feature_mean.wgsl`'s three entries.
const FEATURE_CONSTS: &[Consts] = &[
    Consts::Size("SUM_WG", SUM_WG, "plan::softmax::SUM_WG"),
    Consts::Size("FINISH_WG", FINISH_WG, "plan::softmax::FINISH_WG"),
];
const MERGE: &str = "merge_splits";

/// Every shader entry point (merge entries with their shader).
pub(crate) const SHADERS: [ShaderSpec; 16] = [
    ShaderSpec {
        id: ShaderId::LocalMean,
        file: wgsl!("local_mean.wgsl"),
        entry: "accumulate",
        merge: Some((ShaderId::LocalMeanMerge, MERGE)),
        placeholders: &[
            ("D", 1),
            ("QT", 0),
            ("QA", 1),
            ("STAGE", 256),
            ("C", 16),
            ("MASKED", 0),
            ("R", 4),
            ("FORM", 0),
            ("EXCL", 0),
            ("SPANS", 0),
        ],
        consts: &[
            LOCAL_WG,
            Consts::Log2e,
            Consts::TileFlags,
            Consts::Missing,
            Consts::Forms,
        ],
    },
    ShaderSpec {
        id: ShaderId::LocalMeanIp,
        file: wgsl!("local_mean_ip.wgsl"),
        entry: "accumulate",
        merge: Some((ShaderId::LocalMeanIpMerge, MERGE)),
        placeholders: &[("D", 32), ("QT", 0), ("QA", 1), ("QRES", 1)],
        consts: &[
            LOCAL_WG,
            CHUNK,
            Consts::Log2e,
            Consts::MStart,
            Consts::TileFlags,
            Consts::ExcludeSelf,
            Consts::Size("TQ", IP_TILE_ROWS, "plan::local_mean::IP_TILE_ROWS"),
            Consts::Size("TK", IP_STEP_KEYS, "plan::local_mean::IP_STEP_KEYS"),
            Consts::Size("KC", IP_CHUNK_DIMS, "plan::local_mean::IP_CHUNK_DIMS"),
        ],
    },
    ShaderSpec {
        id: ShaderId::LocalMoments,
        file: wgsl!("local_moments.wgsl"),
        entry: "accumulate",
        merge: Some((ShaderId::LocalMomentsMerge, MERGE)),
        placeholders: &[
            ("D", 1),
            ("QT", 2),
            ("QA", 2),
            ("QY", 0),
            ("YW", 0),
            ("YWA", 1),
            ("STAGE", 256),
            ("SECOND", 0),
        ],
        consts: &[LOCAL_WG, Consts::TileFlags],
    },
    ShaderSpec {
        id: ShaderId::KernelMatrix,
        file: wgsl!("kernel_matrix.wgsl"),
        entry: "entries",
        merge: None,
        placeholders: &[("D", 1)],
        consts: &[wg(MATRIX_WG, "plan::MATRIX_WG"), Consts::MatrixModes],
    },
    ShaderSpec {
        id: ShaderId::Fill,
        file: wgsl!("fill.wgsl"),
        entry: "fill",
        merge: None,
        placeholders: &[],
        consts: &[wg(FILL_WG, "plan::FILL_WG")],
    },
    ShaderSpec {
        id: ShaderId::Knn,
        file: wgsl!("knn.wgsl"),
        entry: "nearest",
        merge: Some((ShaderId::KnnMerge, MERGE)),
        placeholders: &[("D", 1), ("K", 1), ("STAGE", 256), ("KB", 4)],
        consts: &[LOCAL_WG, Consts::TileFlags],
    },
    ShaderSpec {
        id: ShaderId::KnnIp,
        file: wgsl!("knn_ip.wgsl"),
        entry: "nearest_ip",
        merge: Some((ShaderId::KnnIpMerge, MERGE)),
        placeholders: &[("D", 32), ("K", 1), ("QRES", 1)],
        consts: &[
            LOCAL_WG,
            Consts::TileFlags,
            Consts::Size("TQ", IP_TILE_ROWS, "plan::local_mean::IP_TILE_ROWS"),
            Consts::Size("TK", IP_STEP_KEYS, "plan::local_mean::IP_STEP_KEYS"),
            Consts::Size("KC", IP_CHUNK_DIMS, "plan::local_mean::IP_CHUNK_DIMS"),
        ],
    },
    ShaderSpec {
        id: ShaderId::MeanShift,
        file: wgsl!("mean_shift.wgsl"),
        entry: "step",
        merge: None,
        placeholders: &[("D", 1)],
        consts: &[LOCAL_WG, Consts::MeanShift],
    },
    ShaderSpec {
        id: ShaderId::Softmax,
        file: wgsl!("softmax.wgsl"),
        entry: "attend",
        merge: Some((ShaderId::SoftmaxMerge, MERGE)),
        placeholders: &[("D4", 1), ("QA4", 1), ("BK", 32)],
        consts: &[
            ATTEND,
            CHUNK,
            Consts::Log2e,
            Consts::MStart,
            Consts::NegBig,
            Consts::TileFlags,
            Consts::Causal,
        ],
    },
    ShaderSpec {
        id: ShaderId::SoftmaxTiled,
        file: wgsl!("softmax_tiled.wgsl"),
        entry: "attend_tiled",
        merge: Some((ShaderId::SoftmaxTiledMerge, MERGE)),
        placeholders: &[("D4", 1), ("QA4", 1), ("BK", 32), ("RI", 4)],
        consts: &[
            ATTEND,
            Consts::Log2e,
            Consts::MStart,
            Consts::NegBig,
            Consts::TileFlags,
            Consts::Causal,
        ],
    },
    ShaderSpec {
        id: ShaderId::SoftmaxMatrix,
        file: wgsl!("softmax_matrix.wgsl"),
        entry: "entries",
        merge: None,
        placeholders: &[],
        consts: &[
            wg(SOFTMAX_MATRIX_WG, "plan::softmax::MATRIX_WG"),
            Consts::Log2e,
        ],
    },
    ShaderSpec {
        id: ShaderId::LooGrad,
        file: wgsl!("loo_grad.wgsl"),
        entry: "accumulate",
        merge: None,
        placeholders: &[("D", 3), ("Q", 1), ("STAGE", 32)],
        consts: &[LOCAL_WG, CHUNK, Consts::TileFlags, Consts::CosineSlope],
    },
    ShaderSpec {
        id: ShaderId::VariableBandwidth,
        file: wgsl!("variable_bandwidth.wgsl"),
        entry: "accumulate",
        merge: None,
        placeholders: &[("D", 1), ("QT", 0), ("QA", 1), ("STAGE", 256)],
        consts: &[
            wg(VARIABLE_WG, "plan::variable::VARIABLE_WG"),
            Consts::TileFlags,
            Consts::MStart,
        ],
    },
    feature_entry(ShaderId::FeatureSums, "chunk_sums"),
    feature_entry(ShaderId::FeaturePrefix, "prefix"),
    feature_entry(ShaderId::FeatureFinish, "finish"),
];

/// An entry point of `feature_mean.wgsl`: the three share its file,
/// placeholders and constants.
const fn feature_entry(id: ShaderId, entry: &'static str) -> ShaderSpec {
    ShaderSpec {
        id,
        file: wgsl!("feature_mean.wgsl"),
        entry,
        merge: None,
        placeholders: &[("QA", 1)],
        consts: FEATURE_CONSTS,
    }
}

impl ShaderId {
    /// The entry of [`SHADERS`] that declares this shader (a merge
    /// entry's: its accumulate pass's).
    pub(crate) fn spec(self) -> &'static ShaderSpec {
        SHADERS
            .iter()
            .find(|s| s.id == self || s.merge.is_some_and(|(m, _)| m == self))
            .expect("every ShaderId is in SHADERS") // ok: checked by the registry's tests
    }

    /// The shader whose file, placeholders, constants and bindings an
    /// entry point shares (itself but for the merge entries, whose bind
    /// groups are their accumulate pass's).
    pub(crate) fn base(self) -> ShaderId {
        self.spec().id
    }

    /// The merge entry of a shader with key splits.
    pub(crate) fn merge(self) -> Option<ShaderId> {
        let spec = self.spec();
        spec.merge.filter(|_| spec.id == self).map(|(m, _)| m)
    }

    /// File name under `shaders/`.
    pub(crate) fn file(self) -> &'static str {
        self.spec().file.name
    }

    /// Entry point.
    pub(crate) fn entry(self) -> &'static str {
        let spec = self.spec();
        match spec.merge {
            Some((m, entry)) if m == self => entry,
            _ => spec.entry,
        }
    }

    /// The shader's modules, its imports resolved (for `product`, a
    /// product kernel's blocks; `None`: radial).
    fn resolve(self, product: Option<&ProductCode>) -> Result<imports::Resolved, String> {
        let spec = self.spec();
        imports::resolve(spec.file.name, spec.file.text, |name| match name {
            "consts" => Some(Cow::Owned(prelude(&spec.generated()))),
            "profile_consts" => Some(Cow::Owned(prelude(&profile_consts()))),
            "product" => Some(Cow::Owned(ProductCode::wgsl(product))),
            _ => library(name).map(|f| Cow::Borrowed(f.text)),
        })
    }

    /// Whether the shader imports `profiles.wgsl` (and so has its
    /// `PROFILE` override).
    #[cfg(test)]
    pub(crate) fn uses_profiles(self) -> bool {
        let resolved = self.resolve(None).expect("registered shaders resolve");
        resolved.modules.iter().any(|m| m == "profiles")
    }

    /// Every constant generated into the shader: its `consts`, and
    /// `profile_consts` when it imports the profiles.
    #[cfg(test)]
    pub(crate) fn consts(self) -> Vec<GeneratedConst> {
        let resolved = self.resolve(None).expect("registered shaders resolve");
        let has = |m: &str| resolved.modules.iter().any(|n| n == m);
        let mut out = Vec::new();
        if has("profile_consts") {
            out.extend(profile_consts());
        }
        if has("consts") {
            out.extend(self.spec().generated());
        }
        out
    }

    /// The full WGSL source: the shader file with its imports resolved
    /// and the placeholders replaced.
    #[cfg(test)]
    pub(crate) fn render(self, values: &[(&str, u32)]) -> Result<String, String> {
        self.render_for(values, None)
    }

    /// [`render`](Self::render) for a product kernel's blocks (`None`:
    /// radial), which the shaders importing `product` evaluate by
    /// generated functions.
    pub(crate) fn render_for(
        self,
        values: &[(&str, u32)],
        product: Option<&ProductCode>,
    ) -> Result<String, String> {
        let spec = self.spec();
        let mut src = self.resolve(product)?.source;
        for &(name, _) in spec.placeholders {
            let v = values
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("{}: no value for {{{{{name}}}}}", spec.file.name))?;
            src = src.replace(&format!("{{{{{name}}}}}", name = name), &v.1.to_string());
        }
        if let Some(pos) = src.find("{{") {
            let end = src[pos..].find("}}").map_or(src.len(), |e| pos + e + 2);
            return Err(format!(
                "{}: unknown placeholder {}",
                spec.file.name,
                &src[pos..end]
            ));
        }
        Ok(src)
    }

    /// The source rendered with the placeholder values of its entry in
    /// [`SHADERS`].
    fn render_example(self) -> Result<String, String> {
        self.render_for(self.spec().placeholders, None)
    }
}

/// The shared file imported as `name`.
fn library(name: &str) -> Option<WgslFile> {
    LIBRARY.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::samples;

//! The registry's tests: every shader renders and validates, with
//! sample placeholder values the pipeline tests share.

use super::*;
use crate::gpu::plan::local_mean::SPAN_WORKGROUP_BYTES;
use crate::kernel::Kernel;

/// Values exercising each placeholder at small and large sizes: first
/// those of the shader's entry in the table, then others.
#[cfg(test)]
pub(crate) fn samples(id: ShaderId) -> Vec<Vec<(&'static str, u32)>> {
    let others = match id {
        ShaderId::LocalMean | ShaderId::LocalMeanMerge => vec![
            vec![
                ("D", 3),
                ("QT", 3),
                ("QA", 3),
                ("STAGE", 256),
                ("C", 16),
                ("MASKED", 1),
                ("R", 2),
                ("FORM", 1),
                ("EXCL", 1),
                ("SPANS", 0),
            ],
            vec![
                ("D", 64),
                ("QT", 8),
                ("QA", 8),
                ("STAGE", 112),
                ("C", 16),
                ("MASKED", 0),
                ("R", 1),
                ("FORM", 2),
                ("EXCL", 0),
                ("SPANS", 1),
            ],
            vec![
                ("D", 2000),
                ("QT", 1),
                ("QA", 1),
                ("STAGE", 4),
                ("C", 4),
                ("MASKED", 0),
                ("R", 1),
                ("FORM", 3),
                ("EXCL", 1),
                ("SPANS", 0),
            ],
        ],
        ShaderId::LocalMeanIp | ShaderId::LocalMeanIpMerge => vec![
            vec![("D", 33), ("QT", 3), ("QA", 3), ("QRES", 1)],
            vec![("D", 784), ("QT", 32), ("QA", 32), ("QRES", 0)],
            vec![("D", 200), ("QT", 5), ("QA", 5), ("QRES", 0)],
        ],
        ShaderId::LocalMoments | ShaderId::LocalMomentsMerge => vec![
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
        ShaderId::KernelMatrix => vec![vec![("D", 7)], vec![("D", 300)]],
        ShaderId::Fill | ShaderId::SoftmaxMatrix => vec![],
        ShaderId::Knn | ShaderId::KnnMerge => vec![
            vec![("D", 16), ("K", 16), ("STAGE", 256), ("KB", 4)],
            vec![("D", 7), ("K", 128), ("STAGE", 64), ("KB", 4)],
            vec![("D", 3000), ("K", 5), ("STAGE", 2), ("KB", 1)],
        ],
        ShaderId::KnnIp | ShaderId::KnnIpMerge => vec![
            vec![("D", 33), ("K", 16), ("QRES", 1)],
            vec![("D", 128), ("K", 128), ("QRES", 1)],
            vec![("D", 784), ("K", 5), ("QRES", 0)],
        ],
        ShaderId::MeanShift => vec![vec![("D", 2)], vec![("D", 64)]],
        ShaderId::VariableBandwidth => vec![
            vec![("D", 2), ("QT", 2), ("QA", 2), ("STAGE", 256)],
            vec![("D", 784), ("QT", 8), ("QA", 8), ("STAGE", 3)],
        ],
        ShaderId::Softmax | ShaderId::SoftmaxMerge => vec![
            vec![("D4", 1), ("QA4", 1), ("BK", 7)],
            vec![("D4", 16), ("QA4", 16), ("BK", 32)],
            vec![("D4", 20), ("QA4", 5), ("BK", 1)],
        ],
        ShaderId::SoftmaxTiled | ShaderId::SoftmaxTiledMerge => vec![
            vec![("D4", 3), ("QA4", 5), ("BK", 16), ("RI", 2)],
            vec![("D4", 16), ("QA4", 16), ("BK", 16), ("RI", 4)],
            vec![("D4", 16), ("QA4", 16), ("BK", 32), ("RI", 4)],
            vec![("D4", 16), ("QA4", 16), ("BK", 64), ("RI", 1)],
            vec![("D4", 20), ("QA4", 3), ("BK", 32), ("RI", 1)],
        ],
        ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
            vec![vec![("QA", 16)]]
        }
        ShaderId::LooGrad => vec![
            vec![("D", 10), ("Q", 10), ("STAGE", 32)],
            vec![("D", 1), ("Q", 32), ("STAGE", 32)],
        ],
    };
    let mut all = vec![id.spec().placeholders.to_vec()];
    all.extend(others);
    all
}

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
        if let Some(&(name, lib)) = LIBRARY.iter().find(|(_, f)| f.name == file) {
            assert_eq!(
                format!("{name}.wgsl"),
                *file,
                "a module is named by its file"
            );
            if name == "profiles" {
                let resolved = imports::resolve(name, lib.text, |m| {
                    (m == "profile_consts").then(|| prelude(&profile_consts()).into())
                })
                .expect("profiles.wgsl imports only its constants");
                validate(file, &resolved.source);
            }
            // row_state.wgsl, softmax_state.wgsl, metric.wgsl: parts of the
            // local-mean family, the two attention shaders and the
            // difference shaders (they use the importing shader's sizes and
            // constants), checked with them.
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

/// Bytes of the workgroup variables `id` declares with placeholder `values`.
fn workgroup_bytes(id: ShaderId, values: &[(&'static str, u32)]) -> usize {
    let src = id.render(values).expect("placeholders");
    let module = naga::front::wgsl::parse_str(&src).expect("parses");
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| module.types[v.ty].inner.size(module.to_ctx()) as usize)
        .sum()
}

/// The planner's counts of workgroup memory (which decide how many keys
/// `local_mean.wgsl` stages, and whether a device can run
/// `local_mean_ip.wgsl` and `softmax_tiled.wgsl`) are the shaders'.
#[test]
fn workgroup_memory_is_what_the_planner_counts() {
    for values in samples(ShaderId::LocalMean) {
        let v = |name| values.iter().find(|(n, _)| *n == name).unwrap().1 as usize;
        let (d4, qa4) = (v("D").div_ceil(4), v("QA").div_ceil(4));
        assert_eq!(
            workgroup_bytes(ShaderId::LocalMean, &values),
            v("STAGE") * 16 * (d4 + qa4) + SPAN_WORKGROUP_BYTES,
            "{values:?}"
        );
    }
    // kNN: the planner's staged keys, vec4 groups of each.
    for values in samples(ShaderId::Knn) {
        let v = |name| values.iter().find(|(n, _)| *n == name).unwrap().1 as usize;
        assert_eq!(
            workgroup_bytes(ShaderId::Knn, &values),
            v("STAGE") * 16 * v("D").div_ceil(4),
            "{values:?}"
        );
    }
    for (d, cols, resident) in [
        (40u32, 0u32, true),
        (40, 3, false),
        (128, 32, true),
        (784, 5, false),
    ] {
        let values = [
            ("D", d),
            ("QT", cols),
            ("QA", cols.max(1)),
            ("QRES", u32::from(resident)),
        ];
        assert_eq!(
            workgroup_bytes(ShaderId::LocalMeanIp, &values),
            crate::gpu::plan::local_mean::ip_workgroup_bytes(d as usize, cols as usize, resident),
            "{values:?}"
        );
    }
    for (d, resident) in [(32u32, true), (33, false), (128, true), (784, false)] {
        let values = [("D", d), ("K", 16), ("QRES", u32::from(resident))];
        assert_eq!(
            workgroup_bytes(ShaderId::KnnIp, &values),
            crate::gpu::plan::knn::knn_ip_workgroup_bytes(d as usize, resident),
            "{values:?}"
        );
    }
    for (d4, qa4, bk, ri) in [
        (1usize, 1usize, 32usize, 4usize),
        (3, 5, 16, 2),
        (16, 16, 16, 4),
        (16, 16, 32, 4),
        (16, 16, 64, 1),
        (9, 2, 32, 1),
    ] {
        let values = [
            ("D4", d4 as u32),
            ("QA4", qa4 as u32),
            ("BK", bk as u32),
            ("RI", ri as u32),
        ];
        assert_eq!(
            workgroup_bytes(ShaderId::SoftmaxTiled, &values),
            crate::gpu::plan::softmax::tiled_workgroup_bytes(d4, qa4, bk, ri),
            "{values:?}"
        );
    }
}

/// The profile-using shaders validate with a product kernel's generated
/// block functions too (eight blocks, every profile).
#[test]
fn shaders_validate_with_product_blocks() {
    let blocks: Vec<(usize, Profile, f32)> = Profile::ALL
        .into_iter()
        .cycle()
        .take(crate::kernel::MAX_BLOCKS)
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
    let k = |h: f32, p: Profile| Kernel::product([(2, p, h), (1, Profile::Gaussian, h)]).unwrap();
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

/// The table names each shader once (a merge entry with its shader),
/// each library module is imported by some shader, and every shader
/// renders and validates with its placeholder values in the table (those
/// its layout is reflected with).
#[test]
fn the_table_is_complete() {
    for id in ShaderId::ALL {
        let declaring = SHADERS
            .iter()
            .filter(|s| s.id == id || s.merge.is_some_and(|(m, _)| m == id))
            .count();
        assert_eq!(declaring, 1, "{id:?} is declared {declaring} times");
        assert_eq!(id.merge().map(ShaderId::base), id.merge().map(|_| id));
        let src = id.render_example().expect("renders");
        validate(&format!("{} (table values)", id.file()), &src);
        let names: Vec<_> = id.spec().placeholders.iter().map(|p| p.0).collect();
        for values in samples(id) {
            let mut given: Vec<_> = values.iter().map(|v| v.0).collect();
            given.sort_unstable();
            let mut want = names.clone();
            want.sort_unstable();
            assert_eq!(
                given, want,
                "{id:?}: samples and table name the same placeholders"
            );
        }
    }
    assert_eq!(
        SHADERS.len() + SHADERS.iter().filter(|s| s.merge.is_some()).count(),
        ShaderId::ALL.len()
    );
    for (name, _) in LIBRARY {
        assert!(
            ShaderId::ALL.into_iter().any(|id| id
                .resolve(None)
                .expect("resolves")
                .modules
                .iter()
                .any(|m| m == name)),
            "no shader imports {name}"
        );
    }
}

/// What each shader imports, in the order the resolver emits it: the
/// shared files and the generated modules.
#[test]
fn shaders_name_their_imports() {
    let modules = |id: ShaderId| id.resolve(None).expect("resolves").modules;
    assert_eq!(
        modules(ShaderId::LocalMean),
        [
            "consts",
            "profile_consts",
            "profiles",
            "product",
            "row_state",
            "metric",
            "local_mean.wgsl"
        ]
    );
    assert_eq!(
        modules(ShaderId::SoftmaxTiledMerge),
        ["consts", "softmax_state", "softmax_tiled.wgsl"]
    );
    assert_eq!(modules(ShaderId::Fill), ["consts", "fill.wgsl"]);
    // Generated source has no directive left; nothing is prepended that
    // a file does not import.
    for id in ShaderId::ALL {
        let src = id.render_example().expect("renders");
        assert!(!src.contains("#import"), "{id:?}");
        assert_eq!(
            src.contains("override PROFILE"),
            id.uses_profiles(),
            "{id:?}"
        );
    }
}

#[test]
fn missing_placeholder_values_are_reported() {
    assert!(ShaderId::LocalMean.render(&[("D", 3)]).is_err());
}

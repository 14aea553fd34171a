//! Every hot loop held to its budget, and docs/gpu-cost.md to the counts.

use super::{hot_loop, trace};

/// A hot loop's budget: the shader, its template, the (query, key)
/// pairs one run of its hot loop serves, and the most issue slots per
/// pair it may take (docs/gpu-cost.md, "Budgets").
struct Budget {
    name: &'static str,
    shader: crate::gpu::shaders::ShaderId,
    template: Vec<(&'static str, u32)>,
    pairs: u64,
    slots_per_pair: f64,
    /// The pipeline overrides it is counted with (the profile).
    profile: &'static [(&'static str, f64)],
}

/// Gaussian profile (the benchmarks').
const GAUSSIAN: &[(&str, f64)] = &[("PROFILE", 0.0)];
/// Epanechnikov profile: compact, the kernels a key set's cell index serves.
const EPANECHNIKOV: &[(&str, f64)] = &[("PROFILE", 1.0)];

fn budgets() -> Vec<Budget> {
    use crate::gpu::plan::LOCAL_MEAN_WG;
    use crate::gpu::plan::local_mean::{
        IP_STEP_KEYS, IP_TILE_ROWS, LOCAL_MEAN_CHUNK, rows_per_thread,
    };
    use crate::gpu::shaders::ShaderId;
    // One run of the local mean's hot loop: a chunk of keys against
    // the invocation's rows.
    let pairs = (rows_per_thread(3) * LOCAL_MEAN_CHUNK) as u64;
    // The gaussian local mean at d = 3 with `qt` value columns, weight
    // form `form`, leave-one-out `excl`.
    let lm = |name, qt: u32, form: u32, (excl, spans): (u32, u32), budget| Budget {
        name,
        shader: ShaderId::LocalMean,
        template: vec![
            ("D", 3),
            ("QT", qt),
            ("QA", qt.max(1)),
            ("STAGE", 256),
            ("C", LOCAL_MEAN_CHUNK as u32),
            ("MASKED", 0),
            ("R", rows_per_thread(3) as u32),
            ("FORM", form),
            ("EXCL", excl),
            ("SPANS", spans),
        ],
        pairs,
        slots_per_pair: budget,
        profile: if form == 3 { EPANECHNIKOV } else { GAUSSIAN },
    };
    vec![
        lm("local mean d=3 q=1", 1, 0, (0, 0), 15.0),
        lm("local mean d=3 q=2", 2, 0, (0, 0), 15.0),
        lm("local mean d=3 q=4", 4, 0, (0, 0), 15.0),
        lm("row sums d=3 (KDE)", 0, 0, (0, 0), 15.0),
        lm("leave-one-out d=3 q=1", 1, 0, (1, 0), 13.89),
        lm("row sums d=3, exact nearest key", 0, 1, (0, 0), 11.55),
        // A key set's cell index: each workgroup over its spans; the same
        // hot loop, epanechnikov weights (plain form).
        lm("epanechnikov local mean d=3 q=1", 1, 3, (0, 0), 13.55),
        lm(
            "epanechnikov local mean d=3 q=1 over spans",
            1,
            3,
            (0, 1),
            13.55,
        ),
        Budget {
            name: "kNN d=128 k=16",
            shader: ShaderId::Knn,
            template: vec![("D", 128), ("K", 16), ("STAGE", 64), ("KB", 4)],
            pairs: 4,
            slots_per_pair: 327.75,
            profile: GAUSSIAN,
        },
        Budget {
            name: "kNN inner-product tiles d=128 k=16",
            shader: ShaderId::KnnIp,
            template: vec![("D", 128), ("K", 16), ("QRES", 1)],
            pairs: (IP_STEP_KEYS * IP_TILE_ROWS / LOCAL_MEAN_WG) as u64,
            slots_per_pair: 185.16,
            profile: GAUSSIAN,
        },
        Budget {
            name: "inner-product tiles d=128 q=4",
            shader: ShaderId::LocalMeanIp,
            template: vec![("D", 128), ("QT", 4), ("QA", 4), ("QRES", 1)],
            pairs: (IP_STEP_KEYS * IP_TILE_ROWS / LOCAL_MEAN_WG) as u64,
            slots_per_pair: 222.09,
            profile: GAUSSIAN,
        },
        Budget {
            name: "attention d=64 (RI 4, BK 32)",
            shader: ShaderId::SoftmaxTiled,
            template: vec![("D4", 16), ("QA4", 16), ("BK", 32), ("RI", 4)],
            pairs: 4 * 32 / 4,
            slots_per_pair: 167.84,
            profile: GAUSSIAN,
        },
        // One run of the hot loop: a chunk of keys against the row.
        Budget {
            name: "leave-one-out per feature d=4 q=1",
            shader: ShaderId::LooGrad,
            template: vec![("D", 4), ("Q", 1), ("STAGE", 32)],
            pairs: crate::gpu::plan::CHUNK_KEYS as u64,
            slots_per_pair: 80.25,
            profile: GAUSSIAN,
        },
        Budget {
            name: "local moments d=3 q=1 (local linear)",
            shader: ShaderId::LocalMoments,
            template: vec![
                ("D", 3),
                ("QT", 13),
                ("QA", 13),
                ("QY", 1),
                ("YW", 1),
                ("YWA", 1),
                ("STAGE", 256),
                ("SECOND", 1),
            ],
            pairs: 1,
            slots_per_pair: 94.0,
            profile: GAUSSIAN,
        },
        Budget {
            name: "attention row pass d=64 (BK 32)",
            shader: ShaderId::Softmax,
            template: vec![("D4", 16), ("QA4", 16), ("BK", 32)],
            pairs: crate::gpu::plan::CHUNK_KEYS as u64,
            slots_per_pair: 219.0,
            profile: GAUSSIAN,
        },
        Budget {
            name: "variable bandwidths d=3 q=1",
            shader: ShaderId::VariableBandwidth,
            template: vec![("D", 3), ("QT", 1), ("QA", 1), ("STAGE", 256)],
            pairs: 1,
            slots_per_pair: 56.0,
            profile: GAUSSIAN,
        },
        Budget {
            name: "attention decoding d=64 (RI 1, BK 64)",
            shader: ShaderId::SoftmaxTiled,
            template: vec![("D4", 16), ("QA4", 16), ("BK", 64), ("RI", 1)],
            pairs: 64 / 4,
            slots_per_pair: 229.94,
            profile: GAUSSIAN,
        },
    ]
}

/// Every hot loop within its budget: a change that adds work per pair
/// fails here without a GPU. docs/gpu-cost.md shows each row as this
/// prints it (checked: a count that moves must be written there).
#[test]
fn hot_loops_within_their_budgets() {
    let doc = include_str!("../../../../docs/gpu-cost.md");
    let mut over = Vec::new();
    for b in budgets() {
        let src = b.shader.render_for(&b.template, None).unwrap();
        let c = hot_loop(&src, b.shader.entry(), b.profile)
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
        let per = |n: u64| n as f64 / b.pairs as f64;
        let slots = per(c.slots());
        let row = format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            b.name,
            slots,
            per(c.fma),
            per(c.sfu),
            per(c.wg_load),
            per(c.global_load),
            per(c.branch),
            b.slots_per_pair
        );
        println!("{row}");
        if !doc.lines().any(|l| l.trim() == row) {
            over.push(format!("docs/gpu-cost.md lacks the row {row}"));
        }
        // Budgets are counts to two decimals.
        if slots > b.slots_per_pair + 0.005 {
            // Where the slots go, line by line of the rendered source.
            for (line, n, text) in trace(&src, b.shader.entry(), b.profile).unwrap() {
                println!("  {line:5} {:8.2}  {text}", per(n));
            }
            over.push(format!(
                "{}: {slots:.2} slots per pair > {}",
                b.name, b.slots_per_pair
            ));
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}

//! Shared test helpers: seeded data, plain f64 references, comparisons,
//! and the GPU engine (which must exist under `CI=true`).
#![allow(dead_code)]

pub mod attention;

use std::sync::OnceLock;

use locus::{Device, Engine, EngineOptions, Error, Kernel, TileLimits};
use ndarray::Array2;

/// Written into GPU outputs before each op: an unwritten entry fails.
pub const SENTINEL: f32 = -7.5e33;

/// SplitMix64: small, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// `rows × cols` uniform in [lo, hi).
    pub fn matrix(&mut self, rows: usize, cols: usize, lo: f32, hi: f32) -> Array2<f32> {
        Array2::from_shape_fn((rows, cols), |_| lo + (hi - lo) * self.uniform())
    }
}

fn sq_dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum()
}

/// Far-away rule shared with the engines: `t ≥ 1e37` weighs exactly 0.
const T_FAR: f64 = 1e37;

/// Log-weights of one query against all keys (None = weight 0), plus
/// whether the profile is exponential.
fn log_weights(kernel: &Kernel, q: &[f32], keys: &Array2<f32>) -> Vec<Option<f64>> {
    if kernel.is_product() {
        return keys
            .rows()
            .into_iter()
            .map(|x| {
                let l = product_log_weight(kernel, q, x.as_slice().unwrap());
                (l > f64::NEG_INFINITY).then_some(l)
            })
            .collect();
    }
    let h = f64::from(kernel.bandwidth());
    let p = kernel.profile();
    keys.rows()
        .into_iter()
        .map(|x| {
            let t = sq_dist(q, x.as_slice().unwrap()) / (h * h);
            if t >= T_FAR {
                return None;
            }
            match p.log_eval_sq(t) {
                Some(lw) => Some(lw),
                None => {
                    let w = p.eval_sq(t);
                    (w > 0.0).then(|| w.ln())
                }
            }
        })
        .collect()
}

/// Plain f64 Nadaraya–Watson local mean, in the log domain (NaN rows for
/// empty neighbourhoods) and the number of empty rows.
pub fn ref_local_mean(
    kernel: &Kernel,
    queries: &Array2<f32>,
    keys: &Array2<f32>,
    values: &Array2<f32>,
) -> (Array2<f64>, usize) {
    let (m, q) = (queries.nrows(), values.ncols());
    let mut out = Array2::<f64>::zeros((m, q));
    let mut empty = 0;
    for (i, qi) in queries.rows().into_iter().enumerate() {
        let lw = log_weights(kernel, qi.as_slice().unwrap(), keys);
        let mx = lw
            .iter()
            .flatten()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max);
        if mx == f64::NEG_INFINITY {
            out.row_mut(i).fill(f64::NAN);
            empty += 1;
            continue;
        }
        let mut s = 0.0;
        let mut u = vec![0.0; q];
        for (j, l) in lw.iter().enumerate() {
            if let Some(l) = l {
                let w = (l - mx).exp();
                s += w;
                for c in 0..q {
                    u[c] += w * f64::from(values[[j, c]]);
                }
            }
        }
        for c in 0..q {
            out[[i, c]] = u[c] / s;
        }
    }
    (out, empty)
}

/// `ln K(q, x)` of a product kernel in f64, block by block from the
/// profiles' plain definitions (−inf: weight 0).
pub fn product_log_weight(kernel: &Kernel, q: &[f32], x: &[f32]) -> f64 {
    let mut k0 = 0;
    let mut lw = 0.0;
    for b in kernel.blocks().expect("a product kernel") {
        let h = f64::from(b.bandwidth);
        let t = sq_dist(&q[k0..k0 + b.dims], &x[k0..k0 + b.dims]) / (h * h);
        k0 += b.dims;
        lw += b
            .profile
            .log_eval_sq(t)
            .unwrap_or_else(|| b.profile.eval_sq(t).ln());
    }
    lw
}

/// Plain f64 kernel matrix.
pub fn ref_kernel_matrix(
    kernel: &Kernel,
    queries: &Array2<f32>,
    keys: &Array2<f32>,
) -> Array2<f64> {
    if kernel.is_product() {
        return Array2::from_shape_fn((queries.nrows(), keys.nrows()), |(i, j)| {
            product_log_weight(
                kernel,
                queries.row(i).as_slice().unwrap(),
                keys.row(j).as_slice().unwrap(),
            )
            .exp()
        });
    }
    let h = f64::from(kernel.bandwidth());
    Array2::from_shape_fn((queries.nrows(), keys.nrows()), |(i, j)| {
        let t = sq_dist(
            queries.row(i).as_slice().unwrap(),
            keys.row(j).as_slice().unwrap(),
        ) / (h * h);
        if t >= T_FAR {
            0.0
        } else {
            kernel.profile().eval_sq(t)
        }
    })
}

/// Plain f64 `D⁻¹K` in the log domain, and its empty-row count.
pub fn ref_normalized(
    kernel: &Kernel,
    queries: &Array2<f32>,
    keys: &Array2<f32>,
) -> (Array2<f64>, usize) {
    let mut out = Array2::<f64>::zeros((queries.nrows(), keys.nrows()));
    let mut empty = 0;
    for (i, qi) in queries.rows().into_iter().enumerate() {
        let lw = log_weights(kernel, qi.as_slice().unwrap(), keys);
        let mx = lw
            .iter()
            .flatten()
            .cloned()
            .fold(f64::NEG_INFINITY, f64::max);
        if mx == f64::NEG_INFINITY {
            out.row_mut(i).fill(f64::NAN);
            empty += 1;
            continue;
        }
        let w: Vec<f64> = lw
            .iter()
            .map(|l| l.map_or(0.0, |l| (l - mx).exp()))
            .collect();
        let s: f64 = w.iter().sum();
        for (j, wj) in w.iter().enumerate() {
            out[[i, j]] = wj / s;
        }
    }
    (out, empty)
}

/// Plain f64 Laplacians: `D − K` or `I − D⁻¹K`.
pub fn ref_laplacian(kernel: &Kernel, points: &Array2<f32>, random_walk: bool) -> Array2<f64> {
    let n = points.nrows();
    if random_walk {
        let (k, _) = ref_normalized(kernel, points, points);
        Array2::from_shape_fn((n, n), |(i, j)| f64::from(u8::from(i == j)) - k[[i, j]])
    } else {
        let k = ref_kernel_matrix(kernel, points, points);
        let d: Vec<f64> = k.rows().into_iter().map(|r| r.sum()).collect();
        Array2::from_shape_fn(
            (n, n),
            |(i, j)| if i == j { d[i] - k[[i, j]] } else { -k[[i, j]] },
        )
    }
}

/// Asserts `|got − want| ≤ rtol·|want| + atol` entrywise, with NaN allowed
/// exactly where `want` is NaN.
#[track_caller]
pub fn assert_close(what: &str, got: &Array2<f32>, want: &Array2<f64>, rtol: f64, atol: f64) {
    assert_eq!(got.dim(), want.dim(), "{what}: shape");
    let mut worst = (0.0f64, 0usize, 0usize);
    for ((i, j), &w) in want.indexed_iter() {
        let g = f64::from(got[[i, j]]);
        if w.is_nan() {
            assert!(
                g.is_nan(),
                "{what}: [{i},{j}] = {g}, expected NaN (empty row)"
            );
            continue;
        }
        assert!(
            g != f64::from(SENTINEL),
            "{what}: [{i},{j}] was never written"
        );
        let err = (g - w).abs();
        let bound = rtol * w.abs() + atol;
        assert!(
            err <= bound,
            "{what}: [{i},{j}] = {g}, expected {w} (error {err:e} > {bound:e})"
        );
        if err > worst.0 {
            worst = (err, i, j);
        }
    }
}

/// An engine on any GPU adapter (lavapipe included) with output sentinels
/// and the given tile caps. Without an adapter: panics under `CI=true`,
/// otherwise prints that the test was skipped and returns `None`.
pub fn gpu_engine(limits: TileLimits) -> Option<Engine> {
    let mut o = EngineOptions::new(Device::Gpu);
    o.tile_limits = limits;
    o.output_sentinel = Some(SENTINEL);
    match Engine::with_options(o) {
        Ok(e) => Some(e),
        Err(Error::NoAdapter { .. }) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: no GPU adapter (install mesa-vulkan-drivers); GPU checks not run");
            None
        }
        Err(e) => panic!("GPU engine required (CI=true) but unavailable: {e}"),
    }
}

/// The shared GPU engine with device-sized tiles.
pub fn gpu() -> Option<&'static Engine> {
    static E: OnceLock<Option<Engine>> = OnceLock::new();
    E.get_or_init(|| gpu_engine(TileLimits::default())).as_ref()
}

/// A CPU engine, a GPU engine with device-sized tiles and one with forced
/// tiny tiles (several query tiles, key tiles and column passes), by name;
/// the GPU ones only where there is an adapter (as [`gpu_engine`]).
pub fn engines_and_tiny_tiles(query_rows: usize, key_rows: usize) -> Vec<(&'static str, Engine)> {
    let mut v = vec![("cpu", Engine::cpu())];
    if let Some(g) = gpu_engine(TileLimits::default()) {
        v.push(("gpu", g));
    }
    let tiny = TileLimits {
        query_rows: Some(query_rows),
        key_rows: Some(key_rows),
        value_cols: Some(3),
        buffer_bytes: None,
        // Keys split across workgroups and swept in windows too (merged
        // like key tiles), as on hardware adapters.
        key_splits: Some(3),
        dispatch_keys: Some(key_rows.div_ceil(2)),
    };
    if let Some(g) = gpu_engine(tiny) {
        v.push(("gpu tiny tiles", g));
    }
    v
}

/// The CPU engine.
pub fn cpu() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(Engine::cpu)
}

//! The inner-product kNN (`knn_ip.wgsl`) against the differences
//! (`knn.wgsl`, lists bit for bit) and an `f64` reference, on whatever
//! adapter there is (lavapipe in CI), with tiny tiles, windows and splits
//! forced.

use ndarray::Array2;

use super::knn_on_tiles;
use crate::gpu::context::GpuContext;
use crate::gpu::keys::{DeviceKeys, OnTiles, upload_key_tiles};
use crate::gpu::plan::{KnnPlan, Shape, TileLimits, plan_knn};
use crate::matrix::Matrix;
use crate::types::Neighbours;

fn context() -> Option<GpuContext> {
    crate::gpu::adapter::test_context(None)
}

/// Uniform values in `[lo, hi)` from a seeded generator.
fn data(len: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// The `k` nearest of `x` (n × d) to each row of `q` by `plan` (its key
/// tiles uploaded for the call).
fn run(ctx: &GpuContext, q: &[f32], x: &[f32], d: usize, plan: &KnnPlan) -> Neighbours {
    let (m, n) = (q.len() / d, x.len() / d);
    let qv = ndarray::ArrayView2::from_shape((m, d), q).unwrap();
    let xv = ndarray::ArrayView2::from_shape((n, d), x).unwrap();
    let (queries, keys) = (
        Matrix::check("test", "q", qv).unwrap(),
        Matrix::check("test", "x", xv).unwrap(),
    );
    let scope = ctx.scope("knn", format!("M={m} N={n} d={d}")).unwrap();
    let tiles = upload_key_tiles(ctx, "knn", &keys, None, plan.key_tile).unwrap();
    let call = OnTiles {
        ctx,
        scope: &scope,
        queries: &queries,
        keys: DeviceKeys {
            tiles: &tiles,
            d,
            q: 0,
        },
    };
    let out = knn_on_tiles(&call, (n, &crate::kernel::Metric::Euclidean), plan).unwrap();
    scope.finish(ctx).unwrap();
    out
}

/// Every list of `got` holds keys no farther (in `f64`) than the `k`-th
/// nearest, in ascending order, at distances close to the `f64` ones.
fn check_reference(got: &Neighbours, q: &[f32], x: &[f32], d: usize, what: &str) {
    let k = got.indices.ncols();
    for (i, qi) in q.chunks_exact(d).enumerate() {
        let dist = |j: usize| {
            x[j * d..(j + 1) * d]
                .iter()
                .zip(qi)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum::<f64>()
                .sqrt()
        };
        let mut all: Vec<f64> = (0..x.len() / d).map(dist).collect();
        all.sort_by(f64::total_cmp);
        let kth = all[k - 1];
        for c in 0..k {
            let j = got.indices[[i, c]] as usize;
            let (g, want) = (f64::from(got.distances[[i, c]]), dist(j));
            let tol = 1e-5 * (1.0 + want);
            assert!((g - want).abs() <= tol, "{what} row {i}: {g} vs {want}");
            assert!(want <= kth + tol, "{what} row {i}: key {j} beyond the k-th");
            if c > 0 {
                assert!(got.distances[[i, c - 1]] <= got.distances[[i, c]], "{what}");
            }
        }
    }
}

/// The inner-product path's lists equal the differences' bit for bit and
/// the reference's, under `caps` (set on the context).
fn same_lists(ctx: &mut GpuContext, caps: TileLimits, q: &[f32], x: &[f32], d: usize, k: usize) {
    ctx.caps = caps;
    let (m, n) = (q.len() / d, x.len() / d);
    let what = format!("M={m} N={n} d={d} k={k} {caps:?}");
    let ip = plan_knn(&ctx.limits, &caps, Shape { m, n, d, q: 0 }, (k, false)).unwrap();
    assert!(ip.ip.is_some(), "{what}: d ≥ 32 takes the tiles");
    let direct = KnnPlan { ip: None, ..ip };
    let got = run(ctx, q, x, d, &ip);
    let want = run(ctx, q, x, d, &direct);
    assert_eq!(got.indices, want.indices, "{what}");
    let bits = |a: &Array2<f32>| a.mapv(f32::to_bits);
    assert_eq!(bits(&got.distances), bits(&want.distances), "{what}");
    check_reference(&got, q, x, d, &what);
    // The queries a chunk a step where they would stay.
    if ip.ip == Some(true) {
        let chunked = KnnPlan {
            ip: Some(false),
            ..ip
        };
        let again = run(ctx, q, x, d, &chunked);
        assert_eq!(again, got, "{what}: queries a chunk a step");
    }
}

/// Tiles, windows and splits forced small: key tiles, windows and slices
/// of fewer keys than a 32-key step and than `k`, partial query tiles.
fn tiny() -> TileLimits {
    TileLimits {
        query_rows: Some(50),
        key_rows: Some(70),
        key_splits: Some(3),
        dispatch_keys: Some(37),
        ..TileLimits::default()
    }
}

// Few (d, k) pairs, shared by the tests: each is a pipeline to compile,
// seconds on a software adapter with a cold shader cache.

#[test]
fn inner_product_lists_equal_the_differences() {
    let Some(mut ctx) = context() else { return };
    let (m, n) = (70, 300);
    for (d, k, caps) in [
        (32, 16, TileLimits::default()),
        (32, 16, tiny()),
        (33, 1, tiny()),
        (100, 1, TileLimits::default()),
        (128, 16, tiny()),
    ] {
        // Offset data: the centring keeps the filter tight.
        let q = data(m * d, d as u64, 10.0, 11.0);
        let x = data(n * d, 7 * d as u64, 10.0, 11.0);
        same_lists(&mut ctx, caps, &q, &x, d, k);
    }
}

#[test]
fn inner_product_lists_with_ties_every_key_and_far_rows() {
    let Some(mut ctx) = context() else { return };
    // Eleven distinct keys repeated: ties everywhere, the lower index
    // first; queries on keys (distance 0) and between them.
    for (d, k, caps) in [(128, 16, tiny()), (33, 1, TileLimits::default())] {
        let n = 90;
        let base = data(11 * d, 5, -1.0, 1.0);
        let x: Vec<f32> = (0..n)
            .flat_map(|j| base[(j * 7 % 11) * d..][..d].to_vec())
            .collect();
        let mut q = x[..5 * d].to_vec();
        q.extend(data(4 * d, 6, -1.0, 1.0));
        same_lists(&mut ctx, caps, &q, &x, d, k);
    }
    // Every key (k = N, more than a window's or a slice's keys); a query
    // far from the keys (beyond the filter's norm limit: it measures every
    // key) and a key far from the others.
    let (d, n, k) = (32, 16, 16);
    let mut x = data(n * d, 8, 0.0, 1.0);
    x[11 * d] = 4e17;
    let mut q = data(6 * d, 9, 0.0, 1.0);
    q[2 * d + 1] = -5e17;
    let caps = TileLimits {
        dispatch_keys: Some(7),
        ..tiny()
    };
    same_lists(&mut ctx, caps, &q, &x, d, k);
}

//! The portable and AVX2 group kernels against the plain `f64`
//! definition and each other.

use super::super::keys::KeysSoa;
use super::super::simd::{Avx2Fma, KEY_BLOCK};
#[cfg(target_arch = "x86_64")]
use super::avx2;
use super::*;
use crate::kernel::{Kernel, Profile};
use crate::matrix::padded_stride;

fn data(n: usize, cols: usize, seed: u32) -> Vec<f32> {
    (0..n * cols)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                / (1 << 24) as f32
        })
        .collect()
}

fn soa(rows: &[f32], n: usize, cols: usize) -> Vec<f32> {
    let ld = padded_stride(n);
    let mut t = vec![0.0; ld * cols];
    for i in 0..n {
        for k in 0..cols {
            t[k * ld + i] = rows[i * cols + k];
        }
    }
    t
}

/// Keys and values transposed by `soa` (`n` keys, `q` value columns), as
/// the group kernels take them, without panels.
fn keys_of<'a>(xt: &'a [f32], yt: &'a [f32], n: usize, q: usize) -> KeysSoa<'a> {
    KeysSoa {
        xt,
        yt,
        n,
        ld: padded_stride(n),
        q,
        panels: None,
        rows: None,
    }
}

/// Plain f64 local mean of one query (None: empty neighbourhood).
fn naive(k: &Kernel, q: &[f32], x: &[f32], y: &[f32], d: usize, qc: usize) -> Option<Vec<f64>> {
    let h2 = f64::from(k.bandwidth()).powi(2);
    let lw: Vec<Option<f64>> = x
        .chunks(d)
        .map(|xj| {
            let t = xj
                .iter()
                .zip(q)
                .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
                .sum::<f64>()
                / h2;
            k.profile().log_eval_sq(t).or_else(|| {
                let w = k.profile().eval_sq(t);
                (w > 0.0).then(|| w.ln())
            })
        })
        .collect();
    let mx = lw
        .iter()
        .flatten()
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max);
    if mx == f64::NEG_INFINITY {
        return None;
    }
    let mut s = 0.0;
    let mut u = vec![0.0; qc];
    for (j, l) in lw.iter().enumerate() {
        if let Some(l) = l {
            let w = (l - mx).exp();
            s += w;
            for c in 0..qc {
                u[c] += w * f64::from(y[j * qc + c]);
            }
        }
    }
    Some(u.into_iter().map(|v| v / s).collect())
}

/// The portable version (which the integration tests do not reach on
/// an AVX2 machine) against the plain f64 definition.
#[test]
fn portable_version_matches_plain_definition() {
    for &(n, d, q) in &[
        (300usize, 1usize, 1usize),
        (517, 3, 3),
        (99, 7, 4),
        (700, 5, 9),
        (333, 8, 1),
        (270, 6, 2),
        (301, 11, 3),
    ] {
        let x = data(n, d, 1);
        let y = data(n, q, 2);
        let queries = data(QUERY_GROUP, d, 3);
        let (xt, yt) = (soa(&x, n, d), soa(&y, n, q));
        let keys = keys_of(&xt, &yt, n, q);
        for p in Profile::ALL {
            let k = Kernel::new(p, 0.3 * (d as f32).sqrt()).unwrap();
            let mut out = vec![0.0f32; QUERY_GROUP * q];
            let st = group_portable(&GroupJob {
                kernel: &k,
                queries: &queries,
                d,
                keys: &keys,
                k0: 0,
                k1: n,
                self_row: None,
                centred: None,
            });
            st.finalize(q, &mut out);
            for r in 0..QUERY_GROUP {
                let want = naive(&k, &queries[r * d..(r + 1) * d], &x, &y, d, q);
                for c in 0..q {
                    let got = f64::from(out[r * q + c]);
                    match &want {
                        None => assert!(got.is_nan()),
                        Some(w) => assert!(
                            (got - w[c]).abs() <= 1e-4 * w[c].abs() + 1e-5,
                            "{p} d={d} q={q}: {got} vs {}",
                            w[c]
                        ),
                    }
                }
            }
        }
    }
}

/// A key at exactly `r = h` weighs 0 under every compact profile in
/// both compiled versions (integer coordinates, so `t = 1` exactly),
/// in full lane groups and in the tail; a key just inside weighs > 0.
#[test]
fn keys_at_exactly_one_bandwidth_weigh_nothing_in_both_versions() {
    // 11 keys (one full lane group and a tail of 3), d = 2: key j at
    // (0, 2) for even j (r = h = 2 from the origin), (0, 1) for odd j.
    let n = 11;
    let x: Vec<f32> = (0..n)
        .flat_map(|j| [0.0, if j % 2 == 0 { 2.0 } else { 1.0 }])
        .collect();
    let y: Vec<f32> = (0..n).map(|j| j as f32).collect();
    let (xt, yt) = (soa(&x, n, 2), soa(&y, n, 1));
    let keys = keys_of(&xt, &yt, n, 1);
    let queries = [0.0f32; 2 * QUERY_GROUP];
    for p in [
        Profile::Epanechnikov,
        Profile::Uniform,
        Profile::Triangular,
        Profile::Biweight,
        Profile::Cosine,
    ] {
        let k = Kernel::new(p, 2.0).unwrap();
        let job = GroupJob {
            kernel: &k,
            queries: &queries,
            d: 2,
            keys: &keys,
            k0: 0,
            k1: n,
            self_row: None,
            centred: None,
        };
        let mut states = vec![group_portable(&job)];
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = Avx2Fma::detect() {
            states.push(avx2::group(isa, &job));
        }
        let w_in = f64::from(k.profile().eval_sq(0.25) as f32);
        for st in &states {
            // Only the 5 odd keys count, each with k(1/2).
            assert!((st.s[0] - 5.0 * w_in).abs() < 1e-6, "{p}: s = {}", st.s[0]);
            let mean = st.u[0] / st.s[0];
            assert!((mean - 5.0).abs() < 1e-6, "{p}: mean {mean}");
        }
    }
}

/// The AVX2 kernel and the portable one compute the same states, for
/// every profile, dimension path (1–8 and any) and value-column path.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_and_portable_versions_agree() {
    let Some(isa) = Avx2Fma::detect() else {
        eprintln!("SKIPPED: no AVX2 on this CPU; only the portable version runs here");
        return;
    };
    for &(n, d, q) in &[
        (300usize, 1usize, 1usize),
        (517, 3, 3),
        (260, 4, 2),
        (99, 7, 4),
        (700, 5, 9),
        (333, 8, 1),
        (270, 6, 2),
        (301, 11, 3),
    ] {
        let x = data(n, d, 1);
        let y = data(n, q, 2);
        let queries = data(QUERY_GROUP, d, 3);
        let (xt, yt) = (soa(&x, n, d), soa(&y, n, q));
        let keys = keys_of(&xt, &yt, n, q);
        // Every profile, radial and (d ≥ 2) as the first block of a product,
        // whose AVX2 build is the portable kernel compiled for AVX2 + FMA.
        let h = 0.3 * (d as f32).sqrt();
        let kernels = Profile::ALL.into_iter().flat_map(|p| {
            let product = (d >= 2)
                .then(|| Kernel::product([(1, p, h), (d - 1, Profile::Gaussian, h)]).unwrap());
            std::iter::once(Kernel::new(p, h).unwrap()).chain(product)
        });
        for k in kernels {
            // Key ranges, and leave-one-out with the queries taken as keys 0..8.
            let own = &x[..QUERY_GROUP * d];
            for (k0, k1, self_row) in [
                (0, n, None),
                (KEY_BLOCK.min(n), n, None),
                (0, 13.min(n), None),
                (0, n, Some(0)),
                (5, n, Some(0)),
            ] {
                let job = GroupJob {
                    kernel: &k,
                    queries: if self_row.is_some() { own } else { &queries },
                    d,
                    keys: &keys,
                    k0,
                    k1,
                    self_row,
                    centred: None,
                };
                let a = group_portable(&job);
                let b = avx2::group(isa, &job);
                for r in 0..QUERY_GROUP {
                    let what = format!("{k} n={n} d={d} q={q} keys {k0}..{k1} row {r}");
                    // m may differ in the last bit (fused vs separate multiply-add).
                    assert!(
                        a.m[r] == b.m[r] || (a.m[r] - b.m[r]).abs() <= 1e-6 * a.m[r].abs(),
                        "{what}: m {} vs {}",
                        a.m[r],
                        b.m[r]
                    );
                    if a.s[r] == 0.0 || b.s[r] == 0.0 {
                        assert_eq!(a.s[r], b.s[r], "{what}: empty");
                        continue;
                    }
                    let sa = a.s[r] * f64::from(a.m[r]).exp();
                    let sb = b.s[r] * f64::from(b.m[r]).exp();
                    assert!((sa - sb).abs() <= 1e-5 * sa.abs(), "{what}: s {sa} vs {sb}");
                    for c in 0..q {
                        let (ma, mb) = (a.u[r * q + c] / a.s[r], b.u[r * q + c] / b.s[r]);
                        assert!(
                            (ma - mb).abs() <= 1e-5 * ma.abs() + 1e-6,
                            "{what}: mean {ma} vs {mb}"
                        );
                    }
                }
            }
        }
    }
}

/// Keys with panels (`panels.rs`): the inner-product distances, on every
/// compiled version, against the plain f64 definition — every profile,
/// key ranges that start and end inside a panel, leave-one-out, data far
/// from the origin, duplicate keys, and two tight clusters far apart
/// (where the rows fall back to the differences).
#[test]
fn inner_product_distances_match_plain_definition() {
    use super::super::panels::{KnnRows, Panels};
    let cases: [(&str, usize, usize, f32, f32); 5] = [
        ("plain d=32", 32, 2, 1.0, 0.0),
        ("plain d=33", 33, 3, 1.0, 0.0),
        ("offset 1e4 d=100", 100, 1, 1.0, 1e4),
        ("d=300", 300, 5, 1.0, 0.0),
        ("clusters d=40", 40, 2, 1e-3, 0.0),
    ];
    for (what, d, q, scale, offset) in cases {
        let n = 523;
        let mut x: Vec<f32> = data(n, d, 11).iter().map(|v| v * scale + offset).collect();
        if what.starts_with("clusters") {
            // Every other key 100 away along every axis.
            for j in (1..n).step_by(2) {
                x[j * d..(j + 1) * d].iter_mut().for_each(|v| *v += 100.0);
            }
        } else {
            // Duplicates: keys 40..60 repeat keys 0..20.
            x.copy_within(0..20 * d, 40 * d);
        }
        let y = data(n, q, 12);
        let (xt, yt) = (soa(&x, n, d), soa(&y, n, q));
        let panels = Panels::from_rows(&x, d, KnnRows::No).expect("panels");
        let keys = KeysSoa {
            panels: Some(&panels),
            ..keys_of(&xt, &yt, n, q)
        };
        // Queries: keys 40..48 (duplicates of keys 0..8), for leave-one-out.
        let first = 40;
        let queries = x[first * d..(first + QUERY_GROUP) * d].to_vec();
        let h = if what.starts_with("clusters") {
            0.01
        } else {
            0.25
        } * (d as f32).sqrt();
        for p in Profile::ALL {
            let k = Kernel::new(p, h).unwrap();
            for (k0, k1, loo) in [(0, n, false), (5, n - 3, false), (0, n, true)] {
                let job = GroupJob {
                    kernel: &k,
                    queries: &queries,
                    d,
                    keys: &keys,
                    k0,
                    k1,
                    self_row: loo.then_some(first),
                    centred: None,
                };
                let isas: Vec<Option<Avx2Fma>> = vec![None, Avx2Fma::detect()];
                for isa in isas {
                    let st = group_on(isa, &job);
                    let mut out = vec![0.0f32; QUERY_GROUP * q];
                    st.finalize(q, &mut out);
                    for r in 0..QUERY_GROUP {
                        let keep: Vec<usize> =
                            (k0..k1).filter(|&j| !(loo && j == first + r)).collect();
                        let xs: Vec<f32> = keep
                            .iter()
                            .flat_map(|&j| x[j * d..(j + 1) * d].to_vec())
                            .collect();
                        let ys: Vec<f32> = keep
                            .iter()
                            .flat_map(|&j| y[j * q..(j + 1) * q].to_vec())
                            .collect();
                        let want = naive(&k, &queries[r * d..(r + 1) * d], &xs, &ys, d, q);
                        for c in 0..q {
                            let got = f64::from(out[r * q + c]);
                            match &want {
                                None => assert!(got.is_nan(), "{what} {p}: {got} not NaN"),
                                Some(w) => assert!(
                                    (got - w[c]).abs() <= 1e-4 * w[c].abs() + 1e-5,
                                    "{what} {p} ({k0}..{k1}, loo {loo}, avx2 {}): row {r}: {got} vs {}",
                                    isa.is_some(),
                                    w[c]
                                ),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The cache-blocked tasks of [`group_states`] with panels (groups of a
/// task over key ranges, ranges merged): local means and leave-one-out
/// against the plain definition, with a partial last group, a partial
/// last range and ranges shorter than a key block (d = 900).
#[test]
fn panel_tasks_match_plain_definition() {
    use super::super::keys::{KeyColumns, Pack};
    use crate::matrix::Matrix;
    for (d, n) in [(40usize, 700usize), (900, 400)] {
        let q = 2;
        let x: Vec<f32> = data(n, d, 21).iter().map(|v| v + 3.0).collect();
        let y = data(n, q, 22);
        let groups = 4 * rayon::current_num_threads() + 3;
        let m = (groups * QUERY_GROUP + 5).min(n);
        let xv = ndarray::ArrayView2::from_shape((n, d), &x[..]).unwrap();
        let yv = ndarray::ArrayView2::from_shape((n, q), &y[..]).unwrap();
        let xm = Matrix::check("test", "x", xv).unwrap();
        let ym = Matrix::check("test", "y", yv).unwrap();
        let cols = KeyColumns::new(&xm, &[ym], Pack::Panels);
        let soa = cols.soa(Some(0));
        let k = Kernel::new(Profile::Gaussian, 0.3 * (d as f32).sqrt()).unwrap();
        assert!(super::super::panels::serve_sq_dists(&k, soa.panels, d));
        for loo in [false, true] {
            // Leave-one-out needs the keys as queries: all n of them.
            let queries = if loo { &x[..] } else { &x[..m * d] };
            let rows = queries.len() / d;
            let mut out = vec![0.0f32; rows * q];
            let cp = crate::cancel::Checkpoint::current("local_mean");
            local_mean(&k, queries, d, &soa, loo, &mut out, &cp).unwrap();
            for r in (0..rows).step_by(7).chain([rows - 1]) {
                let keep: Vec<usize> = (0..n).filter(|&j| !(loo && j == r)).collect();
                let xs: Vec<f32> = keep
                    .iter()
                    .flat_map(|&j| x[j * d..(j + 1) * d].to_vec())
                    .collect();
                let ys: Vec<f32> = keep
                    .iter()
                    .flat_map(|&j| y[j * q..(j + 1) * q].to_vec())
                    .collect();
                let want = naive(&k, &queries[r * d..(r + 1) * d], &xs, &ys, d, q).unwrap();
                for c in 0..q {
                    let got = f64::from(out[r * q + c]);
                    assert!(
                        (got - want[c]).abs() <= 1e-4 * want[c].abs() + 1e-5,
                        "d={d} loo={loo} row {r}: {got} vs {}",
                        want[c]
                    );
                }
            }
        }
    }
}

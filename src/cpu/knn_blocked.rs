//! Brute-force k nearest neighbours by inner products, for larger `d`: a
//! group of queries against a panel of keys, dot products with
//! multiply-adds over `d`, approximate squared distances
//! `‖q‖² − 2q·x + ‖x‖²` of the centred data used only as a filter, and the
//! exact squared distance (the arithmetic of `knn.rs`, bit for bit) of each
//! key that passes, offered to the same [`TopK`]. The results equal the
//! direct path's; numerics.md, "kNN by inner products", gives the bound.
//!
//! Imports: `super::{keys, knn, simd}`.

use rayon::prelude::*;

use super::keys::KeysSoa;
use super::knn::{TopK, range};
use super::simd::{Avx2Fma, Isa, Portable, fmadd, sq_dist};

/// Queries per register-blocked group.
const G: usize = 4;
/// Keys per panel (the micro-kernel's width: two AVX registers).
const P: usize = 16;
/// Queries per rayon task (groups of `G` sharing each key block).
const CHUNK: usize = 8 * G;
/// Centred squared norms at or above this take the direct path (no
/// intermediate of either path can overflow below it).
const NORM_LIMIT: f64 = 1e35;
/// Largest `d` the bound is derived for (`d·u ≤ 0.004`).
pub(crate) const MAX_D: usize = 65_536;

/// The keys centred on their mean, in panels of [`P`] keys
/// (`c[(j/P)·P·d + k·P + j%P]`, zero-padded), their squared norms scaled by
/// `1 − γ`, and the data of the filter.
struct Centred {
    c: Vec<f32>,
    w: Vec<f32>,
    mean: Vec<f64>,
    gamma: f64,
    abs: f64,
}

/// `γ = (2d + 64)·2⁻²⁴`: the filter's relative slack (numerics.md).
fn gamma(d: usize) -> f64 {
    (2 * d + 64) as f64 * f64::from(f32::EPSILON) / 2.0
}

/// Centres the keys, or `None` when some key is too far from the mean for
/// the bound (then the direct path runs).
fn centre(keys: &KeysSoa<'_>, d: usize) -> Option<Centred> {
    let (n, ld) = (keys.n, keys.ld);
    let mean: Vec<f64> = (0..d)
        .into_par_iter()
        .map(|k| {
            keys.xt[k * ld..k * ld + n]
                .iter()
                .map(|&x| f64::from(x))
                .sum::<f64>()
                / n as f64
        })
        .collect();
    let panels = n.div_ceil(P);
    let mut c = vec![0.0f32; panels * P * d];
    let gamma = gamma(d);
    let w: Vec<Option<Vec<f32>>> = c
        .par_chunks_mut(P * d)
        .enumerate()
        .map(|(p, panel)| {
            let mut norms = [0.0f64; P];
            for (k, row) in panel.chunks_exact_mut(P).enumerate() {
                for (l, v) in row.iter_mut().enumerate() {
                    let j = p * P + l;
                    if j < n {
                        *v = (f64::from(keys.xt[k * ld + j]) - mean[k]) as f32;
                        norms[l] += f64::from(*v) * f64::from(*v);
                    }
                }
            }
            let ok = norms.iter().all(|&s| s < NORM_LIMIT);
            ok.then(|| norms.iter().map(|&s| (s * (1.0 - gamma)) as f32).collect())
        })
        .collect();
    let w: Vec<f32> = w.into_iter().collect::<Option<Vec<_>>>()?.concat();
    let abs = (4 * d + 64) as f64 * f64::from(f32::MIN_POSITIVE);
    Some(Centred {
        c,
        w,
        mean,
        gamma,
        abs,
    })
}

/// The `k` nearest keys of every query by inner products; `None` when the
/// data are too far apart for the bound (the caller then runs the direct
/// path). `isa`: the AVX2 + FMA token, or `None` for the portable build.
pub(crate) fn knn(
    isa: Option<Avx2Fma>,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    k: usize,
) -> Option<Vec<TopK>> {
    if d > MAX_D || keys.n == 0 {
        return None;
    }
    let cen = centre(keys, d)?;
    let m = queries.len() / d;
    let per = m
        .div_ceil(4 * rayon::current_num_threads())
        .next_multiple_of(G)
        .clamp(G, CHUNK);
    let lists = queries
        .par_chunks(per * d)
        .flat_map_iter(|chunk| chunk_lists(isa, chunk, d, keys, &cen, k))
        .collect();
    Some(lists)
}

/// The lists of up to [`CHUNK`] queries, on the AVX2 + FMA build when `isa`
/// holds the token.
fn chunk_lists(
    isa: Option<Avx2Fma>,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    cen: &Centred,
    k: usize,
) -> Vec<TopK> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        // SAFETY: `isa` is an `Avx2Fma` token, made only where run-time
        // detection found AVX2 and FMA.
        return unsafe { chunk_avx2(isa, chunk, d, keys, cen, k) };
    }
    let _ = isa;
    chunk_impl(Portable, chunk, d, keys, cen, k)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn chunk_avx2(
    isa: Avx2Fma,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    cen: &Centred,
    k: usize,
) -> Vec<TopK> {
    chunk_impl(isa, chunk, d, keys, cen, k)
}

/// `s[g][l] = Σ_k q_g[k]·x_l[k]` for a group of queries and one panel.
#[inline(always)]
fn dots<S: Isa>(qs: &[f32], d: usize, panel: &[f32], s: &mut [[f32; P]; G]) {
    let mut acc = [[0.0f32; P]; G];
    for (kk, x) in panel.chunks_exact(P).enumerate() {
        for (g, a) in acc.iter_mut().enumerate() {
            let qv = qs[g * d + kk];
            for l in 0..P {
                a[l] = fmadd::<S>(qv, x[l], a[l]);
            }
        }
    }
    *s = acc;
}

/// One query's filter state: its list, centred squared norm and the
/// current limit `L` of the test `w_j − 2s_j ≤ L`.
struct Row {
    top: TopK,
    nq: f64,
    lim: f32,
}

impl Row {
    /// A query too far from the keys' mean for the expansion (or with a
    /// non-finite norm): it takes the direct path.
    fn far(&self) -> bool {
        self.nq >= NORM_LIMIT || !self.nq.is_finite()
    }

    fn update(&mut self, cen: &Centred) {
        let thr = f64::from(self.top.d2[self.top.d2.len() - 1]);
        self.lim = (thr * (1.0 + cen.gamma) + cen.abs - self.nq * (1.0 - cen.gamma)) as f32;
    }
}

#[inline(always)]
fn chunk_impl<S: Isa>(
    isa: S,
    chunk: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    cen: &Centred,
    k: usize,
) -> Vec<TopK> {
    let m = chunk.len() / d;
    let n = keys.n;
    // Centred queries (f64 difference, rounded once), padded to whole groups.
    let mut qc = vec![0.0f32; m.next_multiple_of(G) * d];
    let mut rows: Vec<Row> = Vec::with_capacity(m);
    for i in 0..m {
        let mut nq = 0.0f64;
        for kk in 0..d {
            let v = (f64::from(chunk[i * d + kk]) - cen.mean[kk]) as f32;
            qc[i * d + kk] = v;
            nq += f64::from(v) * f64::from(v);
        }
        let mut row = Row {
            top: TopK::new(k),
            nq,
            lim: 0.0,
        };
        row.update(cen);
        rows.push(row);
    }
    let mut s = [[0.0f32; P]; G];
    for p in 0..n.div_ceil(P) {
        let panel = &cen.c[p * P * d..(p + 1) * P * d];
        let len = P.min(n - p * P);
        for g0 in (0..m).step_by(G) {
            dots::<S>(&qc[g0 * d..(g0 + G) * d], d, panel, &mut s);
            for (g, sg) in s.iter().enumerate().take((m - g0).min(G)) {
                let i = g0 + g;
                let row = &mut rows[i];
                if row.far() {
                    continue;
                }
                let query = &chunk[i * d..(i + 1) * d];
                for (l, &sl) in sg.iter().enumerate().take(len) {
                    let j = p * P + l;
                    if cen.w[j] - 2.0 * sl <= row.lim {
                        // Re-measured as the direct path measures it.
                        let t = sq_dist::<S>(keys.xt, keys.ld, j, query);
                        if row.top.offer(t, j as u32) {
                            row.update(cen);
                        }
                    }
                }
            }
        }
    }
    let isa = isa.avx2_fma();
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| {
            if row.far() {
                range(isa, &chunk[i * d..(i + 1) * d], keys, k, 0, n)
            } else {
                row.top
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::keys::KeyColumns;
    use super::super::knn::direct;
    use super::*;
    use crate::matrix::Matrix;

    /// A small deterministic generator (xorshift), values in `[-1, 1)`.
    fn data(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Blocked and direct lists of `q` (m × d) against `x` (n × d), on the
    /// portable build and (where the CPU has it) the AVX2 + FMA build.
    fn same(q: &[f32], x: &[f32], d: usize, k: usize, what: &str) {
        let n = x.len() / d;
        let view = ndarray::ArrayView2::from_shape((n, d), x).unwrap();
        let cols = KeyColumns::new(&Matrix::check("test", "x", view).unwrap(), &[]);
        let soa = cols.soa(None);
        for isa in [None, Avx2Fma::detect()] {
            let want = direct(isa, q, d, &soa, k);
            let got = knn(isa, q, d, &soa, k).expect("blocked path runs");
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.idx, w.idx, "{what} avx2={} row {i}", isa.is_some());
                let (gb, wb): (Vec<u32>, Vec<u32>) = (
                    g.d2.iter().map(|v| v.to_bits()).collect(),
                    w.d2.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(gb, wb, "{what} avx2={} row {i}", isa.is_some());
            }
        }
    }

    #[test]
    fn blocked_lists_equal_the_direct_lists() {
        for d in [1, 7, 31, 32, 33, 64, 128, 200] {
            for (m, n) in [(1, 1), (5, 3), (13, 37), (33, 301)] {
                let q = data(m * d, (d * 1000 + m) as u64);
                let x = data(n * d, (d * 7 + n) as u64);
                for k in [1, 3.min(n), n] {
                    same(&q, &x, d, k, &format!("d={d} m={m} n={n} k={k}"));
                }
            }
        }
    }

    #[test]
    fn offset_data_and_duplicate_keys_give_the_same_lists() {
        for d in [1, 7, 33, 128] {
            let (m, n) = (9, 257);
            // Offset by 1e4: the centring keeps the filter tight.
            let q: Vec<f32> = data(m * d, 3).iter().map(|v| v + 1e4).collect();
            let x: Vec<f32> = data(n * d, 4).iter().map(|v| v + 1e4).collect();
            for k in [1, 16, n] {
                same(&q, &x, d, k, &format!("offset d={d} k={k}"));
            }
            // Eleven distinct keys repeated: ties everywhere, lower index first;
            // queries on keys (distance 0) and between them.
            let base = data(11 * d, 5);
            let x: Vec<f32> = (0..n)
                .flat_map(|j| base[(j * 7 % 11) * d..][..d].to_vec())
                .collect();
            let mut q = x[..5 * d].to_vec();
            q.extend(data(4 * d, 6));
            for k in [1, 5, 40, n] {
                same(&q, &x, d, k, &format!("ties d={d} k={k}"));
            }
        }
    }

    #[test]
    fn far_data_fall_back_to_the_direct_path() {
        let d = 3;
        let x = [0.0f32, 0.0, 0.0, 1e19, 0.0, 0.0];
        let view = ndarray::ArrayView2::from_shape((2, d), &x[..]).unwrap();
        let cols = KeyColumns::new(&Matrix::check("test", "x", view).unwrap(), &[]);
        assert!(knn(None, &[0.0; 3], d, &cols.soa(None), 1).is_none());
        // A far query alone goes the direct way inside the blocked path.
        let x = data(40 * d, 9);
        let mut q = data(8 * d, 10);
        q[4] = 3e19;
        same(&q, &x, d, 4, "far query");
    }
}

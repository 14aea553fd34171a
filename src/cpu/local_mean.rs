//! Fused, streaming Nadaraya–Watson local mean on the CPU.
//!
//! Queries are split into groups handled by rayon tasks; each group walks
//! the keys in blocks of [`KEY_BLOCK`] that stay in L1 while every query of
//! the group visits them. The AVX2 kernel is in `avx2.rs`; this file holds
//! the driver and the portable version. Per query the row state `(m, s, u)` of docs/numerics.md
//! is kept in `f64`; a block's sums are formed in `f32` lanes and merged
//! into it. The `M×N` matrix is never stored.

use rayon::prelude::*;

use super::far;
use super::keys::KeysSoa;
use super::simd::{Avx2Fma, Isa, KEY_BLOCK, LANES, Portable, dot, exp_nonpos, fmadd, fmax};
use super::weights::initial_max;
use crate::kernel::form::{Form, with_form};
use crate::kernel::{Kernel, Profile};
use crate::types::RowStates;
use crate::types::merge_states;

/// Queries that share one pass over the keys.
pub(crate) const QUERY_GROUP: usize = 8;

/// Row states `(m, s, u)` of a group of queries over some of the keys
/// (docs/numerics.md): `m` the largest log-weight (0 for non-exponential
/// profiles), `s = Σ e^{w−m}`, `u = Σ e^{w−m} y` (`rows × q`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupState {
    pub m: [f32; QUERY_GROUP],
    pub s: [f64; QUERY_GROUP],
    pub u: Vec<f64>,
}

impl GroupState {
    pub(crate) fn empty(profile: Profile, q: usize) -> Self {
        GroupState {
            m: [initial_max(profile); QUERY_GROUP],
            s: [0.0; QUERY_GROUP],
            u: vec![0.0; QUERY_GROUP * q],
        }
    }

    /// Merges `other` (same queries, other keys) into `self`.
    pub(crate) fn merge(&mut self, other: &GroupState, q: usize) {
        let mut u = vec![0.0; q];
        for r in 0..QUERY_GROUP {
            let (ua, ub) = (&self.u[r * q..(r + 1) * q], &other.u[r * q..(r + 1) * q]);
            let (m, s) = merge_states(
                (self.m[r], self.s[r], ua),
                (other.m[r], other.s[r], ub),
                &mut u,
            );
            self.m[r] = m;
            self.s[r] = s;
            self.u[r * q..(r + 1) * q].copy_from_slice(&u);
        }
    }

    /// Writes `u / s` for the first `out.len() / q` rows (NaN where `s = 0`)
    /// and returns how many rows were empty.
    pub(crate) fn finalize(&self, q: usize, out: &mut [f32]) -> usize {
        let mut empty = 0;
        for (r, o) in out.chunks_mut(q).enumerate() {
            if self.s[r] > 0.0 {
                for (oc, &uc) in o.iter_mut().zip(&self.u[r * q..(r + 1) * q]) {
                    *oc = (uc / self.s[r]) as f32;
                }
            } else {
                o.fill(f32::NAN);
                empty += 1;
            }
        }
        empty
    }
}

/// One unit of work: a group of at most [`QUERY_GROUP`] queries against
/// the keys `k0..k1`.
#[derive(Clone, Copy)]
pub(crate) struct GroupJob<'a> {
    pub kernel: &'a Kernel,
    /// The group's query rows, row-major with `d` columns.
    pub queries: &'a [f32],
    pub d: usize,
    pub keys: &'a KeysSoa<'a>,
    pub k0: usize,
    pub k1: usize,
    /// When the queries are the keys and every row must leave out its own
    /// key (leave-one-out): the global index of the group's first query.
    pub self_row: Option<usize>,
}

/// Row states `(m, s, u)` of every query: the shared core of local means,
/// densities and leave-one-out sums. With `exclude_self` the queries must be
/// the keys and row `i` skips key `i`.
///
/// Work is split over query groups; when there are too few of them to
/// occupy every thread, the keys are split as well and the partial states
/// merged with the associative rule.
pub(crate) fn group_states(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    exclude_self: bool,
) -> Vec<GroupState> {
    let (n, q) = (keys.n, keys.q);
    let groups = queries.len().div_ceil(QUERY_GROUP * d);
    let want = 4 * rayon::current_num_threads();
    let splits = if groups >= want {
        1
    } else {
        want.div_ceil(groups).min(n / (4 * KEY_BLOCK)).max(1)
    };
    // Key ranges aligned to whole blocks.
    let per = n.div_ceil(splits).next_multiple_of(KEY_BLOCK);
    queries
        .par_chunks(QUERY_GROUP * d)
        .enumerate()
        .map(|(gi, qs)| {
            let job = |k0: usize, k1: usize| GroupJob {
                kernel,
                queries: qs,
                d,
                keys,
                k0,
                k1,
                self_row: exclude_self.then_some(gi * QUERY_GROUP),
            };
            if splits == 1 {
                return group(&job(0, n));
            }
            (0..n.div_ceil(per))
                .into_par_iter()
                .map(|t| group(&job(t * per, ((t + 1) * per).min(n))))
                .reduce_with(|mut a, b| {
                    a.merge(&b, q);
                    a
                })
                .unwrap_or_else(|| GroupState::empty(kernel.profile(), q))
        })
        .collect()
}

/// The row states of `m` queries from their groups' states (as
/// [`group_states`] returns them), rows with no mass normalized.
pub(crate) fn row_states_of(groups: &[GroupState], m: usize, q: usize) -> RowStates {
    let mut states = RowStates::empty(m, q);
    for (g, st) in groups.iter().enumerate() {
        for r in 0..QUERY_GROUP.min(m.saturating_sub(g * QUERY_GROUP)) {
            let i = g * QUERY_GROUP + r;
            states.max_log_weight[i] = st.m[r];
            states.sum[i] = st.s[r];
            for c in 0..q {
                states.weighted[[i, c]] = st.u[r * q + c];
            }
        }
    }
    states.normalize_empty();
    states
}

/// Local means of `queries` (row-major, `d` columns) into `out` (`q`
/// columns). Returns the number of empty rows (written as NaN).
pub(crate) fn local_mean(
    kernel: &Kernel,
    queries: &[f32],
    d: usize,
    keys: &KeysSoa<'_>,
    exclude_self: bool,
    out: &mut [f32],
) -> usize {
    let q = keys.q;
    let states = group_states(kernel, queries, d, keys, exclude_self);
    out.par_chunks_mut(QUERY_GROUP * q)
        .zip(states.par_iter())
        .map(|(o, st)| st.finalize(q, o))
        .sum()
}

/// The state of one group, on the best compiled version.
pub(crate) fn group(job: &GroupJob<'_>) -> GroupState {
    group_on(Avx2Fma::detect(), job)
}

/// The state of one group: on the AVX2 kernel when `isa` holds the token,
/// else on the portable one (`None` forces it).
pub(crate) fn group_on(isa: Option<Avx2Fma>, job: &GroupJob<'_>) -> GroupState {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa {
        let mut st = super::avx2::group(isa, job);
        far::finish_far_rows(job, &mut st);
        return st;
    }
    let _ = isa;
    group_portable(job)
}

/// The portable version (any CPU); the AVX2 one is tested against it.
pub(crate) fn group_portable(job: &GroupJob<'_>) -> GroupState {
    let mut st = group_impl::<Portable>(job);
    far::finish_far_rows(job, &mut st);
    st
}

#[inline(always)]
fn group_impl<S: Isa>(job: &GroupJob<'_>) -> GroupState {
    let GroupJob {
        kernel,
        queries,
        d,
        keys,
        k0,
        k1,
        self_row,
    } = *job;
    let profile = kernel.profile();
    let inv_h2 = kernel.inv_h2();
    let (n, q) = (keys.ld, keys.q);
    let g = queries.len() / d;
    let mut st = GroupState::empty(profile, q);
    let mut buf = [0.0f32; KEY_BLOCK];
    let mut cmax = [0.0f32; KEY_BLOCK / LANES + 1];
    let mut ub = [0.0f32; MAX_FUSED_COLS];
    let mut j0 = k0;
    while j0 < k1 {
        let len = KEY_BLOCK.min(k1 - j0);
        let w = &mut buf[..len];
        for r in 0..g {
            let query = &queries[r * d..(r + 1) * d];
            let mut bm = log_weights::<S>(profile, keys.xt, n, j0, query, inv_h2, w, &mut cmax);
            if let Some(sk) = self_row
                .map(|r0| r0 + r)
                .filter(|&sk| sk >= j0 && sk < j0 + len)
            {
                // Leave the query's own key out, and recompute the maxima.
                w[sk - j0] = initial_max(profile);
                let c = (sk - j0) / LANES;
                cmax[c] = w[c * LANES..(c * LANES + LANES).min(len)]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| fmax(a, b));
                bm = cmax[..len.div_ceil(LANES)]
                    .iter()
                    .fold(f32::NEG_INFINITY, |a, &b| fmax(a, b));
            }
            if bm == f32::NEG_INFINITY || (!profile.is_exponential() && bm <= 0.0) {
                continue; // no mass in this block
            }
            let ur = &mut st.u[r * q..(r + 1) * q];
            // Non-exponential profiles keep m = 0: their weights are not shifted.
            if profile.is_exponential() && bm > st.m[r] {
                let factor = (f64::from(st.m[r]) - f64::from(bm)).exp();
                st.m[r] = bm;
                st.s[r] *= factor;
                ur.iter_mut().for_each(|x| *x *= factor);
            }
            let sb = accumulate::<S>(
                profile.is_exponential(),
                st.m[r],
                w,
                &cmax,
                keys,
                j0,
                &mut ub,
            );
            st.s[r] += f64::from(sb);
            if q <= MAX_FUSED_COLS {
                for (uc, &b) in ur.iter_mut().zip(&ub) {
                    *uc += f64::from(b);
                }
            } else {
                // `accumulate` left the weights in `w`.
                for (c, uc) in ur.iter_mut().enumerate() {
                    *uc += f64::from(dot::<S>(w, &keys.yt[c * n + j0..c * n + j0 + len]));
                }
            }
        }
        j0 += len;
    }
    st
}

/// Value columns accumulated in registers in the same pass as the weights.
const MAX_FUSED_COLS: usize = 4;

/// Pass one over a block: scaled squared distances turned into log-weights
/// (exponential profiles; −inf for infinitely far keys) or weights (the
/// others), stored in `w`, with the maximum of each lane group in `cmax`.
/// Returns the block's maximum.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn log_weights<S: Isa>(
    profile: Profile,
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    inv_h2: f32,
    w: &mut [f32],
    cmax: &mut [f32],
) -> f32 {
    with_form!(profile, P => fused_dists::<S, _>(xt, n, j0, query, inv_h2, w, cmax, P::lane::<f32>))
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fused_dists<S: Isa, F: Fn(f32) -> f32>(
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    inv_h2: f32,
    w: &mut [f32],
    cmax: &mut [f32],
    f: F,
) -> f32 {
    let mut bm = f32::NEG_INFINITY;
    for (c, chunk) in w.chunks_mut(LANES).enumerate() {
        let j = j0 + c * LANES;
        if chunk.len() == LANES {
            let mut acc = [0.0f32; LANES];
            for (k, &qk) in query.iter().enumerate() {
                let x = &xt[k * n + j..k * n + j + LANES];
                for l in 0..LANES {
                    let df = x[l] - qk;
                    acc[l] = fmadd::<S>(df, df, acc[l]);
                }
            }
            let mut v = [0.0f32; LANES];
            for l in 0..LANES {
                v[l] = f(acc[l] * inv_h2);
            }
            chunk.copy_from_slice(&v);
            let cm = max8(v);
            cmax[c] = cm;
            bm = fmax(bm, cm);
        } else {
            let mut cm = f32::NEG_INFINITY;
            for (l, wl) in chunk.iter_mut().enumerate() {
                let mut a = 0.0f32;
                for (k, &qk) in query.iter().enumerate() {
                    let df = xt[k * n + j + l] - qk;
                    a = fmadd::<S>(df, df, a);
                }
                *wl = f(a * inv_h2);
                cm = fmax(cm, *wl);
            }
            cmax[c] = cm;
            bm = fmax(bm, cm);
        }
    }
    bm
}

/// Maximum of one lane group, as a shuffle tree (a sequential `max` fold
/// would not vectorize: float reductions are not reassociated).
#[inline(always)]
fn max8(v: [f32; LANES]) -> f32 {
    let mut a = [0.0f32; 4];
    for l in 0..4 {
        a[l] = fmax(v[l], v[l + 4]);
    }
    let b = [fmax(a[0], a[2]), fmax(a[1], a[3])];
    fmax(b[0], b[1])
}

/// Pass two: weights `e^{w−m}` (or the plain weights), their sum (returned)
/// and, for at most [`MAX_FUSED_COLS`] value columns, the weighted value
/// sums into `ub`. With more columns the weights are left in `w` for the
/// caller's dot products. Lane groups whose weights are all zero are
/// skipped.
#[inline(always)]
fn accumulate<S: Isa>(
    exponential: bool,
    m: f32,
    w: &mut [f32],
    cmax: &[f32],
    keys: &KeysSoa<'_>,
    j0: usize,
    ub: &mut [f32; MAX_FUSED_COLS],
) -> f32 {
    macro_rules! by_q {
        ($exp:literal) => {
            match keys.q {
                1 => accumulate_q::<S, $exp, 1>(m, w, cmax, keys, j0, ub),
                2 => accumulate_q::<S, $exp, 2>(m, w, cmax, keys, j0, ub),
                3 => accumulate_q::<S, $exp, 3>(m, w, cmax, keys, j0, ub),
                4 => accumulate_q::<S, $exp, 4>(m, w, cmax, keys, j0, ub),
                _ => accumulate_q::<S, $exp, 0>(m, w, cmax, keys, j0, ub),
            }
        };
    }
    if exponential {
        by_q!(true)
    } else {
        by_q!(false)
    }
}

#[inline(always)]
fn accumulate_q<S: Isa, const EXP: bool, const Q: usize>(
    m: f32,
    w: &mut [f32],
    cmax: &[f32],
    keys: &KeysSoa<'_>,
    j0: usize,
    ub: &mut [f32; MAX_FUSED_COLS],
) -> f32 {
    let n = keys.ld;
    let ys: [&[f32]; Q] = std::array::from_fn(|c| &keys.yt[c * n + j0..c * n + j0 + w.len()]);
    let mut s_acc = [0.0f32; LANES];
    let mut u_acc = [[0.0f32; LANES]; Q];
    let mut s_tail = 0.0f32;
    let mut u_tail = [0.0f32; Q];
    for (c, chunk) in w.chunks_mut(LANES).enumerate() {
        // exp(−87) is the smallest weight exp_nonpos does not flush to 0.
        let empty = if EXP {
            cmax[c] - m < -87.0
        } else {
            cmax[c] <= 0.0
        };
        if empty {
            chunk.fill(0.0);
            continue;
        }
        let o = c * LANES;
        if chunk.len() == LANES {
            let mut wl = [0.0f32; LANES];
            wl.copy_from_slice(chunk);
            if EXP {
                for x in &mut wl {
                    *x = exp_nonpos::<S>(*x - m);
                }
            }
            for l in 0..LANES {
                s_acc[l] += wl[l];
            }
            for (col, y) in ys.iter().enumerate() {
                let y = &y[o..o + LANES];
                for l in 0..LANES {
                    u_acc[col][l] = fmadd::<S>(wl[l], y[l], u_acc[col][l]);
                }
            }
            if Q == 0 {
                chunk.copy_from_slice(&wl);
            }
        } else {
            for (l, x) in chunk.iter_mut().enumerate() {
                let wv = if EXP { exp_nonpos::<S>(*x - m) } else { *x };
                s_tail += wv;
                for (col, y) in ys.iter().enumerate() {
                    u_tail[col] = fmadd::<S>(wv, y[o + l], u_tail[col]);
                }
                *x = wv;
            }
        }
    }
    for col in 0..Q {
        ub[col] = u_acc[col].iter().sum::<f32>() + u_tail[col];
    }
    s_acc.iter().sum::<f32>() + s_tail
}

#[cfg(test)]
mod tests {
    use super::*;
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
            let keys = KeysSoa {
                xt: &xt,
                yt: &yt,
                n,
                ld: padded_stride(n),
                q,
            };
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
        let keys = KeysSoa {
            xt: &xt,
            yt: &yt,
            n,
            ld: padded_stride(n),
            q: 1,
        };
        let queries = [0.0f32; 2 * QUERY_GROUP];
        for p in [
            Profile::Epanechnikov,
            Profile::Uniform,
            Profile::Triangular,
            Profile::Biweight,
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
            };
            let mut states = vec![group_portable(&job)];
            #[cfg(target_arch = "x86_64")]
            if let Some(isa) = Avx2Fma::detect() {
                states.push(super::super::avx2::group(isa, &job));
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
            let keys = KeysSoa {
                xt: &xt,
                yt: &yt,
                n,
                ld: padded_stride(n),
                q,
            };
            for p in Profile::ALL {
                let k = Kernel::new(p, 0.3 * (d as f32).sqrt()).unwrap();
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
                    };
                    let a = group_portable(&job);
                    let b = super::super::avx2::group(isa, &job);
                    for r in 0..QUERY_GROUP {
                        let what = format!("{p} n={n} d={d} q={q} keys {k0}..{k1} row {r}");
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
}

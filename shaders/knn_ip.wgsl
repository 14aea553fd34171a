// k nearest neighbours from inner-product tiles, for d ≥ 32
// (docs/numerics.md, "kNN by inner products (GPU)"): the GPU twin of the
// CPU's blocked kNN. The inner products only filter; every key that
// passes is measured again by differences, as knn.wgsl measures it, and
// offered to the same list, so the lists are knn.wgsl's bit for bit.
//
// A workgroup takes TQ = 64 query rows (one per invocation, each with its
// list) against TK = 32 keys a step. The approximate squared distances
// a = ‖q'‖² + ‖x'‖² − 2 q'·x' use q' = q − c and x' = x − c centred on
// the window's first key c. The 64 × 32 dot products are a
// register-blocked tile (each invocation an 8-row × 4-key block: per
// coordinate two vec4 loads of query rows and one of keys feed 32 FMAs),
// over chunks of KC = 32 coordinates staged at a time, one chain per
// product (the filter's bound is the sequential one).
//
// Workgroup memory, transposed so that every load is a vec4 across rows
// or keys (local_mean_ip.wgsl's layout; docs/gpu-cost.md has the bank
// analysis):
// - sq: the centred queries, coordinate-major, `QS` words a coordinate.
//   With QRES = 1 all ⌈D/KC⌉·KC coordinates of the tile's rows, staged
//   once per dispatch (QS = 64); with QRES = 0 one chunk, staged per chunk
//   and step (QS = 68: 17 vec4 units, odd).
// - sw: per chunk the centred keys (36 words a coordinate, 9 units); after
//   the chunks the 64 × 32 dot products (36 words a row).
// - xn: the step's key norms in two halves (even and odd coordinates);
//   wn: per key w = ‖x'‖²·(1 − γ) (−∞ for a key too far from c for the
//   bound, +∞ past the step's keys).
//
// The filter: key j can enter row i's list only if its exact distance is
// below the list's k-th τ, and then w_j − 2s_ij ≤ L_i with
// L_i = τ(1 + γ) + ABS − ‖q'‖²(1 − γ) (+∞ for a row too far from c). Each
// invocation takes the minimum of w_j − 2s_ij over its row's 32 keys; where
// it is within L_i (the rule while the list is not full, the exception
// after), the row re-measures the step's keys that pass one by one, in
// index order, from the raw coordinates in global memory, and offers them
// (the limit falls with τ). A key the filter drops has an exact distance
// of at least τ, which the direct path would not offer either.
//
// Template constants: D dimension, K neighbours, QRES (1: the queries
// stay in workgroup memory for the dispatch). Generated: WG (= 64 = TQ),
// TQ, TK, KC (the tile sizes the planner counts), the flag bits
// FIRST_TILE, LAST_TILE.

#import consts
#import knn_list

const D: u32 = {{D}}u;
const K: u32 = {{K}}u;
const QRES: u32 = {{QRES}}u;
// TQ (query rows), TK (keys a step), KC (coordinates a chunk): generated.
const MR: u32 = 8u;
const MK: u32 = 4u;
const_assert TQ == WG && TQ == 8u * MR && TK == 8u * MK && KC * 2u == WG;
// Chunks of coordinates, and the coordinates they cover.
const NCH: u32 = (D + KC - 1u) / KC;
const DP: u32 = NCH * KC;
// sq: coordinates held, vec4 units a coordinate (16 resident, 17 a chunk).
const QC: u32 = KC + QRES * (DP - KC);
const QS4: u32 = TQ / 4u + 1u - QRES;
// sw: vec4 units a coordinate of keys and a row of dot products (9).
const XS4: u32 = TK / 4u + 1u;
// Keys each half of the workgroup stages (by groups of 4).
const KH: u32 = TK / 2u;
// The filter's relative slack γ = (4d + 64)·2⁻²⁴, its absolute slack
// (8d + 128)·2⁻¹²⁶ (underflow, flushed subnormals), and the centred
// squared norm from which a row or key takes every key (docs/numerics.md).
const GAMMA: f32 = f32(4u * D + 64u) * 5.9604645e-8;
const ABS: f32 = f32(8u * D + 128u) * 1.1754944e-38;
const NORM_LIMIT: f32 = 1.0e35;

var<workgroup> sq: array<vec4<f32>, QC * QS4>;
var<workgroup> sw: array<vec4<f32>, TQ * XS4>;
var<workgroup> xn: array<vec4<f32>, TK / 2u>;
var<workgroup> wn: array<vec4<f32>, TK / 4u>;

// +∞ and −∞ (WGSL has no literal for them).
fn pos_inf() -> f32 {
    return bitcast<f32>(0x7f800000u);
}

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// Coordinate k of the centre: the window's first key.
fn centre(k: u32) -> f32 {
    return keys[p.kbase * D + k];
}

// Stages coordinates c0 + kl (kl = lid mod KC) of the tile's 64 query
// rows into sq, centred, at coordinate `at`: each half of the workgroup
// 32 rows, four rows to a vec4 store.
fn stage_queries(lid: u32, tile_row0: u32, c0: u32, at: u32) {
    let kl = lid % KC;
    let half = lid / KC;
    let k = c0 + kl;
    let kin = k < D;
    var ck = 0.0;
    if kin {
        ck = centre(k);
    }
    for (var g = 0u; g < TQ / 8u; g++) {
        var v = vec4<f32>(0.0);
        for (var c = 0u; c < 4u; c++) {
            let row = tile_row0 + half * (TQ / 2u) + 4u * g + c;
            if kin && row < p.rows {
                v[c] = queries[row * D + k] - ck;
            }
        }
        sq[(at + kl) * QS4 + half * (TQ / 8u) + g] = v;
    }
}

// Stages coordinates c0 + kl of the step's keys kb.. (count of them, the
// rest zero) into sw, centred: each half 16 keys, four to a store.
fn stage_keys(lid: u32, kb: u32, count: u32, c0: u32) {
    let kl = lid % KC;
    let half = lid / KC;
    let k = c0 + kl;
    let kin = k < D;
    var ck = 0.0;
    if kin {
        ck = centre(k);
    }
    for (var g = 0u; g < KH / 4u; g++) {
        var v = vec4<f32>(0.0);
        for (var c = 0u; c < 4u; c++) {
            let j = half * KH + 4u * g + c;
            if kin && j < count {
                v[c] = keys[(kb + j) * D + k] - ck;
            }
        }
        sw[kl * XS4 + half * (KH / 4u) + g] = v;
    }
}

// Where sq holds chunk c0's first coordinate.
fn sq_at(c0: u32) -> u32 {
    return QRES * c0;
}

// The filter's limit L for a row with list threshold τ and centred
// squared norm qn: +∞ (every key passes) when qn is too large for the
// bound or not finite.
fn limit(tau: f32, qn: f32) -> f32 {
    if !(qn < NORM_LIMIT) {
        return pos_inf();
    }
    return fma(tau, 1.0 + GAMMA, ABS - qn * (1.0 - GAMMA));
}

// The squared distance of query row i and key j of the bound tile, by
// differences in coordinate order: knn.wgsl's arithmetic, bit for bit.
fn exact(i: u32, j: u32) -> f32 {
    var t = 0.0;
    for (var k = 0u; k < D; k++) {
        let df = keys[j * D + k] - queries[i * D + k];
        t = fma(df, df, t);
    }
    return t;
}

@compute @workgroup_size(WG)
fn nearest_ip(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let tile_row0 = wid.x * TQ;
    let i = tile_row0 + lid;
    let live = i < p.rows;
    // Which 8 × 4 block of the 64 × 32 tile this invocation forms.
    let br = lid / (TK / MK);
    let bk = lid % (TK / MK);
    // The key whose ‖x'‖² this invocation sums (half of its coordinates).
    let nk = lid % TK;
    let nh = lid / TK;

    // The queries, centred (once for the dispatch when they stay), and
    // ‖q'‖² of this invocation's row.
    var qnorm = 0.0;
    for (var c0 = 0u; c0 < D; c0 += KC) {
        stage_queries(lid, tile_row0, c0, sq_at(c0));
        workgroupBarrier();
        for (var kk = 0u; kk < KC; kk++) {
            let v = sq[(sq_at(c0) + kk) * QS4 + lid / 4u][lid % 4u];
            qnorm = fma(v, v, qnorm);
        }
        workgroupBarrier();
    }
    var bd: array<f32, K>;
    var bi: array<u32, K>;
    if live {
        start_list(i, &bd, &bi);
    }
    var lim = limit(bd[K - 1u], qnorm);

    let k_lo = min(wid.y * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    // cost: hot loop
    for (var base = k_lo; base < k_hi; base += TK) {
        let count = min(TK, k_hi - base);
        let kb = p.kbase + base;
        // The tile's dot products and the keys' ‖x'‖², chunk by chunk.
        var acc: array<f32, MR * MK>;
        var knorm = 0.0;
        for (var c0 = 0u; c0 < D; c0 += KC) {
            if QRES == 0u {
                stage_queries(lid, tile_row0, c0, 0u);
            }
            stage_keys(lid, kb, count, c0);
            workgroupBarrier();
            for (var k2 = 0u; k2 < KC / 2u; k2++) {
                let v = sw[(2u * k2 + nh) * XS4 + nk / 4u][nk % 4u];
                knorm = fma(v, v, knorm);
            }
            let qb = sq_at(c0) * QS4 + 2u * br;
            for (var kk = 0u; kk < KC; kk++) {
                let a0 = sq[qb + kk * QS4];
                let a1 = sq[qb + kk * QS4 + 1u];
                let b = sw[kk * XS4 + bk];
                for (var r = 0u; r < 4u; r++) {
                    for (var c = 0u; c < MK; c++) {
                        acc[r * MK + c] = fma(a0[r], b[c], acc[r * MK + c]);
                        acc[(r + 4u) * MK + c] = fma(a1[r], b[c], acc[(r + 4u) * MK + c]);
                    }
                }
            }
            workgroupBarrier();
        }
        // The dot products to their rows, the norms' halves; then each
        // key's w.
        for (var r = 0u; r < MR; r++) {
            let e = r * MK;
            sw[(br * MR + r) * XS4 + bk] = vec4<f32>(acc[e], acc[e + 1u], acc[e + 2u], acc[e + 3u]);
        }
        xn[nh * (TK / 4u) + nk / 4u][nk % 4u] = knorm;
        workgroupBarrier();
        if lid < TK {
            let xs = xn[lid / 4u][lid % 4u] + xn[TK / 4u + lid / 4u][lid % 4u];
            var w = xs * (1.0 - GAMMA);
            if !(xs < NORM_LIMIT) {
                w = neg_inf();
            }
            if lid >= count {
                w = pos_inf();
            }
            wn[lid / 4u][lid % 4u] = w;
        }
        workgroupBarrier();

        // This row's nearest key of the step by the filter's measure.
        var amin = pos_inf();
        for (var jj = 0u; jj < TK / 4u; jj++) {
            let sv = sw[lid * XS4 + jj];
            let wv = wn[jj];
            for (var c = 0u; c < 4u; c++) {
                amin = min(amin, fma(-2.0, sv[c], wv[c]));
            }
        }
        // Once the list holds k keys, a step with a key to re-measure is
        // the exception (docs/gpu-cost.md counts this branch as not taken).
        // cost: rare
        if live && !(amin > lim) {
            for (var j = 0u; j < count; j++) {
                let a = fma(-2.0, sw[lid * XS4 + j / 4u][j % 4u], wn[j / 4u][j % 4u]);
                if !(a > lim) {
                    let t = exact(i, kb + j);
                    if t < bd[K - 1u] {
                        offer(&bd, &bi, t, p.key0 + base + j);
                        lim = limit(bd[K - 1u], qnorm);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    if live {
        end_list(i, wid.y, &bd, &bi);
    }
}

// The distance of a listed squared distance (knn_list.wgsl's `finish`).
fn list_distance(t: f32) -> f32 {
    return sqrt(t);
}

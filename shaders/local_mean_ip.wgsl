// Local means from inner-product tiles, for d ≥ 32 (docs/numerics.md,
// "Inner products (larger `d`, GPU)"): the GPU twin of the CPU's panels.
//
// A workgroup takes TQ = 64 query rows against TK = 32 keys a step. The
// squared distances come from t = ‖q'‖² + ‖x'‖² − 2 q'·x', with
// q' = q − c and x' = x − c centred on the window's first key c. The
// 64 × 32 dot products are a register-blocked tile (each invocation an
// 8-row × 4-key block: per coordinate two vec4 loads of query rows and one
// of keys feed 32 FMAs), over chunks of KC = 32 coordinates staged at a
// time, each half chunk (KS = 16) summed apart and those sums added (the
// rounding grows with KS + ⌈D/KS⌉, not D).
//
// Workgroup memory, transposed so that every load is a vec4 across rows
// or keys (docs/tiling.md, "Inner-product tiles", has the bank analysis):
// - sq: the centred queries, coordinate-major, `QS` words a coordinate.
//   With QRES = 1 all ⌈D/KC⌉·KC coordinates of the tile's rows, staged
//   once per dispatch (QS = 64); with QRES = 0 one chunk, staged per chunk
//   and step (QS = 68: 17 vec4 units, odd, so the staging stores are
//   conflict-free).
// - sw: per chunk the centred keys (`XS` = 36 words a coordinate, 9 units);
//   after the chunks the 64 × 32 dot products (36 words a row); in the
//   re-measure the raw keys and raw queries of a chunk.
// Staging reads global memory row by row, lane = coordinate: each warp
// load is one 128-byte row segment.
//
// Per row and step, the expansion is used only where its error bound
// γ·(‖q'‖² + max ‖x'‖²) is within 10⁻⁴ in t (scaled by 2√t_min for the √t
// profiles) or within the direct form's own bound at the step's nearest
// key; otherwise that row measures the step's keys by differences. When
// any row of the workgroup needs that, the whole workgroup stages the
// step's raw keys and its raw queries chunk by chunk (the same coalesced
// loads) and the rows that need it sum (x − q)² in coordinate order.
//
// Then each invocation takes one row of the tile and accumulates its 32
// weights exactly as local_mean.wgsl does with R = 1: log₂ units, one
// maximum update per chunk of C keys, two-level sums, the nearest key's t
// tracked for m. Windows, key splits (partial + merge_splits), flags and
// finish_row are local_mean.wgsl's.
//
// Template constants (src/gpu/shaders/): D dimension, QT value columns
// in this pass (0: row sums only), QA = max(QT, 1), QRES (1: the queries
// stay in workgroup memory for the dispatch). Generated: WG (= 64 = TQ,
// the tile's 8 × 8 blocks), TQ, TK, KC (the tile sizes the planner
// counts), C (keys per chunk of the weights), the flag bits FIRST_TILE,
// LAST_TILE, EXCLUDE_SELF.

#import consts
#import profiles
#import row_state
// Radial kernels only: the product's stand-ins, folded away.
#import product

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const QRES: u32 = {{QRES}}u;
const STATE: u32 = 2u + QA;
// TQ (query rows), TK (keys a step), KC (coordinates a chunk): generated.
const MR: u32 = 8u;
const MK: u32 = 4u;
// Coordinates a dot product, a key norm or a query norm sums in one chain
// before adding it to its total: half a chunk.
const KS: u32 = KC / 2u;
const_assert TQ == WG && TQ == 8u * MR && TK == 8u * MK && KC * 2u == WG;
// Chunks of coordinates, and the coordinates they cover.
const NCH: u32 = (D + KC - 1u) / KC;
const DP: u32 = NCH * KC;
// sq: coordinates held, vec4 units a coordinate (16 resident, 17 a chunk).
const QC: u32 = KC + QRES * (DP - KC);
const QS4: u32 = TQ / 4u + 1u - QRES;
// sw: vec4 units a coordinate of keys and a row of dot products (9), the
// raw-query chunk's offset, and its size (the larger of its two uses).
const XS4: u32 = TK / 4u + 1u;
const RAWQ: u32 = KC * XS4;
const SW4: u32 = max(RAWQ + KC * (TQ / 4u + 1u), TQ * XS4);
const QA4: u32 = (QA + 3u) / 4u;
// Keys each half of the workgroup stages (by groups of 4).
const KH: u32 = TK / 2u;
// The unit roundoff 2⁻²⁴, and twice the expansion's first-order error
// bound in units of N = ‖q'‖² + ‖x'‖² (docs/numerics.md).
const U: f32 = 5.9604645e-8;
const GAMMA: f32 = 2.0 * f32(KS + (D + KS - 1u) / KS + 11u) * U;
// t of a key that does not count (past the step's keys, or the row's own).
const NO_KEY: f32 = -1.0;

// Params, the bindings and block_inv_h: row_state.wgsl.

var<workgroup> sq: array<vec4<f32>, QC * QS4>;
var<workgroup> sw: array<vec4<f32>, SW4>;
var<workgroup> sy: array<vec4<f32>, TK * QA4>;
// ‖x'‖² of the step's keys, in two halves (coordinates even and odd).
var<workgroup> xn: array<vec4<f32>, TK / 2u>;
var<workgroup> fb_rows: atomic<u32>;
var<workgroup> fb_any: u32;

// Coordinate k of the centre: the window's first key.
fn centre(k: u32) -> f32 {
    return keys[p.kbase * D + k];
}

// Stages coordinates c0 + kl (kl = lid mod KC) of the tile's 64 query
// rows into sq (centred, at coordinate `at`) or, raw, into sw's re-measure
// chunk: each half of the workgroup 32 rows, four rows to a vec4 store.
fn stage_queries(lid: u32, tile_row0: u32, c0: u32, at: u32, centred: bool) {
    let kl = lid % KC;
    let half = lid / KC;
    let k = c0 + kl;
    let kin = k < D;
    var ck = 0.0;
    if centred && kin {
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
        let unit = half * (TQ / 8u) + g;
        if centred {
            sq[(at + kl) * QS4 + unit] = v;
        } else {
            sw[RAWQ + kl * (TQ / 4u + 1u) + unit] = v;
        }
    }
}

// Stages coordinates c0 + kl of the step's keys kb.. (count of them, the
// rest zero) into sw, centred or raw: each half 16 keys, four to a store.
fn stage_keys(lid: u32, kb: u32, count: u32, c0: u32, centred: bool) {
    let kl = lid % KC;
    let half = lid / KC;
    let k = c0 + kl;
    let kin = k < D;
    var ck = 0.0;
    if centred && kin {
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

// log₂ of the exponential profiles' weight (LOG2E · ln k, rounded alike).
fn log2_weight(tr: f32) -> f32 {
    if PROFILE == PROFILE_GAUSSIAN {
        return tr * (-0.5 * LOG2E);
    }
    return sqrt(tr) * -LOG2E;
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let is_exp = profile_is_exp();
    let tile_row0 = wid.x * TQ;
    let i = tile_row0 + lid;
    let live = i < p.rows;
    // Which 8 × 4 block of the 64 × 32 tile this invocation forms.
    let br = lid / (TK / MK);
    let bk = lid % (TK / MK);
    // The key whose ‖x'‖² this invocation sums (half of its coordinates).
    let nk = lid % TK;
    let nh = lid / TK;
    if lid == 0u {
        atomicStore(&fb_rows, 0u);
    }

    // The queries, centred (once for the dispatch when they stay), and
    // ‖q'‖² of this invocation's row, in chunks of KC.
    var qnorm = 0.0;
    for (var c0 = 0u; c0 < D; c0 += KC) {
        stage_queries(lid, tile_row0, c0, sq_at(c0), true);
        workgroupBarrier();
        for (var k0 = 0u; k0 < KC; k0 += KS) {
            var part = 0.0;
            for (var kk = k0; kk < k0 + KS; kk++) {
                let v = sq[(sq_at(c0) + kk) * QS4 + lid / 4u][lid % 4u];
                part = fma(v, v, part);
            }
            qnorm += part;
        }
        workgroupBarrier();
    }
    var own = 0xffffffffu;
    if live && (p.flags & EXCLUDE_SELF) != 0u {
        own = p.row0 + i - p.key0;
    }
    var m = select(0.0, M_START, is_exp);
    var s = 0.0;
    var u: array<f32, QA>;
    var tmin = T_FAR;

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
                stage_queries(lid, tile_row0, c0, 0u, true);
            }
            stage_keys(lid, kb, count, c0, true);
            workgroupBarrier();
            var npart = 0.0;
            for (var k2 = 0u; k2 < KC / 2u; k2++) {
                let v = sw[(2u * k2 + nh) * XS4 + nk / 4u][nk % 4u];
                npart = fma(v, v, npart);
            }
            knorm += npart;
            let qb = sq_at(c0) * QS4 + 2u * br;
            for (var k0 = 0u; k0 < KC; k0 += KS) {
                var part: array<f32, MR * MK>;
                for (var kk = k0; kk < k0 + KS; kk++) {
                    let a0 = sq[qb + kk * QS4];
                    let a1 = sq[qb + kk * QS4 + 1u];
                    let b = sw[kk * XS4 + bk];
                    for (var r = 0u; r < 4u; r++) {
                        for (var c = 0u; c < MK; c++) {
                            part[r * MK + c] = fma(a0[r], b[c], part[r * MK + c]);
                            part[(r + 4u) * MK + c] = fma(a1[r], b[c], part[(r + 4u) * MK + c]);
                        }
                    }
                }
                for (var e = 0u; e < MR * MK; e++) {
                    acc[e] += part[e];
                }
            }
            workgroupBarrier();
        }
        // The dot products to their rows, the norms, the keys' values.
        for (var r = 0u; r < MR; r++) {
            let e = r * MK;
            sw[(br * MR + r) * XS4 + bk] = vec4<f32>(acc[e], acc[e + 1u], acc[e + 2u], acc[e + 3u]);
        }
        xn[nh * (TK / 4u) + nk / 4u][nk % 4u] = knorm;
        for (var e = lid; e < TK * QT; e += WG) {
            let j = e / QA;
            let c = e - j * QA;
            var y = 0.0;
            if j < count {
                y = vals[(kb + j) * p.q_stride + p.c0 + c];
            }
            sy[j * QA4 + c / 4u][c % 4u] = y;
        }
        workgroupBarrier();

        // This row's t, NO_KEY for keys that do not count; whether the
        // expansion is accurate enough for the row and step.
        let jo = own - base;
        var tt: array<f32, TK>;
        var amin = 3.0e38;
        var xmax = 0.0;
        for (var jj = 0u; jj < TK / 4u; jj++) {
            let dv = sw[lid * XS4 + jj];
            let xv = xn[jj] + xn[TK / 4u + jj];
            for (var c = 0u; c < 4u; c++) {
                let j = 4u * jj + c;
                let t = max(qnorm + xv[c] - 2.0 * dv[c], 0.0);
                let counts = j < count && j != jo;
                tt[j] = select(NO_KEY, t, counts);
                amin = min(amin, select(3.0e38, t, counts));
                xmax = max(xmax, xv[c]);
            }
        }
        var allow = 1.0e-4 / p.inv_h2;
        if PROFILE == PROFILE_LAPLACIAN || PROFILE == PROFILE_TRIANGULAR {
            allow *= 2.0 * sqrt(amin * p.inv_h2);
        }
        let bound = GAMMA * (qnorm + xmax);
        let redo = live && !(bound <= max(allow, f32(D + 2u) * U * amin));
        if redo {
            atomicOr(&fb_rows, 1u);
        }
        workgroupBarrier();
        if lid == 0u {
            fb_any = atomicExchange(&fb_rows, 0u);
        }
        // A step whose rows all keep the expansion is the rule; one that
        // re-measures is what the data asks for (docs/gpu-cost.md).
        // cost: rare
        if workgroupUniformLoad(&fb_any) != 0u {
            // Some row measures the step's keys by differences: the raw
            // keys and queries, chunk by chunk, (x − q)² in coordinate order.
            var td: array<f32, TK>;
            for (var c0 = 0u; c0 < D; c0 += KC) {
                stage_keys(lid, kb, count, c0, false);
                stage_queries(lid, tile_row0, c0, 0u, false);
                workgroupBarrier();
                if redo {
                    for (var kk = 0u; kk < KC; kk++) {
                        let qv = sw[RAWQ + kk * (TQ / 4u + 1u) + lid / 4u][lid % 4u];
                        for (var jj = 0u; jj < TK / 4u; jj++) {
                            let xv = sw[kk * XS4 + jj];
                            for (var c = 0u; c < 4u; c++) {
                                let df = xv[c] - qv;
                                td[4u * jj + c] = fma(df, df, td[4u * jj + c]);
                            }
                        }
                    }
                }
                workgroupBarrier();
            }
            if redo {
                for (var j = 0u; j < TK; j++) {
                    tt[j] = select(NO_KEY, td[j], tt[j] != NO_KEY);
                }
            }
        }

        if live {
            // The step's weights, as local_mean.wgsl with one row.
            var ss = 0.0;
            var su: array<f32, QA>;
            let m0 = m;
            for (var j0 = 0u; j0 < TK; j0 += C) {
                var lw: array<f32, C>;
                for (var c = 0u; c < C; c++) {
                    let tr = tt[j0 + c] * p.inv_h2;
                    let has = tr < T_FAR && tr >= 0.0;
                    if is_exp {
                        lw[c] = select(NEG_BIG, log2_weight(tr), has);
                        tmin = min(tmin, select(T_FAR, tr, has));
                    } else {
                        lw[c] = select(0.0, profile_weight(tr), has);
                    }
                }
                if is_exp {
                    var cm = lw[0];
                    for (var c = 1u; c < C; c++) {
                        cm = max(cm, lw[c]);
                    }
                    let mn = max(m, cm);
                    let sc = exp2(m - mn);
                    m = mn;
                    ss *= sc;
                    for (var q = 0u; q < QT; q++) {
                        su[q] *= sc;
                    }
                }
                for (var c = 0u; c < C; c++) {
                    let w = select(lw[c], exp2(lw[c] - m), is_exp);
                    ss += w;
                    for (var g = 0u; g < QA4; g++) {
                        let yv = sy[(j0 + c) * QA4 + g];
                        for (var q = 4u * g; q < min(4u * g + 4u, QT); q++) {
                            su[q] = fma(w, yv[q % 4u], su[q]);
                        }
                    }
                }
            }
            let sc = select(1.0, exp2(m0 - m), is_exp);
            s = fma(s, sc, ss);
            for (var q = 0u; q < QT; q++) {
                u[q] = fma(u[q], sc, su[q]);
            }
        }
        workgroupBarrier();
    }

    if live {
        var st: RowState;
        st.m = nearest_log_weight(tmin);
        st.s = s;
        for (var q = 0u; q < QT; q++) {
            st.u[q] = u[q];
        }
        end_row(i, wid.y, st);
    }
}

// Local means from inner-product tiles, for d ≥ 32 (docs/numerics.md,
// "Inner products (larger `d`, GPU)"): the GPU twin of the CPU's panels.
//
// A workgroup takes TQ = 64 query rows against TK = 32 keys at a time.
// The squared distances come from t = ‖q'‖² + ‖x'‖² − 2 q'·x', with
// q' = q − c and x' = x − c centred on the window's first key c: the
// 64 × 32 dot products are a register-blocked tile (each invocation an
// 8-row × 4-key block), over chunks of KC = 16 coordinates staged through
// workgroup memory, each chunk summed apart and the chunk sums added (the
// rounding grows with KC + ⌈D/KC⌉, not D). Nothing per query lives in
// private arrays of D floats, so no D spills to local memory.
//
// Per row and step, the expansion is used only where its error bound
// γ·(‖q'‖² + max ‖x'‖²) is within 10⁻⁴ in t (scaled by 2√t_min for the √t
// profiles) or within the direct form's own bound at the step's nearest
// key; otherwise that row measures the step's keys by differences.
//
// Then each invocation takes one row of the tile and accumulates its 32
// weights exactly as local_mean.wgsl does with R = 1: log₂ units, one
// maximum update per chunk of C keys, two-level sums, the nearest key's t
// tracked for m. Windows, key splits (partial + merge_splits), flags and
// finish_row are local_mean.wgsl's.
//
// Template constants (src/gpu/shaders/): D dimension, QT value columns
// in this pass (0: row sums only), QA = max(QT, 1). Generated: WG (= 64 =
// TQ, the tile's 8 × 8 blocks), TQ, TK, KC (the tile sizes the planner
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
const STATE: u32 = 2u + QA;
// TQ (query rows), TK (keys a step), KC (coordinates a chunk): generated.
const MR: u32 = 8u;
const MK: u32 = 4u;
// The unit roundoff 2⁻²⁴, and twice the expansion's first-order error
// bound in units of N = ‖q'‖² + ‖x'‖² (docs/numerics.md).
const U: f32 = 5.9604645e-8;
const GAMMA: f32 = 2.0 * (f32(KC) + f32((D + KC - 1u) / KC) + 11.0) * U;

// Params, the bindings and block_inv_h: row_state.wgsl.

var<workgroup> sq: array<f32, TQ * KC>;
var<workgroup> sx: array<f32, TK * KC>;
var<workgroup> st_t: array<f32, TQ * TK>;
var<workgroup> sy: array<f32, TK * QA>;
var<workgroup> xn: array<f32, TK>;
var<workgroup> qn: array<f32, TQ>;

// Coordinate k of the centre: the window's first key.
fn centre(k: u32) -> f32 {
    return keys[p.kbase * D + k];
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

    // ‖q'‖² of this invocation's row, in chunks of KC.
    var qnorm = 0.0;
    if live {
        for (var c0 = 0u; c0 < D; c0 += KC) {
            var part = 0.0;
            for (var k = c0; k < min(c0 + KC, D); k++) {
                let v = queries[i * D + k] - centre(k);
                part = fma(v, v, part);
            }
            qnorm += part;
        }
    }
    qn[lid] = qnorm;
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
    for (var base = k_lo; base < k_hi; base += TK) {
        let count = min(TK, k_hi - base);
        let kb = p.kbase + base;
        // The tile's dot products and the keys' ‖x'‖², chunk by chunk.
        var acc: array<f32, MR * MK>;
        var knorm = 0.0;
        for (var c0 = 0u; c0 < D; c0 += KC) {
            for (var e = lid; e < TQ * KC; e += WG) {
                let r = e / KC;
                let k = c0 + e % KC;
                let row = tile_row0 + r;
                var v = 0.0;
                if row < p.rows && k < D {
                    v = queries[row * D + k] - centre(k);
                }
                sq[e] = v;
            }
            for (var e = lid; e < TK * KC; e += WG) {
                let j = e / KC;
                let k = c0 + e % KC;
                var v = 0.0;
                if j < count && k < D {
                    v = keys[(kb + j) * D + k] - centre(k);
                }
                sx[e] = v;
            }
            workgroupBarrier();
            if lid < TK {
                var part = 0.0;
                for (var kk = 0u; kk < KC; kk++) {
                    let v = sx[lid * KC + kk];
                    part = fma(v, v, part);
                }
                knorm += part;
            }
            var part: array<f32, MR * MK>;
            for (var kk = 0u; kk < KC; kk++) {
                var a: array<f32, MR>;
                for (var r = 0u; r < MR; r++) {
                    a[r] = sq[(br * MR + r) * KC + kk];
                }
                for (var c = 0u; c < MK; c++) {
                    let b = sx[(bk * MK + c) * KC + kk];
                    for (var r = 0u; r < MR; r++) {
                        part[r * MK + c] = fma(a[r], b, part[r * MK + c]);
                    }
                }
            }
            for (var e = 0u; e < MR * MK; e++) {
                acc[e] += part[e];
            }
            workgroupBarrier();
        }
        if lid < TK {
            xn[lid] = knorm;
        }
        for (var e = lid; e < count * QT; e += WG) {
            let j = e / QA;
            let c = e - j * QA;
            sy[e] = vals[(kb + j) * p.q_stride + p.c0 + c];
        }
        workgroupBarrier();
        for (var r = 0u; r < MR; r++) {
            let row = br * MR + r;
            for (var c = 0u; c < MK; c++) {
                let key = bk * MK + c;
                st_t[row * TK + key] = max(qn[row] + xn[key] - 2.0 * acc[r * MK + c], 0.0);
            }
        }
        workgroupBarrier();
        if live {
            // Whether the expansion is accurate enough for this row and step.
            var amin = 3.0e38;
            var xmax = 0.0;
            for (var j = 0u; j < count; j++) {
                amin = min(amin, st_t[lid * TK + j]);
                xmax = max(xmax, xn[j]);
            }
            var allow = 1.0e-4 / p.inv_h2;
            if PROFILE == PROFILE_LAPLACIAN || PROFILE == PROFILE_TRIANGULAR {
                allow *= 2.0 * sqrt(amin * p.inv_h2);
            }
            let bound = GAMMA * (qnorm + xmax);
            if !(bound <= max(allow, f32(D + 2u) * U * amin)) {
                // Not here: this row measures the step's keys by differences.
                for (var j = 0u; j < count; j++) {
                    var t = 0.0;
                    for (var k = 0u; k < D; k++) {
                        let df = keys[(kb + j) * D + k] - queries[i * D + k];
                        t = fma(df, df, t);
                    }
                    st_t[lid * TK + j] = t;
                }
            }
            // The step's weights, as local_mean.wgsl with one row.
            var ss = 0.0;
            var su: array<f32, QA>;
            let m0 = m;
            for (var j0 = 0u; j0 < count; j0 += C) {
                var lw: array<f32, C>;
                for (var c = 0u; c < C; c++) {
                    let j = min(j0 + c, count - 1u);
                    let tr = st_t[lid * TK + j] * p.inv_h2;
                    let has = j0 + c < count && tr < T_FAR && base + j0 + c != own;
                    if is_exp {
                        lw[c] = select(NEG_BIG, LOG2E * profile_log_weight(tr), has);
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
                    let j = min(j0 + c, count - 1u);
                    let w = select(lw[c], exp2(lw[c] - m), is_exp);
                    ss += w;
                    for (var q = 0u; q < QT; q++) {
                        su[q] = fma(w, sy[j * QA + q], su[q]);
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

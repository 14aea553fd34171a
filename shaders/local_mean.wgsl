// Fused, streaming Nadaraya–Watson local mean (docs/numerics.md).
//
// Register blocking: each invocation keeps R query rows (rows
// wid.x·WG·R + r·WG + lid), so every staged key is read from workgroup
// memory once for R rows. Keys and their value columns are staged through
// workgroup memory STAGE at a time, as vec4 groups (D4 per key, QA4 per
// value row, zero-padded): one 16-byte load feeds four coordinates or
// columns of every row. Each row's state (m, s, u[QT]) lives
// in registers with m in log₂ units:
//   m = largest log₂-weight seen (0 for non-exponential profiles),
//   s = Σ 2^{w−m},  u = Σ 2^{w−m}·y,
// and leaves the invocation in natural-log units (the RowState of
// row_state.wgsl, whose merge is shared by every pass and by the host) as
// the profile's log-weight of the nearest key's t, tracked alongside: the
// very value every other pass computes for that key, so a pass that
// weighs keys against m (the normalized kernel matrix) gives the nearest
// key exactly e⁰, however large |m| is (a product of m₂ by ln 2 would be
// off by its rounding, thousands at |m| ~ 10¹⁰).
// The exponential profiles raise m once per chunk of C keys, to the
// chunk's largest log-weight, with one exp2 rescaling the stage's sums:
// no per-pair branch on the running maximum, and every weight 2^{w−m}
// is at most 1. A stage's sums are added to the row's at the stage's end
// (two-level summation), rescaled once.
//
// A dispatch sweeps a window of p.keys keys starting at p.kbase in the
// bound key tile. With a key split (p.splits > 1) workgroup_id.y picks a
// slice of p.split_keys keys and the slice's states go to `partial`, for
// merge_splits (row_state.wgsl); otherwise successive windows and key
// tiles are merged through `state` and the last finalizes into `out`
// (NaN + counted when the row has no mass), by finish_row.
//
// Template constants (src/gpu/shaders/): D dimension, QT value columns
// in this pass (0: row sums only), QA = max(QT, 1), STAGE staged keys, R
// query rows per invocation, MASKED (1: masked distances for imputation,
// missing coordinates stored as values at or above MISSING). Generated:
// WG, C (keys per chunk sharing one update of the running maximum), the
// flag bits FIRST_TILE, LAST_TILE, EXCLUDE_SELF, and MISSING.

#import consts
#import profiles
#import product
#import row_state

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const STAGE: u32 = {{STAGE}}u;
const MASKED: u32 = {{MASKED}}u;
const R: u32 = {{R}}u;
const STATE: u32 = 2u + QA;
const D4: u32 = (D + 3u) / 4u;
const QA4: u32 = (QA + 3u) / 4u;
// LOG2E, M_START (consts) and NEG_BIG (a key without weight;
// profile_consts, through profiles): see row_state.wgsl.

// Params, the bindings and block_inv_h: row_state.wgsl.

var<workgroup> stage_x: array<vec4<f32>, STAGE * D4>;
var<workgroup> stage_y: array<vec4<f32>, STAGE * QA4>;

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let is_exp = profile_is_exp();
    let first_row = wid.x * WG * R + lid;

    var qx: array<f32, R * D>;
    // Index within this window of each row's own key (leave-one-out), or
    // an index no key has.
    var own: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        let i = first_row + r * WG;
        own[r] = 0xffffffffu;
        if i < p.rows {
            for (var k = 0u; k < D; k++) {
                qx[r * D + k] = queries[i * D + k];
            }
            if (p.flags & EXCLUDE_SELF) != 0u {
                own[r] = p.row0 + i - p.key0;
            }
        }
    }
    // PRODUCT: each coordinate's 1/h_b; differences are scaled before they
    // are squared (docs/numerics.md, "Product kernels").
    var cscale: array<f32, D>;
    for (var k = 0u; k < D; k++) {
        cscale[k] = coord_inv_h(k);
    }
    // Row states (m in log₂ units) and the current stage's sums.
    var m: array<f32, R>;
    var s: array<f32, R>;
    var u: array<f32, R * QA>;
    var ss: array<f32, R>;
    var su: array<f32, R * QA>;
    // The smallest t with weight seen (T_FAR: none).
    var tmin: array<f32, R>;
    for (var r = 0u; r < R; r++) {
        m[r] = select(0.0, M_START, is_exp);
        tmin[r] = T_FAR;
    }

    // This workgroup's slice of the window (all of it without a split).
    let k_lo = min(wid.y * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    for (var base = k_lo; base < k_hi; base += STAGE) {
        let count = min(STAGE, k_hi - base);
        let kb = p.kbase + base;
        for (var e = lid; e < count * D4; e += WG) {
            let j = e / D4;
            let k0 = (e - j * D4) * 4u;
            var v = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                if k0 + c < D {
                    v[c] = keys[(kb + j) * D + k0 + c];
                }
            }
            stage_x[e] = v;
        }
        if QT > 0u {
            for (var e = lid; e < count * QA4; e += WG) {
                let j = e / QA4;
                let c0 = (e - j * QA4) * 4u;
                var v = vec4<f32>(0.0);
                for (var c = 0u; c < 4u; c++) {
                    if c0 + c < QT {
                        v[c] = vals[(kb + j) * p.q_stride + p.c0 + c0 + c];
                    }
                }
                stage_y[e] = v;
            }
        }
        workgroupBarrier();
        // The maximum the rows' sums are relative to at the stage's start.
        var m0: array<f32, R>;
        for (var r = 0u; r < R; r++) {
            m0[r] = m[r];
            ss[r] = 0.0;
            for (var c = 0u; c < QT; c++) {
                su[r * QA + c] = 0.0;
            }
        }
        // cost: hot loop
        for (var j0 = 0u; j0 < count; j0 += C) {
            // Each chunk key's log₂-weight (exponential profiles) or weight,
            // per row; NEG_BIG (or 0) where it has none.
            var lw: array<f32, R * C>;
            for (var c = 0u; c < C; c++) {
                let j = min(j0 + c, count - 1u);
                // t: the squared distance over the row (radial) or over the
                // current block (PRODUCT, whose carrier sums the blocks').
                var t: array<f32, R>;
                var seen: array<u32, R>;
                var carrier: array<f32, R>;
                for (var k4 = 0u; k4 < D4; k4++) {
                    let xv = stage_x[j * D4 + k4];
                    for (var c4 = 0u; c4 < 4u; c4++) {
                        let k = k4 * 4u + c4;
                        if k >= D {
                            break;
                        }
                        let xk = xv[c4];
                        for (var r = 0u; r < R; r++) {
                            let qk = qx[r * D + k];
                            let df = select(xk - qk, (xk - qk) * cscale[k], PRODUCT);
                            // MASKED: a coordinate either row lacks (stored as a
                            // value at or above MISSING) is left out.
                            if MASKED == 0u || max(abs(xk), abs(qk)) < MISSING {
                                t[r] = fma(df, df, t[r]);
                                seen[r] += 1u;
                            }
                            if PRODUCT && block_last(k) {
                                if MASKED == 0u {
                                    carrier[r] += block_t(k, t[r]);
                                } else if seen[r] > 0u {
                                    carrier[r] += block_t(k, t[r] * (f32(block_dims(k)) / f32(seen[r])));
                                } else {
                                    // No coordinate of the block shared: no weight.
                                    carrier[r] += T_FAR;
                                }
                                t[r] = 0.0;
                                seen[r] = 0u;
                            }
                        }
                    }
                }
                for (var r = 0u; r < R; r++) {
                    var tr: f32;
                    if PRODUCT {
                        tr = carrier[r];
                    } else if MASKED != 0u {
                        // nan_euclidean's rescaling; no shared coordinate, no weight.
                        tr = select(T_FAR, t[r] * (f32(D) / f32(max(seen[r], 1u))) * p.inv_h2, seen[r] > 0u);
                    } else {
                        tr = t[r] * p.inv_h2;
                    }
                    let has = j0 + c < count && tr < T_FAR && base + j0 + c != own[r];
                    if is_exp {
                        lw[r * C + c] = select(NEG_BIG, LOG2E * profile_log_weight(tr), has);
                        tmin[r] = min(tmin[r], select(T_FAR, tr, has));
                    } else {
                        lw[r * C + c] = select(0.0, profile_weight(tr), has);
                    }
                }
            }
            if is_exp {
                // One update of each row's maximum for the chunk.
                for (var r = 0u; r < R; r++) {
                    var cm = lw[r * C];
                    for (var c = 1u; c < C; c++) {
                        cm = max(cm, lw[r * C + c]);
                    }
                    let mn = max(m[r], cm);
                    let sc = exp2(m[r] - mn);
                    m[r] = mn;
                    ss[r] *= sc;
                    for (var c = 0u; c < QT; c++) {
                        su[r * QA + c] *= sc;
                    }
                }
            }
            for (var c = 0u; c < C; c++) {
                let j = min(j0 + c, count - 1u);
                var w: array<f32, R>;
                for (var r = 0u; r < R; r++) {
                    let v = lw[r * C + c];
                    w[r] = select(v, exp2(v - m[r]), is_exp);
                    ss[r] += w[r];
                }
                // Row sums only (QT = 0): no values staged, none read.
                for (var q4 = 0u; q4 < select(0u, QA4, QT > 0u); q4++) {
                    let yv = stage_y[j * QA4 + q4];
                    for (var c4 = 0u; c4 < 4u; c4++) {
                        let q = q4 * 4u + c4;
                        if q >= QT {
                            break;
                        }
                        for (var r = 0u; r < R; r++) {
                            su[r * QA + q] = fma(w[r], yv[c4], su[r * QA + q]);
                        }
                    }
                }
            }
        }
        // The stage's sums into the rows' (relative to m0 until now).
        for (var r = 0u; r < R; r++) {
            let sc = select(1.0, exp2(m0[r] - m[r]), is_exp);
            s[r] = fma(s[r], sc, ss[r]);
            for (var c = 0u; c < QT; c++) {
                u[r * QA + c] = fma(u[r * QA + c], sc, su[r * QA + c]);
            }
        }
        workgroupBarrier();
    }

    for (var r = 0u; r < R; r++) {
        let i = first_row + r * WG;
        if i < p.rows {
            var st: RowState;
            st.m = nearest_log_weight(tmin[r]);
            st.s = s[r];
            for (var c = 0u; c < QT; c++) {
                st.u[c] = u[r * QA + c];
            }
            end_row(i, wid.y, st);
        }
    }
}

// Fused, streaming Nadaraya–Watson local mean (docs/numerics.md).
//
// Register blocking: each invocation keeps R query rows (rows
// wid.x·WG·R + r·WG + lid), so every staged key is read from workgroup
// memory once for R rows. Keys and their value columns are staged through
// workgroup memory STAGE at a time, in chunks of C keys, as vec4 groups
// (D4 per key, QA4 per value row, zero-padded): one 16-byte load feeds
// four coordinates or columns of every row, addressed by the chunk and a
// constant offset. A stage's last chunk is padded with keys at infinite
// distance (weight exactly 0), so no key of the hot loop is tested.
//
// Each key gets a key value v (the row's distance measure, v ≥ 0,
// increasing with t) and its weight is 2^(ref − λ(v)), where the row's
// reference ref = λ(V) and V is the smallest v seen: the nearest key weighs
// exactly 2⁰ (same expression, same rounding) and every weight is at most
// 1. By FORM (a template constant):
//   FORM_SCALED  gaussian, coordinates pre-scaled by √(½·log₂e/h²):
//                v = t' = Σ(x' − q')², λ(v) = v, so a pair costs its
//                distance, a min, one subtraction and the exp2;
//   FORM_EXACT   gaussian of v (v = t unscaled, the masked rescaled t, or a
//                product kernel's carrier), λ(v) = v·½·log₂e·(1/h²): V is
//                the nearest key's t exactly as the other passes compute it;
//   FORM_ROOT    laplacian, λ(v) = √(v·log₂²e/h²), V likewise exact;
//   FORM_PLAIN   the other profiles: plain weights k(t), no reference.
// V and ref move once per chunk of C keys, to the chunk's smallest v (a
// min per pair), with one exp2 rescaling the stage's sums: no per-pair
// branch, no per-pair select for the nearest key. A stage's sums are
// added to the row's at the stage's end (two-level summation).
//
// The state leaves the invocation as the RowState of row_state.wgsl (m in
// natural-log units, whose merge is shared by every pass and by the host).
// FORM_EXACT and FORM_ROOT give m as the profile's log-weight of the
// nearest key's t — the very value every other pass computes for that
// key, so a pass that weighs keys against m (the normalized kernel matrix,
// which asks for FORM_EXACT) gives the nearest key exactly e⁰, however
// large |m| is. FORM_SCALED gives m = −V·ln 2, consistent with its sums to
// the rounding of m (a log-sum, a density, a merge, a local mean need no
// more). A row whose nearest key lies at t ≥ T_FAR (FORM_SCALED: V at or
// beyond ½·log₂e·T_FAR) leaves the empty state: the host finishes it.
// FORM_SCALED clamps a pre-scaled query coordinate to the f32 range, so a
// coordinate whose scaled value overflows is far from every key, never NaN.
//
// A dispatch sweeps a window of p.keys keys starting at p.kbase in the
// bound key tile, or (SPANS = 1) the key ranges `spans` lists for its
// workgroup: a key set's cell index, whose keys are sorted by grid cell or
// k-d leaf and whose queries come sorted likewise, so each workgroup's
// rows visit only the keys within the kernel's reach of them. `spans`
// holds, per dispatch window w and workgroup g, a head at
// 2·(w·groups + g): the offset of its first range and the number of
// ranges; each range is two u32, its first key and one past its last
// within the bound tile (never empty). The bounds reach every invocation
// through workgroupUniformLoad (the key loop holds barriers). With a key split (p.splits > 1) workgroup_id.y picks a
// slice of p.split_keys keys and the slice's states go to `partial`, for
// merge_splits (row_state.wgsl); otherwise successive windows and key
// tiles are merged through `state` and the last finalizes into `out`
// (NaN + counted when the row has no mass), by finish_row.
//
// Template constants (src/gpu/shaders/): D dimension, QT value columns
// in this pass (0: row sums only), QA = max(QT, 1), STAGE staged keys, C
// keys per chunk (STAGE a multiple of C), R query rows per invocation,
// MASKED (1: masked distances for imputation, missing coordinates stored
// as values at or above MISSING), FORM (above), EXCL (1: leave each row's
// own key out; queries are the keys), SPANS (1: the key ranges of
// `spans`, never with a key split or EXCL). Generated: WG, the FORM_* codes,
// FIRST_TILE, LAST_TILE, LOG2E and MISSING.
//
// METRIC (a pipeline override of the module `metric`): the distance r of
// k(r/h). 0: Euclidean, t = Σ(x − q)² as above. The others (never with
// FORM_SCALED, MASKED or PRODUCT: the host asks for FORM_EXACT) accumulate
// the metric's rank over the coordinates (metric_step) and turn it into
// t = r² at the key's end (metric_t); a padding key gets t = +∞.

#import consts
#import profiles
#import product
#import row_state
#import metric

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const STAGE: u32 = {{STAGE}}u;
const C: u32 = {{C}}u;
const MASKED: u32 = {{MASKED}}u;
const R: u32 = {{R}}u;
const FORM: u32 = {{FORM}}u;
const EXCL: u32 = {{EXCL}}u;
const SPANS: u32 = {{SPANS}}u;
const STATE: u32 = 2u + QA;
const D4: u32 = (D + 3u) / 4u;
const QA4: u32 = (QA + 3u) / 4u;
const CHUNKS: u32 = STAGE / C;
// ½·log₂e: a gaussian's log₂-weight per unit of t.
const KAPPA: f32 = 0.5 * LOG2E;
// The largest finite f32.
const F32_MAX: f32 = 3.40282347e38;
// NEG_BIG (a key without weight; profile_consts, through profiles): see
// row_state.wgsl.

// Params, the bindings and block_inv_h: row_state.wgsl.

// SPANS: the key ranges of each workgroup (above), read by one
// invocation and handed to all through workgroup memory: the head (first
// range, ranges), then each range in turn.
@group(0) @binding(8) var<storage, read> spans: array<u32>;
var<workgroup> span_head: vec2<u32>;
var<workgroup> span_range: vec2<u32>;

var<workgroup> stage_x: array<array<vec4<f32>, C * D4>, CHUNKS>;
var<workgroup> stage_y: array<array<vec4<f32>, C * QA4>, CHUNKS>;

// +∞: the coordinates of a padding key, the key value of a key without
// weight (formed at run time: WGSL has no infinite literal).
fn infinity() -> f32 {
    return bitcast<f32>(0x7f800000u | (p.flags & 0u));
}

// The row's reference for its smallest key value v (FORM_PLAIN: none);
// `lam` is the λ scale of FORM_EXACT (½·log₂e/h², or ½·log₂e for a
// product's carrier) and FORM_ROOT (log₂²e/h²).
fn reference(v: f32, lam: f32) -> f32 {
    if FORM == FORM_EXACT {
        return v * lam;
    }
    if FORM == FORM_ROOT {
        return sqrt(v * lam);
    }
    return v;
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let first_row = wid.x * WG * R + lid;
    let inf = infinity();
    // t of a radial or masked key is Σ(x − q)² (times 1/h² at the end);
    // a product's carrier is already scaled.
    let t_scale = select(p.inv_h2, 1.0, PRODUCT);
    let lam = select(KAPPA, LOG2E * LOG2E, FORM == FORM_ROOT) * t_scale;
    // FORM_SCALED: coordinates times √(½·log₂e/h²), so t' is the pair's
    // log₂-weight (negated).
    let a = select(1.0, sqrt(KAPPA * p.inv_h2), FORM == FORM_SCALED);

    var qx: array<f32, R * D>;
    // Index within this window of each row's own key (EXCL), or an index
    // no key has.
    var own: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        let i = first_row + r * WG;
        own[r] = 0xffffffffu;
        if i < p.rows {
            for (var k = 0u; k < D; k++) {
                let v = queries[i * D + k];
                qx[r * D + k] = select(v, clamp(v * a, -F32_MAX, F32_MAX), FORM == FORM_SCALED);
            }
            if EXCL == 1u {
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
    // Row states: the smallest key value v, its reference, the sums
    // relative to it, and the current stage's sums.
    var vmin: array<f32, R>;
    var rf: array<f32, R>;
    var s: array<f32, R>;
    var u: array<f32, R * QA>;
    var ss: array<f32, R>;
    var su: array<f32, R * QA>;
    // Before any key: the largest v whose reference is finite, so no
    // difference of references is ∞ − ∞ (a key beyond it lies at
    // t ≥ T_FAR: its weight is 0 or the row is left empty).
    let v_start = select(F32_MAX, F32_MAX * 0.5 / lam, FORM != FORM_SCALED && lam > 1.0);
    for (var r = 0u; r < R; r++) {
        vmin[r] = v_start;
        rf[r] = reference(v_start, lam);
    }

    // The key ranges: this workgroup's spans in this window (SPANS), else
    // one, its slice of the window (all of it without a split).
    var first_span = 0u;
    var n_spans = 1u;
    if SPANS == 1u {
        if lid == 0u {
            let groups = (p.rows + WG * R - 1u) / (WG * R);
            let h = 2u * (p.span_window * groups + wid.x);
            span_head = vec2<u32>(spans[h], spans[h + 1u]);
        }
        let head = workgroupUniformLoad(&span_head);
        first_span = head.x;
        n_spans = head.y;
    }
    for (var sp = 0u; sp < n_spans; sp++) {
        var k_lo = min(wid.y * p.split_keys, p.keys);
        var k_hi = min(k_lo + p.split_keys, p.keys);
        if SPANS == 1u {
            // Written again only after the previous range's stages, whose
            // barriers every invocation has passed (ranges are never empty).
            if lid == 0u {
                let at = first_span + 2u * sp;
                span_range = vec2<u32>(spans[at], spans[at + 1u]);
            }
            let range = workgroupUniformLoad(&span_range);
            k_lo = range.x;
            k_hi = range.y;
        }
        for (var base = k_lo; base < k_hi; base += STAGE) {
            let count = min(STAGE, k_hi - base);
            // Whole chunks; the keys past `count` are padding.
            let chunks = (count + C - 1u) / C;
            let kb = p.kbase + base;
            for (var e = lid; e < chunks * C * D4; e += WG) {
                let j = e / D4;
                let k0 = (e - j * D4) * 4u;
                var v = vec4<f32>(0.0);
                for (var c = 0u; c < 4u; c++) {
                    if k0 + c < D {
                        v[c] = select(inf, keys[(kb + j) * D + k0 + c] * a, j < count);
                    }
                }
                stage_x[j / C][e - j / C * C * D4] = v;
            }
            if QT > 0u {
                for (var e = lid; e < chunks * C * QA4; e += WG) {
                    let j = e / QA4;
                    let c0 = (e - j * QA4) * 4u;
                    var v = vec4<f32>(0.0);
                    if j < count {
                        for (var c = 0u; c < 4u; c++) {
                            if c0 + c < QT {
                                v[c] = vals[(kb + j) * p.q_stride + p.c0 + c0 + c];
                            }
                        }
                    }
                    stage_y[j / C][e - j / C * C * QA4] = v;
                }
            }
            workgroupBarrier();
            // The references the rows' sums are relative to at the stage's start.
            var ref0: array<f32, R>;
            for (var r = 0u; r < R; r++) {
                ref0[r] = rf[r];
                ss[r] = 0.0;
                for (var c = 0u; c < QT; c++) {
                    su[r * QA + c] = 0.0;
                }
            }
            // cost: hot loop
            for (var ch = 0u; ch < chunks; ch++) {
                // Each chunk key's key value, per row (FORM_PLAIN: its weight).
                var kv: array<f32, R * C>;
                // EXCL: each row's own key within this chunk (C or more: none).
                var own_c: array<u32, R>;
                if EXCL == 1u {
                    for (var r = 0u; r < R; r++) {
                        own_c[r] = own[r] - (base + ch * C);
                    }
                }
                for (var c = 0u; c < C; c++) {
                    // t: the squared distance over the row (radial) or over the
                    // current block (PRODUCT, whose carrier sums the blocks').
                    var t: array<f32, R>;
                    var seen: array<u32, R>;
                    var carrier: array<f32, R>;
                    for (var k4 = 0u; k4 < D4; k4++) {
                        let xv = stage_x[ch][c * D4 + k4];
                        for (var c4 = 0u; c4 < 4u; c4++) {
                            let k = k4 * 4u + c4;
                            if k >= D {
                                break;
                            }
                            let xk = xv[c4];
                            for (var r = 0u; r < R; r++) {
                                let qk = qx[r * D + k];
                                var df = xk - qk;
                                if PRODUCT {
                                    df *= cscale[k];
                                }
                                // MASKED: a coordinate either row lacks (stored as a
                                // value at or above MISSING) is left out.
                                if MASKED == 0u && METRIC == 0u {
                                    t[r] = fma(df, df, t[r]);
                                } else if MASKED == 0u {
                                    t[r] = metric_step(t[r], df, k, stage_x[ch][c * D4][0], qx[r * D]);
                                } else if max(abs(xk), abs(qk)) < MISSING {
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
                        var v = t[r];
                        if METRIC != 0u {
                            v = metric_t(t[r], inf);
                        }
                        if PRODUCT {
                            v = carrier[r];
                        } else if MASKED != 0u {
                            // nan_euclidean's rescaling; no shared coordinate, no weight.
                            v = select(inf, t[r] * (f32(D) / f32(max(seen[r], 1u))), seen[r] > 0u);
                        }
                        if EXCL == 1u {
                            v = select(v, inf, own_c[r] == c);
                        }
                        if FORM == FORM_PLAIN {
                            let tr = v * t_scale;
                            v = select(0.0, profile_weight(tr), tr < T_FAR);
                        }
                        kv[r * C + c] = v;
                    }
                }
                // One move of each row's reference for the chunk.
                var sc: array<f32, R>;
                if FORM != FORM_PLAIN {
                    for (var r = 0u; r < R; r++) {
                        var cm = vmin[r];
                        for (var c = 0u; c < C; c++) {
                            cm = min(cm, kv[r * C + c]);
                        }
                        vmin[r] = cm;
                        var rn = cm;
                        if FORM == FORM_EXACT {
                            rn = cm * lam;
                        } else if FORM == FORM_ROOT {
                            rn = sqrt(cm * lam);
                        }
                        sc[r] = exp2(rn - rf[r]);
                        rf[r] = rn;
                        ss[r] *= sc[r];
                        for (var q = 0u; q < QT; q++) {
                            su[r * QA + q] *= sc[r];
                        }
                    }
                }
                for (var c = 0u; c < C; c++) {
                    var w: array<f32, R>;
                    for (var r = 0u; r < R; r++) {
                        let v = kv[r * C + c];
                        if FORM == FORM_PLAIN {
                            w[r] = v;
                        } else if FORM == FORM_SCALED {
                            w[r] = exp2(rf[r] - v);
                        } else if FORM == FORM_EXACT {
                            w[r] = exp2(rf[r] - v * lam);
                        } else {
                            w[r] = exp2(rf[r] - sqrt(v * lam));
                        }
                        ss[r] += w[r];
                    }
                    // Row sums only (QT = 0): no values staged, none read.
                    for (var q4 = 0u; q4 < select(0u, QA4, QT > 0u); q4++) {
                        let yv = stage_y[ch][c * QA4 + q4];
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
            // The stage's sums into the rows' (relative to ref0 until now).
            for (var r = 0u; r < R; r++) {
                let sc = select(exp2(rf[r] - ref0[r]), 1.0, FORM == FORM_PLAIN);
                s[r] = fma(s[r], sc, ss[r]);
                for (var c = 0u; c < QT; c++) {
                    u[r * QA + c] = fma(u[r * QA + c], sc, su[r * QA + c]);
                }
            }
            workgroupBarrier();
        }
    }

    for (var r = 0u; r < R; r++) {
        let i = first_row + r * WG;
        if i < p.rows {
            var st: RowState;
            // The nearest key's log-weight, and whether it lies within
            // the f32 range (else the empty state: the host finishes it).
            var near = true;
            st.m = 0.0;
            if FORM == FORM_SCALED {
                near = vmin[r] < KAPPA * T_FAR;
                st.m = -vmin[r] / LOG2E;
            } else if FORM != FORM_PLAIN {
                // s = 0: no key with a finite t at all.
                let tr = vmin[r] * t_scale;
                near = tr < T_FAR && s[r] > 0.0;
                st.m = profile_log_weight(tr);
            }
            if near {
                st.s = s[r];
                for (var c = 0u; c < QT; c++) {
                    st.u[c] = u[r * QA + c];
                }
            } else {
                st.m = NEG_BIG;
                st.s = 0.0;
                for (var c = 0u; c < QT; c++) {
                    st.u[c] = 0.0;
                }
            }
            end_row(i, wid.y, st);
        }
    }
}

// The leave-one-out error's row sums and their derivatives with respect
// to per-feature bandwidths, fused (docs/numerics.md, "Per-feature
// bandwidths"). The GPU twin of src/cpu/loo_grad.rs.
//
// The points arrive divided by their bandwidths (u = Δ/h is a plain
// difference). One invocation per row i (a point; its own key is left
// out); every other point is a key. Per row, in registers: the largest
// log-weight m (exponential profiles; 0 for the others), and relative to
// it S = Σ K, W_c = Σ K δ_c, G_a = Σ k' u_a², H_ac = Σ k' u_a² δ_c, with
// δ = y_j − y_i (targets centred on the row's own) and k' the profile's
// slope (relative to K for the exponential profiles, so the shift by m
// applies to G and H as to S and W: slope_of below).
//
// Keys and their targets are staged through workgroup memory STAGE at a
// time; a row's reference m moves once per chunk of C keys, to the
// chunk's largest log-weight, with one exp rescaling every sum. A key at
// t ≥ T_FAR (or where t overflows) has no weight; a row left without any
// keeps S = 0 and the host finishes it in f64 (far rows).
//
// A dispatch covers p.rows rows from p.row0 against the window of p.keys
// keys from p.key0; windows after the first (FIRST_TILE clear) merge into
// the row's record in `state` by the rule of types::merge_record. The
// record: m | S | W (Q) | G (D) | H (D·Q, feature-major).
//
// Template constants (src/gpu/shaders/): D features, Q target columns
// (≥ 1), STAGE staged keys. Generated: WG, C, FIRST_TILE, the profile
// codes, T_FAR, NEG_BIG, and COSINE_S0 … COSINE_S6
// (kernel::slope::COSINE_SLOPE_POLY).

#import consts
#import profiles

const D: u32 = {{D}}u;
const Q: u32 = {{Q}}u;
const STAGE: u32 = {{STAGE}}u;
const STATE: u32 = 2u + Q + D + D * Q;
// The smallest normal f32: below it t counts as 0 for the √t slopes.
const MIN_NORMAL: f32 = 1.17549435e-38;

struct Params {
    rows: u32,
    row0: u32,
    keys: u32,
    key0: u32,
    flags: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read> vals: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;

var<workgroup> sx: array<f32, STAGE * D>;
var<workgroup> sy: array<f32, STAGE * Q>;

// The slope k'(t) (kernel::slope): relative to the weight, k'/k, for
// the exponential profiles; 0 beyond a compact support.
fn slope_of(t: f32) -> f32 {
    if PROFILE == PROFILE_GAUSSIAN {
        return -0.5;
    }
    let half_root = select(-0.5 / sqrt(max(t, MIN_NORMAL)), 0.0, t < MIN_NORMAL);
    if PROFILE == PROFILE_LAPLACIAN {
        return half_root;
    }
    if PROFILE == PROFILE_EPANECHNIKOV {
        return select(0.0, -1.0, t < 1.0);
    }
    if PROFILE == PROFILE_TRIANGULAR {
        return select(0.0, half_root, t < 1.0);
    }
    if PROFILE == PROFILE_BIWEIGHT {
        return -2.0 * max(1.0 - t, 0.0);
    }
    if PROFILE == PROFILE_CAUCHY {
        let a = 1.0 + t;
        return -1.0 / (a * a);
    }
    if PROFILE == PROFILE_COSINE {
        var s = COSINE_S6;
        s = s * t + COSINE_S5;
        s = s * t + COSINE_S4;
        s = s * t + COSINE_S3;
        s = s * t + COSINE_S2;
        s = s * t + COSINE_S1;
        s = s * t + COSINE_S0;
        return select(0.0, s, t < 1.0);
    }
    return 0.0;
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let local = wid.x * WG + lid;
    let in_range = local < p.rows;
    let i = p.row0 + local;
    let is_log = profile_is_exp();

    var xi: array<f32, D>;
    var yi: array<f32, Q>;
    if in_range {
        for (var a = 0u; a < D; a++) {
            xi[a] = points[i * D + a];
        }
        for (var c = 0u; c < Q; c++) {
            yi[c] = vals[i * Q + c];
        }
    }
    var m = select(0.0, NEG_BIG, is_log);
    var s = 0.0;
    var w: array<f32, Q>;
    var g: array<f32, D>;
    var h: array<f32, D * Q>;

    for (var base = 0u; base < p.keys; base += STAGE) {
        let count = min(STAGE, p.keys - base);
        let k0 = p.key0 + base;
        for (var e = lid; e < count * D; e += WG) {
            sx[e] = points[k0 * D + e];
        }
        for (var e = lid; e < count * Q; e += WG) {
            sy[e] = vals[k0 * Q + e];
        }
        workgroupBarrier();
        if in_range {
            // cost: hot loop
            for (var ch = 0u; ch < count; ch += C) {
                // Each chunk key's t (T_FAR: none, or the row's own key).
                var tk: array<f32, C>;
                var cm = m;
                for (var c = 0u; c < C; c++) {
                    let j = ch + c;
                    var t = T_FAR;
                    if j < count && k0 + j != i {
                        t = 0.0;
                        for (var a = 0u; a < D; a++) {
                            let u = sx[j * D + a] - xi[a];
                            t = fma(u, u, t);
                        }
                    }
                    tk[c] = t;
                    if is_log && t < T_FAR {
                        cm = max(cm, profile_log_weight(t));
                    }
                }
                // One move of the reference for the chunk.
                if is_log && cm > m {
                    let sc = exp(m - cm);
                    m = cm;
                    s *= sc;
                    for (var c = 0u; c < Q; c++) {
                        w[c] *= sc;
                    }
                    for (var a = 0u; a < D; a++) {
                        g[a] *= sc;
                    }
                    for (var k = 0u; k < D * Q; k++) {
                        h[k] *= sc;
                    }
                }
                for (var c = 0u; c < C; c++) {
                    let t = tk[c];
                    let near = t < T_FAR;
                    var wt = 0.0;
                    if is_log {
                        wt = select(0.0, exp(profile_log_weight(t) - m), near);
                    } else {
                        wt = select(0.0, profile_weight(t), near);
                    }
                    let sl = slope_of(t);
                    let cf = select(0.0, select(sl, wt * sl, is_log), near);
                    // A key without weight (past the stage's keys, the
                    // row's own, beyond T_FAR) adds zeros, without a branch.
                    let j = min(ch + c, STAGE - 1u);
                    s += wt;
                    var dl: array<f32, Q>;
                    for (var q = 0u; q < Q; q++) {
                        dl[q] = select(0.0, sy[j * Q + q] - yi[q], near);
                        w[q] = fma(wt, dl[q], w[q]);
                    }
                    for (var a = 0u; a < D; a++) {
                        let u = sx[j * D + a] - xi[a];
                        // 0, not 0·∞, where a weightless key's offset overflows.
                        let e = select(0.0, cf * (u * u), cf != 0.0);
                        g[a] += e;
                        for (var q = 0u; q < Q; q++) {
                            h[a * Q + q] = fma(e, dl[q], h[a * Q + q]);
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }

    if !in_range {
        return;
    }
    let o = i * STATE;
    // Merge with the earlier windows' record (types::merge_record).
    if (p.flags & FIRST_TILE) == 0u {
        let mo = state[o];
        let so = state[o + 1u];
        if so > 0.0 {
            var sa = 1.0;
            var sb = 1.0;
            if s > 0.0 {
                let mm = max(m, mo);
                sa = exp(m - mm);
                sb = exp(mo - mm);
                m = mm;
            } else {
                sa = 0.0;
                m = mo;
            }
            s = fma(s, sa, so * sb);
            for (var c = 0u; c < Q; c++) {
                w[c] = fma(w[c], sa, state[o + 2u + c] * sb);
            }
            for (var a = 0u; a < D; a++) {
                g[a] = fma(g[a], sa, state[o + 2u + Q + a] * sb);
            }
            for (var k = 0u; k < D * Q; k++) {
                h[k] = fma(h[k], sa, state[o + 2u + Q + D + k] * sb);
            }
        }
    }
    state[o] = m;
    state[o + 1u] = s;
    for (var c = 0u; c < Q; c++) {
        state[o + 2u + c] = w[c];
    }
    for (var a = 0u; a < D; a++) {
        state[o + 2u + Q + a] = g[a];
    }
    for (var k = 0u; k < D * Q; k++) {
        state[o + 2u + Q + D + k] = h[k];
    }
}

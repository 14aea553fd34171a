// Row states with variable bandwidths (docs/numerics.md, "Variable
// bandwidths"); the CPU twin is src/cpu/variable.rs.
//
// One invocation per query row i sweeps a window of a key tile. A key j
// has t = Σ_k ((x_jk − q_ik)·σ_i·τ_j)² (scaled before squared: t
// overflows only where it is beyond T_FAR anyway) and the log-weight
// lw = ln k(t) + c_j, every profile in the log domain: σ_i = 1/h_i is the
// row's scale (row_scale), (τ_j, c_j) = (1/h_j, the key's log-weight) its
// key's (key_scale). The row state (m, s, u) keeps the running maximum m
// of lw, s = Σ e^{lw − m} and u = Σ e^{lw − m}·y over this pass's QT
// value columns; sums are staged over VARIABLE_STAGE keys (STAGE) and
// added into the state (the two-level summation), and a key that raises m
// rescales both. Dispatches over the windows and key tiles of one query
// tile run in order, each continuing the state the last one left
// (FIRST_TILE: none yet); the host reads the states back. A row without
// weight keeps s = 0 and m = NEG_BIG; the host finishes far rows in f64.
//
// Template constants: D dimension, QT value columns this pass (0: row
// sums only), QA = max(QT, 1), STAGE keys per stage. Generated: WG,
// FIRST_TILE, M_START (a log-weight at or below it is no weight).

#import consts
#import profiles

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const STAGE: u32 = {{STAGE}}u;
// State floats per row: m, s, u.
const SW: u32 = QA + 2u;

struct Params {
    rows: u32,      // query rows in this tile
    keys: u32,      // keys this dispatch sweeps
    q_stride: u32,  // value columns of the bound values
    c0: u32,        // first value column of this pass
    key0: u32,      // first key of the window within the bound key tile
    flags: u32,     // FIRST_TILE
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> row_scale: array<f32>;
@group(0) @binding(3) var<storage, read> keys: array<f32>;
@group(0) @binding(4) var<storage, read> key_scale: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read> vals: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;

// ln k(t); NEG_BIG (no weight) at or beyond T_FAR, for NaN, and outside a
// compact profile's support.
fn variable_log_weight(t: f32) -> f32 {
    if !(t < T_FAR) {
        return NEG_BIG;
    }
    if PROFILE == PROFILE_GAUSSIAN {
        return -0.5 * t;
    }
    if PROFILE == PROFILE_LAPLACIAN {
        return -sqrt(t);
    }
    let k = weight_of(PROFILE, t);
    return select(NEG_BIG, log(k), k > 0.0);
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= p.rows {
        return;
    }
    var q: array<f32, D>;
    for (var k = 0u; k < D; k++) {
        q[k] = queries[i * D + k];
    }
    let sigma = row_scale[i];
    var m = NEG_BIG;
    var s = 0.0;
    var u: array<f32, QA>;
    if (p.flags & FIRST_TILE) == 0u {
        m = state[i * SW];
        s = state[i * SW + 1u];
        for (var c = 0u; c < QT; c++) {
            u[c] = state[i * SW + 2u + c];
        }
    }
    var ss = 0.0;
    var us: array<f32, QA>;
    var staged = 0u;
    // cost: hot loop
    for (var jj = 0u; jj < p.keys; jj++) {
        let j = p.key0 + jj;
        let sc = key_scale[j];
        let f = sigma * sc.x;
        var t = 0.0;
        for (var k = 0u; k < D; k++) {
            let dk = (keys[j * D + k] - q[k]) * f;
            t += dk * dk;
        }
        let lw = variable_log_weight(t) + sc.y;
        if lw > M_START {
            if lw > m {
                let r = exp(m - lw);
                s *= r;
                ss *= r;
                for (var c = 0u; c < QT; c++) {
                    u[c] *= r;
                    us[c] *= r;
                }
                m = lw;
            }
            let w = exp(lw - m);
            ss += w;
            for (var c = 0u; c < QT; c++) {
                us[c] += w * vals[j * p.q_stride + p.c0 + c];
            }
        }
        staged += 1u;
        if staged == STAGE {
            s += ss;
            ss = 0.0;
            for (var c = 0u; c < QT; c++) {
                u[c] += us[c];
                us[c] = 0.0;
            }
            staged = 0u;
        }
    }
    s += ss;
    state[i * SW] = m;
    state[i * SW + 1u] = s;
    for (var c = 0u; c < QT; c++) {
        state[i * SW + 2u + c] = u[c] + us[c];
    }
}

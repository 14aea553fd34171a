// Local moments (docs/numerics.md, "Local moments"): per query row
// [q | c] (weights placed by q, offsets from the centre c), the
// kernel-weighted averages of the products F[ia]·F[ib] of each key's
// factor vector F = [(x − c)/h (D) | y (QY) | 1], in the column order of
// `types/moments.rs` (MomentLayout: r, then r_a·r_b for a ≤ b, then each
// value y_c with its r_a·y_c; without SECOND: r, then y). Offsets are
// formed per pair from a centre
// near the keys' local mean, so no moment about a distant origin is ever
// subtracted.
//
// Staging, the row state (m, s, u), its merge across key tiles and the
// key split are those of local_mean.wgsl (row_state.wgsl): one invocation
// per query row, STAGE keys and
// their value rows at a time through workgroup memory, QT columns of the
// layout per pass (columns c0 .. c0 + QT), finalized into `out` on the
// last key tile (NaN + counted when the row has no mass).
//
// Template constants (src/gpu/shaders/): D dimension, QT columns in this
// pass, QA = max(QT, 1), QY value columns per key, YW value columns a pass
// stages (the widest span of value columns any pass's columns touch),
// YWA = max(YW, 1), STAGE staged keys, SECOND (1: the second moments'
// layout). Generated: WG, the flag bits FIRST_TILE, LAST_TILE.

#import consts
#import profiles
#import product
#import row_state

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const QY: u32 = {{QY}}u;
const YW: u32 = {{YW}}u;
const YWA: u32 = {{YWA}}u;
const STAGE: u32 = {{STAGE}}u;
const SECOND: u32 = {{SECOND}}u;
const STATE: u32 = 2u + QA;
// F's constant 1, in the layout's numbering and in this pass's `f`.
const ONE: u32 = D + QY;
const ONE_F: u32 = D + YW;
const NF: u32 = D + YW + 1u;

// Params, the bindings and block_inv_h: row_state.wgsl.

var<workgroup> stage_x: array<f32, STAGE * D>;
var<workgroup> stage_y: array<f32, STAGE * YWA>;

// The factor indices (ia, ib) of layout column `col` (MomentLayout::factors).
fn factors(col: u32) -> vec2<u32> {
    if col < D {
        return vec2<u32>(col, ONE);
    }
    var k = col - D;
    if SECOND == 0u {
        return vec2<u32>(D + k, ONE);
    }
    let pairs = D * (D + 1u) / 2u;
    if k < pairs {
        var a = 0u;
        for (; a < D && k >= D - a; a++) {
            k -= D - a;
        }
        return vec2<u32>(a, a + k);
    }
    k -= pairs;
    let c = k / (D + 1u);
    let at = k % (D + 1u);
    if at == 0u {
        return vec2<u32>(D + c, ONE);
    }
    return vec2<u32>(at - 1u, D + c);
}

// A factor index of the layout in this pass's `f`: value columns from
// `ylo` on are staged at D.
fn local_factor(g: u32, ylo: u32) -> u32 {
    if g < D {
        return g;
    }
    if g == ONE {
        return ONE_F;
    }
    return D + (g - D - ylo);
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = gid.x;
    let live = i < p.rows;
    let is_exp = profile_is_exp();

    // The row [q | c]: q places the weights, c centres the offsets.
    var qx: array<f32, D>;
    var cx: array<f32, D>;
    if live {
        for (var k = 0u; k < D; k++) {
            qx[k] = queries[i * 2u * D + k];
            cx[k] = queries[i * 2u * D + D + k];
        }
    }
    let inv_h = sqrt(p.inv_h2);
    // The offsets' scale of each coordinate: 1/h (a product's per block).
    var coord_scale: array<f32, D>;
    for (var k = 0u; k < D; k++) {
        coord_scale[k] = select(inv_h, coord_inv_h(k), PRODUCT);
    }
    // This pass's columns as factor pairs, and the first value column
    // they touch (the pass stages YW value columns from there).
    var ylo = QY;
    for (var c = 0u; c < QT; c++) {
        let ab = factors(p.c0 + c);
        if ab.y >= D && ab.y < ONE {
            ylo = min(ylo, ab.y - D);
        }
        if ab.x >= D && ab.x < ONE {
            ylo = min(ylo, ab.x - D);
        }
    }
    ylo = min(ylo, QY - min(QY, YW));
    let ycount = min(YW, QY - ylo);
    var ia: array<u32, QA>;
    var ib: array<u32, QA>;
    for (var c = 0u; c < QT; c++) {
        let ab = factors(p.c0 + c);
        ia[c] = local_factor(ab.x, ylo);
        ib[c] = local_factor(ab.y, ylo);
    }
    var f: array<f32, NF>;
    f[ONE_F] = 1.0;
    var st: RowState;
    st.m = select(0.0, NEG_BIG, is_exp);
    st.s = 0.0;

    // This workgroup's slice of the dispatch's keys (all of them without
    // a split), at p.kbase within the bound key tile.
    let k_lo = min(wid.y * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    for (var base = k_lo; base < k_hi; base += STAGE) {
        let count = min(STAGE, k_hi - base);
        let kb = p.kbase + base;
        for (var e = lid; e < count * D; e += WG) {
            stage_x[e] = keys[kb * D + e];
        }
        for (var e = lid; e < count * ycount; e += WG) {
            let j = e / ycount;
            let c = e - j * ycount;
            stage_y[j * YWA + c] = vals[(kb + j) * QY + ylo + c];
        }
        workgroupBarrier();
        if live {
            // Sums of this stage, relative to the same running maximum,
            // added to the row state afterwards (two-level summation).
            var stage: RowState;
            // cost: hot loop
            for (var j = 0u; j < count; j++) {
                var t = 0.0;
                var carrier = 0.0;
                for (var k = 0u; k < D; k++) {
                    let xk = stage_x[j * D + k];
                    // PRODUCT: differences scaled by 1/h_b before squaring.
                    let df = select(xk - qx[k], (xk - qx[k]) * coord_scale[k], PRODUCT);
                    f[k] = (xk - cx[k]) * coord_scale[k];
                    t = fma(df, df, t);
                    if PRODUCT && block_last(k) {
                        carrier += block_t(k, t);
                        t = 0.0;
                    }
                }
                t = select(t * p.inv_h2, carrier, PRODUCT);
                if t < T_FAR {
                    let w = pair_weight(t, &st, &stage);
                    if w > 0.0 {
                        for (var c = 0u; c < ycount; c++) {
                            f[D + c] = stage_y[j * YWA + c];
                        }
                        stage.s += w;
                        for (var c = 0u; c < QT; c++) {
                            stage.u[c] = fma(w, f[ia[c]] * f[ib[c]], stage.u[c]);
                        }
                    }
                }
            }
            add_stage(&st, stage);
        }
        workgroupBarrier();
    }

    if live {
        end_row(i, wid.y, st);
    }
}

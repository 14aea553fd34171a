// Fused, streaming Nadaraya–Watson local mean (docs/numerics.md).
//
// One invocation per query row. Keys and their value columns are staged
// through workgroup memory STAGE at a time; each invocation keeps its
// query and its row state (m, s, u[QT]) in registers:
//   m = largest log-weight seen (0 for non-exponential profiles),
//   s = Σ e^{w−m},  u = Σ e^{w−m}·y.
// A dispatch covers one key tile; states of successive key tiles are
// merged with the associative rule (merge_state), through `state`.
// On the last key tile the row is finalized into `out` (NaN + counted
// when the row has no mass).
//
// Template constants (src/gpu/shaders.rs): D dimension, QT value columns
// in this pass (0: row sums only), QA = max(QT, 1), STAGE staged keys,
// MASKED (1: masked distances for imputation, missing coordinates stored
// as values at or above MISSING). Generated: WG, the flag bits FIRST_TILE,
// LAST_TILE, EXCLUDE_SELF, and MISSING.

const D: u32 = {{D}}u;
const QT: u32 = {{QT}}u;
const QA: u32 = {{QA}}u;
const STAGE: u32 = {{STAGE}}u;
const MASKED: u32 = {{MASKED}}u;
const STATE: u32 = 2u + QA;

struct Params {
    rows: u32,      // query rows in this tile
    keys: u32,      // keys in this key tile
    q_stride: u32,  // columns of the values and of the output
    c0: u32,        // first value column of this pass
    inv_h2: f32,    // 1/h²
    flags: u32,     // FIRST_TILE, LAST_TILE, EXCLUDE_SELF (leave each
                    // row's own key out: queries are the keys)
    row0: u32,      // global index of the tile's first query
    key0: u32,      // global index of the key tile's first key
    // A product kernel's 1/h_b per block (PRODUCT; unused otherwise).
    block_inv_h: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read> vals: array<f32>;
@group(0) @binding(4) var<storage, read_write> state: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> empty_rows: atomic<u32>;

// 1/h of product block b (the generated block functions read it).
fn block_inv_h(b: u32) -> f32 {
    return p.block_inv_h[b / 4u][b % 4u];
}

var<workgroup> stage_x: array<f32, STAGE * D>;
var<workgroup> stage_y: array<f32, STAGE * QA>;

@compute @workgroup_size(WG)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let i = gid.x;
    let live = i < p.rows;
    let is_exp = profile_is_exp();

    var qx: array<f32, D>;
    if live {
        for (var k = 0u; k < D; k++) {
            qx[k] = queries[i * D + k];
        }
    }
    // PRODUCT: each coordinate's 1/h_b; differences are scaled before they
    // are squared (docs/numerics.md, "Product kernels").
    var cscale: array<f32, D>;
    for (var k = 0u; k < D; k++) {
        cscale[k] = coord_inv_h(k);
    }
    var st: RowState;
    st.m = select(0.0, NEG_BIG, is_exp);
    st.s = 0.0;
    // Index within this key tile of the row's own key (leave-one-out), or
    // an index no key has.
    var own = 0xffffffffu;
    if (p.flags & EXCLUDE_SELF) != 0u {
        own = p.row0 + i - p.key0;
    }

    for (var base = 0u; base < p.keys; base += STAGE) {
        let count = min(STAGE, p.keys - base);
        for (var e = lid; e < count * D; e += WG) {
            stage_x[e] = keys[base * D + e];
        }
        for (var e = lid; e < count * QT; e += WG) {
            let j = e / QA;
            let c = e - j * QA;
            stage_y[e] = vals[(base + j) * p.q_stride + p.c0 + c];
        }
        workgroupBarrier();
        if live {
            // Sums of this stage, relative to the same running maximum,
            // added to the row state afterwards (two-level summation).
            var stage: RowState;
            for (var j = 0u; j < count; j++) {
                // t: the squared distance over the row (radial) or over the
                // current block (PRODUCT, whose carrier t sums the blocks').
                var t = 0.0;
                var seen = 0u;
                var carrier = 0.0;
                for (var k = 0u; k < D; k++) {
                    let xk = stage_x[j * D + k];
                    let df = select(xk - qx[k], (xk - qx[k]) * cscale[k], PRODUCT);
                    // MASKED: a coordinate either row lacks (stored as a
                    // value at or above MISSING) is left out.
                    if MASKED == 0u || max(abs(xk), abs(qx[k])) < MISSING {
                        t = fma(df, df, t);
                        seen += 1u;
                    }
                    if PRODUCT && block_last(k) {
                        if MASKED == 0u {
                            carrier += block_t(k, t);
                        } else if seen > 0u {
                            carrier += block_t(k, t * (f32(block_dims(k)) / f32(seen)));
                        } else {
                            // No coordinate of the block shared: no weight.
                            carrier += T_FAR;
                        }
                        t = 0.0;
                        seen = 0u;
                    }
                }
                if PRODUCT {
                    t = carrier;
                } else if MASKED != 0u {
                    // nan_euclidean's rescaling; no shared coordinate, no weight.
                    t = select(T_FAR, t * (f32(D) / f32(max(seen, 1u))) * p.inv_h2, seen > 0u);
                } else {
                    t = t * p.inv_h2;
                }
                if t < T_FAR && base + j != own {
                    let w = pair_weight(t, &st, &stage);
                    stage.s += w;
                    for (var c = 0u; c < QT; c++) {
                        stage.u[c] = fma(w, stage_y[j * QA + c], stage.u[c]);
                    }
                }
            }
            add_stage(&st, stage);
        }
        workgroupBarrier();
    }

    if live {
        finish_row(i, st);
    }
}

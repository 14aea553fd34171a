// Kernel matrix blocks: K, D⁻¹K, D − K, I − D⁻¹K (docs/numerics.md), and the
// scaled squared distances themselves.
//
// One invocation per output entry of a block of `rows × cols` entries,
// whose first row is row `row_off` of the query tile and whose columns are
// the whole key tile. The normalized and Laplacian modes read each row's
// state (m, s) from the local-mean shader's row-sum pass (QT = 0), so
// D⁻¹K is formed in the log domain: exp(ln k − m) / s.
//
// Template constant: D dimension. Generated: WG (workgroup side), the
// mode codes MODE_* (shaders::matrix_mode_code).

#import consts
#import profiles
#import product

const D: u32 = {{D}}u;

struct MatParams {
    rows: u32,      // rows of this block
    cols: u32,      // columns (keys in the key tile)
    row_off: u32,   // first row of the block within the query tile
    mode: u32,      // MODE_RAW K, MODE_ROW_NORMALIZED D⁻¹K, MODE_LAPLACIAN
                    // D − K, MODE_NORMALIZED_LAPLACIAN I − D⁻¹K,
                    // MODE_SQ_DISTANCE ‖q − x‖²/h²
    inv_h2: f32,
    row_global: u32, // global index of the block's first row
    col_global: u32, // global index of the key tile's first key
    state_stride: u32, // floats per row of row_state
    // A product kernel's 1/h_b per block (PRODUCT; unused otherwise).
    block_inv_h: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> mp: MatParams;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read> row_state: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// 1/h of product block b (the generated block functions read it).
fn block_inv_h(b: u32) -> f32 {
    return mp.block_inv_h[b / 4u][b % 4u];
}

@compute @workgroup_size(WG, WG)
fn entries(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if r >= mp.rows || j >= mp.cols {
        return;
    }
    let i = mp.row_off + r;
    var t = 0.0;
    var carrier = 0.0;
    for (var k = 0u; k < D; k++) {
        let dk = keys[j * D + k] - queries[i * D + k];
        // PRODUCT: differences scaled by 1/h_b before squaring.
        let df = select(dk, dk * coord_inv_h(k), PRODUCT);
        t = fma(df, df, t);
        if PRODUCT && block_last(k) {
            carrier += block_t(k, t);
            t = 0.0;
        }
    }
    t = select(t * mp.inv_h2, carrier, PRODUCT);
    // Row state (m, s) of the row-sum pass; m = 0 for non-exponential profiles.
    var ms = 0.0;
    var s = 1.0;
    if mp.mode != MODE_RAW {
        ms = row_state[i * mp.state_stride];
        s = row_state[i * mp.state_stride + 1u];
    }
    // Raw entries (K, D − K) use m = 0; normalized ones the row maximum,
    // so exp(ln k − m) / s stays exact when every raw weight underflows.
    let m = select(0.0, ms, mp.mode == MODE_ROW_NORMALIZED || mp.mode == MODE_NORMALIZED_LAPLACIAN);
    var w = 0.0;
    if t < T_FAR {
        if profile_is_exp() {
            w = exp(profile_log_weight(t) - m);
        } else {
            w = profile_weight(t);
        }
    }
    let on_diag = mp.row_global + r == mp.col_global + j;
    var v: f32;
    switch mp.mode {
        case MODE_ROW_NORMALIZED: {
            v = select(nan_f32(), w / s, s > 0.0);
        }
        case MODE_LAPLACIAN: {
            v = select(-w, s * exp(ms) - w, on_diag);
        }
        case MODE_NORMALIZED_LAPLACIAN: {
            v = select(-w / s, 1.0 - w / s, on_diag);
        }
        case MODE_SQ_DISTANCE: {
            v = t;
        }
        default: {
            v = w;
        }
    }
    out[r * mp.cols + j] = v;
}

// Softmax weight-matrix blocks: e^{s·⟨φ_i, ψ_j⟩ − m_i} / l_i (docs/numerics.md),
// computed as 2^{s₂ − m_i} / l_i with the logit s₂ in log₂ units (the query
// scaled as (φ·s)·LOG2E, as the row pass of softmax.wgsl scales it), as
// the row pass keeps m.
//
// One invocation per entry of a block of `rows × cols` entries of one
// batch, whose first row is row `row_off` of the query tile and whose
// columns are the whole key tile. Each row's statistics (m, l) come from
// the row pass of softmax.wgsl (cols = 0), which computes the logits in the
// same order (scaled query, vec4 fma, pairwise lane sum). Keys the causal
// mask hides get weight 0.
//
// Generated: WG (workgroup side), LOG2E.

#import consts

struct MatParams {
    rows: u32,         // rows of this block
    cols: u32,         // columns: keys in the key tile
    d: u32,            // feature dimension
    row_off: u32,      // first row of the block within the query tile
    row_start: u32,    // index within its batch of the query tile's first row
    key_start: u32,    // index within its batch of the key tile's first key
    off: u32,          // N − M: query i sees the keys j ≤ i + off
    causal: u32,       // 1: apply the mask
    scale: f32,        // logit scale s
    state_stride: u32, // floats per row of row_state
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> mp: MatParams;
@group(0) @binding(1) var<storage, read> phi: array<f32>;
@group(0) @binding(2) var<storage, read> psi: array<f32>;
@group(0) @binding(3) var<storage, read> row_state: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

fn group4(src: u32, k4: u32, scale: f32, is_phi: bool) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        let k = k4 * 4u + c;
        if k < mp.d {
            if is_phi {
                v[c] = phi[src + k] * scale * LOG2E;
            } else {
                v[c] = psi[src + k];
            }
        }
    }
    return v;
}

@compute @workgroup_size(WG, WG)
fn entries(@builtin(global_invocation_id) gid: vec3<u32>) {
    let j = gid.x;
    let r = gid.y;
    if r >= mp.rows || j >= mp.cols {
        return;
    }
    let i = mp.row_off + r;
    var w = 0.0;
    let visible = mp.causal == 0u || mp.key_start + j <= mp.row_start + i + mp.off;
    if visible {
        var dot4 = vec4<f32>(0.0);
        let d4 = (mp.d + 3u) / 4u;
        for (var k4 = 0u; k4 < d4; k4++) {
            dot4 = fma(group4(i * mp.d, k4, mp.scale, true), group4(j * mp.d, k4, 1.0, false), dot4);
        }
        let s = (dot4.x + dot4.y) + (dot4.z + dot4.w);
        let m = row_state[i * mp.state_stride];
        let l = row_state[i * mp.state_stride + 1u];
        w = exp2(s - m) / l;
    }
    out[r * mp.cols + j] = w;
}

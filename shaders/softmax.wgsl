// Kernel softmax (attention) softmax(s·ΦΨᵀ)V in one pass (docs/numerics.md):
// FlashAttention's online softmax, the M×N scores never stored.
//
// One invocation per query row, WG rows per workgroup; workgroup_id.y is
// the batch within the dispatch (rows of batch b start at b·rows in phi,
// state and out, keys at (key_batch + b)·keys in psi and vals: a prepared
// key set may bind more batches than the dispatch has). Each invocation keeps
// its query, pre-scaled by s·log₂e ((φ·s)·LOG2E, as softmax_matrix.wgsl
// forms it: log₂e folded into the query, once per row, not per pair),
// as vec4 groups, and its row state in registers, in log₂ units:
//   m = largest logit seen, l = Σ 2^{s−m}, acc = Σ 2^{s−m}·v.
// Keys and value rows are staged through workgroup memory BK at a time;
// the row takes them in chunks of C: the chunk's logits, one update of
// the maximum to the chunk's largest (one exp2 rescales the state), then
// the weights 2^{s−m} and the weighted values. No pair branches on the
// maximum. softmax_matrix.wgsl reads m and l in the same units.
//
// Causal mask: key j of this key tile is visible to row r when
// key_start + j ≤ row_start + r + off. Each row stops at its last visible
// key; staged tiles past the workgroup's last visible key are never loaded
// (and the host skips key tiles that no row of the query tile sees).
//
// A dispatch covers one key tile; states of successive key tiles merge
// through `state` (merge_state, the rule of plan::merge_states). The last
// key tile writes acc/l into `out`. With cols = 0 only the row statistics
// (m, l) are computed and left in `state` (softmax_matrix's row pass).
//
// Key split: with p.splits > 1, workgroup_id.z picks a slice of
// p.split_keys keys of the tile; each slice's states go to `partial`
// (slice-major over the dispatch's batches × rows) and the entry
// merge_splits, a second dispatch, merges them and ends the key tile as
// an unsplit dispatch does (finish_row).
//
// The parameter block, the state and output bindings, row state, its merge, finish_row and the
// merge_splits entry are in softmax_state.wgsl (imported). With value
// columns, softmax_tiled.wgsl runs instead where its tiles fit
// (plan::softmax::tiled_keys).
//
// Template constants (src/gpu/shaders/): D4 = ⌈d/4⌉, QA4 = max(⌈cols/4⌉, 1)
// (vec4 groups of value columns a pass holds), BK staged keys.
// Generated: WG, C (keys per chunk sharing one update of the maximum), the
// flag bits FIRST_TILE, LAST_TILE, CAUSAL.

#import consts
#import softmax_state

const D4: u32 = {{D4}}u;
const QA4: u32 = {{QA4}}u;
const BK: u32 = {{BK}}u;

@group(0) @binding(1) var<storage, read> phi: array<f32>;
@group(0) @binding(2) var<storage, read> psi: array<f32>;
@group(0) @binding(3) var<storage, read> vals: array<f32>;

var<workgroup> stage_k: array<vec4<f32>, BK * D4>;
var<workgroup> stage_v: array<vec4<f32>, BK * QA4>;

@compute @workgroup_size(WG)
fn attend(@builtin(workgroup_id) wid: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let b = wid.y;
    let r = wid.x * WG + lid;
    let live = r < p.rows;
    let causal = (p.flags & CAUSAL) != 0u;
    let row = b * p.rows + r;

    var qx: array<vec4<f32>, D4>;
    if live {
        for (var k4 = 0u; k4 < D4; k4++) {
            var v = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                let k = k4 * 4u + c;
                if k < p.d {
                    v[c] = phi[row * p.d + k] * p.scale * LOG2E;
                }
            }
            qx[k4] = v;
        }
    }
    // This workgroup's slice of the key tile (all of it without a split).
    let k_lo = min(wid.z * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    // Keys this workgroup may see (causal: up to its last row's limit),
    // and the number this row sees: keys j < my_end of the tile.
    var kend = k_hi;
    var my_end = k_hi;
    if causal {
        let last = min(wid.x * WG + WG, p.rows) - 1u;
        let wg_lim = p.row_start + last + p.off + 1u;
        kend = select(0u, min(k_hi, wg_lim - p.key_start), wg_lim > p.key_start);
        let lim = p.row_start + r + p.off + 1u;
        my_end = select(0u, min(k_hi, lim - p.key_start), lim > p.key_start);
    }

    var st: RowState;
    st.m = M_START;
    st.l = 0.0;
    for (var c = 0u; c < QA4; c++) {
        st.acc[c] = vec4<f32>(0.0);
    }

    for (var base = k_lo; base < kend; base += BK) {
        let count = min(BK, kend - base);
        for (var e = lid; e < count * D4; e += WG) {
            let j = e / D4;
            let k4 = e - j * D4;
            let src = ((p.key_batch + b) * p.keys + base + j) * p.d;
            var v = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                let k = k4 * 4u + c;
                if k < p.d {
                    v[c] = psi[src + k];
                }
            }
            stage_k[e] = v;
        }
        if p.cols > 0u {
            for (var e = lid; e < count * QA4; e += WG) {
                let j = e / QA4;
                let c4 = e - j * QA4;
                let src = ((p.key_batch + b) * p.keys + base + j) * p.q_stride + p.c0;
                var v = vec4<f32>(0.0);
                for (var c = 0u; c < 4u; c++) {
                    let col = c4 * 4u + c;
                    if col < p.cols {
                        v[c] = vals[src + col];
                    }
                }
                stage_v[e] = v;
            }
        }
        workgroupBarrier();
        // Keys of this stage the row sees.
        let seen = min(count, select(0u, my_end - base, my_end > base));
        if live && seen > 0u {
            // cost: hot loop
            for (var j0 = 0u; j0 < seen; j0 += C) {
                // The chunk's logits (NEG_BIG past the row's last key).
                var lw: array<f32, C>;
                for (var c = 0u; c < C; c++) {
                    let j = min(j0 + c, seen - 1u);
                    var dot4 = vec4<f32>(0.0);
                    for (var k4 = 0u; k4 < D4; k4++) {
                        dot4 = fma(qx[k4], stage_k[j * D4 + k4], dot4);
                    }
                    let s = (dot4.x + dot4.y) + (dot4.z + dot4.w);
                    lw[c] = select(NEG_BIG, s, j0 + c < seen);
                }
                // One update of the maximum for the chunk.
                var cm = lw[0];
                for (var c = 1u; c < C; c++) {
                    cm = max(cm, lw[c]);
                }
                let mn = max(st.m, cm);
                let f = exp2(st.m - mn);
                st.m = mn;
                st.l *= f;
                for (var c = 0u; c < QA4; c++) {
                    st.acc[c] *= f;
                }
                for (var c = 0u; c < C; c++) {
                    let j = min(j0 + c, seen - 1u);
                    let w = exp2(lw[c] - st.m);
                    st.l += w;
                    if p.cols > 0u {
                        for (var c4 = 0u; c4 < QA4; c4++) {
                            st.acc[c4] = fma(vec4<f32>(w), stage_v[j * QA4 + c4], st.acc[c4]);
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }

    if !live {
        return;
    }
    if p.splits > 1u {
        let pb = ((wid.z * p.batches + b) * p.rows + r) * STATE;
        partial[pb] = st.m;
        partial[pb + 1u] = st.l;
        for (var c = 0u; c < QA4; c++) {
            let o = pb + 2u + 4u * c;
            partial[o] = st.acc[c].x;
            partial[o + 1u] = st.acc[c].y;
            partial[o + 2u] = st.acc[c].z;
            partial[o + 3u] = st.acc[c].w;
        }
        return;
    }
    finish_row(row, st);
}

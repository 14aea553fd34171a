// The attention row state (softmax.wgsl, softmax_tiled.wgsl): the
// parameter block and bindings, the state's merge across key tiles, how a
// key tile ends, and the second pass of a key split (docs/numerics.md,
// "Attention"). The module `softmax_state`, imported by those two; it uses
// the importing shader's QA4 (vec4 groups of value columns a pass holds)
// and WG (rows of a merge_splits workgroup).
//
// A row state, in log₂ units: m = largest logit seen, l = Σ 2^{s−m},
// acc = Σ 2^{s−m}·v, stored as STATE floats (m, l, acc).

#import consts

const STATE: u32 = 2u + 4u * QA4;
// Generated: LOG2E, M_START (the running maximum before any key) and
// NEG_BIG (the logit of a key the row does not see): exp2 of NEG_BIG minus
// any maximum, and of M_START minus any finite one, is exactly 0 (logits
// are checked to stay below 1e37).

struct Params {
    rows: u32,       // query rows per batch in this query tile
    keys: u32,       // keys per batch in this key tile
    d: u32,          // feature dimension
    q_stride: u32,   // value columns: row stride of vals and out
    c0: u32,         // first value column of this pass
    scale: f32,      // logit scale s
    flags: u32,      // FIRST_TILE, LAST_TILE, CAUSAL
    row_start: u32,  // index within its batch of the tile's first query
    key_start: u32,  // index within its batch of the tile's first key
    off: u32,        // N − M: query i sees the keys j ≤ i + off
    cols: u32,       // value columns of this pass (≤ 4·QA4; 0: statistics only)
    split_keys: u32, // keys per slice (workgroup_id.z)
    splits: u32,     // slices (1: no split)
    batches: u32,    // batches in the dispatch
    key_batch: u32,  // batch of psi and vals that the dispatch's batch 0 reads
    _pad: u32,
}

// Bindings 1–3 (queries phi, keys psi, values vals) are declared by the
// importing shader: softmax.wgsl reads them as floats, softmax_tiled.wgsl
// as vec4s.
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read_write> state: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;

struct RowState {
    m: f32,
    l: f32,
    acc: array<vec4<f32>, QA4>,
}

// The one merge rule (log₂ units): m = max(m₁, m₂),
// l = l₁2^{m₁−m} + l₂2^{m₂−m}, acc likewise.
fn merge_state(a: RowState, b: RowState) -> RowState {
    var r: RowState;
    r.m = max(a.m, b.m);
    let fa = exp2(a.m - r.m);
    let fb = exp2(b.m - r.m);
    r.l = a.l * fa + b.l * fb;
    for (var c = 0u; c < QA4; c++) {
        r.acc[c] = a.acc[c] * fa + b.acc[c] * fb;
    }
    return r;
}

// The row state stored at float `sb` of `partial` or of `state`.
fn load_state(sb: u32, from_partial: bool) -> RowState {
    var st: RowState;
    if from_partial {
        st.m = partial[sb];
        st.l = partial[sb + 1u];
        for (var c = 0u; c < QA4; c++) {
            let o = sb + 2u + 4u * c;
            st.acc[c] = vec4<f32>(partial[o], partial[o + 1u], partial[o + 2u], partial[o + 3u]);
        }
    } else {
        st.m = state[sb];
        st.l = state[sb + 1u];
        for (var c = 0u; c < QA4; c++) {
            let o = sb + 2u + 4u * c;
            st.acc[c] = vec4<f32>(state[o], state[o + 1u], state[o + 2u], state[o + 3u]);
        }
    }
    return st;
}

// Row `row` after this key tile: merged with the earlier tiles' state,
// then kept for the next tile or, on the last, written out as acc/l.
fn finish_row(row: u32, tile: RowState) {
    var st = tile;
    let sb = row * STATE;
    if (p.flags & FIRST_TILE) == 0u {
        st = merge_state(load_state(sb, false), st);
    }
    if (p.flags & LAST_TILE) == 0u {
        state[sb] = st.m;
        state[sb + 1u] = st.l;
        for (var c = 0u; c < QA4; c++) {
            let o = sb + 2u + 4u * c;
            state[o] = st.acc[c].x;
            state[o + 1u] = st.acc[c].y;
            state[o + 2u] = st.acc[c].z;
            state[o + 3u] = st.acc[c].w;
        }
        return;
    }
    // Every row sees key 0 (M ≤ N under the mask), so l ≥ 1.
    let inv = 1.0 / st.l;
    let ob = row * p.q_stride + p.c0;
    // Constant indices only: a private array indexed at run time would
    // live in (slow) memory instead of registers.
    for (var c4 = 0u; c4 < QA4; c4++) {
        let v = st.acc[c4] * inv;
        for (var k = 0u; k < 4u; k++) {
            if c4 * 4u + k < p.cols {
                out[ob + c4 * 4u + k] = v[k];
            }
        }
    }
}

// The second pass of a key split: each row's slices merged, then the key
// tile ended as without a split. workgroup_id.y is the batch.
@compute @workgroup_size(WG)
fn merge_splits(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let b = wid.y;
    let r = wid.x * WG + lid;
    if r >= p.rows {
        return;
    }
    let row = b * p.rows + r;
    let slice_floats = p.batches * p.rows * STATE;
    var st = load_state(row * STATE, true);
    for (var sl = 1u; sl < p.splits; sl++) {
        st = merge_state(st, load_state(sl * slice_floats + row * STATE, true));
    }
    finish_row(row, st);
}

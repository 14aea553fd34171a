// The row state of the local-mean family (local_mean.wgsl,
// local_mean_ip.wgsl, local_moments.wgsl): their parameter block and
// bindings, the state's merge across key tiles and how a key tile ends
// (docs/numerics.md, "Row states and their merge"). The module
// `row_state`, imported by those three; it uses the importing shader's
// QT, QA and STATE.
//
// Key splits: when a dispatch's keys are shared by `p.splits` workgroups
// per query block (workgroup_id.y picks the slice), each writes its row
// states into `partial` (slice-major) and the entry `merge_splits`, a
// second small dispatch, merges the slices and ends the key tile as
// finish_row does.

#import consts
#import profiles

struct Params {
    rows: u32,       // query rows in this tile
    keys: u32,       // keys in this dispatch's window
    q_stride: u32,   // columns of the values (local_moments: of the layout) and of the output
    c0: u32,         // first output column of this pass
    inv_h2: f32,     // 1/h²
    flags: u32,      // FIRST_TILE, LAST_TILE, EXCLUDE_SELF (leave each row's
                     // own key out: queries are the keys; local means only)
    row0: u32,       // global index of the tile's first query
    key0: u32,       // global index of the dispatch's first key
    kbase: u32,      // the dispatch's first key within the bound key tile
    split_keys: u32, // keys per slice when the keys are split (workgroup_id.y)
    splits: u32,     // slices (1: no split; row states end via finish_row)
    span_window: u32, // local_mean.wgsl with SPANS: the window whose spans this dispatch sweeps
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
@group(0) @binding(7) var<storage, read_write> partial: array<f32>;

// 1/h of product block b (the generated block functions read it).
fn block_inv_h(b: u32) -> f32 {
    return p.block_inv_h[b / 4u][b % 4u];
}

// The local-mean shaders run their exponential profiles in log₂ units
// (weights 2^{w₂−m₂}) with the generated LOG2E, M_START (the running
// maximum before any key) and NEG_BIG (a key without weight): exp2 of
// NEG_BIG minus any maximum, and of M_START minus any finite one, is
// exactly 0 (shaders::M_START).

// A row state's m in natural-log units from the nearest key's t (T_FAR:
// none): the value every other pass computes for that key
// (docs/numerics.md, "Row states and their merge"); 0 for the plain-weight
// profiles.
fn nearest_log_weight(tmin: f32) -> f32 {
    let m = select(NEG_BIG, profile_log_weight(tmin), tmin < T_FAR);
    return select(0.0, m, profile_is_exp());
}

// m = largest log-weight seen (0 for non-exponential profiles),
// s = Σ e^{w−m}, u = Σ e^{w−m}·y over this pass's QT columns.
struct RowState {
    m: f32,
    s: f32,
    u: array<f32, QA>,
}

// The one merge rule: m = max(m₁, m₂), s = s₁e^{m₁−m} + s₂e^{m₂−m}, u likewise.
fn merge_state(a: RowState, b: RowState) -> RowState {
    var r: RowState;
    r.m = max(a.m, b.m);
    let fa = exp(a.m - r.m);
    let fb = exp(b.m - r.m);
    r.s = a.s * fa + b.s * fb;
    for (var c = 0u; c < QT; c++) {
        r.u[c] = a.u[c] * fa + b.u[c] * fb;
    }
    return r;
}

// The weight of a key at scaled squared distance t (< T_FAR) for a row
// whose state `st` and current stage sums `stage` are relative to st.m:
// for the exponential profiles, a key that raises the running maximum
// rescales both first (the log-domain rule of docs/numerics.md).
fn pair_weight(t: f32, st: ptr<function, RowState>, stage: ptr<function, RowState>) -> f32 {
    if !profile_is_exp() {
        return profile_weight(t);
    }
    let lw = profile_log_weight(t);
    if lw > (*st).m {
        let r = exp((*st).m - lw);
        (*st).s *= r;
        (*stage).s *= r;
        for (var c = 0u; c < QT; c++) {
            (*st).u[c] *= r;
            (*stage).u[c] *= r;
        }
        (*st).m = lw;
    }
    return exp(lw - (*st).m);
}

// Adds a stage's sums (relative to the same maximum) into the row state:
// the two-level summation.
fn add_stage(st: ptr<function, RowState>, stage: RowState) {
    (*st).s += stage.s;
    for (var c = 0u; c < QT; c++) {
        (*st).u[c] += stage.u[c];
    }
}

// The end of row i's sweep of its keys: into `partial` as slice `slice`
// of a key split, else merged and kept or finalized (finish_row).
fn end_row(i: u32, slice: u32, st: RowState) {
    if p.splits > 1u {
        store_partial(i, slice, st);
    } else {
        finish_row(i, st);
    }
}

// Row i's state from key slice `slice` into `partial`.
fn store_partial(i: u32, slice: u32, st: RowState) {
    let b = (slice * p.rows + i) * STATE;
    partial[b] = st.m;
    partial[b + 1u] = st.s;
    for (var c = 0u; c < QT; c++) {
        partial[b + 2u + c] = st.u[c];
    }
}

// Row i's state of key slice `slice`, from `partial`.
fn load_partial(i: u32, slice: u32) -> RowState {
    let b = (slice * p.rows + i) * STATE;
    var st: RowState;
    st.m = partial[b];
    st.s = partial[b + 1u];
    for (var c = 0u; c < QT; c++) {
        st.u[c] = partial[b + 2u + c];
    }
    return st;
}

// The second pass of a key split: each row's slices merged, then the key
// tile ended as without a split.
@compute @workgroup_size(WG)
fn merge_splits(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= p.rows {
        return;
    }
    var st = load_partial(i, 0u);
    for (var sl = 1u; sl < p.splits; sl++) {
        st = merge_state(st, load_partial(i, sl));
    }
    finish_row(i, st);
}

// Row i's state after this key tile: merged with the earlier tiles' (in
// `state`), then kept for the next tile or, on the last, finalized into
// `out` as u/s (NaN, and counted once per row, without mass).
fn finish_row(i: u32, tile: RowState) {
    var st = tile;
    let sb = i * STATE;
    if (p.flags & FIRST_TILE) == 0u {
        var prev: RowState;
        prev.m = state[sb];
        prev.s = state[sb + 1u];
        for (var c = 0u; c < QT; c++) {
            prev.u[c] = state[sb + 2u + c];
        }
        st = merge_state(prev, st);
    }
    if (p.flags & LAST_TILE) == 0u {
        state[sb] = st.m;
        state[sb + 1u] = st.s;
        for (var c = 0u; c < QT; c++) {
            state[sb + 2u + c] = st.u[c];
        }
        return;
    }
    let ob = i * p.q_stride + p.c0;
    if st.s > 0.0 {
        let inv = 1.0 / st.s;
        for (var c = 0u; c < QT; c++) {
            out[ob + c] = st.u[c] * inv;
        }
    } else {
        for (var c = 0u; c < QT; c++) {
            out[ob + c] = nan_f32();
        }
        if p.c0 == 0u {
            atomicAdd(&empty_rows, 1u);
        }
    }
}

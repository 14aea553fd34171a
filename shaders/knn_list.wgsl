// The top-k list of the kNN shaders (knn.wgsl, knn_ip.wgsl): their
// parameter block and bindings, the sorted insert, how a window ends and
// the key split's merge (docs/tiling.md, "k nearest neighbours"). The
// module `knn_list`, imported by those two; it uses the importing shader's
// K.
//
// Each query keeps its k best (squared distance, global key index) sorted
// in private arrays. A key enters only when it beats the k-th, so a tie
// keeps the lower index (keys arrive in increasing order). The insert is
// a compare-exchange pass over all K slots with selects, no data-dependent
// index: after the driver unrolls the constant-bound loop every index is a
// constant, so the list stays in registers (an array indexed at run time
// lives in local memory on NVIDIA).
//
// A dispatch sweeps a window of p.keys keys starting at p.kbase in the
// bound key tile. Without a key split (p.splits = 1) successive windows
// and key tiles continue from the list left in `best`, and the last
// writes distances (square-rooted) and indices. With a split,
// workgroup_id.y picks a slice of p.split_keys keys; each slice keeps its
// own list, seeded with the k-th distance already in `best` (a key at or
// beyond it can never enter: the k listed keys precede it in (distance,
// index) order), writes it to `partial` (slice-major), and the entry
// merge_splits merges the slices into `best` in slice order — the lists
// are sorted by (distance, index) and the slices' indices increase, so
// the merged list is the one an unsplit sweep would keep — and ends the
// window as an unsplit dispatch would.

#import consts

const BIG: f32 = 3.0e38;
const NONE: u32 = 0xffffffffu;

struct KnnParams {
    rows: u32,       // query rows in this tile
    keys: u32,       // keys in this dispatch's window
    key0: u32,       // global index of the window's first key
    flags: u32,      // FIRST_TILE, LAST_TILE
    kbase: u32,      // the window's first key within the bound key tile
    split_keys: u32, // keys per slice when the keys are split (workgroup_id.y)
    splits: u32,     // slices (1: no split; the list continues in `best`)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: KnnParams;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read_write> best: array<u32>;
@group(0) @binding(4) var<storage, read_write> out_dist: array<f32>;
@group(0) @binding(5) var<storage, read_write> out_idx: array<u32>;
@group(0) @binding(6) var<storage, read_write> partial: array<u32>;

// Offers key j at squared distance t to the sorted list (bd, bi): it
// sinks in at the first slot it beats (strictly: equal distances keep
// their earlier key) and carries each displaced entry one slot down.
fn offer(bd: ptr<function, array<f32, K>>, bi: ptr<function, array<u32, K>>, t: f32, j: u32) {
    var cd = t;
    var ci = j;
    var moving = false;
    for (var r = 0u; r < K; r++) {
        let od = (*bd)[r];
        let oi = (*bi)[r];
        // Once in, every later entry moves down one slot.
        let swap = moving || cd < od;
        moving = swap;
        (*bd)[r] = select(od, cd, swap);
        (*bi)[r] = select(oi, ci, swap);
        cd = select(cd, od, swap);
        ci = select(ci, oi, swap);
    }
}

// Row i's list at the start of a dispatch: a slice starts empty below the
// k-th distance the earlier windows left (BIG: none yet); an unsplit sweep
// continues their list.
fn start_list(i: u32, bd: ptr<function, array<f32, K>>, bi: ptr<function, array<u32, K>>) {
    let split = p.splits > 1u;
    var limit = BIG;
    if (p.flags & FIRST_TILE) == 0u && split {
        limit = bitcast<f32>(best[(i * K + K - 1u) * 2u]);
    }
    for (var r = 0u; r < K; r++) {
        if (p.flags & FIRST_TILE) != 0u || split {
            (*bd)[r] = limit;
            (*bi)[r] = NONE;
        } else {
            (*bd)[r] = bitcast<f32>(best[(i * K + r) * 2u]);
            (*bi)[r] = best[(i * K + r) * 2u + 1u];
        }
    }
}

// Row i's list at the end of a dispatch: its slice's in `partial` (slice
// `slice`), or, unsplit, the window's end.
fn end_list(i: u32, slice: u32, bd: ptr<function, array<f32, K>>, bi: ptr<function, array<u32, K>>) {
    for (var r = 0u; r < K; r++) {
        if p.splits > 1u {
            let o = ((slice * p.rows + i) * K + r) * 2u;
            partial[o] = bitcast<u32>((*bd)[r]);
            partial[o + 1u] = (*bi)[r];
        } else {
            finish(i, r, (*bd)[r], (*bi)[r]);
        }
    }
}

// Entry r of row i's list after this window: kept in `best` for the next
// window, or, on the last, written out as (distance, index): the
// importing shader's list_distance (√t for the Euclidean metric).
fn finish(i: u32, r: u32, t: f32, j: u32) {
    if (p.flags & LAST_TILE) != 0u {
        out_dist[i * K + r] = list_distance(t);
        out_idx[i * K + r] = j;
    } else {
        best[(i * K + r) * 2u] = bitcast<u32>(t);
        best[(i * K + r) * 2u + 1u] = j;
    }
}

// A key split's second pass: row i's list from the earlier windows (in
// `best`) and the slices' lists offered in slice order, each slice's in
// its (distance, index) order; a slice's first entry that does not enter
// ends it (the rest are no nearer).
@compute @workgroup_size(WG)
fn merge_splits(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= p.rows {
        return;
    }
    var bd: array<f32, K>;
    var bi: array<u32, K>;
    for (var r = 0u; r < K; r++) {
        if (p.flags & FIRST_TILE) != 0u {
            bd[r] = BIG;
            bi[r] = NONE;
        } else {
            bd[r] = bitcast<f32>(best[(i * K + r) * 2u]);
            bi[r] = best[(i * K + r) * 2u + 1u];
        }
    }
    for (var sl = 0u; sl < p.splits; sl++) {
        for (var r = 0u; r < K; r++) {
            let o = ((sl * p.rows + i) * K + r) * 2u;
            let t = bitcast<f32>(partial[o]);
            if !(t < bd[K - 1u]) {
                break;
            }
            offer(&bd, &bi, t, partial[o + 1u]);
        }
    }
    for (var r = 0u; r < K; r++) {
        finish(i, r, bd[r], bi[r]);
    }
}

// Brute-force k nearest neighbours, one invocation per query.
//
// Keys are staged through workgroup memory STAGE at a time; each
// invocation keeps its k best (squared distance, global key index) sorted
// in private arrays and inserts a key only when it beats the k-th, so a
// tie keeps the lower index (keys arrive in increasing order). The insert
// is a compare-exchange pass over all K slots with selects, no
// data-dependent index: after the driver unrolls the constant-bound loop
// every index is a constant, so the list stays in registers (an array
// indexed at run time lives in local memory on NVIDIA). Key tiles
// (one dispatch each) continue from the list left in `best`; the last
// tile writes distances (square-rooted) and indices.
//
// Template constants: D dimension, K neighbours, STAGE staged keys.
// Generated: WG, the flag bits FIRST_TILE, LAST_TILE.

#import consts

const D: u32 = {{D}}u;
const K: u32 = {{K}}u;
const STAGE: u32 = {{STAGE}}u;
const BIG: f32 = 3.0e38;

struct KnnParams {
    rows: u32,    // query rows in this tile
    keys: u32,    // keys in this key tile
    key0: u32,    // global index of the key tile's first key
    flags: u32,   // FIRST_TILE, LAST_TILE
}

@group(0) @binding(0) var<uniform> p: KnnParams;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> keys: array<f32>;
@group(0) @binding(3) var<storage, read_write> best: array<u32>;
@group(0) @binding(4) var<storage, read_write> out_dist: array<f32>;
@group(0) @binding(5) var<storage, read_write> out_idx: array<u32>;

var<workgroup> stage_x: array<f32, STAGE * D>;

@compute @workgroup_size(WG)
fn nearest(@builtin(global_invocation_id) gid: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = gid.x;
    let live = i < p.rows;
    var qx: array<f32, D>;
    var bd: array<f32, K>;
    var bi: array<u32, K>;
    if live {
        for (var k = 0u; k < D; k++) {
            qx[k] = queries[i * D + k];
        }
        for (var r = 0u; r < K; r++) {
            if (p.flags & FIRST_TILE) != 0u {
                bd[r] = BIG;
                bi[r] = 0xffffffffu;
            } else {
                bd[r] = bitcast<f32>(best[(i * K + r) * 2u]);
                bi[r] = best[(i * K + r) * 2u + 1u];
            }
        }
    }
    for (var base = 0u; base < p.keys; base += STAGE) {
        let count = min(STAGE, p.keys - base);
        for (var e = lid; e < count * D; e += WG) {
            stage_x[e] = keys[base * D + e];
        }
        workgroupBarrier();
        if live {
            for (var j = 0u; j < count; j++) {
                var t = 0.0;
                for (var k = 0u; k < D; k++) {
                    let df = stage_x[j * D + k] - qx[k];
                    t = fma(df, df, t);
                }
                if t < bd[K - 1u] {
                    // The candidate sinks in at the first slot it beats
                    // (strictly: equal distances keep their earlier key)
                    // and carries each displaced entry one slot down.
                    var cd = t;
                    var ci = p.key0 + base + j;
                    var moving = false;
                    for (var r = 0u; r < K; r++) {
                        let od = bd[r];
                        let oi = bi[r];
                        // Once in, every later entry moves down one slot.
                        let swap = moving || cd < od;
                        moving = swap;
                        bd[r] = select(od, cd, swap);
                        bi[r] = select(oi, ci, swap);
                        cd = select(cd, od, swap);
                        ci = select(ci, oi, swap);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    if !live {
        return;
    }
    for (var r = 0u; r < K; r++) {
        if (p.flags & LAST_TILE) != 0u {
            out_dist[i * K + r] = sqrt(bd[r]);
            out_idx[i * K + r] = bi[r];
        } else {
            best[(i * K + r) * 2u] = bitcast<u32>(bd[r]);
            best[(i * K + r) * 2u + 1u] = bi[r];
        }
    }
}

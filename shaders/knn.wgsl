// Brute-force k nearest neighbours, one invocation per query, by
// differences (d < 32, or where the inner-product tiles of knn_ip.wgsl do
// not fit the workgroup memory).
//
// Keys are staged through workgroup memory STAGE at a time as vec4 groups
// (D4 per key, zero-padded): one 16-byte load, the same address for every
// invocation (a broadcast), feeds four coordinates. Each invocation
// measures KB keys at once, KB independent multiply-add chains (each key's
// own chain runs over its coordinates in order, `t = fma(df, df, t)`, the
// arithmetic of the CPU's direct path, so distances agree bit for bit),
// and then offers them in index order to its k best (knn_list.wgsl: the
// list, its windows, key splits and their merge).
//
// METRIC (a pipeline override of the module `metric`): the distance the
// keys are ranked by. 0: Euclidean, t the squared distance as above; the
// others accumulate the metric's rank (metric_step), the list keeps it and
// list_distance turns it into the distance written out.
//
// Template constants: D dimension, K neighbours, STAGE staged keys (a
// multiple of KB), KB keys measured at once (4, or 1 where fewer than 4
// keys fit the workgroup memory). Generated: WG, the flag bits
// FIRST_TILE, LAST_TILE.

#import consts
#import knn_list
#import metric

const D: u32 = {{D}}u;
const K: u32 = {{K}}u;
const STAGE: u32 = {{STAGE}}u;
const KB: u32 = {{KB}}u;
const D4: u32 = (D + 3u) / 4u;

var<workgroup> stage_x: array<vec4<f32>, STAGE * D4>;

// The distance of a listed rank (knn_list.wgsl's `finish`).
fn list_distance(t: f32) -> f32 {
    if METRIC == 0u {
        return sqrt(t);
    }
    return metric_distance(t);
}

@compute @workgroup_size(WG)
fn nearest(@builtin(workgroup_id) wid: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = wid.x * WG + lid;
    let live = i < p.rows;
    var qx: array<vec4<f32>, D4>;
    var bd: array<f32, K>;
    var bi: array<u32, K>;
    if live {
        for (var k = 0u; k < D; k++) {
            qx[k / 4u][k % 4u] = queries[i * D + k];
        }
        start_list(i, &bd, &bi);
    }
    // This workgroup's slice of the window (all of it without a split).
    let k_lo = min(wid.y * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    for (var base = k_lo; base < k_hi; base += STAGE) {
        let count = min(STAGE, k_hi - base);
        let kb = p.kbase + base;
        for (var e = lid; e < count * D4; e += WG) {
            let j = e / D4;
            let k0 = (e - j * D4) * 4u;
            var v = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                if k0 + c < D {
                    v[c] = keys[(kb + j) * D + k0 + c];
                }
            }
            stage_x[e] = v;
        }
        workgroupBarrier();
        if live {
            // KB keys a step, KB independent chains; a step past `count`
            // (the stage's last, partial) reads stale slots it never offers.
            // cost: hot loop
            for (var j = 0u; j < count; j += KB) {
                var t: array<f32, KB>;
                for (var k4 = 0u; k4 < D4; k4++) {
                    let qv = qx[k4];
                    for (var u = 0u; u < KB; u++) {
                        let dv = stage_x[(j + u) * D4 + k4] - qv;
                        for (var c = 0u; c < 4u; c++) {
                            if k4 * 4u + c >= D {
                                break;
                            }
                            if METRIC == 0u {
                                t[u] = fma(dv[c], dv[c], t[u]);
                            } else {
                                let x0 = stage_x[(j + u) * D4][0];
                                t[u] = metric_step(t[u], dv[c], k4 * 4u + c, x0, qx[0][0]);
                            }
                        }
                    }
                }
                for (var u = 0u; u < KB; u++) {
                    // A key enters the list rarely once it holds k keys
                    // (docs/gpu-cost.md counts this branch as not taken).
                    // cost: rare
                    if j + u < count && t[u] < bd[K - 1u] {
                        offer(&bd, &bi, t[u], p.key0 + base + j + u);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    if !live {
        return;
    }
    end_list(i, wid.y, &bd, &bi);
}

// MeanShift bookkeeping around the fused local mean (local_mean.wgsl),
// so the iteration stays on the device (docs/numerics.md):
//   mode GATHER: the moving seeds of the active list → a query tile;
//   mode FINISH: each seed moves to its local mean; a seed whose shift
//     is above tolerance is appended to the next active list, so seeds
//     that converged stop costing work;
//   mode FINISH_BLURRING: every point moves; no list.
// `counters` = (seeds still moving, largest shift as f32 bits) is all the
// host reads back per iteration. A NaN mean is an empty neighbourhood: the
// seed stays where it is and stops (docs/numerics.md).
//
// Template constant: D dimension. Generated: WG, the modes GATHER, FINISH,
// FINISH_BLURRING, and SHIFT_FLOOR (types::SHIFT_FLOOR, as on the CPU): a
// shift within f32 rounding of the seed's coordinates also converges.

#import consts

const D: u32 = {{D}}u;

struct ShiftParams {
    rows: u32,      // seeds in the active list (modes 0, 1) or points (mode 2)
    mode: u32,      // GATHER, FINISH, FINISH_BLURRING
    thr_sq: f32,    // (tol·h)²
    _pad: u32,
}

@group(0) @binding(0) var<uniform> sp: ShiftParams;
@group(0) @binding(1) var<storage, read_write> positions: array<f32>;
@group(0) @binding(2) var<storage, read> active_list: array<u32>;
@group(0) @binding(3) var<storage, read_write> next_list: array<u32>;
@group(0) @binding(4) var<storage, read_write> queries: array<f32>;
@group(0) @binding(5) var<storage, read> means: array<f32>;
@group(0) @binding(6) var<storage, read_write> counters: array<atomic<u32>, 2>;

// NaN test on the bits (a float comparison may be folded away).
fn is_nan_bits(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(WG)
fn step(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    if r >= sp.rows {
        return;
    }
    if sp.mode == GATHER {
        let s = active_list[r];
        for (var k = 0u; k < D; k++) {
            queries[r * D + k] = positions[s * D + k];
        }
        return;
    }
    var s = r;
    if sp.mode == FINISH {
        s = active_list[r];
    }
    if is_nan_bits(means[r * D]) {
        return;
    }
    var sh2 = 0.0;
    var big = 0.0;
    for (var k = 0u; k < D; k++) {
        let m = means[r * D + k];
        let df = m - positions[s * D + k];
        sh2 += df * df;
        big = max(big, abs(m));
        positions[s * D + k] = m;
    }
    let fl = big * SHIFT_FLOOR;
    if sh2 > max(sp.thr_sq, fl * fl) {
        let slot = atomicAdd(&counters[0], 1u);
        if sp.mode == FINISH {
            next_list[slot] = s;
        }
    }
    // Non-negative floats order like their bits.
    atomicMax(&counters[1], bitcast<u32>(sqrt(sh2)));
}

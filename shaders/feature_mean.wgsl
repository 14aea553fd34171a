// Linear feature local mean (ΦΨᵀV) ⊘ (ΦΨᵀ1), computed as Φ(ΨᵀV) ⊘ Φ(Ψᵀ1)
// in O((M + N)·d·q), never forming ΦΨᵀ (docs/numerics.md). Three entry points,
// dispatched in order for one batch:
//
// chunk_sums  one workgroup per chunk of `chunk` keys of a key tile: the
//             chunk's sums S[k, c] = Σ_j ψ_jk v_jc (c < q) and
//             S[k, q] = Σ_j ψ_jk, E = d·(q+1) floats at sums[chunk·E].
// prefix      one invocation per entry e < E: the exclusive prefix over the
//             chunks in place (compensated summation), the total at slot
//             `chunks`.
// finish      one invocation per query row: with the causal mask, row i
//             (limit t = i + off) takes the prefix of its chunk plus the
//             keys of that chunk up to t, read from the key tile bound;
//             without it, the total. Then φᵀS[:, c] / φᵀS[:, q], or NaN
//             and a count when the denominator is 0.
//
// The weights are invariant to scaling ψ by one factor per batch and φ by
// one per row: ψ is scaled by the power of two `psi_scale` (its largest
// entry into [1, 2)) and each φ row by its own, so tiny features do not
// underflow to a false zero denominator.
//
// Template constant: QA, the value columns a finish pass can hold (a power
// of two; the pass computes the first `cols` ≤ QA of them). Generated:
// SUM_WG (workgroup size of chunk_sums and prefix), FINISH_WG (of finish).

#import consts

const QA: u32 = {{QA}}u;

struct FeatParams {
    d: u32,          // feature dimension
    q: u32,          // value columns
    keys: u32,       // keys in the bound key tile
    chunk: u32,      // keys per chunk (key tiles are whole chunks)
    chunk0: u32,     // chunk index of the key tile's first key
    chunks: u32,     // chunks of the batch (slot of the total)
    rows: u32,       // query rows in the bound query tile
    row_start: u32,  // index within the batch of the tile's first query
    key_start: u32,  // index within the batch of the key tile's first key
    off: u32,        // N − M: query i sees the keys j ≤ i + off
    c0: u32,         // first value column of this finish pass
    causal: u32,     // 1: prefix sums
    psi_scale: f32,  // power of two applied to ψ
    cols: u32,       // value columns of this finish pass (≤ QA)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> fp: FeatParams;
@group(0) @binding(1) var<storage, read> phi: array<f32>;
@group(0) @binding(2) var<storage, read> psi: array<f32>;
@group(0) @binding(3) var<storage, read> vals: array<f32>;
@group(0) @binding(4) var<storage, read_write> sums: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read_write> empty_rows: atomic<u32>;

@compute @workgroup_size(SUM_WG)
fn chunk_sums(@builtin(workgroup_id) wid: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = fp.q + 1u;
    let e_count = fp.d * w;
    let j0 = wid.x * fp.chunk;
    let j1 = min(fp.keys, j0 + fp.chunk);
    let dst = (fp.chunk0 + wid.x) * e_count;
    for (var e = lid; e < e_count; e += SUM_WG) {
        let k = e / w;
        let c = e - k * w;
        var s = 0.0;
        if c < fp.q {
            for (var j = j0; j < j1; j++) {
                s = fma(psi[j * fp.d + k] * fp.psi_scale, vals[j * fp.q + c], s);
            }
        } else {
            for (var j = j0; j < j1; j++) {
                s += psi[j * fp.d + k] * fp.psi_scale;
            }
        }
        sums[dst + e] = s;
    }
}

@compute @workgroup_size(SUM_WG)
fn prefix(@builtin(global_invocation_id) gid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
    let e_count = fp.d * (fp.q + 1u);
    for (var e = gid.x; e < e_count; e += nwg.x * SUM_WG) {
        // Kahan summation: the chunks of a long sequence add up exactly
        // enough in f32.
        var run = 0.0;
        var comp = 0.0;
        for (var c = 0u; c < fp.chunks; c++) {
            let x = sums[c * e_count + e];
            sums[c * e_count + e] = run;
            let y = x - comp;
            let t = run + y;
            comp = (t - run) - y;
            run = t;
        }
        sums[fp.chunks * e_count + e] = run;
    }
}

@compute @workgroup_size(FINISH_WG)
fn finish(@builtin(global_invocation_id) gid: vec3<u32>) {
    let r = gid.x;
    if r >= fp.rows {
        return;
    }
    let d = fp.d;
    let w = fp.q + 1u;
    let pb = r * d;
    // This row's power-of-two scale: its largest feature into [1, 2).
    var mx = 0.0;
    for (var k = 0u; k < d; k++) {
        mx = max(mx, phi[pb + k]);
    }
    var rs = 1.0;
    if mx > 0.0 {
        rs = ldexp(1.0, clamp(1 - frexp(mx).exp, -126, 126));
    }
    var slot = fp.chunks;
    var t0 = 0u;
    var t1 = 0u;
    if fp.causal != 0u {
        let lim = fp.row_start + r + fp.off;
        slot = lim / fp.chunk;
        t0 = slot * fp.chunk - fp.key_start;
        t1 = lim + 1u - fp.key_start;
    }
    let sb = slot * d * w;
    var den = 0.0;
    var num: array<f32, QA>;
    for (var c = 0u; c < QA; c++) {
        num[c] = 0.0;
    }
    for (var k = 0u; k < d; k++) {
        let f = phi[pb + k] * rs;
        let row = sb + k * w;
        den = fma(f, sums[row + fp.q], den);
        for (var c = 0u; c < QA; c++) {
            if c < fp.cols {
                num[c] = fma(f, sums[row + fp.c0 + c], num[c]);
            }
        }
    }
    // Keys of the row's own chunk up to its limit (causal only).
    for (var t = t0; t < t1; t++) {
        var wt = 0.0;
        for (var k = 0u; k < d; k++) {
            wt = fma(phi[pb + k] * rs, psi[t * d + k] * fp.psi_scale, wt);
        }
        den += wt;
        for (var c = 0u; c < QA; c++) {
            if c < fp.cols {
                num[c] = fma(wt, vals[t * fp.q + fp.c0 + c], num[c]);
            }
        }
    }
    let ob = r * fp.q + fp.c0;
    if den > 0.0 {
        let inv = 1.0 / den;
        for (var c = 0u; c < QA; c++) {
            if c < fp.cols {
                out[ob + c] = num[c] * inv;
            }
        }
    } else {
        for (var c = 0u; c < fp.cols; c++) {
            out[ob + c] = bitcast<f32>(0x7fc00000u);
        }
        if fp.c0 == 0u {
            atomicAdd(&empty_rows, 1u);
        }
    }
}

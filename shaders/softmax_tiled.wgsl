// Kernel softmax (attention) softmax(s·ΦΨᵀ)V with FlashAttention-style
// register tiles (docs/numerics.md, "Attention"; docs/tiling.md,
// "Attention tiles"). Same parameters, bindings, row state, masks, key
// tiles and key splits as softmax.wgsl (softmax_state.wgsl); only how a
// workgroup's WG rows meet a block of BK keys differs.
//
// The workgroup stages its WG queries once (pre-scaled by s·log₂e, so the
// logits are in log₂ units), then per block of BK keys:
//   1. logits: invocation t = 4g + s holds the 4 × KS tile of rows
//      4g..4g+3 and keys s, s+4, …: per vec4 of features, 4 query loads
//      and KS key loads from workgroup memory feed 4·KS dot products;
//      the tile goes to workgroup memory (`tile_s`).
//   2. row pass: invocation t owns row t's maximum m and sum l. It takes
//      the row's BK logits (NEG_BIG for keys it does not see), moves m
//      once to the block's largest, writes the weights 2^{s−m} back in
//      place of the logits and the factor 2^{m_old−m_new} the row's
//      accumulators need (`tile_a`).
//   3. weighted values: invocation 4g + s holds the accumulators of rows
//      4g..4g+3 × value groups s, s+4, … (CO4 vec4s per row); it rescales
//      them once and adds, per key, 4 weights × CO4 value vec4s.
// No exp2 or maximum per (row, key) beyond the one of step 2, and every
// value a step reads from workgroup memory feeds 4 or more FMAs.
//
// Template constants (src/gpu/shaders/): D4 = ⌈d/4⌉, QA4 = ⌈cols/4⌉
// (cols ≥ 1), BK keys per block (a multiple of 4). Generated: WG (= 64
// rows, 16 groups of 4), FIRST_TILE, LAST_TILE, CAUSAL.

#import consts
#import softmax_state

const D4: u32 = {{D4}}u;
const QA4: u32 = {{QA4}}u;
const BK: u32 = {{BK}}u;
// Keys per invocation in the logit tile, value groups per row in the
// accumulators (QP = 4·CO4 staged per key, zero past QA4).
const KS: u32 = BK / 4u;
const CO4: u32 = (QA4 + 3u) / 4u;
const QP: u32 = 4u * CO4;
// Padded row strides (vec4s of a staged query, floats of a tile row), so
// the rows one load instruction touches fall in different banks.
const QS: u32 = D4 + 1u;
const SS: u32 = BK + 1u;

var<workgroup> tile_q: array<vec4<f32>, WG * QS>;
var<workgroup> tile_k: array<vec4<f32>, BK * D4>;
var<workgroup> tile_v: array<vec4<f32>, BK * QP>;
var<workgroup> tile_s: array<f32, WG * SS>;
var<workgroup> tile_a: array<f32, WG>;

@compute @workgroup_size(WG)
fn attend_tiled(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let b = wid.y;
    let r0 = wid.x * WG;
    let g4 = (lid / 4u) * 4u;
    let s = lid % 4u;
    let causal = (p.flags & CAUSAL) != 0u;

    // The workgroup's queries, once (zero rows past the tile).
    for (var e = lid; e < WG * D4; e += WG) {
        let i = e / D4;
        let k4 = e - i * D4;
        var v = vec4<f32>(0.0);
        if r0 + i < p.rows {
            let src = (b * p.rows + r0 + i) * p.d;
            for (var c = 0u; c < 4u; c++) {
                let k = k4 * 4u + c;
                if k < p.d {
                    v[c] = phi[src + k] * p.scale * LOG2E;
                }
            }
        }
        tile_q[i * QS + k4] = v;
    }

    // This workgroup's slice of the key tile, the keys any of its rows
    // sees (workgroup-uniform), and the keys row `lid` sees.
    let k_lo = min(wid.z * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    let live = r0 + lid < p.rows;
    var kend = k_hi;
    var my_end = select(k_lo, k_hi, live);
    if causal {
        let last = min(r0 + WG, p.rows) - 1u;
        let wg_lim = p.row_start + last + p.off + 1u;
        kend = select(0u, min(k_hi, wg_lim - p.key_start), wg_lim > p.key_start);
        let lim = p.row_start + r0 + lid + p.off + 1u;
        my_end = select(0u, min(k_hi, lim - p.key_start), lim > p.key_start && live);
    }

    var m = M_START;
    var l = 0.0;
    var acc: array<vec4<f32>, 4u * CO4>;
    for (var a = 0u; a < 4u * CO4; a++) {
        acc[a] = vec4<f32>(0.0);
    }

    for (var base = k_lo; base < kend; base += BK) {
        let count = min(BK, kend - base);
        for (var e = lid; e < BK * D4; e += WG) {
            let j = e / D4;
            let k4 = e - j * D4;
            var v = vec4<f32>(0.0);
            if j < count {
                let src = ((p.key_batch + b) * p.keys + base + j) * p.d;
                for (var c = 0u; c < 4u; c++) {
                    let k = k4 * 4u + c;
                    if k < p.d {
                        v[c] = psi[src + k];
                    }
                }
            }
            tile_k[e] = v;
        }
        for (var e = lid; e < BK * QP; e += WG) {
            let j = e / QP;
            let c4 = e - j * QP;
            var v = vec4<f32>(0.0);
            if j < count {
                let src = ((p.key_batch + b) * p.keys + base + j) * p.q_stride + p.c0;
                for (var c = 0u; c < 4u; c++) {
                    let col = c4 * 4u + c;
                    if col < p.cols {
                        v[c] = vals[src + col];
                    }
                }
            }
            tile_v[e] = v;
        }
        workgroupBarrier();

        // 1. The 4 × KS logit tile of this invocation.
        var sc: array<f32, 4u * KS>;
        for (var a = 0u; a < 4u * KS; a++) {
            sc[a] = 0.0;
        }
        for (var k4 = 0u; k4 < D4; k4++) {
            let q0 = tile_q[(g4 + 0u) * QS + k4];
            let q1 = tile_q[(g4 + 1u) * QS + k4];
            let q2 = tile_q[(g4 + 2u) * QS + k4];
            let q3 = tile_q[(g4 + 3u) * QS + k4];
            for (var j = 0u; j < KS; j++) {
                let kv = tile_k[(s + 4u * j) * D4 + k4];
                sc[j] += dot(q0, kv);
                sc[KS + j] += dot(q1, kv);
                sc[2u * KS + j] += dot(q2, kv);
                sc[3u * KS + j] += dot(q3, kv);
            }
        }
        for (var i = 0u; i < 4u; i++) {
            for (var j = 0u; j < KS; j++) {
                tile_s[(g4 + i) * SS + s + 4u * j] = sc[i * KS + j];
            }
        }
        workgroupBarrier();

        // 2. Row lid: the block's maximum, its weights and the factor.
        let seen = min(count, select(0u, my_end - base, my_end > base));
        let rb = lid * SS;
        var bm = NEG_BIG;
        for (var j = 0u; j < seen; j++) {
            bm = max(bm, tile_s[rb + j]);
        }
        let mn = max(m, bm);
        let alpha = exp2(m - mn);
        m = mn;
        var sum = 0.0;
        for (var j = 0u; j < count; j++) {
            let w = exp2(select(NEG_BIG, tile_s[rb + j], j < seen) - mn);
            tile_s[rb + j] = w;
            sum += w;
        }
        l = l * alpha + sum;
        tile_a[lid] = alpha;
        workgroupBarrier();

        // 3. The accumulators of rows g4..g4+3, value groups s + 4c.
        for (var i = 0u; i < 4u; i++) {
            let f = tile_a[g4 + i];
            for (var c = 0u; c < CO4; c++) {
                acc[i * CO4 + c] *= f;
            }
        }
        for (var j = 0u; j < count; j++) {
            let w0 = vec4<f32>(tile_s[(g4 + 0u) * SS + j]);
            let w1 = vec4<f32>(tile_s[(g4 + 1u) * SS + j]);
            let w2 = vec4<f32>(tile_s[(g4 + 2u) * SS + j]);
            let w3 = vec4<f32>(tile_s[(g4 + 3u) * SS + j]);
            for (var c = 0u; c < CO4; c++) {
                let v = tile_v[j * QP + s + 4u * c];
                acc[c] = fma(w0, v, acc[c]);
                acc[CO4 + c] = fma(w1, v, acc[CO4 + c]);
                acc[2u * CO4 + c] = fma(w2, v, acc[2u * CO4 + c]);
                acc[3u * CO4 + c] = fma(w3, v, acc[3u * CO4 + c]);
            }
        }
        workgroupBarrier();
    }

    // The row's statistics after this key tile, by its owner: into
    // `partial` (a key split) or merged with the earlier tiles' state, and
    // the factors every holder of the row's accumulators applies.
    let row = b * p.rows + r0 + lid;
    var f_old = 0.0;
    var f_new = 1.0;
    if live {
        if p.splits > 1u {
            let pb = ((wid.z * p.batches + b) * p.rows + r0 + lid) * STATE;
            partial[pb] = m;
            partial[pb + 1u] = l;
        } else {
            let sb = row * STATE;
            if (p.flags & FIRST_TILE) == 0u {
                let pm = state[sb];
                let mm = max(pm, m);
                f_old = exp2(pm - mm);
                f_new = exp2(m - mm);
                l = state[sb + 1u] * f_old + l * f_new;
                m = mm;
            }
            if (p.flags & LAST_TILE) == 0u {
                state[sb] = m;
                state[sb + 1u] = l;
            }
        }
    }
    tile_s[lid * SS] = f_old;
    tile_s[lid * SS + 1u] = f_new;
    // Every row sees key 0 (M ≤ N under the mask), so l ≥ 1 at the end.
    tile_s[lid * SS + 2u] = select(0.0, 1.0 / l, live);
    workgroupBarrier();

    for (var i = 0u; i < 4u; i++) {
        let r = r0 + g4 + i;
        if r >= p.rows {
            break;
        }
        let ri = b * p.rows + r;
        let fo = tile_s[(g4 + i) * SS];
        let f_tile = tile_s[(g4 + i) * SS + 1u];
        let inv = tile_s[(g4 + i) * SS + 2u];
        for (var c = 0u; c < CO4; c++) {
            let c4 = s + 4u * c;
            if c4 >= QA4 {
                break;
            }
            var a = acc[i * CO4 + c];
            if p.splits > 1u {
                let o = ((wid.z * p.batches + b) * p.rows + r) * STATE + 2u + 4u * c4;
                partial[o] = a.x;
                partial[o + 1u] = a.y;
                partial[o + 2u] = a.z;
                partial[o + 3u] = a.w;
                continue;
            }
            let o = ri * STATE + 2u + 4u * c4;
            if (p.flags & FIRST_TILE) == 0u {
                let prev = vec4<f32>(state[o], state[o + 1u], state[o + 2u], state[o + 3u]);
                a = prev * fo + a * f_tile;
            }
            if (p.flags & LAST_TILE) == 0u {
                state[o] = a.x;
                state[o + 1u] = a.y;
                state[o + 2u] = a.z;
                state[o + 3u] = a.w;
                continue;
            }
            let v = a * inv;
            let ob = ri * p.q_stride + p.c0 + c4 * 4u;
            for (var k = 0u; k < 4u; k++) {
                if c4 * 4u + k < p.cols {
                    out[ob + k] = v[k];
                }
            }
        }
    }
}

// Kernel softmax (attention) softmax(s·ΦΨᵀ)V with FlashAttention-style
// register tiles (docs/numerics.md, "Attention"; docs/tiling.md,
// "Attention tiles"). Same parameters, state and output bindings, row
// state, masks, key tiles and key splits as softmax.wgsl
// (softmax_state.wgsl); only how a workgroup's WR rows meet a block of BK
// keys differs. Queries, keys and values are read as vec4s: the host runs
// this shader only when d, the value-row stride and the pass's first
// column are multiples of 4.
//
// The 64 invocations are 16 row lanes × 4 key lanes: invocation
// lid = 16·tk + tr holds rows tr + 16i (i < RI) and, of each block, the
// keys 16h + 4tk + c (h < KH = BK/16, c < 4) for the logits and the value
// groups tk + 4c (c < CO4) for the accumulators. The workgroup stages its
// WR = 16·RI queries once (pre-scaled by s·log₂e, so the logits are in
// log₂ units), then per block of BK keys:
//   1. staging: the block's keys and value rows, vec4 loads;
//   2. logits: per vec4 of features, RI query and 4·KH key vec4 loads
//      from workgroup memory feed 16·RI·KH scalar FMAs (the RI × 4KH tile
//      of this invocation), no dot() accumulate;
//   3. row pass: each invocation takes the maximum of its part of each
//      row; the four key lanes of a row exchange theirs through `tile_m`,
//      so all four move the row's m to the block's largest together; each
//      forms the weights 2^{s−m} of its keys and keeps its own part of l
//      (summed over the four at the end of the tile) and writes the
//      weights, as vec4s of four keys, over the staged keys;
//   4. weighted values: per four keys, RI weight vec4s and 4·CO4 value
//      vec4s feed 16·RI·CO4 vec4 FMAs.
// Blocks that some row does not see whole (the last of a slice, the
// causal diagonal) mask the hidden logits to NEG_BIG in a workgroup-
// uniform branch; no other per-pair branch, select or maximum.
//
// Bank layout (32 banks of 4 bytes; a vec4 access is served a quarter
// warp, 8 lanes, at a time): in a warp tr runs over 0..15 and tk over two
// values, and every load of a step reads one feature group or key group.
//   tile_q[row·QS + f4], QS odd: the 8 rows of a quarter warp fall in 8
//     distinct vec4 bank groups; 16 distinct vec4s a warp (2 wavefronts,
//     the minimum);
//   tile_kp[key·D4 + f4] (keys): 2 distinct addresses a warp (broadcast);
//   tile_kp[row·PS + key/4] (weights), PS odd: as tile_q, stores too;
//   tile_v[key·QA4 + c4]: 2 distinct addresses a warp (broadcast);
//   tile_m[tk·MS + row], MS ≡ 16 (mod 32): the two key lanes of a warp
//     in opposite halves of the banks, 32 distinct words.
//
// Template constants (src/gpu/shaders/): D4 = d/4, QA4 = ⌈cols/4⌉
// (cols ≥ 1), BK keys per block (a multiple of 16), RI rows per
// invocation (1, 2 or 4). Generated: WG (= 64 invocations), FIRST_TILE,
// LAST_TILE, CAUSAL.

#import consts
#import softmax_state

const D4: u32 = {{D4}}u;
const QA4: u32 = {{QA4}}u;
const BK: u32 = {{BK}}u;
const RI: u32 = {{RI}}u;

// Row lanes and key lanes of the 64 invocations; rows per workgroup.
const TR: u32 = 16u;
const WR: u32 = TR * RI;
// Key groups of four per invocation, keys per invocation, value groups
// per row per invocation.
const KH: u32 = BK / 16u;
const KPI: u32 = 4u * KH;
const CO4: u32 = (QA4 + 3u) / 4u;
// Odd vec4 strides of a staged query row and of a weight row; the float
// stride of a key lane's maxima.
const QS: u32 = D4 | 1u;
const PS: u32 = (BK / 4u) | 1u;
const MS: u32 = (WR + 31u) / 32u * 32u + 16u;
// Staging steps (whole workgroups of vec4s) of a block's keys and values.
const KSTEPS: u32 = (BK * D4 + WG - 1u) / WG;
const VSTEPS: u32 = (BK * QA4 + WG - 1u) / WG;

@group(0) @binding(1) var<storage, read> phi: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> psi: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vals: array<vec4<f32>>;

var<workgroup> tile_q: array<vec4<f32>, WR * QS>;
// A block's keys, then (after the maxima's exchange) its weights; at the
// end of the tile, each row's factors.
var<workgroup> tile_kp: array<vec4<f32>, max(KSTEPS * WG, WR * PS)>;
// Value rows (the last row's groups past QA4 read into the padding).
var<workgroup> tile_v: array<vec4<f32>, VSTEPS * WG + 4u>;
var<workgroup> tile_m: array<f32, 4u * MS>;

@compute @workgroup_size(WG)
fn attend_tiled(@builtin(workgroup_id) wid: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let b = wid.y;
    let r0 = wid.x * WR;
    let tr = lid % TR;
    let tk = lid / TR;
    let causal = (p.flags & CAUSAL) != 0u;

    // The workgroup's queries, once (zero rows past the tile).
    for (var e = lid; e < WR * D4; e += WG) {
        let i = e / D4;
        let f4 = e - i * D4;
        var v = vec4<f32>(0.0);
        if r0 + i < p.rows {
            v = phi[(b * p.rows + r0 + i) * D4 + f4] * p.scale * LOG2E;
        }
        tile_q[i * QS + f4] = v;
    }
    // The padding past the value rows (read only for groups past QA4).
    if lid < 4u {
        tile_v[VSTEPS * WG + lid] = vec4<f32>(0.0);
    }

    // This workgroup's slice of the key tile, the keys any of its rows
    // sees and those all of them see (workgroup-uniform), and the keys
    // each of this invocation's rows sees: keys j < row_end[i].
    let k_lo = min(wid.z * p.split_keys, p.keys);
    let k_hi = min(k_lo + p.split_keys, p.keys);
    var kend = k_hi;
    var kfull = k_hi;
    if causal {
        let last = min(r0 + WR, p.rows) - 1u;
        let wg_lim = p.row_start + last + p.off + 1u;
        kend = select(0u, min(k_hi, wg_lim - p.key_start), wg_lim > p.key_start);
        let first = p.row_start + r0 + p.off + 1u;
        kfull = select(0u, min(k_hi, first - p.key_start), first > p.key_start);
    }
    var row_end: array<u32, RI>;
    for (var i = 0u; i < RI; i++) {
        let r = r0 + tr + TR * i;
        var e = select(k_lo, k_hi, r < p.rows);
        if causal {
            let lim = p.row_start + r + p.off + 1u;
            e = select(0u, min(k_hi, lim - p.key_start), lim > p.key_start && r < p.rows);
        }
        row_end[i] = e;
    }

    // Bases of this invocation's workgroup-memory reads.
    let qb = tr * QS;
    let kb = 4u * tk * D4;
    let pb = tr * PS;
    let mb = tk * MS + tr;

    var m: array<f32, RI>;
    var l: array<f32, RI>;
    var acc: array<vec4<f32>, RI * CO4>;
    for (var i = 0u; i < RI; i++) {
        m[i] = M_START;
        l[i] = 0.0;
        for (var c = 0u; c < CO4; c++) {
            acc[i * CO4 + c] = vec4<f32>(0.0);
        }
    }

    // cost: hot loop
    for (var base = k_lo; base < kend; base += BK) {
        // 1. The block's keys and value rows (zero past its last key).
        let count = min(BK, kend - base);
        let key_row = (p.key_batch + b) * p.keys + base;
        let kg = key_row * D4;
        let k_in = count * D4;
        for (var s = 0u; s < KSTEPS; s++) {
            let e = lid + s * WG;
            var v = vec4<f32>(0.0);
            if e < k_in {
                v = psi[kg + e];
            }
            tile_kp[e] = v;
        }
        let vstride = p.q_stride / 4u;
        let vg = key_row * vstride + p.c0 / 4u;
        let v_in = count * QA4;
        for (var s = 0u; s < VSTEPS; s++) {
            let e = lid + s * WG;
            let j = e / QA4;
            var v = vec4<f32>(0.0);
            if e < v_in {
                v = vals[vg + j * vstride + (e - j * QA4)];
            }
            tile_v[e] = v;
        }
        workgroupBarrier();

        // 2. The RI × KPI logit tile of this invocation: scalar FMAs.
        var sc: array<f32, RI * KPI>;
        for (var a = 0u; a < RI * KPI; a++) {
            sc[a] = 0.0;
        }
        for (var f4 = 0u; f4 < D4; f4++) {
            var qv: array<vec4<f32>, RI>;
            for (var i = 0u; i < RI; i++) {
                qv[i] = tile_q[qb + TR * QS * i + f4];
            }
            for (var h = 0u; h < KH; h++) {
                for (var c = 0u; c < 4u; c++) {
                    let kv = tile_kp[kb + (16u * h + c) * D4 + f4];
                    for (var i = 0u; i < RI; i++) {
                        let a = i * KPI + 4u * h + c;
                        sc[a] = fma(qv[i].x, kv.x, sc[a]);
                        sc[a] = fma(qv[i].y, kv.y, sc[a]);
                        sc[a] = fma(qv[i].z, kv.z, sc[a]);
                        sc[a] = fma(qv[i].w, kv.w, sc[a]);
                    }
                }
            }
        }
        // Keys some row of the workgroup does not see: NEG_BIG.
        if base + BK > kfull {
            for (var i = 0u; i < RI; i++) {
                for (var h = 0u; h < KH; h++) {
                    for (var c = 0u; c < 4u; c++) {
                        let a = i * KPI + 4u * h + c;
                        let seen = base + 16u * h + 4u * tk + c < row_end[i];
                        sc[a] = select(NEG_BIG, sc[a], seen);
                    }
                }
            }
        }

        // 3. Row pass: this invocation's part of each row's maximum, the
        // exchange, the row's new m, the weights and the factor.
        for (var i = 0u; i < RI; i++) {
            var bm = sc[i * KPI];
            for (var c = 1u; c < KPI; c++) {
                bm = max(bm, sc[i * KPI + c]);
            }
            tile_m[mb + TR * i] = bm;
        }
        workgroupBarrier();
        for (var i = 0u; i < RI; i++) {
            let r = tr + TR * i;
            let bm = max(max(tile_m[r], tile_m[MS + r]), max(tile_m[2u * MS + r], tile_m[3u * MS + r]));
            let mn = max(m[i], bm);
            let alpha = exp2(m[i] - mn);
            m[i] = mn;
            var sum = 0.0;
            for (var h = 0u; h < KH; h++) {
                var w: vec4<f32>;
                for (var c = 0u; c < 4u; c++) {
                    w[c] = exp2(sc[i * KPI + 4u * h + c] - mn);
                    sum += w[c];
                }
                tile_kp[pb + TR * PS * i + 4u * h + tk] = w;
            }
            l[i] = l[i] * alpha + sum;
            for (var c = 0u; c < CO4; c++) {
                acc[i * CO4 + c] *= alpha;
            }
        }
        workgroupBarrier();

        // 4. Weighted values: per four keys, RI weight vec4s and 4·CO4
        // value vec4s.
        for (var j4 = 0u; j4 < BK / 4u; j4++) {
            var pw: array<vec4<f32>, RI>;
            for (var i = 0u; i < RI; i++) {
                pw[i] = tile_kp[pb + TR * PS * i + j4];
            }
            for (var kk = 0u; kk < 4u; kk++) {
                for (var c = 0u; c < CO4; c++) {
                    let v = tile_v[tk + (4u * j4 + kk) * QA4 + 4u * c];
                    for (var i = 0u; i < RI; i++) {
                        acc[i * CO4 + c] = fma(vec4<f32>(pw[i][kk]), v, acc[i * CO4 + c]);
                    }
                }
            }
        }
        workgroupBarrier();
    }

    // Each row's l: the four key lanes' parts.
    for (var i = 0u; i < RI; i++) {
        tile_m[mb + TR * i] = l[i];
    }
    workgroupBarrier();

    // The row's statistics after this key tile, by its owner (invocation
    // 16i + tr owns row tr + 16i, i < RI): into `partial` (a key split) or
    // merged with the earlier tiles' state, and the factors every holder
    // of the row's accumulators applies.
    let own = lid;
    var f_old = 0.0;
    var f_new = 1.0;
    var inv = 0.0;
    if own < WR && r0 + own < p.rows {
        var mm = m[0];
        for (var i = 1u; i < RI; i++) {
            mm = select(mm, m[i], tk == i);
        }
        var ll = (tile_m[own] + tile_m[MS + own]) + (tile_m[2u * MS + own] + tile_m[3u * MS + own]);
        if p.splits > 1u {
            let sp = ((wid.z * p.batches + b) * p.rows + r0 + own) * STATE;
            partial[sp] = mm;
            partial[sp + 1u] = ll;
        } else {
            let sb = (b * p.rows + r0 + own) * STATE;
            if (p.flags & FIRST_TILE) == 0u {
                let pm = state[sb];
                let mx = max(pm, mm);
                f_old = exp2(pm - mx);
                f_new = exp2(mm - mx);
                ll = state[sb + 1u] * f_old + ll * f_new;
                mm = mx;
            }
            if (p.flags & LAST_TILE) == 0u {
                state[sb] = mm;
                state[sb + 1u] = ll;
            }
        }
        // Every row sees key 0 (M ≤ N under the mask), so l ≥ 1 at the end.
        inv = 1.0 / ll;
    }
    if own < WR {
        tile_kp[own] = vec4<f32>(f_old, f_new, inv, 0.0);
    }
    workgroupBarrier();

    for (var i = 0u; i < RI; i++) {
        let r = r0 + tr + TR * i;
        let fac = tile_kp[tr + TR * i];
        for (var c = 0u; c < CO4; c++) {
            let c4 = tk + 4u * c;
            if r < p.rows && c4 < QA4 {
                var a = acc[i * CO4 + c];
                if p.splits > 1u {
                    let o = ((wid.z * p.batches + b) * p.rows + r) * STATE + 2u + 4u * c4;
                    partial[o] = a.x;
                    partial[o + 1u] = a.y;
                    partial[o + 2u] = a.z;
                    partial[o + 3u] = a.w;
                } else {
                    let ri = b * p.rows + r;
                    let o = ri * STATE + 2u + 4u * c4;
                    if (p.flags & FIRST_TILE) == 0u {
                        let prev = vec4<f32>(state[o], state[o + 1u], state[o + 2u], state[o + 3u]);
                        a = prev * fac.x + a * fac.y;
                    }
                    if (p.flags & LAST_TILE) == 0u {
                        state[o] = a.x;
                        state[o + 1u] = a.y;
                        state[o + 2u] = a.z;
                        state[o + 3u] = a.w;
                    } else {
                        let v = a * fac.z;
                        let ob = ri * p.q_stride + p.c0 + c4 * 4u;
                        for (var k = 0u; k < 4u; k++) {
                            if c4 * 4u + k < p.cols {
                                out[ob + k] = v[k];
                            }
                        }
                    }
                }
            }
        }
    }
}

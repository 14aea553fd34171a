// Distance metrics other than the Euclidean one (kernel/metric.rs): the
// module `metric`, imported by local_mean.wgsl and knn.wgsl, the shaders
// that measure keys by differences.
//
// METRIC (a pipeline override, as PROFILE): 0 Euclidean (the importing
// shader's own fma loop; nothing here is used), 1 Manhattan, 2 Chebyshev,
// 3 Minkowski of exponent METRIC_P, 4 haversine (D = 2: latitude,
// longitude in radians). A key's rank is accumulated over its coordinates
// (metric_step): Σ|Δ|, max|Δ|, Minkowski's distance itself (combined
// coordinate by coordinate without under- or overflow), or haversine's
// a = sin²(Δφ/2) + cos φ_q cos φ_x sin²(Δλ/2); metric_distance turns it
// into the distance and metric_t into t = r² (before 1/h²).
//
// Haversine's sine and arcsine are polynomials here (f32 accuracy, about
// 1e-7), not the built-ins, whose accuracy the WGSL and Vulkan
// specifications leave as loose as 2⁻¹¹ absolute. A key with an infinite
// coordinate (local_mean.wgsl's padding) gets rank ≥ 4, so t = +∞.

override METRIC: u32 = 0u;
override METRIC_P: f32 = 2.0;

const METRIC_PI: f32 = 3.14159265;
const METRIC_HALF_PI: f32 = 1.57079633;

// sin(x) for any finite x: reduced to [−π, π], folded onto [−π/2, π/2],
// then the odd Taylor polynomial to x¹¹ (error below 6e-8 there).
fn metric_sin(x: f32) -> f32 {
    var r = x - 2.0 * METRIC_PI * round(x / (2.0 * METRIC_PI));
    if r > METRIC_HALF_PI {
        r = METRIC_PI - r;
    } else if r < -METRIC_HALF_PI {
        r = -METRIC_PI - r;
    }
    let r2 = r * r;
    let p = fma(fma(fma(fma(-2.5052108e-8, r2, 2.7557319e-6), r2, -1.9841270e-4), r2, 8.3333333e-3), r2, -1.6666667e-1);
    return fma(r * r2, p, r);
}

// asin(z) for z in [0, 1] (Cephes' asinf: a polynomial in z² up to 0.5,
// π/2 − 2·asin(√((1 − z)/2)) above).
fn metric_asin(z: f32) -> f32 {
    let big = z > 0.5;
    let w = select(z * z, 0.5 * (1.0 - z), big);
    let x = select(z, sqrt(w), big);
    let p = fma(fma(fma(fma(4.2163199e-2, w, 2.4181311e-2), w, 4.5470026e-2), w, 7.4953003e-2), w, 1.6666752e-1);
    let a = fma(x * w, p, x);
    return select(a, METRIC_HALF_PI - 2.0 * a, big);
}

// One coordinate's step of the rank (METRIC ≠ 0): `t` the rank so far,
// `df` the difference x_k − q_k, `x0`, `q0` the key's and the query's
// coordinate 0 (haversine's latitudes).
fn metric_step(t: f32, df: f32, k: u32, x0: f32, q0: f32) -> f32 {
    if METRIC == 1u {
        return t + abs(df);
    }
    if METRIC == 2u {
        return max(t, abs(df));
    }
    if METRIC == 3u {
        // The distance so far and |Δ| combined as hi·(1 + (lo/hi)^p)^(1/p)
        // (kernel/metric.rs): no underflow or overflow for any p.
        let x = abs(df);
        let hi = max(t, x);
        let r = min(t, x) / hi;
        let rp = select(select(pow(r, METRIC_P), 1.0, r >= 1.0), 0.0, r <= 0.0);
        return select(hi * pow(1.0 + rp, 1.0 / METRIC_P), hi, hi <= 0.0 || hi > 3.40282347e38);
    }
    let big = 3.40282347e38;
    let pad = abs(df) > big || abs(x0) > big;
    let s = metric_sin(0.5 * select(df, 0.0, pad));
    let far = select(0.0, 4.0, pad);
    if k == 0u {
        return s * s + far;
    }
    let cx = metric_sin(select(x0, 0.0, pad) + METRIC_HALF_PI);
    let cq = metric_sin(q0 + METRIC_HALF_PI);
    return t + cq * cx * s * s + far;
}

// The distance of a rank (METRIC ≠ 0; haversine's rank clamped to [0, 1]).
fn metric_distance(rank: f32) -> f32 {
    if METRIC == 1u || METRIC == 2u || METRIC == 3u {
        return rank;
    }
    return 2.0 * metric_asin(sqrt(clamp(rank, 0.0, 1.0)));
}

// t = r² of a rank (METRIC ≠ 0), +∞ for a padding key (`inf`: +∞ formed
// by the caller, WGSL has no infinite literal).
fn metric_t(rank: f32, inf: f32) -> f32 {
    let r = metric_distance(rank);
    return select(r * r, inf, METRIC == 4u && rank >= 2.0);
}

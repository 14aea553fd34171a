// Kernel profiles shared by every distance-kernel op (docs/numerics.md),
// the module `profiles`: each op's shader imports it.
//
// PROFILE: one of the generated codes PROFILE_GAUSSIAN, …, PROFILE_COSINE
// (Profile::shader_code); T_FAR is generated too (kernel::T_FAR): t at or
// beyond it is infinitely far, weight exactly 0 (as on the CPU); NEG_BIG
// is generated too (shaders::NEG_BIG): a finite stand-in for −inf, the
// log-weight of a key without weight. All three are in the generated
// module `profile_consts`, with the cosine profile's polynomial
// COSINE_P0 … COSINE_P5 (kernel::COSINE_POLY).
// The argument t is the scaled squared distance r²/h².

#import profile_consts

override PROFILE: u32 = PROFILE_GAUSSIAN;

// Whether the profile is exp(·), accumulated in the log domain.
fn profile_is_exp() -> bool {
    return PROFILE == PROFILE_GAUSSIAN || PROFILE == PROFILE_LAPLACIAN;
}

// ln k for the exponential profiles.
fn profile_log_weight(t: f32) -> f32 {
    if PROFILE == PROFILE_GAUSSIAN {
        return -0.5 * t;
    }
    return -sqrt(t);
}

// k itself (for exponential profiles: the plain, possibly underflowing value).
fn profile_weight(t: f32) -> f32 {
    return weight_of(PROFILE, t);
}

// The cosine profile, (1 − t)·P(t) with P(t) = cos(π√t/2)/(1 − t) the
// polynomial of form.rs (Horner, the CPU's order): relative accuracy up
// to the support's edge, no sqrt, no cos (WGSL's cos promises only 2⁻¹¹
// absolute).
fn cosine_weight(t: f32) -> f32 {
    var p = COSINE_P5;
    p = p * t + COSINE_P4;
    p = p * t + COSINE_P3;
    p = p * t + COSINE_P2;
    p = p * t + COSINE_P1;
    p = p * t + COSINE_P0;
    return select(0.0, (1.0 - t) * p, t < 1.0);
}

// k of the profile with this code.
fn weight_of(code: u32, t: f32) -> f32 {
    switch code {
        case PROFILE_EPANECHNIKOV: { return max(1.0 - t, 0.0); }
        case PROFILE_UNIFORM: { return select(0.0, 1.0, t < 1.0); }
        case PROFILE_TRIANGULAR: { return max(1.0 - sqrt(t), 0.0); }
        case PROFILE_BIWEIGHT: { let a = max(1.0 - t, 0.0); return a * a; }
        case PROFILE_CAUCHY: { return 1.0 / (1.0 + t); }
        case PROFILE_COSINE: { return cosine_weight(t); }
        case PROFILE_LAPLACIAN: { return exp(-sqrt(t)); }
        default: { return exp(-0.5 * t); }
    }
}

// One block of a product kernel: −2 ln k(t) of the block's profile
// (`code`) at its scaled squared distance t (from differences already
// divided by h_b), at most T_FAR (no weight). A product's weight is the
// gaussian of the sum of its blocks' values, cut at T_FAR only as a whole
// (docs/numerics.md, "Product kernels"); the generated block_t calls it.
fn carrier_t(code: u32, t: f32) -> f32 {
    switch code {
        case PROFILE_GAUSSIAN: { return min(t, T_FAR); }
        case PROFILE_LAPLACIAN: { return min(2.0 * sqrt(t), T_FAR); }
        case PROFILE_CAUCHY: { return min(2.0 * log(1.0 + t), T_FAR); }
        default: {
            if t >= T_FAR {
                return T_FAR;
            }
            let k = weight_of(code, t);
            return select(T_FAR, min(-2.0 * log(k), T_FAR), k > 0.0);
        }
    }
}

fn nan_f32() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

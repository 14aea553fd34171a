// Kernel profiles shared by every distance-kernel op (docs/numerics.md).
// Prepended to each op's shader by the registry (src/gpu/shaders.rs).
//
// PROFILE: 0 gaussian, 1 epanechnikov, 2 uniform, 3 triangular,
//          4 biweight, 5 laplacian, 6 cauchy (Profile::shader_code).
// The argument t is the scaled squared distance r²/h².

override PROFILE: u32 = 0u;

// A finite stand-in for −inf: the running maximum before any key is seen.
const NEG_BIG: f32 = -3.0e38;
// t at or beyond this is infinitely far: weight exactly 0 (as on the CPU).
const T_FAR: f32 = 1.0e37;

// Whether the profile is exp(·), accumulated in the log domain.
fn profile_is_exp() -> bool {
    return PROFILE == 0u || PROFILE == 5u;
}

// ln k for the exponential profiles.
fn profile_log_weight(t: f32) -> f32 {
    if PROFILE == 0u {
        return -0.5 * t;
    }
    return -sqrt(t);
}

// k itself (for exponential profiles: the plain, possibly underflowing value).
fn profile_weight(t: f32) -> f32 {
    switch PROFILE {
        case 1u: { return max(1.0 - t, 0.0); }
        case 2u: { return select(0.0, 1.0, t < 1.0); }
        case 3u: { return max(1.0 - sqrt(t), 0.0); }
        case 4u: { let a = max(1.0 - t, 0.0); return a * a; }
        case 6u: { return 1.0 / (1.0 + t); }
        default: { return exp(profile_log_weight(t)); }
    }
}

fn nan_f32() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

//! Vectorizable building blocks of the CPU path, and the instruction-set
//! tokens that select the compiled version of a kernel.
//!
//! Everything here is written over fixed groups of [`LANES`] floats so LLVM
//! turns it into packed instructions. The kernels are generic over an
//! [`Isa`] and compiled twice: for baseline x86-64 ([`Portable`]) and, inside
//! `#[target_feature(enable = "avx2,fma")]` functions, for AVX2 + FMA
//! ([`Avx2Fma`]); no `target-cpu` flag is needed. An [`Avx2Fma`] value is
//! the proof that the CPU has both features: only [`Avx2Fma::detect`]
//! (run-time detection) makes one, and every path into AVX2 code takes it,
//! so safe code cannot reach that code on a CPU without the features. A
//! later AVX-512 token would be a second type of the same kind.
//!
//! Imports: nothing outside `std` (a leaf of `cpu/`).

/// Width of the lane groups (one AVX register of `f32`).
pub(crate) const LANES: usize = 8;

/// Keys handled per block: the block's distances, weights and key/value
/// columns stay in L1 while a group of queries visits it.
pub(crate) const KEY_BLOCK: usize = 256;

/// An instruction set a kernel is compiled for, carried by value down to
/// the code that depends on it.
pub(crate) trait Isa: Copy + Send + Sync {
    /// Whether multiply-adds are fused (`f32::mul_add`).
    const FMA: bool;
    /// The AVX2 + FMA token when this instruction set provides it, so
    /// generic code can call the explicit AVX2 micro-kernels.
    fn avx2_fma(self) -> Option<Avx2Fma>;
    /// The AVX-512 token when this instruction set provides it (the
    /// zmm micro-kernels).
    #[inline(always)]
    fn avx512(self) -> Option<Avx512> {
        None
    }
}

/// Baseline x86-64 (or any CPU): plain multiply-adds, no explicit vector
/// code.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Portable;

impl Isa for Portable {
    const FMA: bool = false;
    #[inline(always)]
    fn avx2_fma(self) -> Option<Avx2Fma> {
        None
    }
}

/// Proof that the CPU supports AVX2 and FMA. Zero-sized; the private field
/// keeps it from being made anywhere but [`Avx2Fma::detect`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2Fma(());

/// How far `LOCUS_CPU_ISA` lets the CPU path go: 0 baseline, 1 AVX2 +
/// FMA, 2 AVX-512, 3 AVX-512 with BF16 dot products in kNN's filter (the
/// default, which means the best the CPU has). A cap, never a promise: a
/// level the CPU lacks stays off. For comparing the builds on one
/// machine, as PyTorch's `ATEN_CPU_CAPABILITY` does.
pub(crate) fn isa_cap() -> u8 {
    static CAP: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| match std::env::var_os("LOCUS_CPU_ISA") {
        None => 3,
        Some(v) => parse_isa_cap(&v.to_string_lossy()).unwrap_or_else(|| {
            eprintln!(
                "locus: LOCUS_CPU_ISA={v:?} is not one of baseline, avx2, avx512, \
                 avx512bf16; using the best the CPU has"
            );
            3
        }),
    })
}

/// The level a `LOCUS_CPU_ISA` value names.
fn parse_isa_cap(v: &str) -> Option<u8> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "best" | "avx512bf16" | "bf16" => Some(3),
        "avx512" => Some(2),
        "avx2" => Some(1),
        "baseline" | "portable" | "none" => Some(0),
        _ => None,
    }
}

impl Avx2Fma {
    /// The token, when run-time detection finds AVX2 and FMA (the standard
    /// library caches the detection) and `LOCUS_CPU_ISA` allows it.
    #[inline]
    pub(crate) fn detect() -> Option<Avx2Fma> {
        if isa_cap() < 1 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            (std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"))
            .then_some(Avx2Fma(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }
}

impl Isa for Avx2Fma {
    const FMA: bool = true;
    #[inline(always)]
    fn avx2_fma(self) -> Option<Avx2Fma> {
        Some(self)
    }
}

/// Proof that the CPU supports AVX-512F as well as AVX2 and FMA (it holds
/// the [`Avx2Fma`] token). Only [`Avx512::detect`] makes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512(Avx2Fma);

impl Avx512 {
    /// The token, when run-time detection finds AVX-512F, AVX2 and FMA
    /// and `LOCUS_CPU_ISA` allows it.
    #[inline]
    pub(crate) fn detect() -> Option<Avx512> {
        let avx2 = Avx2Fma::detect()?;
        if isa_cap() < 2 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f").then_some(Avx512(avx2))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = avx2;
            None
        }
    }
}

/// Proof that the CPU has AVX-512 BF16 (`vdpbf16ps`: sixteen lanes of
/// two `bf16` products each, summed into `f32`) as well as AVX-512F. kNN's
/// filter takes its inner products from it (`bf16.rs`): on an AMD Zen 4
/// the instruction does twice the multiply-adds of an `f32` FMA in the
/// same time. Only [`Bf16Dot::detect`] makes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bf16Dot(Avx512);

impl Bf16Dot {
    /// The token, when run-time detection finds AVX-512 BF16 beside
    /// AVX-512F, AVX2 and FMA and `LOCUS_CPU_ISA` allows it.
    #[inline]
    pub(crate) fn detect() -> Option<Bf16Dot> {
        let t = Avx512::detect()?;
        if isa_cap() < 3 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512bf16").then_some(Bf16Dot(t))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = t;
            None
        }
    }
}

impl Isa for Avx512 {
    const FMA: bool = true;
    #[inline(always)]
    fn avx2_fma(self) -> Option<Avx2Fma> {
        Some(self.0)
    }
    #[inline(always)]
    fn avx512(self) -> Option<Avx512> {
        Some(self)
    }
}

/// The instruction set a kernel is compiled for, chosen at run time: the
/// best the CPU has, or a lower one that tests force.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TileIsa {
    Portable,
    Avx2(Avx2Fma),
    Avx512(Avx512),
}

impl TileIsa {
    /// The best the CPU has.
    pub(crate) fn best() -> TileIsa {
        match (Avx512::detect(), Avx2Fma::detect()) {
            (Some(t), _) => TileIsa::Avx512(t),
            (None, Some(t)) => TileIsa::Avx2(t),
            (None, None) => TileIsa::Portable,
        }
    }

    /// The tile's build for a kernel running on `isa`: the portable one
    /// for `None` (how tests force the portable build), else the best the
    /// CPU has.
    pub(crate) fn at_most(isa: Option<Avx2Fma>) -> TileIsa {
        match (isa, TileIsa::best()) {
            (None, _) => TileIsa::Portable,
            (Some(_), best @ TileIsa::Avx512(_)) => best,
            (Some(t), _) => TileIsa::Avx2(t),
        }
    }

    /// Every version this CPU can run (for tests).
    #[cfg(test)]
    pub(crate) fn all() -> Vec<TileIsa> {
        let mut v = vec![TileIsa::Portable];
        v.extend(Avx2Fma::detect().map(TileIsa::Avx2));
        v.extend(Avx512::detect().map(TileIsa::Avx512));
        v
    }
}

/// A short description of the vector path in use, for reports.
pub(crate) fn simd_name() -> &'static str {
    if Bf16Dot::detect().is_some() {
        "avx512+bf16+avx2+fma"
    } else if Avx512::detect().is_some() {
        "avx512+avx2+fma"
    } else if Avx2Fma::detect().is_some() {
        "avx2+fma"
    } else {
        "baseline"
    }
}

/// `a·b + c`, fused in the FMA version.
#[inline(always)]
pub(crate) fn fmadd<S: Isa>(a: f32, b: f32, c: f32) -> f32 {
    if S::FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Branch-free `max` that lowers to `maxps` (inputs are never NaN here).
#[inline(always)]
pub(crate) fn fmax(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// `1.5 · 2²³`: added to a float of magnitude below 2²², it rounds it to an
/// integer held in the low mantissa bits ([`exp_nonpos`] and its vector
/// twins in `local_mean/avx2.rs` and `softmax/avx512.rs`, which take every
/// `EXP_` constant from here).
pub(crate) const EXP_MAGIC: f32 = 12_582_912.0;
/// Below this argument the exponential is exactly 0.
pub(crate) const EXP_MIN: f32 = -87.0;
/// `ln 2` split in a short high part and the rest (Cody–Waite reduction).
pub(crate) const EXP_LN2_HI: f32 = 0.693_359_4;
/// See [`EXP_LN2_HI`].
pub(crate) const EXP_LN2_LO: f32 = -2.121_944_4e-4;
/// The polynomial of `(e^r − 1 − r)/r²`, highest degree first (Horner).
pub(crate) const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `e^x` for `x ≤ 0` (including `-inf`), with relative error below 2e-7;
/// returns exactly 0 for `x < -87` so no subnormal ever reaches a sum.
#[inline(always)]
pub(crate) fn exp_nonpos<S: Isa>(x: f32) -> f32 {
    let xc = fmax(x, EXP_MIN);
    let k = fmadd::<S>(xc, std::f32::consts::LOG2_E, EXP_MAGIC);
    let n = k - EXP_MAGIC;
    let r = fmadd::<S>(n, -EXP_LN2_HI, xc);
    let r = fmadd::<S>(n, -EXP_LN2_LO, r);
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = fmadd::<S>(p, r, c);
    }
    let y = fmadd::<S>(p, r * r, r) + 1.0;
    // The low bits of `k` hold n (|n| ≤ 126 here): build 2^n directly.
    let ni = (k.to_bits() as i32).wrapping_sub(EXP_MAGIC.to_bits() as i32);
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    let v = y * scale;
    if x < EXP_MIN { 0.0 } else { v }
}

/// Below this argument [`exp2_capped`] is exactly 0.
pub(crate) const EXP2_MIN: f32 = -126.0;
/// The polynomial of `2^r` on `|r| ≤ ½`, highest degree first (Horner;
/// the constant term is 1, so `2^0` is exactly 1): relative error below
/// 1.7e-7 evaluated in `f32`. (The linear coefficient is the minimax
/// one, a few units in the last place from `ln 2`.)
#[allow(clippy::approx_constant)]
pub(crate) const EXP2_POLY: [f32; 6] = [
    1.326_471e-3,
    9.671_507e-3,
    5.550_733_6e-2,
    2.402_224_2e-1,
    6.931_47e-1,
    1.0,
];

/// `2^x` for `x ≤ 64` (including `-inf`; its callers keep their arguments
/// at most a few units above 0), with relative error below 2e-7; exactly
/// 0 for `x < −126` (no result is subnormal), 0 for NaN. The attention's
/// softmax takes `e^y` as `2^{y·log₂e}` with it: no Cody–Waite reduction
/// (`r = x − round(x)` is exact) and no clamp. Its AVX-512 twin in
/// `softmax/avx512.rs` rounds with `vrndscaleps` and scales with
/// `vscalefps`, bit for bit the same.
#[inline(always)]
pub(crate) fn exp2_capped<S: Isa>(x: f32) -> f32 {
    // Round to the nearest integer, ties to even (|x| < 2²² where it matters).
    let k = x + EXP_MAGIC;
    let n = k - EXP_MAGIC;
    let r = x - n;
    let mut p = EXP2_POLY[0];
    for &c in &EXP2_POLY[1..] {
        p = fmadd::<S>(p, r, c);
    }
    // The low bits of `k` hold n (−126 ≤ n ≤ 64 here): build 2^n directly.
    let ni = (k.to_bits() as i32).wrapping_sub(EXP_MAGIC.to_bits() as i32);
    let scale = f32::from_bits((ni.wrapping_add(127) as u32) << 23);
    let v = p * scale;
    // NaN gives 0, as in the AVX-512 twin.
    if x >= EXP2_MIN { v } else { 0.0 }
}

/// Maximum of `xs` (−inf when empty).
#[inline(always)]
pub(crate) fn max_of(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = fmax(acc[l], c[l]);
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in chunks.remainder().iter().chain(acc.iter()) {
        m = fmax(m, x);
    }
    m
}

/// Sum of `xs`, with `4·LANES` independent partial sums.
#[inline(always)]
pub(crate) fn sum_of(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4 * LANES];
    let mut chunks = xs.chunks_exact(4 * LANES);
    for c in &mut chunks {
        for l in 0..4 * LANES {
            acc[l] += c[l];
        }
    }
    let mut s = 0.0f32;
    for &x in chunks.remainder() {
        s += x;
    }
    s + reduce(&acc)
}

/// Dot product `Σ a_j b_j` with `4·LANES` independent partial sums.
#[inline(always)]
pub(crate) fn dot<S: Isa>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 4 * LANES];
    let mut ca = a.chunks_exact(4 * LANES);
    let mut cb = b.chunks_exact(4 * LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..4 * LANES {
            acc[l] = fmadd::<S>(x[l], y[l], acc[l]);
        }
    }
    let mut s = 0.0f32;
    for (&x, &y) in ca.remainder().iter().zip(cb.remainder()) {
        s = fmadd::<S>(x, y, s);
    }
    s + reduce(&acc)
}

/// Pairwise sum of an accumulator array.
#[inline(always)]
fn reduce(acc: &[f32; 4 * LANES]) -> f32 {
    let mut v = *acc;
    let mut w = 4 * LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            v[l] += v[l + w];
        }
    }
    v[0]
}

/// Scaled squared distances `t_j = ‖x_j − q‖²/h²` from one query to the keys
/// `j0..j0+t.len()` of a key set stored column-major (`xt[k·n + j]`).
#[inline(always)]
pub(crate) fn scaled_sq_dists<S: Isa>(
    xt: &[f32],
    n: usize,
    j0: usize,
    query: &[f32],
    inv_h2: f32,
    t: &mut [f32],
) {
    let len = t.len();
    let full = len / LANES * LANES;
    let mut j = 0;
    while j < full {
        let mut acc = [0.0f32; LANES];
        for (k, &qk) in query.iter().enumerate() {
            let x = &xt[k * n + j0 + j..k * n + j0 + j + LANES];
            for l in 0..LANES {
                let df = x[l] - qk;
                acc[l] = fmadd::<S>(df, df, acc[l]);
            }
        }
        for l in 0..LANES {
            t[j + l] = acc[l] * inv_h2;
        }
        j += LANES;
    }
    for (jj, tj) in t.iter_mut().enumerate().skip(full) {
        *tj = sq_dist::<S>(xt, n, j0 + jj, query) * inv_h2;
    }
}

/// The squared distance from `query` to key `j` of transposed keys `xt`
/// (stride `ld`), by the lanes' arithmetic: one multiply-add per
/// coordinate, in coordinate order. Every lane of [`scaled_sq_dists`] gives
/// this value, so code that re-measures a key with it (the kNN filter)
/// matches the direct path bit for bit.
#[inline(always)]
pub(crate) fn sq_dist<S: Isa>(xt: &[f32], ld: usize, j: usize, query: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (k, &qk) in query.iter().enumerate() {
        let df = xt[k * ld + j] - qk;
        acc = fmadd::<S>(df, df, acc);
    }
    acc
}

/// [`sq_dist`] of a key stored as a row: the same arithmetic (one
/// multiply-add per coordinate, in coordinate order), so the same value
/// bit for bit.
#[inline(always)]
pub(crate) fn sq_dist_row<S: Isa>(key: &[f32], query: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (&x, &qk) in key.iter().zip(query) {
        let df = x - qk;
        acc = fmadd::<S>(df, df, acc);
    }
    acc
}

/// The transpose of eight rows of eight floats: `out[k][c] = rows[c][k]`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fused multiply-adds without the AVX2 token (`f32::mul_add` works on
    /// any CPU), so the FMA arithmetic is tested everywhere.
    #[derive(Clone, Copy)]
    struct Fused;

    impl Isa for Fused {
        const FMA: bool = true;
        fn avx2_fma(self) -> Option<Avx2Fma> {
            None
        }
    }

    #[test]
    fn isa_cap_values() {
        assert_eq!(parse_isa_cap("AVX2"), Some(1));
        assert_eq!(parse_isa_cap(" avx512 "), Some(2));
        assert_eq!(parse_isa_cap("avx512bf16"), Some(3));
        assert_eq!(parse_isa_cap(""), Some(3));
        assert_eq!(parse_isa_cap("baseline"), Some(0));
        assert_eq!(parse_isa_cap("sse9"), None);
    }

    #[test]
    fn exp_matches_std_on_its_domain() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            for fma in [false, true] {
                let got = if fma {
                    exp_nonpos::<Fused>(x)
                } else {
                    exp_nonpos::<Portable>(x)
                };
                let want = f64::from(x).exp();
                let rel = ((f64::from(got) - want) / want).abs();
                worst = worst.max(rel);
            }
            x += 0.001_37;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp_nonpos::<Portable>(-87.5), 0.0);
        assert_eq!(exp_nonpos::<Portable>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpos::<Fused>(0.0), 1.0);
    }

    #[test]
    fn exp2_matches_std_on_its_domain() {
        let mut worst = 0.0f64;
        let mut x = -126.0f32;
        while x <= 8.0 {
            for fma in [false, true] {
                let got = if fma {
                    exp2_capped::<Fused>(x)
                } else {
                    exp2_capped::<Portable>(x)
                };
                let want = f64::from(x).exp2();
                let rel = ((f64::from(got) - want) / want).abs();
                worst = worst.max(rel);
            }
            x += 0.000_97;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        for x in [-126.5, -1e30, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(exp2_capped::<Portable>(x), 0.0);
        }
        assert_eq!(exp2_capped::<Fused>(0.0), 1.0);
        assert_eq!(exp2_capped::<Portable>(-126.0), f32::MIN_POSITIVE);
        assert_eq!(exp2_capped::<Portable>(64.0), 2.0f32.powi(64));
    }

    #[test]
    fn reductions_match_plain_loops() {
        let a: Vec<f32> = (0..77).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..77).map(|i| (i as f32 * 0.11).cos()).collect();
        let s: f64 = a.iter().map(|&x| f64::from(x)).sum();
        let d: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x * y)).sum();
        assert!((f64::from(sum_of(&a)) - s).abs() < 1e-5);
        assert!((f64::from(dot::<Fused>(&a, &b)) - d).abs() < 1e-5);
        let m = a.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(max_of(&a), m);
        assert_eq!(max_of(&[]), f32::NEG_INFINITY);
    }
}

//! Small dense symmetric eigenproblems in `f64`, one per query, for the
//! local models (local linear regression, local PCA).

/// Most Jacobi sweeps; a symmetric matrix of the sizes used here (at most
/// 64 × 64) converges in well under 20.
const MAX_SWEEPS: usize = 60;

/// Eigen-decomposition of the symmetric `n × n` matrix `a` (row-major; it
/// is overwritten) by cyclic Jacobi rotations: `values` receives the
/// eigenvalues in descending order and row `k` of `vectors` (`n × n`,
/// row-major) the unit eigenvector of `values[k]`.
pub(crate) fn sym_eigen(a: &mut [f64], n: usize, values: &mut [f64], vectors: &mut [f64]) {
    debug_assert!(a.len() == n * n && vectors.len() == n * n && values.len() == n);
    // v: eigenvectors as columns while rotating.
    let mut v = vec![0.0f64; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let total: f64 = a.iter().map(|x| x * x).sum();
    for _ in 0..MAX_SWEEPS {
        let mut off = 0.0;
        for p in 0..n {
            for q in p + 1..n {
                off += a[p * n + q] * a[p * n + q];
            }
        }
        if off <= f64::EPSILON * f64::EPSILON * total || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let (app, aqq) = (a[p * n + p], a[q * n + q]);
                let theta = (aqq - app) / (2.0 * apq);
                let t = if theta.abs() > 1e150 {
                    0.5 / theta
                } else {
                    theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt())
                };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A ← Jᵀ A J: columns p and q, then rows p and q.
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[j * n + j].total_cmp(&a[i * n + i]));
    for (k, &i) in order.iter().enumerate() {
        values[k] = a[i * n + i];
        for r in 0..n {
            vectors[k * n + r] = v[r * n + i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(a0: &[f64], n: usize) {
        let mut a = a0.to_vec();
        let (mut w, mut v) = (vec![0.0; n], vec![0.0; n * n]);
        sym_eigen(&mut a, n, &mut w, &mut v);
        let scale: f64 = a0.iter().map(|x| x.abs()).fold(0.0, f64::max).max(1.0);
        for k in 0..n {
            if k > 0 {
                assert!(w[k] <= w[k - 1], "descending: {w:?}");
            }
            // A v = λ v, ‖v‖ = 1.
            let vk = &v[k * n..(k + 1) * n];
            let norm: f64 = vk.iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-12);
            for r in 0..n {
                let av: f64 = (0..n).map(|c| a0[r * n + c] * vk[c]).sum();
                assert!((av - w[k] * vk[r]).abs() < 1e-11 * scale, "A v ≠ λ v");
            }
        }
    }

    #[test]
    fn decomposes_symmetric_matrices() {
        check(&[2.0], 1);
        check(&[2.0, 1.0, 1.0, 2.0], 2);
        check(&[1.0, 0.0, 0.0, 1.0], 2);
        check(&[4.0, 1.0, -2.0, 1.0, 3.0, 0.5, -2.0, 0.5, 1.0], 3);
        // Rank one (a singular local design) and a wide spread of scales.
        check(&[1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 3.0, 6.0, 9.0], 3);
        check(&[1e8, 1.0, 0.0, 1.0, 1e-8, 0.0, 0.0, 0.0, 1.0], 3);
        let n = 12;
        let mut s = 1u64;
        let mut m = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let x = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                m[i * n + j] = x;
                m[j * n + i] = x;
            }
        }
        check(&m, n);
    }
}

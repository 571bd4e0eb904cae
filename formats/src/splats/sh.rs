//! Real spherical harmonics up to degree 3: evaluation and rotation of coefficients.
//!
//! Basis and signs: the real SH with Condon–Shortley phase used by the INRIA 3DGS rasterizer
//! (`utils/sh_utils.py`, `forward.cu computeColorFromSH`) and by `KHR_gaussian_splatting`,
//! ordered m = −l..+l within each band: Y₁ = (−C1·y, C1·z, −C1·x), and so on (see
//! [`sh_basis`]). Colour seen from direction `d` (unit vector from the camera towards the
//! splat) is 0.5 + Σₖ cₖ·Yₖ(d), per channel, before clamping.
//!
//! Rotation: for a rotation R of the scene, each band l transforms on its own by a
//! (2l+1)×(2l+1) matrix M_l such that Σ c′ₖ Yₖ(R·d) = Σ cₖ Yₖ(d) for every d. Rather than the
//! closed-form Wigner-D recursions (Ivanic & Ruedenberg 1996) we build M_l numerically: evaluate
//! the band's basis at 64 well-spread directions dᵢ (A) and at R·dᵢ (B) and solve the least-squares
//! problem B·M = A. The band is closed under rotation, so the fit is exact to f64 round-off;
//! `sh_rotation_preserves_colour_in_rotated_directions` checks the identity at random directions.

/// Number of SH coefficients per channel for `degree` (0..=3): (degree + 1)².
pub fn sh_coeff_count(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// The 16 real SH basis functions of degrees 0..=3 at unit direction `d` (x, y, z), in Kiln's
/// coefficient order (index l² + l + m). Values for a non-unit `d` are meaningless.
pub fn sh_basis(d: [f64; 3]) -> [f64; 16] {
    const C0: f64 = 0.282_094_791_773_878_14;
    const C1: f64 = 0.488_602_511_902_919_9;
    const C2: [f64; 5] = [
        1.092_548_430_592_079_2,
        -1.092_548_430_592_079_2,
        0.315_391_565_252_520_05,
        -1.092_548_430_592_079_2,
        0.546_274_215_296_039_6,
    ];
    const C3: [f64; 7] = [
        -0.590_043_589_926_643_5,
        2.890_611_442_640_554,
        -0.457_045_799_464_465_8,
        0.373_176_332_590_115_4,
        -0.457_045_799_464_465_8,
        1.445_305_721_320_277,
        -0.590_043_589_926_643_5,
    ];
    let [x, y, z] = d;
    let (xx, yy, zz) = (x * x, y * y, z * z);
    [
        C0,
        -C1 * y,
        C1 * z,
        -C1 * x,
        C2[0] * x * y,
        C2[1] * y * z,
        C2[2] * (2.0 * zz - xx - yy),
        C2[3] * x * z,
        C2[4] * (xx - yy),
        C3[0] * y * (3.0 * xx - yy),
        C3[1] * x * y * z,
        C3[2] * y * (4.0 * zz - xx - yy),
        C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
        C3[4] * x * (4.0 * zz - xx - yy),
        C3[5] * z * (xx - yy),
        C3[6] * x * (xx - 3.0 * yy),
    ]
}

/// Colour (r, g, b) of one splat seen along unit direction `d`: 0.5 + Σₖ cₖ·Yₖ(d), unclamped.
///
/// - `coeffs`: `[K, 3]` coefficient-major SH of one splat, K = (degree + 1)², degree ≤ 3.
///
/// # Panics
/// If `coeffs.len()` is not 3·K for some degree 0..=3.
pub fn eval_sh_colour(coeffs: &[f32], d: [f64; 3]) -> [f64; 3] {
    let k = coeffs.len() / 3;
    assert!(
        coeffs.len().is_multiple_of(3) && [1, 4, 9, 16].contains(&k),
        "SH coefficients must be [K, 3] with K in 1, 4, 9, 16; got {} values",
        coeffs.len()
    );
    let basis = sh_basis(d);
    let mut rgb = [0.5; 3];
    for (j, &y) in basis.iter().take(k).enumerate() {
        for c in 0..3 {
            rgb[c] += coeffs[j * 3 + c] as f64 * y;
        }
    }
    rgb
}

/// Per-band coefficient transforms for one 3×3 rotation, bands 1..=3 (band 0 is invariant).
#[derive(Debug, Clone)]
pub struct ShRotation {
    /// Row-major (2l+1)×(2l+1) matrix M_l for l = 1, 2, 3: c′ = M_l·c.
    bands: [Vec<f64>; 3],
}

impl ShRotation {
    /// Build the transforms for the rotation matrix `r` (row-major, maps old world coordinates
    /// to new ones: p′ = r·p). `r` should be a proper rotation (orthonormal, det +1); callers
    /// check that.
    pub fn new(r: [[f64; 3]; 3]) -> Self {
        let dirs = fibonacci_sphere(64);
        let rotate = |d: [f64; 3]| -> [f64; 3] {
            std::array::from_fn(|i| r[i][0] * d[0] + r[i][1] * d[1] + r[i][2] * d[2])
        };
        let bands = std::array::from_fn(|b| {
            let l = b + 1;
            let m = 2 * l + 1;
            let off = l * l;
            // Normal equations of B·M = A: (BᵀB)·M = BᵀA, with A = basis at d, B = basis at R·d.
            let mut btb = vec![0.0; m * m];
            let mut bta = vec![0.0; m * m];
            for &d in &dirs {
                let a = sh_basis(d);
                let bb = sh_basis(rotate(d));
                for i in 0..m {
                    for j in 0..m {
                        btb[i * m + j] += bb[off + i] * bb[off + j];
                        bta[i * m + j] += bb[off + i] * a[off + j];
                    }
                }
            }
            solve_in_place(&mut btb, &mut bta, m);
            bta
        });
        Self { bands }
    }

    /// Rotate the SH of every splat in place.
    ///
    /// - `sh_coeffs`: `[N, K, 3]` coefficient-major, K = (degree + 1)², degree ≤ 3; the DC term
    ///   (k = 0) is left unchanged.
    pub fn apply(&self, sh_coeffs: &mut [f32], degree: u32) {
        let k = sh_coeff_count(degree);
        let mut tmp = [0f64; 7];
        for splat in sh_coeffs.chunks_exact_mut(k * 3) {
            for l in 1..=degree as usize {
                let m = 2 * l + 1;
                let off = l * l;
                let mat = &self.bands[l - 1];
                for c in 0..3 {
                    for (i, t) in tmp.iter_mut().take(m).enumerate() {
                        *t = (0..m)
                            .map(|j| mat[i * m + j] * splat[(off + j) * 3 + c] as f64)
                            .sum();
                    }
                    for i in 0..m {
                        splat[(off + i) * 3 + c] = tmp[i] as f32;
                    }
                }
            }
        }
    }
}

/// `n` near-uniform unit directions (Fibonacci lattice).
fn fibonacci_sphere(n: usize) -> Vec<[f64; 3]> {
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    (0..n)
        .map(|i| {
            let z = 1.0 - (2.0 * i as f64 + 1.0) / n as f64;
            let r = (1.0 - z * z).sqrt();
            let phi = golden * i as f64;
            [r * phi.cos(), r * phi.sin(), z]
        })
        .collect()
}

/// Solve `a · X = b` for X (both m×m row-major) by Gauss–Jordan elimination with partial
/// pivoting; X overwrites `b`. `a` is symmetric positive definite here (normal equations of a
/// well-conditioned fit), so pivots are far from zero.
fn solve_in_place(a: &mut [f64], b: &mut [f64], m: usize) {
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
            .unwrap_or(col);
        if pivot != col {
            for j in 0..m {
                a.swap(col * m + j, pivot * m + j);
                b.swap(col * m + j, pivot * m + j);
            }
        }
        let p = a[col * m + col];
        for j in 0..m {
            a[col * m + j] /= p;
            b[col * m + j] /= p;
        }
        for i in 0..m {
            if i != col {
                let f = a[i * m + col];
                if f != 0.0 {
                    for j in 0..m {
                        a[i * m + j] -= f * a[col * m + j];
                        b[i * m + j] -= f * b[col * m + j];
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::Rng;

    fn rot_x(a: f64) -> [[f64; 3]; 3] {
        let (s, c) = a.sin_cos();
        [[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]]
    }

    fn rot_z(a: f64) -> [[f64; 3]; 3] {
        let (s, c) = a.sin_cos();
        [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
    }

    fn mul(a: [[f64; 3]; 3], b: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
    }

    fn apply(r: [[f64; 3]; 3], d: [f64; 3]) -> [f64; 3] {
        std::array::from_fn(|i| (0..3).map(|k| r[i][k] * d[k]).sum())
    }

    #[test]
    fn sh_basis_is_orthonormal_over_the_sphere() {
        let dirs = fibonacci_sphere(4000);
        let w = 4.0 * std::f64::consts::PI / dirs.len() as f64;
        for i in 0..16 {
            for j in 0..16 {
                let v: f64 = dirs
                    .iter()
                    .map(|&d| sh_basis(d)[i] * sh_basis(d)[j] * w)
                    .sum();
                let expected = if i == j { 1.0 } else { 0.0 };
                assert!((v - expected).abs() < 2e-3, "<Y{i}, Y{j}> = {v}");
            }
        }
    }

    #[test]
    fn sh_rotation_preserves_colour_in_rotated_directions() {
        let mut rng = Rng::new(5);
        let r = mul(rot_z(0.7), mul(rot_x(-1.1), rot_z(2.3)));
        let rot = ShRotation::new(r);
        for degree in 1..=3 {
            let k = sh_coeff_count(degree);
            let coeffs: Vec<f32> = (0..k * 3).map(|_| rng.range(-1.0, 1.0)).collect();
            let mut rotated = coeffs.clone();
            rot.apply(&mut rotated, degree);
            assert_eq!(&rotated[..3], &coeffs[..3], "DC must not change");
            for _ in 0..50 {
                let v = [
                    rng.range(-1.0, 1.0),
                    rng.range(-1.0, 1.0),
                    rng.range(-1.0, 1.0),
                ]
                .map(f64::from);
                let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-3);
                let d = v.map(|x| x / n);
                let before = eval_sh_colour(&coeffs, d);
                let after = eval_sh_colour(&rotated, apply(r, d));
                for c in 0..3 {
                    assert!(
                        (before[c] - after[c]).abs() < 1e-5,
                        "degree {degree}: {before:?} vs {after:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn sh_rotation_by_identity_is_identity_and_composes() {
        let mut rng = Rng::new(9);
        let coeffs: Vec<f32> = (0..48).map(|_| rng.range(-1.0, 1.0)).collect();
        let mut same = coeffs.clone();
        ShRotation::new(rot_x(0.0)).apply(&mut same, 3);
        for (a, b) in coeffs.iter().zip(&same) {
            assert!((a - b).abs() < 1e-6);
        }
        // R then R⁻¹ restores the coefficients.
        let r = mul(rot_x(0.4), rot_z(-1.3));
        let rt: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| r[j][i]));
        let mut back = coeffs.clone();
        ShRotation::new(r).apply(&mut back, 3);
        ShRotation::new(rt).apply(&mut back, 3);
        for (a, b) in coeffs.iter().zip(&back) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}

//! Real spherical harmonics up to degree 3: the basis, its gradient with respect to the (unit) view
//! direction, and the colour evaluation used by `project` / `project_backward`.
//!
//! Source: INRIA 3DGS `utils/sh_utils.py` and `forward.cu::computeColorFromSH` (real SH with the
//! Condon–Shortley phase, i.e. the `−C1·y`, `−C1·x` signs), identical to gsplat's
//! `spherical_harmonics`. Colour = Σₖ basisₖ(dir)·shₖ + 0.5, clamped at 0 by the caller.
//! NaN directions give NaN colours, which `project` culls.

use super::scalar::Scalar;

pub use super::sh_constants::{SH_C0, SH_C1, SH_C2, SH_C3};

/// Number of SH coefficients per channel for a degree: `(degree + 1)²`.
pub const fn sh_coeff_count(degree: u32) -> usize {
    ((degree + 1) * (degree + 1)) as usize
}

/// The SH basis values `[16]` at unit direction `dir`; entries beyond `(degree + 1)²` are 0.
#[inline]
pub fn sh_basis<T: Scalar>(degree: u32, dir: [T; 3]) -> [T; 16] {
    let c = T::of;
    let [x, y, z] = dir;
    let mut b = [T::ZERO; 16];
    b[0] = c(SH_C0);
    if degree >= 1 {
        b[1] = -c(SH_C1) * y;
        b[2] = c(SH_C1) * z;
        b[3] = -c(SH_C1) * x;
    }
    if degree >= 2 {
        let (xx, yy, zz) = (x * x, y * y, z * z);
        b[4] = c(SH_C2[0]) * x * y;
        b[5] = c(SH_C2[1]) * y * z;
        b[6] = c(SH_C2[2]) * (c(2.0) * zz - xx - yy);
        b[7] = c(SH_C2[3]) * x * z;
        b[8] = c(SH_C2[4]) * (xx - yy);
        if degree >= 3 {
            b[9] = c(SH_C3[0]) * y * (c(3.0) * xx - yy);
            b[10] = c(SH_C3[1]) * x * y * z;
            b[11] = c(SH_C3[2]) * y * (c(4.0) * zz - xx - yy);
            b[12] = c(SH_C3[3]) * z * (c(2.0) * zz - c(3.0) * xx - c(3.0) * yy);
            b[13] = c(SH_C3[4]) * x * (c(4.0) * zz - xx - yy);
            b[14] = c(SH_C3[5]) * z * (xx - yy);
            b[15] = c(SH_C3[6]) * x * (xx - c(3.0) * yy);
        }
    }
    b
}

/// ∂basisₖ/∂(x, y, z) `[16][3]` at `dir`, treating x, y, z as independent (the caller chains through
/// the normalisation of the view direction).
#[inline]
pub fn sh_basis_grad<T: Scalar>(degree: u32, dir: [T; 3]) -> [[T; 3]; 16] {
    let c = T::of;
    let z0 = T::ZERO;
    let [x, y, z] = dir;
    let mut g = [[z0; 3]; 16];
    if degree >= 1 {
        g[1] = [z0, -c(SH_C1), z0];
        g[2] = [z0, z0, c(SH_C1)];
        g[3] = [-c(SH_C1), z0, z0];
    }
    if degree >= 2 {
        let k = SH_C2.map(c);
        g[4] = [k[0] * y, k[0] * x, z0];
        g[5] = [z0, k[1] * z, k[1] * y];
        g[6] = [k[2] * c(-2.0) * x, k[2] * c(-2.0) * y, k[2] * c(4.0) * z];
        g[7] = [k[3] * z, z0, k[3] * x];
        g[8] = [k[4] * c(2.0) * x, k[4] * c(-2.0) * y, z0];
        if degree >= 3 {
            let k = SH_C3.map(c);
            let (xx, yy, zz) = (x * x, y * y, z * z);
            g[9] = [k[0] * c(6.0) * x * y, k[0] * c(3.0) * (xx - yy), z0];
            g[10] = [k[1] * y * z, k[1] * x * z, k[1] * x * y];
            g[11] = [
                k[2] * c(-2.0) * x * y,
                k[2] * (c(4.0) * zz - xx - c(3.0) * yy),
                k[2] * c(8.0) * y * z,
            ];
            g[12] = [
                k[3] * c(-6.0) * x * z,
                k[3] * c(-6.0) * y * z,
                k[3] * (c(6.0) * zz - c(3.0) * (xx + yy)),
            ];
            g[13] = [
                k[4] * (c(4.0) * zz - c(3.0) * xx - yy),
                k[4] * c(-2.0) * x * y,
                k[4] * c(8.0) * x * z,
            ];
            g[14] = [
                k[5] * c(2.0) * x * z,
                k[5] * c(-2.0) * y * z,
                k[5] * (xx - yy),
            ];
            g[15] = [k[6] * c(3.0) * (xx - yy), k[6] * c(-6.0) * x * y, z0];
        }
    }
    g
}

/// Unclamped colour `[3]` = Σₖ basisₖ·shₖ + 0.5 for one splat, with `sh` its `[K, 3]` coefficients
/// (coefficient-major) and only the first `(degree + 1)²` used.
#[inline]
pub fn sh_color<T: Scalar>(degree: u32, sh: &[T], basis: &[T; 16]) -> [T; 3] {
    let mut rgb = [T::of(0.5); 3];
    for k in 0..sh_coeff_count(degree) {
        for ch in 0..3 {
            rgb[ch] += basis[k] * sh[k * 3 + ch];
        }
    }
    rgb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_degree_zero_colour_is_c0_times_dc_plus_half() {
        let b = sh_basis::<f64>(0, [0.3, -0.2, 0.9]);
        let rgb = sh_color(0, &[0.4, -1.0, 2.0], &b);
        for (got, dc) in rgb.iter().zip([0.4, -1.0, 2.0]) {
            assert!((got - (SH_C0 * dc + 0.5)).abs() < 1e-15);
        }
    }

    #[test]
    fn sh_basis_grad_matches_central_differences() {
        let dir = [0.31, -0.52, 0.79];
        let g = sh_basis_grad::<f64>(3, dir);
        let h = 1e-6;
        for axis in 0..3 {
            let (mut p, mut m) = (dir, dir);
            p[axis] += h;
            m[axis] -= h;
            let (bp, bm) = (sh_basis(3, p), sh_basis(3, m));
            for k in 0..16 {
                let fd = (bp[k] - bm[k]) / (2.0 * h);
                assert!(
                    (fd - g[k][axis]).abs() < 1e-8,
                    "k={k} axis={axis}: fd {fd} vs {}",
                    g[k][axis]
                );
            }
        }
    }
}

//! Fixed-size 3×3 / 2×3 matrix products for the projection and its backward pass. Row-major
//! `[[T; cols]; rows]`; small enough that the compiler unrolls everything.

use super::scalar::Scalar;

/// 3×3 matrix, row-major.
pub type M3<T> = [[T; 3]; 3];

/// `a · b` for `a` R×3 and `b` 3×C.
#[inline(always)]
pub fn mul<T: Scalar, const R: usize, const C: usize>(
    a: &[[T; 3]; R],
    b: &[[T; C]; 3],
) -> [[T; C]; R] {
    let mut out = [[T::ZERO; C]; R];
    for i in 0..R {
        for j in 0..C {
            out[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    out
}

/// Transpose of an R×C matrix.
#[inline(always)]
pub fn transpose<T: Scalar, const R: usize, const C: usize>(a: &[[T; C]; R]) -> [[T; R]; C] {
    let mut out = [[T::ZERO; R]; C];
    for i in 0..R {
        for j in 0..C {
            out[j][i] = a[i][j];
        }
    }
    out
}

/// `a · v` for a 3×3 matrix.
#[inline(always)]
pub fn mul_vec<T: Scalar>(a: &M3<T>, v: [T; 3]) -> [T; 3] {
    [
        a[0][0] * v[0] + a[0][1] * v[1] + a[0][2] * v[2],
        a[1][0] * v[0] + a[1][1] * v[1] + a[1][2] * v[2],
        a[2][0] * v[0] + a[2][1] * v[1] + a[2][2] * v[2],
    ]
}

/// `a · b` for a 2×3 `a` and 3×3 `b`.
#[inline(always)]
pub fn mul23<T: Scalar>(a: &[[T; 3]; 2], b: &M3<T>) -> [[T; 3]; 2] {
    let mut out = [[T::ZERO; 3]; 2];
    for i in 0..2 {
        for j in 0..3 {
            out[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    out
}

/// `a · bᵀ` for two 2×3 matrices (a 2×2 result).
#[inline(always)]
pub fn mul_abt23<T: Scalar>(a: &[[T; 3]; 2], b: &[[T; 3]; 2]) -> [[T; 2]; 2] {
    let mut out = [[T::ZERO; 2]; 2];
    for i in 0..2 {
        for j in 0..2 {
            out[i][j] = a[i][0] * b[j][0] + a[i][1] * b[j][1] + a[i][2] * b[j][2];
        }
    }
    out
}

//! Column-major 4×4 transforms as 3D Tiles stores them (`tile.transform`, element `m[4·column +
//! row]`): composition, application to points, rigid inverses and the rotation part.
//!
//! Source: OGC 3D Tiles 1.1 (22-025r4) §"Tile transforms" (column-major, local → parent, affine).
//! Shared by the tileset checker and by everything that places tile content in a world frame
//! (evaluation, viewer cameras).

/// Column-major 4×4 (element `m[4 * column + row]`), as `tile.transform` is stored.
pub type Mat4 = [f64; 16];

/// The identity transform.
pub const IDENTITY: Mat4 = [
    1.0, 0.0, 0.0, 0.0, //
    0.0, 1.0, 0.0, 0.0, //
    0.0, 0.0, 1.0, 0.0, //
    0.0, 0.0, 0.0, 1.0,
];

/// `a · b` (apply `b` first).
#[must_use]
pub fn mul(a: &Mat4, b: &Mat4) -> Mat4 {
    std::array::from_fn(|i| {
        let (c, r) = (i / 4, i % 4);
        (0..4).map(|k| a[4 * k + r] * b[4 * c + k]).sum()
    })
}

/// `m · (p, 1)`, dropping w (tile transforms are affine).
#[must_use]
pub fn apply(m: &Mat4, p: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|r| m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r])
}

/// `m · (v, 0)`: the linear part applied to a direction.
#[must_use]
pub fn apply_vector(m: &Mat4, v: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|r| m[r] * v[0] + m[4 + r] * v[1] + m[8 + r] * v[2])
}

/// A translation by `t` (metres).
#[must_use]
pub fn translation(t: [f64; 3]) -> Mat4 {
    let mut m = IDENTITY;
    m[12..15].copy_from_slice(&t);
    m
}

/// The affine transform `p ↦ r·p + t` from a row-major 3×3 `r` and a translation `t`.
#[must_use]
pub fn from_rotation_translation(r: [[f64; 3]; 3], t: [f64; 3]) -> Mat4 {
    let mut m = IDENTITY;
    for c in 0..3 {
        for row in 0..3 {
            m[4 * c + row] = r[row][c];
        }
    }
    m[12..15].copy_from_slice(&t);
    m
}

/// The 3×3 linear part of `m`, row-major.
#[must_use]
pub fn linear_part(m: &Mat4) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| m[4 * c + r]))
}

/// The translation part of `m`.
#[must_use]
pub fn translation_part(m: &Mat4) -> [f64; 3] {
    [m[12], m[13], m[14]]
}

/// Inverse of a rigid transform (rotation + translation): `[Rᵀ | −Rᵀ·t]`. Only valid when the
/// linear part is a rotation ([`is_rigid`]).
#[must_use]
pub fn rigid_inverse(m: &Mat4) -> Mat4 {
    let r = linear_part(m);
    let t = translation_part(m);
    let rt: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| r[j][i]));
    let ti = std::array::from_fn(|i| -(0..3).map(|k| rt[i][k] * t[k]).sum::<f64>());
    from_rotation_translation(rt, ti)
}

/// Whether the linear part of `m` is a proper rotation (orthonormal, determinant +1) within
/// `tol`, and the last row is (0, 0, 0, 1).
#[must_use]
pub fn is_rigid(m: &Mat4, tol: f64) -> bool {
    let r = linear_part(m);
    let orthonormal = (0..3).all(|i| {
        (0..3).all(|j| {
            let dot: f64 = (0..3).map(|k| r[k][i] * r[k][j]).sum();
            (dot - if i == j { 1.0 } else { 0.0 }).abs() <= tol
        })
    });
    let det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1])
        - r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0])
        + r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    orthonormal
        && (det - 1.0).abs() <= tol
        && m[3] == 0.0
        && m[7] == 0.0
        && m[11] == 0.0
        && (m[15] - 1.0).abs() <= tol
}

/// The largest and smallest column norms of the 3×3 part (1 and 1 for a rigid transform).
#[must_use]
pub fn scale_range(m: &Mat4) -> (f64, f64) {
    let norms: Vec<f64> = (0..3)
        .map(|c| (0..3).map(|r| m[4 * c + r].powi(2)).sum::<f64>().sqrt())
        .collect();
    (
        norms.iter().copied().fold(f64::INFINITY, f64::min),
        norms.iter().copied().fold(0.0, f64::max),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rigid_inverse_undoes_a_rotation_and_translation() {
        // 90° about z, then a translation.
        let r = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]];
        let m = from_rotation_translation(r, [1.0, 2.0, 3.0]);
        assert!(is_rigid(&m, 1e-12));
        let p = [0.5, -4.0, 7.0];
        let back = apply(&rigid_inverse(&m), apply(&m, p));
        for a in 0..3 {
            assert!((back[a] - p[a]).abs() < 1e-12);
        }
        assert_eq!(apply(&m, [1.0, 0.0, 0.0]), [1.0, 3.0, 3.0]);
        assert_eq!(mul(&m, &rigid_inverse(&m)), IDENTITY);
    }

    #[test]
    fn a_scaled_transform_is_not_rigid() {
        let mut m = IDENTITY;
        m[0] = 2.0;
        assert!(!is_rigid(&m, 1e-9));
        assert_eq!(scale_range(&m), (1.0, 2.0));
    }
}

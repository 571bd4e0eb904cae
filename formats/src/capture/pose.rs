//! Rigid 4×4 row-major pose arithmetic the readers share: the OpenGL ↔ OpenCV camera-axis flip,
//! the inverse of a rigid transform, and the rigidity check ([`rotation_error`] against
//! [`ROTATION_TOLERANCE`]) that decides whether a stored matrix is a pose.

/// Rotation part of a 4×4 row-major matrix times `diag(1, −1, −1)`, i.e. its camera y and z axes
/// negated: OpenGL/NeRF camera (x right, y up, z back) ↔ OpenCV camera (x right, y down, z fwd).
pub(super) fn flip_yz_axes(m: &mut [[f64; 4]; 4]) {
    for row in m.iter_mut().take(3) {
        row[1] = -row[1];
        row[2] = -row[2];
    }
}

/// Inverse of a rigid 4×4 row-major transform `[R t; 0 1]`: `[Rᵀ −Rᵀt; 0 1]`.
pub(super) fn rigid_inverse(m: &[[f64; 4]; 4]) -> [[f64; 4]; 4] {
    let mut out = [[0.0; 4]; 4];
    for i in 0..3 {
        for j in 0..3 {
            out[i][j] = m[j][i];
        }
        out[i][3] = -(m[0][i] * m[0][3] + m[1][i] * m[1][3] + m[2][i] * m[2][3]);
    }
    out[3][3] = 1.0;
    out
}

/// Largest entry of |RᵀR − I| for the rotation block of `m`, and det R.
pub(super) fn rotation_error(m: &[[f64; 4]; 4]) -> (f64, f64) {
    let mut worst: f64 = 0.0;
    for i in 0..3 {
        for j in 0..3 {
            let dot: f64 = (0..3).map(|k| m[k][i] * m[k][j]).sum();
            let want = if i == j { 1.0 } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    (worst, det)
}

/// Tolerance on |RᵀR − I| for a pose to count as rigid: poses written as text with 6+ significant
/// digits (COLMAP, instant-ngp) are orthonormal to ~1e-6; a scaled or sheared matrix (a different
/// convention) is off by far more than 1e-3.
pub(super) const ROTATION_TOLERANCE: f64 = 1e-3;

/// Why a stored camera pose cannot be used (issue 44, rule 3): the camera is skipped with a
/// warning naming it and the reason, and the capture goes on without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoseDefect {
    /// An entry is NaN or infinite.
    NonFinite,
    /// The rotation block is singular (|det R| ≈ 0, e.g. a zero quaternion or a zero column).
    Singular,
    /// The rotation block is a reflection (det R < 0), e.g. one axis negated.
    Mirrored,
    /// The rotation block is not orthonormal beyond [`ROTATION_TOLERANCE`] (scaled or sheared).
    NonRigid,
}

impl PoseDefect {
    /// The reason as the skip warning states it.
    pub(super) fn reason(self) -> &'static str {
        match self {
            PoseDefect::NonFinite => "pose not finite (NaN or Inf)",
            PoseDefect::Singular => "rotation singular (det R = 0)",
            PoseDefect::Mirrored => "rotation mirrored (det R < 0)",
            PoseDefect::NonRigid => "rotation not orthonormal (scaled or sheared)",
        }
    }
}

/// Below this |det R| a rotation block counts as singular rather than merely non-rigid.
const SINGULAR_DET: f64 = 1e-6;

/// What is wrong with the 4×4 pose `m` (either direction; only its entries and its rotation block
/// are checked), or `None` for a finite rigid pose with det R = +1.
pub(super) fn pose_defect(m: &[[f64; 4]; 4]) -> Option<PoseDefect> {
    if m.iter().flatten().any(|v| !v.is_finite()) {
        return Some(PoseDefect::NonFinite);
    }
    let (err, det) = rotation_error(m);
    if det.abs() <= SINGULAR_DET {
        return Some(PoseDefect::Singular);
    }
    if det < 0.0 {
        return Some(PoseDefect::Mirrored);
    }
    (err > ROTATION_TOLERANCE).then_some(PoseDefect::NonRigid)
}

#[cfg(test)]
// Matrix and per-axis checks index several arrays at once, as the formulas do.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    #[test]
    fn rigid_inverse_undoes_a_pose() {
        let (c, s) = (0.6_f64, 0.8_f64);
        let m = [
            [c, -s, 0.0, 1.0],
            [s, c, 0.0, -2.0],
            [0.0, 0.0, 1.0, 3.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let inv = rigid_inverse(&m);
        for i in 0..4 {
            for j in 0..4 {
                let p: f64 = (0..4).map(|k| m[i][k] * inv[k][j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((p - want).abs() < 1e-12, "({i},{j}) = {p}");
            }
        }
    }
}

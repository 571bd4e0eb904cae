//! Transforms of a whole splat scene that keep its file format out of the picture: rotating it
//! ([`rotate_splats`]: means, orientations and SH together), changing its up axis
//! ([`UpAxis`], [`up_axis_rotation`]) and changing its SH degree ([`reduce_sh_degree`],
//! [`raise_sh_degree`]). The format modules and `convert` import these from here, so no format
//! depends on another, or on `convert`, to transform splats.
//!
//! Up-axis frames ([`UpAxis`]): Kiln's splats carry no frame tag, so the caller says which world
//! axis points up in the input and which should point up in the output. glTF and 3D Tiles
//! content are **+Y up** (x right, −z forward; 3D Tiles then applies its own Y-up → Z-up
//! transform). COLMAP / OpenCV reconstructions are typically **−Y up** (their camera y axis
//! points down, and an SfM world keeps the first camera's axes). Blender, Unreal-style and
//! geospatial local frames (ENU) are **+Z up**. The conversion is always a proper rotation (no
//! mirroring): [`up_axis_rotation`] documents the exact matrices.
//!
//! Source: real SH rotation as in [`super::sh::ShRotation`]; Kerbl et al. 2023 §4
//! (Σ = R·S·Sᵀ·Rᵀ, so rotating a splat by r turns its quaternion into q_r ⊗ q).

use super::GaussianSplats;
use super::sh::ShRotation;
use crate::{Error, Result};

/// Which world axis points up in a splat scene. See the module docs for common conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpAxis {
    /// +X up.
    X,
    /// −X up.
    NegX,
    /// +Y up: glTF, 3D Tiles glTF content, three.js, PlayCanvas.
    Y,
    /// −Y up: COLMAP / OpenCV-style SfM worlds (camera y points down), INRIA 3DGS output.
    NegY,
    /// +Z up: Blender, ENU geospatial frames, 3D Tiles tileset frame.
    Z,
    /// −Z up.
    NegZ,
}

impl UpAxis {
    /// Every axis with its command-line name (`x`, `neg-x`, `y`, `neg-y`, `z`, `neg-z`).
    pub const ALL: [(UpAxis, &'static str); 6] = [
        (UpAxis::X, "x"),
        (UpAxis::NegX, "neg-x"),
        (UpAxis::Y, "y"),
        (UpAxis::NegY, "neg-y"),
        (UpAxis::Z, "z"),
        (UpAxis::NegZ, "neg-z"),
    ];

    /// The command-line name ([`UpAxis::ALL`]).
    #[must_use]
    pub fn name(self) -> &'static str {
        UpAxis::ALL
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("y", |(_, name)| name)
    }

    /// Rotation (row-major, p′ = R·p) carrying this axis onto +Y: a single quarter or half turn
    /// about X (for ±Y, ±Z) or about Z (for ±X).
    fn to_y(self) -> [[f64; 3]; 3] {
        match self {
            // Identity.
            UpAxis::Y => [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            // 180° about X: (x, y, z) → (x, −y, −z).
            UpAxis::NegY => [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]],
            // −90° about X: (x, y, z) → (x, z, −y) (Blender's glTF export).
            UpAxis::Z => [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]],
            // +90° about X: (x, y, z) → (x, −z, y).
            UpAxis::NegZ => [[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]],
            // +90° about Z: (x, y, z) → (−y, x, z).
            UpAxis::X => [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
            // −90° about Z: (x, y, z) → (y, −x, z).
            UpAxis::NegX => [[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
        }
    }
}

impl std::str::FromStr for UpAxis {
    type Err = String;

    /// Parse a command-line name from [`UpAxis::ALL`]; `-y`, `+y` and `negy` are accepted too.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('_', "-");
        let t = t.strip_prefix('+').unwrap_or(&t);
        let t = match t.strip_prefix('-').or_else(|| t.strip_prefix("neg")) {
            Some(axis) => format!("neg-{}", axis.trim_start_matches('-')),
            None => t.to_string(),
        };
        UpAxis::ALL
            .iter()
            .find(|(_, name)| *name == t)
            .map(|(a, _)| *a)
            .ok_or_else(|| {
                format!(
                    "unknown up axis `{s}`; use one of {}",
                    UpAxis::ALL.map(|(_, n)| n).join(", ")
                )
            })
    }
}

/// The rotation (row-major 3×3, p′ = R·p) that turns a scene whose up axis is `from` into one
/// whose up axis is `to`: R = to_y(to)ᵀ · to_y(from), where to_y is the quarter/half turn
/// listed on each [`UpAxis`] case. `from == to` gives the identity. For example NegY → Y is
/// (x, y, z) → (x, −y, −z) and Z → Y is (x, y, z) → (x, z, −y).
pub fn up_axis_rotation(from: UpAxis, to: UpAxis) -> [[f64; 3]; 3] {
    let a = from.to_y();
    let b = to.to_y();
    std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| b[k][i] * a[k][j]).sum()))
}

/// Hamilton product of two wxyz quaternions.
fn quat_mul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ]
}

/// Rotate a whole splat scene by the proper rotation `r` (row-major, p′ = r·p): means become
/// r·μ, rotations q_r ⊗ q (so covariances become r·Σ·rᵀ; quaternions are not renormalised
/// beyond what the product does), SH bands 1..=3 are rotated so that the colour seen along r·d
/// afterwards equals the colour seen along d before ([`ShRotation`]). Scales, opacities and
/// the DC term are unchanged.
///
/// # Errors
/// [`Error::InvalidInput`] when `r` is not orthonormal with determinant +1 (tolerance 1e−6):
/// mirroring would flip SH handedness and is not a change of up axis; or when shapes are
/// inconsistent.
pub fn rotate_splats(splats: &mut GaussianSplats, r: [[f64; 3]; 3]) -> Result<()> {
    const CONTEXT: &str = "rotate splats";
    splats.check_shapes(CONTEXT)?;
    let det = r[0][0] * (r[1][1] * r[2][2] - r[1][2] * r[2][1])
        - r[0][1] * (r[1][0] * r[2][2] - r[1][2] * r[2][0])
        + r[0][2] * (r[1][0] * r[2][1] - r[1][1] * r[2][0]);
    let orthonormal = (0..3).all(|i| {
        (0..3).all(|j| {
            let dot: f64 = (0..3).map(|k| r[i][k] * r[j][k]).sum();
            (dot - if i == j { 1.0 } else { 0.0 }).abs() < 1e-6
        })
    });
    if !orthonormal || (det - 1.0).abs() > 1e-6 {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "rotation".into(),
            expected: "an orthonormal 3×3 matrix with determinant +1 (no mirroring)".into(),
            found: format!("{r:?} (det {det})"),
        });
    }
    for p in splats.means.chunks_exact_mut(3) {
        let v = [p[0] as f64, p[1] as f64, p[2] as f64];
        for i in 0..3 {
            p[i] = (r[i][0] * v[0] + r[i][1] * v[1] + r[i][2] * v[2]) as f32;
        }
    }
    let qr = crate::rotation::rotation_to_quaternion(r);
    for q in splats.rotations.chunks_exact_mut(4) {
        let out = quat_mul(qr, [q[0] as f64, q[1] as f64, q[2] as f64, q[3] as f64]);
        for (d, s) in q.iter_mut().zip(out) {
            *d = s as f32;
        }
    }
    if splats.sh_degree > 0 {
        ShRotation::new(r).apply(&mut splats.sh_coeffs, splats.sh_degree);
    }
    Ok(())
}

/// Drop SH bands above `degree` (coefficients are truncated, not refitted: the lower bands of a
/// real SH expansion are unchanged by removing higher ones).
///
/// # Errors
/// [`Error::InvalidInput`] when `degree` is higher than the splats' degree (bands cannot be
/// invented; the message names the input degree as the fix), or shapes are inconsistent.
pub fn reduce_sh_degree(splats: &mut GaussianSplats, degree: u32) -> Result<()> {
    const CONTEXT: &str = "reduce SH degree";
    splats.check_shapes(CONTEXT)?;
    if degree > splats.sh_degree {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "sh_degree".into(),
            expected: format!(
                "at most {} (the input's SH degree; higher bands cannot be invented: pass \
                 --sh-degree {} or lower, or omit it)",
                splats.sh_degree, splats.sh_degree
            ),
            found: degree.to_string(),
        });
    }
    if degree == splats.sh_degree {
        return Ok(());
    }
    let k_old = splats.sh_coeffs_per_channel();
    let k_new = ((degree + 1) * (degree + 1)) as usize;
    let mut out = Vec::with_capacity(splats.len() * k_new * 3);
    for s in splats.sh_coeffs.chunks_exact(k_old * 3) {
        out.extend_from_slice(&s[..k_new * 3]);
    }
    splats.sh_coeffs = out;
    splats.sh_degree = degree;
    Ok(())
}

/// Add zero SH bands up to `degree`: every splat keeps its colour in every direction (the new
/// coefficients contribute nothing), so splats of a lower degree can be concatenated with
/// higher-degree ones ([`GaussianSplats::concat`] refuses mixed degrees).
///
/// # Errors
/// [`Error::InvalidInput`] when `degree` is below the splats' degree (use
/// [`reduce_sh_degree`]) or above [`super::MAX_SH_DEGREE`], or shapes are inconsistent.
pub fn raise_sh_degree(splats: &mut GaussianSplats, degree: u32) -> Result<()> {
    const CONTEXT: &str = "raise SH degree";
    splats.check_shapes(CONTEXT)?;
    if degree < splats.sh_degree || degree > super::MAX_SH_DEGREE {
        return Err(Error::InvalidInput {
            context: CONTEXT,
            field: "sh_degree".into(),
            expected: format!(
                "{}..={} (the input's SH degree up to {}; drop bands with reduce_sh_degree)",
                splats.sh_degree,
                super::MAX_SH_DEGREE,
                super::MAX_SH_DEGREE
            ),
            found: degree.to_string(),
        });
    }
    if degree == splats.sh_degree {
        return Ok(());
    }
    let k_old3 = splats.sh_coeffs_per_channel() * 3;
    let k_new3 = ((degree + 1) * (degree + 1)) as usize * 3;
    let mut out = Vec::with_capacity(splats.len() * k_new3);
    for s in splats.sh_coeffs.chunks_exact(k_old3) {
        out.extend_from_slice(s);
        out.resize(out.len() + (k_new3 - k_old3), 0.0);
    }
    splats.sh_coeffs = out;
    splats.sh_degree = degree;
    Ok(())
}

#[cfg(test)]
// Matrix and per-axis checks index several arrays at once, as the formulas do.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::splats::sh::eval_sh_colour;
    use crate::splats::test_data::random_splats;

    fn quat_to_matrix(q: &[f32]) -> [[f64; 3]; 3] {
        crate::rotation::quaternion_to_rotation([0, 1, 2, 3].map(|i| f64::from(q[i])))
            .expect("non-zero quaternion")
    }

    fn mat_mul(a: [[f64; 3]; 3], b: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
    }

    #[test]
    fn up_axis_names_parse() {
        assert_eq!("neg-y".parse::<UpAxis>().unwrap(), UpAxis::NegY);
        assert_eq!("-y".parse::<UpAxis>().unwrap(), UpAxis::NegY);
        assert_eq!("+Z".parse::<UpAxis>().unwrap(), UpAxis::Z);
        assert_eq!("negx".parse::<UpAxis>().unwrap(), UpAxis::NegX);
        assert!("w".parse::<UpAxis>().unwrap_err().contains("neg-z"));
    }

    #[test]
    fn up_axis_rotation_carries_the_up_axis_and_is_proper() {
        let unit = |a: UpAxis| -> [f64; 3] {
            match a {
                UpAxis::X => [1.0, 0.0, 0.0],
                UpAxis::NegX => [-1.0, 0.0, 0.0],
                UpAxis::Y => [0.0, 1.0, 0.0],
                UpAxis::NegY => [0.0, -1.0, 0.0],
                UpAxis::Z => [0.0, 0.0, 1.0],
                UpAxis::NegZ => [0.0, 0.0, -1.0],
            }
        };
        for (from, _) in UpAxis::ALL {
            for (to, _) in UpAxis::ALL {
                let r = up_axis_rotation(from, to);
                let u = unit(from);
                let v: [f64; 3] = std::array::from_fn(|i| (0..3).map(|k| r[i][k] * u[k]).sum());
                assert_eq!(v, unit(to), "{from:?} → {to:?}");
                let mut s = random_splats(2, 0, 1.0, 1);
                rotate_splats(&mut s, r).unwrap();
            }
        }
        let r = up_axis_rotation(UpAxis::NegY, UpAxis::Y);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]]);
        let r = up_axis_rotation(UpAxis::Z, UpAxis::Y);
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]);
    }

    #[test]
    fn rotate_splats_moves_means_covariances_and_sh_consistently() {
        let s = random_splats(200, 3, 5.0, 17);
        // A generic rotation: Z-up → Y-up composed with a turn about the new up axis.
        let turn = {
            let (sn, c) = 0.9f64.sin_cos();
            [[c, 0.0, sn], [0.0, 1.0, 0.0], [-sn, 0.0, c]]
        };
        let r = mat_mul(turn, up_axis_rotation(UpAxis::Z, UpAxis::Y));
        let mut t = s.clone();
        rotate_splats(&mut t, r).unwrap();
        let k = 16;
        for i in 0..200 {
            let m = &s.means[i * 3..i * 3 + 3];
            for a in 0..3 {
                let expected: f64 = (0..3).map(|j| r[a][j] * m[j] as f64).sum();
                assert!((t.means[i * 3 + a] as f64 - expected).abs() < 1e-5);
            }
            // Rotation matrix of the splat: R · R_old.
            let before = mat_mul(r, quat_to_matrix(&s.rotations[i * 4..i * 4 + 4]));
            let after = quat_to_matrix(&t.rotations[i * 4..i * 4 + 4]);
            for a in 0..3 {
                for b in 0..3 {
                    assert!((before[a][b] - after[a][b]).abs() < 1e-5);
                }
            }
            // Colour seen along d before equals colour along R·d after.
            for d in [[0.0, 0.0, 1.0], [0.6, -0.8, 0.0], [0.48, 0.6, -0.64]] {
                let rd: [f64; 3] = std::array::from_fn(|a| (0..3).map(|j| r[a][j] * d[j]).sum());
                let c0 = eval_sh_colour(&s.sh_coeffs[i * k * 3..(i + 1) * k * 3], d);
                let c1 = eval_sh_colour(&t.sh_coeffs[i * k * 3..(i + 1) * k * 3], rd);
                for c in 0..3 {
                    assert!((c0[c] - c1[c]).abs() < 1e-4, "splat {i}: {c0:?} vs {c1:?}");
                }
            }
        }
        assert_eq!(s.log_scales, t.log_scales);
        assert_eq!(s.logit_opacities, t.logit_opacities);
        // Mirrors are refused.
        let mirror = [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        assert!(
            rotate_splats(&mut t, mirror)
                .unwrap_err()
                .to_string()
                .contains("determinant")
        );
    }

    #[test]
    fn sh_degree_reduction_keeps_lower_bands_and_refuses_to_invent() {
        let s = random_splats(10, 3, 1.0, 3);
        let mut t = s.clone();
        reduce_sh_degree(&mut t, 1).unwrap();
        assert_eq!(t.sh_degree, 1);
        t.check_shapes("test").unwrap();
        for i in 0..10 {
            assert_eq!(
                &t.sh_coeffs[i * 12..(i + 1) * 12],
                &s.sh_coeffs[i * 48..i * 48 + 12]
            );
        }
        let e = reduce_sh_degree(&mut t, 2).unwrap_err().to_string();
        assert!(e.contains("--sh-degree 1 or lower"), "{e}");
    }

    #[test]
    fn raising_the_sh_degree_adds_zero_bands_and_keeps_every_colour() {
        let s = random_splats(7, 1, 1.0, 4);
        let mut t = s.clone();
        raise_sh_degree(&mut t, 3).unwrap();
        t.check_shapes("test").unwrap();
        assert_eq!(t.sh_degree, 3);
        for i in 0..7 {
            assert_eq!(
                &t.sh_coeffs[i * 48..i * 48 + 12],
                &s.sh_coeffs[i * 12..i * 12 + 12]
            );
            assert!(
                t.sh_coeffs[i * 48 + 12..(i + 1) * 48]
                    .iter()
                    .all(|&c| c == 0.0)
            );
            let d = [0.48, 0.6, -0.64];
            let before = eval_sh_colour(&s.sh_coeffs[i * 12..(i + 1) * 12], d);
            let after = eval_sh_colour(&t.sh_coeffs[i * 48..(i + 1) * 48], d);
            assert_eq!(before, after);
        }
        let e = raise_sh_degree(&mut t, 2).unwrap_err().to_string();
        assert!(e.contains("reduce_sh_degree"), "{e}");
    }
}

//! `project`: 3D Gaussians → screen-space splats (EWA splatting), with SH colour and sigmoid opacity.
//!
//! Per splat, in order (Kerbl et al. 2023 §4, Zwicker et al. 2002 "EWA Splatting", gsplat
//! `ProjectionEWA3DGSFused.cu`):
//! 1. camera point `p = R·mean + t` (`world_to_camera`); culled when `z < NEAR_PLANE`;
//! 2. 3D covariance `Σ = M·Mᵀ`, `M = Rot(q/|q|)·diag(exp(log_scales))`;
//! 3. `Σ_cam = W·Σ·Wᵀ` (W = camera rotation), EWA Jacobian `J` of the pinhole at `p`, with `x/z`
//!    and `y/z` clamped to the frustum widened by [`FRUSTUM_CLAMP_MARGIN`];
//! 4. `Σ2d = J·Σ_cam·Jᵀ + EPS2D·I`, `conic = Σ2d⁻¹`, `radius = ceil(GAUSSIAN_EXTENT·sqrt(λ_max))`;
//! 5. `mean2d = (fx·x/z + cx, fy·y/z + cy)` (pixels, pixel centres at `i + 0.5`); culled when the
//!    bounding square touches no tile;
//! 6. colour = SH(normalize(mean − camera centre)) + 0.5 clamped at 0; opacity = sigmoid(logit),
//!    times the compensation `c = sqrt(max(det(Σ2d − EPS2D·I) / det Σ2d, 0))` in
//!    [`RasterizeMode::Antialiased`] (Yu et al. 2024, "Mip-Splatting: Alias-free 3D Gaussian
//!    Splatting", CVPR, Eq. 9–10; gsplat `fully_fused_projection(calc_compensations=True)`).
//!
//! NaN / Inf / degenerate inputs (zero quaternion, singular covariance, overflow) never panic and never
//! reach binning: any non-finite intermediate culls the splat (radius 0, no tiles). A splat whose
//! covariance before the dilation is singular or indefinite (rounding on needle-thin splats) gets
//! compensation 0 in antialiased mode, never NaN.

use rayon::prelude::*;

use super::linalg::{M3, mul, mul_abt23, mul_vec, mul23, transpose};
use super::scalar::Scalar;
use super::sh::{sh_basis, sh_color};
use crate::Camera;
use crate::consts::{EPS2D, FRUSTUM_CLAMP_MARGIN, GAUSSIAN_EXTENT, NEAR_PLANE, TILE_SIZE};

/// How the projected opacity treats the [`EPS2D`] dilation of the 2D covariance (gsplat's
/// `rasterize_mode`). Both modes dilate; they differ only in the opacity.
///
/// CUDA twin: the `antialiased` argument (0 or 1) of `kiln_project_forward` and
/// `kiln_project_backward` (`cuda/project.cu`, `cuda/project_backward.cu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RasterizeMode {
    /// INRIA 3DGS: opacity = sigmoid(logit). The dilation makes sub-pixel splats wider *and* as
    /// opaque, so they grow into bright blobs when the scene is seen from further away.
    #[default]
    Classic,
    /// Mip-Splatting's 2D filter: opacity = sigmoid(logit) · c with
    /// `c = sqrt(max(det Σ2d_raw / det(Σ2d_raw + EPS2D·I), 0))` ∈ [0, 1] (see [`compensation`]),
    /// which keeps the splat's integrated footprint (opacity × area) what it was before the
    /// dilation. Source: Yu et al., "Mip-Splatting: Alias-free 3D Gaussian Splatting", CVPR 2024,
    /// Eq. 9–10; gsplat `rasterize_mode="antialiased"`.
    Antialiased,
}

impl RasterizeMode {
    /// The mode [`crate::RenderOptions::antialiased`] asks for.
    pub fn from_antialiased(antialiased: bool) -> Self {
        if antialiased {
            Self::Antialiased
        } else {
            Self::Classic
        }
    }

    /// The `unsigned int antialiased` kernel argument of this mode (0 or 1).
    pub fn kernel_flag(self) -> u32 {
        u32::from(self == Self::Antialiased)
    }
}

/// Borrowed splat parameters in the CPU twin's float type; same shapes and meanings as
/// [`crate::SplatsRef`], plus `sh_k` = K (coefficients per channel actually stored).
#[derive(Debug, Clone, Copy)]
pub struct SplatParams<'a, T> {
    /// `[N, 3]` world positions, metres.
    pub means: &'a [T],
    /// `[N, 3]` natural log of per-axis standard deviations, metres.
    pub log_scales: &'a [T],
    /// `[N, 4]` quaternions wxyz, not necessarily normalised.
    pub rotations: &'a [T],
    /// `[N]` opacity logits.
    pub logit_opacities: &'a [T],
    /// `[N, K, 3]` SH coefficients, coefficient-major.
    pub sh_coeffs: &'a [T],
    /// Active SH degree, `(sh_degree + 1)² ≤ sh_k`.
    pub sh_degree: u32,
    /// K, SH coefficients per channel stored per splat.
    pub sh_k: usize,
}

impl<T> SplatParams<'_, T> {
    /// N, the number of splats.
    pub fn len(&self) -> usize {
        self.logit_opacities.len()
    }

    /// Whether there are no splats.
    pub fn is_empty(&self) -> bool {
        self.logit_opacities.is_empty()
    }
}

/// A [`Camera`] converted to the working float type, with derived quantities.
#[derive(Debug, Clone, Copy)]
pub struct CameraModel<T> {
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
    /// Focal lengths, pixels.
    pub fx: T,
    /// Focal length y, pixels.
    pub fy: T,
    /// Principal point x, pixels from the left edge.
    pub cx: T,
    /// Principal point y, pixels from the top edge.
    pub cy: T,
    /// Rotation block of `world_to_camera` (W).
    pub rotation: M3<T>,
    /// Translation of `world_to_camera`, metres.
    pub translation: [T; 3],
    /// Camera centre in world coordinates, `−Wᵀ·t`, metres.
    pub centre: [T; 3],
    /// Clamp range of `x/z`: `[−lim_neg, lim_pos]` (gsplat `persp_proj`).
    pub lim_x: [T; 2],
    /// Clamp range of `y/z`.
    pub lim_y: [T; 2],
}

impl<T: Scalar> CameraModel<T> {
    /// Converts a camera that passed `check_render_inputs`.
    pub fn new(cam: &Camera) -> Self {
        let f = T::from_f32;
        let m = cam.world_to_camera;
        let rotation = [0, 1, 2].map(|i| [0, 1, 2].map(|j| f(m[i][j])));
        let translation = [f(m[0][3]), f(m[1][3]), f(m[2][3])];
        let rt = transpose(&rotation);
        let c = mul_vec(&rt, translation);
        let (w, h) = (T::of(cam.width as f64), T::of(cam.height as f64));
        let (fx, fy, cx, cy) = (f(cam.fx), f(cam.fy), f(cam.cx), f(cam.cy));
        let margin = T::from_f32(FRUSTUM_CLAMP_MARGIN);
        let half = T::of(0.5);
        let tan_x = half * w / fx;
        let tan_y = half * h / fy;
        Self {
            width: cam.width,
            height: cam.height,
            fx,
            fy,
            cx,
            cy,
            rotation,
            translation,
            centre: [-c[0], -c[1], -c[2]],
            lim_x: [cx / fx + margin * tan_x, (w - cx) / fx + margin * tan_x],
            lim_y: [cy / fy + margin * tan_y, (h - cy) / fy + margin * tan_y],
        }
    }

    /// Number of tile columns, `ceil(W / TILE_SIZE)`.
    pub fn tiles_x(&self) -> u32 {
        self.width.div_ceil(TILE_SIZE)
    }

    /// Number of tile rows, `ceil(H / TILE_SIZE)`.
    pub fn tiles_y(&self) -> u32 {
        self.height.div_ceil(TILE_SIZE)
    }
}

/// One splat after projection: what binning and rasterisation need. A culled splat has
/// `radius == 0` and an empty tile box.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProjectedSplat<T> {
    /// Centre on screen, pixels.
    pub mean2d: [T; 2],
    /// Inverse 2D covariance `(a, b, c)` = `[[a, b], [b, c]]`, 1/pixels².
    pub conic: [T; 3],
    /// Camera-space depth z, metres (> NEAR_PLANE).
    pub depth: T,
    /// 3σ radius, whole pixels; 0 when culled.
    pub radius: T,
    /// Opacity used by the rasterizer, in [0, 1): sigmoid(logit) in [`RasterizeMode::Classic`],
    /// sigmoid(logit) · [`compensation`] in [`RasterizeMode::Antialiased`].
    pub opacity: T,
    /// Clamped RGB colour `[3]`, ≥ 0.
    pub color: [T; 3],
    /// First tile touched, `(tx, ty)`.
    pub tile_min: [u32; 2],
    /// One past the last tile touched, `(tx, ty)`.
    pub tile_max: [u32; 2],
}

/// Unit quaternion and its pre-normalisation length, or `None` for a zero / non-finite quaternion.
#[inline]
pub fn normalize_quat<T: Scalar>(q: [T; 4]) -> Option<([T; 4], T)> {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    if !(n > T::ZERO && n.is_finite()) {
        return None;
    }
    Some((q.map(|v| v / n), n))
}

/// Rotation matrix of a unit quaternion `(w, x, y, z)`.
#[inline]
pub fn quat_to_rotmat<T: Scalar>(q: [T; 4]) -> M3<T> {
    let [w, x, y, z] = q;
    let one = T::ONE;
    let two = T::of(2.0);
    [
        [
            one - two * (y * y + z * z),
            two * (x * y - w * z),
            two * (x * z + w * y),
        ],
        [
            two * (x * y + w * z),
            one - two * (x * x + z * z),
            two * (y * z - w * x),
        ],
        [
            two * (x * z - w * y),
            two * (y * z + w * x),
            one - two * (x * x + y * y),
        ],
    ]
}

/// EWA Jacobian of the pinhole projection at camera point `p` (`[[fx/z, 0, −fx·u/z], [0, fy/z, −fy·v/z]]`
/// with `u = clamp(x/z)`, `v = clamp(y/z)`), plus whether `u` and `v` were clamped.
#[inline]
pub fn ewa_jacobian<T: Scalar>(cam: &CameraModel<T>, p: [T; 3]) -> ([[T; 3]; 2], [bool; 2]) {
    let rz = T::ONE / p[2];
    let (u0, v0) = (p[0] * rz, p[1] * rz);
    let u = u0.max(-cam.lim_x[0]).min(cam.lim_x[1]);
    let v = v0.max(-cam.lim_y[0]).min(cam.lim_y[1]);
    let j = [
        [cam.fx * rz, T::ZERO, -cam.fx * u * rz],
        [T::ZERO, cam.fy * rz, -cam.fy * v * rz],
    ];
    (j, [u != u0, v != v0])
}

/// The per-splat intermediates of the projection that the backward pass needs again.
#[derive(Debug, Clone, Copy)]
pub struct Geometry<T> {
    /// Unit quaternion.
    pub quat: [T; 4],
    /// Length of the raw quaternion.
    pub quat_norm: T,
    /// Rotation of the unit quaternion.
    pub rot: M3<T>,
    /// `exp(log_scales)`, metres.
    pub scale: [T; 3],
    /// `M = rot · diag(scale)`.
    pub m: M3<T>,
    /// Camera-space covariance `W Σ Wᵀ`.
    pub cov_cam: M3<T>,
    /// Camera-space mean.
    pub p: [T; 3],
    /// EWA Jacobian.
    pub jac: [[T; 3]; 2],
    /// Whether `x/z`, `y/z` were clamped.
    pub clamped: [bool; 2],
    /// `Σ2d` including `EPS2D`: `[[a, b], [b, c]]` stored as `(a, b, c)`.
    pub cov2d: [T; 3],
    /// Determinant of `Σ2d`, pixels⁴.
    pub det: T,
    /// Determinant of `J·Σ_cam·Jᵀ`, the 2D covariance before the `EPS2D` dilation, pixels⁴
    /// (computed before the dilation, not as `det(Σ2d − EPS2D·I)`, which would cancel digits on
    /// sub-pixel splats). May be ≤ 0 from rounding on degenerate splats.
    pub det_blur_free: T,
}

/// Mip-Splatting's opacity compensation `c = sqrt(max(det_blur_free / det, 0))` ∈ [0, 1]: the
/// factor that keeps `opacity × footprint area` unchanged by the `EPS2D·I` dilation.
///
/// - `det_blur_free`: `det(J·Σ_cam·Jᵀ)`, the 2D covariance before the dilation, pixels⁴ (any sign);
/// - `det`: `det(J·Σ_cam·Jᵀ + EPS2D·I)`, pixels⁴, > 0 for a splat that passed [`geometry`].
///
/// For an isotropic footprint of variance σ² px² this is σ² / (σ² + EPS2D).
/// Source: Yu et al., "Mip-Splatting", CVPR 2024, Eq. 9–10 (the 2D Mip filter); gsplat
/// `add_blur`. CUDA twin: `kiln_compensation` in `cuda/common.cuh`.
#[inline]
pub fn compensation<T: Scalar>(det_blur_free: T, det: T) -> T {
    (det_blur_free / det).max(T::ZERO).sqrt()
}

/// Geometry of splat `i`, or `None` when it is culled (behind the near plane, non-finite, degenerate).
#[inline]
pub fn geometry<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    i: usize,
) -> Option<Geometry<T>> {
    let mean = [
        params.means[3 * i],
        params.means[3 * i + 1],
        params.means[3 * i + 2],
    ];
    let p = mul_vec(&cam.rotation, mean);
    let p = [
        p[0] + cam.translation[0],
        p[1] + cam.translation[1],
        p[2] + cam.translation[2],
    ];
    if !p.iter().all(|v| v.is_finite()) || p[2] < T::from_f32(NEAR_PLANE) {
        return None;
    }
    let q = [0, 1, 2, 3].map(|k| params.rotations[4 * i + k]);
    let (quat, quat_norm) = normalize_quat(q)?;
    let rot = quat_to_rotmat(quat);
    let scale = [0, 1, 2].map(|k| params.log_scales[3 * i + k].exp());
    let m = [0, 1, 2].map(|r| [0, 1, 2].map(|c| rot[r][c] * scale[c]));
    let cov = mul(&m, &transpose(&m));
    let cov_cam = mul(&mul(&cam.rotation, &cov), &transpose(&cam.rotation));
    let (jac, clamped) = ewa_jacobian(cam, p);
    let js = mul23(&jac, &cov_cam);
    let c2 = mul_abt23(&js, &jac);
    let eps = T::from_f32(EPS2D);
    let cov2d = [
        c2[0][0] + eps,
        T::of(0.5) * (c2[0][1] + c2[1][0]),
        c2[1][1] + eps,
    ];
    let det = cov2d[0] * cov2d[2] - cov2d[1] * cov2d[1];
    let det_blur_free = c2[0][0] * c2[1][1] - cov2d[1] * cov2d[1];
    if !det.is_finite() || det <= T::ZERO {
        return None;
    }
    Some(Geometry {
        quat,
        quat_norm,
        rot,
        scale,
        m,
        cov_cam,
        p,
        jac,
        clamped,
        cov2d,
        det,
        det_blur_free,
    })
}

/// Unit view direction from the camera centre to splat `i`'s mean, and the length before normalising.
#[inline]
pub fn view_dir<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    i: usize,
) -> ([T; 3], T) {
    let v = [0, 1, 2].map(|k| params.means[3 * i + k] - cam.centre[k]);
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    (v.map(|x| x / n), n)
}

/// sigmoid(x) = 1 / (1 + e⁻ˣ).
#[inline]
pub fn sigmoid<T: Scalar>(x: T) -> T {
    T::ONE / (T::ONE + (-x).exp())
}

/// Tile box `[min, max)` (tile units, `(tx, ty)`) of the square `mean2d ± radius` (pixels), clipped
/// to the `tiles_x × tiles_y` grid; empty when the square misses the image. NaN input gives an empty
/// box (the float → int casts saturate NaN to 0). CUDA twin: `kiln_tile_bbox` (`cuda/common.cuh`).
#[inline]
pub fn tile_bbox<T: Scalar>(
    mean2d: [T; 2],
    radius: T,
    tiles_x: u32,
    tiles_y: u32,
) -> ([u32; 2], [u32; 2]) {
    let ts = T::from_f32(TILE_SIZE as f32);
    let clip = |v: T, hi: u32| v.max(T::ZERO).min(T::of(hi as f64)).to_f64() as u32;
    let min = [
        clip(((mean2d[0] - radius) / ts).floor(), tiles_x),
        clip(((mean2d[1] - radius) / ts).floor(), tiles_y),
    ];
    let max = [
        clip(((mean2d[0] + radius) / ts).ceil(), tiles_x),
        clip(((mean2d[1] + radius) / ts).ceil(), tiles_y),
    ];
    (min, max)
}

/// Projects splat `i` with opacity rule `mode`; returns the default (culled) splat when it is not
/// visible. CUDA twin: `kiln_project_forward` (`cuda/project.cu`).
pub fn project_one<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    i: usize,
    mode: RasterizeMode,
) -> ProjectedSplat<T> {
    let culled = ProjectedSplat::default();
    let Some(g) = geometry(params, cam, i) else {
        return culled;
    };
    let [a, b, c] = g.cov2d;
    let conic = [c / g.det, -b / g.det, a / g.det];
    let mid = T::of(0.5) * (a + c);
    let lambda_max = mid + (mid * mid - g.det).max(T::ZERO).sqrt();
    let radius = (T::from_f32(GAUSSIAN_EXTENT) * lambda_max.sqrt()).ceil();
    let rz = T::ONE / g.p[2];
    let mean2d = [cam.fx * g.p[0] * rz + cam.cx, cam.fy * g.p[1] * rz + cam.cy];
    let (dir, _) = view_dir(params, cam, i);
    let basis = sh_basis(params.sh_degree, dir);
    let sh = &params.sh_coeffs[i * params.sh_k * 3..(i + 1) * params.sh_k * 3];
    let raw_color = sh_color(params.sh_degree, sh, &basis);
    let opacity = match mode {
        RasterizeMode::Classic => sigmoid(params.logit_opacities[i]),
        RasterizeMode::Antialiased => {
            sigmoid(params.logit_opacities[i]) * compensation(g.det_blur_free, g.det)
        }
    };
    // Checked before the clamp: `max` would turn a NaN colour into 0.
    let finite = conic
        .iter()
        .chain(&mean2d)
        .chain(&raw_color)
        .all(|v| v.is_finite())
        && radius.is_finite()
        && radius > T::ZERO
        && opacity.is_finite();
    if !finite {
        return culled;
    }
    let color = raw_color.map(|v| v.max(T::ZERO));
    let (tile_min, tile_max) = tile_bbox(mean2d, radius, cam.tiles_x(), cam.tiles_y());
    if tile_min[0] >= tile_max[0] || tile_min[1] >= tile_max[1] {
        return culled;
    }
    ProjectedSplat {
        mean2d,
        conic,
        depth: g.p[2],
        radius,
        opacity,
        color,
        tile_min,
        tile_max,
    }
}

/// Projects all N splats in parallel with opacity rule `mode`; output `[N]` in input order.
pub fn project<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    mode: RasterizeMode,
) -> Vec<ProjectedSplat<T>> {
    (0..params.len())
        .into_par_iter()
        .map(|i| project_one(params, cam, i, mode))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compensation_of_isotropic_footprint_is_variance_ratio() {
        // Σ2d_raw = σ²·I: det ratio = σ⁴ / (σ² + ε)², so c = σ² / (σ² + ε).
        let eps = f64::from(EPS2D);
        for var in [0.01, 0.3, 1.0, 4.0, 100.0] {
            let det_raw = var * var;
            let det = (var + eps) * (var + eps);
            let want = var / (var + eps);
            assert!(
                (compensation(det_raw, det) - want).abs() < 1e-15,
                "σ² {var}"
            );
        }
        // σ² = 4 px², ε = 0.3 px²: c = 4 / 4.3.
        assert!((compensation(16.0f64, 4.3 * 4.3) - 4.0 / 4.3).abs() < 1e-15);
    }

    #[test]
    fn compensation_of_anisotropic_footprint_matches_hand_calculation() {
        // Σ2d_raw = [[2, 0.5], [0.5, 1]]: det_raw = 1.75; with ε = 0.3 on the diagonal,
        // det = 2.3·1.3 − 0.25 = 2.74; c = sqrt(1.75 / 2.74).
        let eps = f64::from(EPS2D);
        assert!((eps - 0.3).abs() < 1e-7);
        let det = (2.0 + eps) * (1.0 + eps) - 0.25;
        let c = compensation(1.75f64, det);
        assert!((c - (1.75f64 / 2.74).sqrt()).abs() < 1e-7, "{c}");
    }

    #[test]
    fn compensation_of_degenerate_footprint_is_zero_not_nan() {
        // A needle whose raw determinant rounded to 0 or below: the splat fades out completely.
        assert_eq!(compensation(0.0f32, 0.09), 0.0);
        assert_eq!(compensation(-1e-9f32, 0.09), 0.0);
        assert_eq!(compensation(-1e-9f64, 0.09), 0.0);
    }

    #[test]
    fn tile_bbox_clips_to_grid_and_is_empty_off_screen() {
        assert_eq!(tile_bbox([20.0f32, 8.0], 5.0, 4, 3), ([0, 0], [2, 1]));
        assert_eq!(tile_bbox([-20.0f32, 8.0], 5.0, 4, 3).1[0], 0);
        let (min, max) = tile_bbox([f32::NAN, 8.0], 5.0, 4, 3);
        assert!(min[0] >= max[0]);
        assert_eq!(tile_bbox([30.0f32, 30.0], 1e30, 4, 3), ([0, 0], [4, 3]));
    }
}

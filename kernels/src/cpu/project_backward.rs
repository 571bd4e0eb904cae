//! `project_backward`: screen-space gradients (mean2d, conic, colour, opacity) → gradients of the
//! splat parameters (means, log_scales, rotations, logit_opacities, sh_coeffs).
//!
//! Chain, in reverse of `project` (gsplat `ProjectionEWA3DGSFused.cu` backward, INRIA `backward.cu`):
//! conic = Σ2d⁻¹ (`∂Σ2d = −Q·G·Q`); `Σ2d = J·Σ_cam·Jᵀ + EPS2D·I` (`∂Σ_cam = Jᵀ·G·J`, `∂J = 2·G·J·Σ_cam`);
//! the EWA Jacobian's dependence on the camera point (the clamped coordinate contributes no gradient
//! through `x/z` or `y/z`, as in gsplat); `Σ_cam = W·Σ·Wᵀ`; `Σ = M·Mᵀ` (`∂M = 2·∂Σ·M`);
//! `M = Rot(q̂)·diag(exp(log_scales))`; quaternion normalisation; mean2d = pinhole(p); SH colour
//! (clamped channels pass no gradient) including `∂colour/∂mean` through the view direction; sigmoid.
//!
//! In [`RasterizeMode::Antialiased`] the opacity is `o = sigmoid(logit)·c` with the Mip-Splatting
//! compensation `c = sqrt(r)`, `r = max(det(Σ2d − εI) / det Σ2d, 0)`, ε = EPS2D (Yu et al., CVPR
//! 2024, Eq. 9–10; gsplat `fully_fused_projection` backward, `v_compensations`). Then
//! `∂L/∂logit = ∂L/∂o · c · s(1 − s)` and `∂L/∂c = ∂L/∂o · s`, and `c` adds to `∂L/∂Σ2d`:
//! with `adj(Σ2d − εI) = adj Σ2d − εI` (2×2) and `∂det M/∂M = adj M`,
//! `∂r/∂Σ2d = (adj Σ2d − εI − r·adj Σ2d) / det Σ2d = (1 − r)·Σ2d⁻¹ − (ε / det Σ2d)·I`, so
//! `∂L/∂Σ2d += ∂L/∂c · ∂r/∂Σ2d / (2c)`. Where `r ≤ 0` the clamp passes no gradient; `1/(2c)` is
//! evaluated as `1/(2(c + COMPENSATION_GRAD_EPS))` so a nearly zero-area splat cannot blow up.
//! Matrix gradients use the full-matrix convention (a symmetric matrix's off-diagonal scalar gets the
//! sum of both entries).
//!
//! Culled splats (radius 0) get exactly zero gradient. Work is per splat in parallel, no reduction,
//! so it is deterministic.

use rayon::prelude::*;

use super::linalg::{M3, mul, mul_vec, transpose};
use super::project::{
    CameraModel, Geometry, ProjectedSplat, RasterizeMode, SplatParams, compensation, geometry,
    sigmoid, view_dir,
};
use super::rasterize_backward::ScreenGrad;
use super::scalar::Scalar;
use super::sh::{sh_basis, sh_basis_grad, sh_coeff_count, sh_color};
use crate::consts::{COMPENSATION_GRAD_EPS, EPS2D};

/// Parameter gradients of all splats, f32 or f64; same shapes as [`crate::SplatGradients`].
#[derive(Debug, Clone)]
pub struct ParamGrads<T> {
    /// `[N, 3]`.
    pub means: Vec<T>,
    /// `[N, 3]`.
    pub log_scales: Vec<T>,
    /// `[N, 4]`.
    pub rotations: Vec<T>,
    /// `[N]`.
    pub logit_opacities: Vec<T>,
    /// `[N, K, 3]`.
    pub sh_coeffs: Vec<T>,
    /// `[N]` |∂L/∂mean2d| in NDC units (pixel gradient × (W/2, H/2)); with the AbsGS sums given
    /// to [`project_backward`], the norm of those sums in the same units instead.
    pub means2d_grad_norm: Vec<T>,
}

/// ∂L/∂q (raw quaternion) given ∂L/∂Rot for the unit quaternion `q̂` of length `norm`.
#[inline]
fn quat_backward<T: Scalar>(q: [T; 4], norm: T, g: &M3<T>) -> [T; 4] {
    let [w, x, y, z] = q;
    let two = T::of(2.0);
    let dw =
        two * (-z * g[0][1] + y * g[0][2] + z * g[1][0] - x * g[1][2] - y * g[2][0] + x * g[2][1]);
    let dx = two
        * (y * g[0][1] + z * g[0][2] + y * g[1][0] - two * x * g[1][1] - w * g[1][2]
            + z * g[2][0]
            + w * g[2][1]
            - two * x * g[2][2]);
    let dy = two
        * (-two * y * g[0][0] + x * g[0][1] + w * g[0][2] + x * g[1][0] + z * g[1][2]
            - w * g[2][0]
            + z * g[2][1]
            - two * y * g[2][2]);
    let dz = two
        * (-two * z * g[0][0] - w * g[0][1] + x * g[0][2] + w * g[1][0] - two * z * g[1][1]
            + y * g[1][2]
            + x * g[2][0]
            + y * g[2][1]);
    let dq = [dw, dx, dy, dz];
    let dot = dq[0] * w + dq[1] * x + dq[2] * y + dq[3] * z;
    [0, 1, 2, 3].map(|k| (dq[k] - q[k] * dot) / norm)
}

/// Output slots of one splat.
struct Slots<'a, T> {
    means: &'a mut [T],
    log_scales: &'a mut [T],
    rotations: &'a mut [T],
    sh: &'a mut [T],
    logit: &'a mut T,
    norm2d: &'a mut T,
}

/// ‖g‖ of a mean2d gradient `g` (per pixel of displacement) in NDC units: `g` scaled by
/// `(W/2, H/2)` as INRIA 3DGS / gsplat scale their densification statistic. Used for both the
/// signed gradient and the AbsGS sums. CUDA twin: the end of `kiln_project_backward`.
#[inline]
pub fn ndc_grad_norm<T: Scalar>(g: [T; 2], width: u32, height: u32) -> T {
    let half = T::of(0.5);
    let nx = g[0] * T::of(width as f64) * half;
    let ny = g[1] * T::of(height as f64) * half;
    (nx * nx + ny * ny).sqrt()
}

/// What the backward step of every splat reads besides its own screen gradient.
struct Shared<'a, 'p, T> {
    params: &'a SplatParams<'p, T>,
    cam: &'a CameraModel<T>,
    /// The opacity rule of the forward pass.
    mode: RasterizeMode,
}

/// One splat's chain rule, as named steps from the screen back to the parameters: opacity, SH
/// colour, conic → Σ2d (with the compensation), Σ2d → Σ_cam and J, J and mean2d → camera point →
/// means, Σ_cam → Σ → log_scales and rotations, and the densification statistic.
fn splat_backward<T: Scalar>(
    shared: &Shared<'_, '_, T>,
    i: usize,
    p: &ProjectedSplat<T>,
    sg: &ScreenGrad<T>,
    mean2d_abs: Option<[T; 2]>,
    out: Slots<'_, T>,
) {
    let Shared { params, cam, mode } = *shared;
    if p.radius <= T::ZERO {
        return;
    }
    let Some(geo) = geometry(params, cam, i) else {
        return;
    };
    let (d_logit, d_compensation) = opacity_backward(params, i, p, &geo, sg.opacity, mode);
    *out.logit = d_logit;
    let d_mean_view = sh_backward(params, cam, i, sg.color, out.sh);
    let mut d_cov2d = conic_backward(p.conic, sg.conic);
    if let Some(d_compensation) = d_compensation {
        compensation_backward(&mut d_cov2d, p.conic, d_compensation, geo.det);
    }
    let (d_cov_cam, d_jac) = cov2d_backward(&d_cov2d, &geo);
    let dp = camera_point_backward(cam, &geo, sg.mean2d, &d_jac);
    let wt = transpose(&cam.rotation);
    out.means
        .copy_from_slice(&mean_backward(d_mean_view, &wt, dp));
    let d_cov = cov_cam_backward(&wt, &d_cov_cam, &cam.rotation);
    scale_rotation_backward(&geo, &d_cov, out.log_scales, out.rotations);
    *out.norm2d = ndc_grad_norm(mean2d_abs.unwrap_or(sg.mean2d), cam.width, cam.height);
}

/// Opacity: `∂L/∂logit` (sigmoid' = s(1 − s)) from `d_opacity` = ∂L/∂o. In antialiased mode
/// `o = s·c`, and the second value is `(∂L/∂c, c)` for [`compensation_backward`]
/// (`∂L/∂c = ∂L/∂o · s`); in classic mode `None`.
#[inline]
fn opacity_backward<T: Scalar>(
    params: &SplatParams<'_, T>,
    i: usize,
    p: &ProjectedSplat<T>,
    geo: &Geometry<T>,
    d_opacity: T,
    mode: RasterizeMode,
) -> (T, Option<(T, T)>) {
    match mode {
        RasterizeMode::Classic => (d_opacity * p.opacity * (T::ONE - p.opacity), None),
        RasterizeMode::Antialiased => {
            let s = sigmoid(params.logit_opacities[i]);
            let c = compensation(geo.det_blur_free, geo.det);
            (d_opacity * c * s * (T::ONE - s), Some((d_opacity * s, c)))
        }
    }
}

/// Colour → SH coefficients and view direction: writes `∂L/∂sh` (`[K, 3]`, the active
/// coefficients; clamped channels pass no gradient) from `d_color` = ∂L/∂colour, and returns the
/// part of `∂L/∂mean` that flows through the view direction.
#[inline]
fn sh_backward<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    i: usize,
    d_color: [T; 3],
    out_sh: &mut [T],
) -> [T; 3] {
    let (dir, dir_len) = view_dir(params, cam, i);
    let basis = sh_basis(params.sh_degree, dir);
    let sh = &params.sh_coeffs[i * params.sh_k * 3..(i + 1) * params.sh_k * 3];
    let raw = sh_color(params.sh_degree, sh, &basis);
    let gc = [0, 1, 2].map(|ch| {
        if raw[ch] >= T::ZERO {
            d_color[ch]
        } else {
            T::ZERO
        }
    });
    let active = sh_coeff_count(params.sh_degree);
    let mut d_dir = [T::ZERO; 3];
    let basis_grad = if params.sh_degree > 0 {
        Some(sh_basis_grad(params.sh_degree, dir))
    } else {
        None
    };
    for k in 0..active {
        let mut coeff_dot = T::ZERO;
        for ch in 0..3 {
            out_sh[k * 3 + ch] = basis[k] * gc[ch];
            coeff_dot += sh[k * 3 + ch] * gc[ch];
        }
        if let Some(bg) = &basis_grad {
            for a in 0..3 {
                d_dir[a] += coeff_dot * bg[k][a];
            }
        }
    }
    let dd = d_dir[0] * dir[0] + d_dir[1] * dir[1] + d_dir[2] * dir[2];
    [0, 1, 2].map(|a| (d_dir[a] - dir[a] * dd) / dir_len)
}

/// Conic → Σ2d: `∂Σ2d = −Q·G·Q`, Q the conic `(a, b, c)` and G the full-matrix gradient of
/// `d_conic`.
#[inline]
fn conic_backward<T: Scalar>(conic: [T; 3], d_conic: [T; 3]) -> [[T; 2]; 2] {
    let half = T::of(0.5);
    let [ca, cb, cc] = conic;
    let q2 = [[ca, cb], [cb, cc]];
    let g2 = [
        [d_conic[0], half * d_conic[1]],
        [half * d_conic[1], d_conic[2]],
    ];
    let mut qg = [[T::ZERO; 2]; 2];
    for r in 0..2 {
        for c in 0..2 {
            qg[r][c] = q2[r][0] * g2[0][c] + q2[r][1] * g2[1][c];
        }
    }
    let mut d_cov2d = [[T::ZERO; 2]; 2];
    for r in 0..2 {
        for c in 0..2 {
            d_cov2d[r][c] = -(qg[r][0] * q2[0][c] + qg[r][1] * q2[1][c]);
        }
    }
    d_cov2d
}

/// Compensation → Σ2d (module doc): adds `∂L/∂c · ∂c/∂Σ2d`, `∂c/∂Σ2d = ((1 − r)·Q − (ε/det)·I) / 2c`,
/// Q = Σ2d⁻¹ (the conic), to `d_cov2d`, given `(∂L/∂c, c)` from [`opacity_backward`].
#[inline]
fn compensation_backward<T: Scalar>(
    d_cov2d: &mut [[T; 2]; 2],
    conic: [T; 3],
    (d_c, c): (T, T),
    det: T,
) {
    let half = T::of(0.5);
    let [ca, cb, cc] = conic;
    let r = c * c;
    if r > T::ZERO {
        let scale = d_c * half / (c + T::from_f32(COMPENSATION_GRAD_EPS));
        let diag = T::from_f32(EPS2D) / det;
        let one_minus_r = T::ONE - r;
        d_cov2d[0][0] += scale * (one_minus_r * ca - diag);
        d_cov2d[0][1] += scale * one_minus_r * cb;
        d_cov2d[1][0] += scale * one_minus_r * cb;
        d_cov2d[1][1] += scale * (one_minus_r * cc - diag);
    }
}

/// Σ2d = J Σc Jᵀ: returns `(∂Σc, ∂J)` = `(Jᵀ G J, 2 G J Σc)` for G = `d_cov2d`.
#[inline]
// the chain rule indexes J, dL/dJ and Σ_cam by row and column together, as the formula does.
#[allow(clippy::needless_range_loop)]
fn cov2d_backward<T: Scalar>(d_cov2d: &[[T; 2]; 2], geo: &Geometry<T>) -> (M3<T>, [[T; 3]; 2]) {
    let jac = geo.jac;
    let mut gj = [[T::ZERO; 3]; 2]; // G·J
    for r in 0..2 {
        for c in 0..3 {
            gj[r][c] = d_cov2d[r][0] * jac[0][c] + d_cov2d[r][1] * jac[1][c];
        }
    }
    let mut d_cov_cam = [[T::ZERO; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            d_cov_cam[r][c] = jac[0][r] * gj[0][c] + jac[1][r] * gj[1][c];
        }
    }
    let mut d_jac = [[T::ZERO; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            let mut acc = T::ZERO;
            for k in 0..3 {
                acc += gj[r][k] * geo.cov_cam[k][c];
            }
            d_jac[r][c] = T::of(2.0) * acc;
        }
    }
    (d_cov_cam, d_jac)
}

/// ∂L/∂(camera point) from mean2d (pinhole) and from the EWA Jacobian; a clamped `x/z` or `y/z`
/// passes no gradient through that coordinate.
#[inline]
fn camera_point_backward<T: Scalar>(
    cam: &CameraModel<T>,
    geo: &Geometry<T>,
    d_mean2d: [T; 2],
    d_jac: &[[T; 3]; 2],
) -> [T; 3] {
    let jac = geo.jac;
    let pc = geo.p;
    let rz = T::ONE / pc[2];
    let rz2 = rz * rz;
    let (fx, fy) = (cam.fx, cam.fy);
    let mut dp = [
        d_mean2d[0] * fx * rz,
        d_mean2d[1] * fy * rz,
        -(d_mean2d[0] * fx * pc[0] + d_mean2d[1] * fy * pc[1]) * rz2,
    ];
    let u = -jac[0][2] / (fx * rz); // clamp(x/z)
    let v = -jac[1][2] / (fy * rz);
    let d_rz = d_jac[0][0] * fx - d_jac[0][2] * fx * u + d_jac[1][1] * fy - d_jac[1][2] * fy * v;
    dp[2] -= d_rz * rz2;
    if !geo.clamped[0] {
        let d_u = -d_jac[0][2] * fx * rz;
        dp[0] += d_u * rz;
        dp[2] -= d_u * pc[0] * rz2;
    }
    if !geo.clamped[1] {
        let d_v = -d_jac[1][2] * fy * rz;
        dp[1] += d_v * rz;
        dp[2] -= d_v * pc[1] * rz2;
    }
    dp
}

/// Means: the view-direction part `d_mean_view` (from [`sh_backward`]) plus the camera point's
/// gradient `dp` taken back to world space by `wt` = Wᵀ.
#[inline]
fn mean_backward<T: Scalar>(d_mean_view: [T; 3], wt: &M3<T>, dp: [T; 3]) -> [T; 3] {
    let mut d_mean = d_mean_view;
    let dm = mul_vec(wt, dp);
    for a in 0..3 {
        d_mean[a] += dm[a];
    }
    d_mean
}

/// Σc = W Σ Wᵀ → ∂Σ = Wᵀ ∂Σc W, given `wt` = Wᵀ and `w` = W.
#[inline]
fn cov_cam_backward<T: Scalar>(wt: &M3<T>, d_cov_cam: &M3<T>, w: &M3<T>) -> M3<T> {
    mul(&mul(wt, d_cov_cam), w)
}

/// Σ = M Mᵀ → ∂M = 2 ∂Σ M (∂Σ symmetric); M = Rot · diag(scale) → writes `∂L/∂log_scales` (`[3]`)
/// and `∂L/∂rotations` (`[4]`, the raw quaternion).
#[inline]
fn scale_rotation_backward<T: Scalar>(
    geo: &Geometry<T>,
    d_cov: &M3<T>,
    log_scales: &mut [T],
    rotations: &mut [T],
) {
    let d_m = mul(d_cov, &geo.m).map(|row| row.map(|v| T::of(2.0) * v));
    let mut d_rot = [[T::ZERO; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            d_rot[r][c] = d_m[r][c] * geo.scale[c];
        }
    }
    for c in 0..3 {
        let d_s = d_m[0][c] * geo.rot[0][c] + d_m[1][c] * geo.rot[1][c] + d_m[2][c] * geo.rot[2][c];
        log_scales[c] = d_s * geo.scale[c];
    }
    rotations.copy_from_slice(&quat_backward(geo.quat, geo.quat_norm, &d_rot));
}

/// Gradients of all splat parameters from their screen-space gradients `[N]`; `mode` must be the
/// one `projected` was made with. `mean2d_abs` (`[N, 2]`, from
/// [`super::rasterize_backward::rasterize_backward_with`]) switches `means2d_grad_norm` to the
/// AbsGS statistic ‖(Σ|∂L_p/∂x|, Σ|∂L_p/∂y|)‖ in NDC units; `None` keeps ‖∂L/∂mean2d‖. It changes
/// nothing else. CUDA twin: `kiln_project_backward` (`cuda/project_backward.cu`).
pub fn project_backward<T: Scalar>(
    params: &SplatParams<'_, T>,
    cam: &CameraModel<T>,
    projected: &[ProjectedSplat<T>],
    screen: &[ScreenGrad<T>],
    mean2d_abs: Option<&[[T; 2]]>,
    mode: RasterizeMode,
) -> ParamGrads<T> {
    let n = params.len();
    let k3 = params.sh_k * 3;
    let mut g = ParamGrads {
        means: vec![T::ZERO; 3 * n],
        log_scales: vec![T::ZERO; 3 * n],
        rotations: vec![T::ZERO; 4 * n],
        logit_opacities: vec![T::ZERO; n],
        sh_coeffs: vec![T::ZERO; k3 * n],
        means2d_grad_norm: vec![T::ZERO; n],
    };
    let shared = Shared { params, cam, mode };
    g.means
        .par_chunks_mut(3)
        .zip(g.log_scales.par_chunks_mut(3))
        .zip(g.rotations.par_chunks_mut(4))
        .zip(g.sh_coeffs.par_chunks_mut(k3.max(1)))
        .zip(g.logit_opacities.par_iter_mut())
        .zip(g.means2d_grad_norm.par_iter_mut())
        .enumerate()
        .for_each(
            |(i, (((((means, log_scales), rotations), sh), logit), norm2d))| {
                let slots = Slots {
                    means,
                    log_scales,
                    rotations,
                    sh,
                    logit,
                    norm2d,
                };
                let abs = mean2d_abs.map(|a| a[i]);
                splat_backward(&shared, i, &projected[i], &screen[i], abs, slots);
            },
        );
    g
}

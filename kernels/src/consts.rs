//! Rasterizer constants, defined exactly once for the CPU twin and (later) the CUDA prelude.
//!
//! Values follow gsplat's `Common.h` and INRIA 3DGS (Kerbl et al. 2023); each comment says why the
//! value is what it is and how it relates to the others.

/// Side of a square screen tile, in pixels. 16×16 = 256 pixels is one CUDA block of threads in
/// gsplat/INRIA, and keeps the per-tile splat list small enough to sit in cache on the CPU.
pub const TILE_SIZE: u32 = 16;

/// A splat whose alpha at a pixel is below this is skipped there: 1/255 is the smallest step an
/// 8-bit output can show, so anything fainter is invisible (INRIA, gsplat `ALPHA_THRESHOLD`).
pub const ALPHA_THRESHOLD: f32 = 1.0 / 255.0;

/// Alpha is clamped to at most this, so that `1 − α ≥ 0.01` and the backward pass can recover the
/// transmittance in front of a splat by dividing by `1 − α` without blowing up.
pub const MAX_ALPHA: f32 = 0.99;

/// Front-to-back compositing stops before the transmittance would fall below this. It equals
/// `(1 − MAX_ALPHA)²`: two fully opaque splats in a row end the pixel, and anything behind them could
/// change the pixel by less than 1e-4.
pub const TRANSMITTANCE_THRESHOLD: f32 = 1e-4;

/// Low-pass dilation added to both diagonal entries of the 2D covariance, in pixels². It makes every
/// splat at least about one pixel wide (3σ ≈ 1.6 px), so sub-pixel splats cannot alias, and it keeps
/// the 2D covariance invertible (gsplat `eps2d`, INRIA's `+ 0.3`).
pub const EPS2D: f32 = 0.3;

/// Splats whose camera-space depth is below this (metres) are culled: the perspective Jacobian
/// `1/z` explodes near the camera centre (gsplat `near_plane` default).
pub const NEAR_PLANE: f32 = 0.01;

/// Screen-space extent of a splat in standard deviations: its radius is `ceil(3·sqrt(λ_max))` px.
/// At 3σ the Gaussian has fallen to exp(−4.5) ≈ 0.011, so for opacities below ~0.35 the cut is below
/// [`ALPHA_THRESHOLD`] anyway (INRIA uses 3; gsplat's 3.33 trades more tile work for fewer cut edges).
pub const GAUSSIAN_EXTENT: f32 = 3.0;

/// How far outside the image, as a fraction of the tangent of the half field of view, a splat centre
/// may sit before the EWA Jacobian is evaluated at the clamped point instead. For a centred principal
/// point this is INRIA's `1.3 × tan_fov` clamp; it stops splats far outside the frustum from getting
/// huge, badly approximated footprints (gsplat `persp_proj`).
pub const FRUSTUM_CLAMP_MARGIN: f32 = 0.3;

/// Added to the Mip-Splatting opacity compensation `c` where the backward pass divides by it
/// (`∂c/∂Σ2d` carries a factor `1/(2c)`, infinite for a zero-area splat whose `c` is 0). 1e-6 caps
/// that factor at 5·10⁵ while changing the gradient of any visible splat (c ≳ 0.01, since its
/// opacity is scaled by c) by at most 1e-4 relative (gsplat's `add_blur_vjp` uses the same guard).
pub const COMPENSATION_GRAD_EPS: f32 = 1e-6;

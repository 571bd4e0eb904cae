//! The rasterizer's data types that every device shares: the splats it renders ([`SplatsRef`]),
//! the options of a render ([`RenderOptions`]), the gradients a backward pass returns
//! ([`SplatGradients`]) and the stage times of both passes ([`KernelTimings`]). Plain data: the
//! CPU twin (`cpu`) and the GPU passes (`cuda::render`) read and build them, and the dispatch in
//! `render.rs` hands them on, so none of those files needs another's types.

/// Borrowed splat parameters for one render. Shape letters: N splats, K SH coefficients per channel.
///
/// - `means`: `[N, 3]` world positions, metres.
/// - `log_scales`: `[N, 3]` natural log of the per-axis standard deviations, metres.
/// - `rotations`: `[N, 4]` quaternions wxyz, need not be normalised (normalised inside).
/// - `logit_opacities`: `[N]` logits; opacity = sigmoid(logit).
/// - `sh_coeffs`: `[N, K, 3]` real SH coefficients, coefficient-major, K = (max_degree + 1)²,
///   K ∈ {1, 4, 9, 16}. Colour = SH(view dir) + 0.5, clamped at 0 (INRIA convention).
/// - `sh_degree`: active degree (0..=3), ≤ the degree implied by K; higher coefficients are ignored
///   and get zero gradient.
#[derive(Debug, Clone, Copy)]
pub struct SplatsRef<'a> {
    pub means: &'a [f32],
    pub log_scales: &'a [f32],
    pub rotations: &'a [f32],
    pub logit_opacities: &'a [f32],
    pub sh_coeffs: &'a [f32],
    pub sh_degree: u32,
}

/// Options of one render.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderOptions {
    /// Background colour `[3]`, linear RGB in [0, 1], composited behind the splats:
    /// pixel = Σ colour·α·T + T_final · background.
    pub background: [f32; 3],
    /// Mip-Splatting's 2D filter with opacity compensation (gsplat `rasterize_mode =
    /// "antialiased"`): each splat's opacity is scaled by √(det Σ2D / det(Σ2D + ε·I)), ε =
    /// [`crate::consts::EPS2D`] px², so splats smaller than a pixel fade instead of growing into
    /// aliased blobs (Yu et al., "Mip-Splatting", CVPR 2024, Eq. 9–10). Default `false` (the
    /// reference 3DGS rasterizer).
    ///
    /// Σ2D is the projected covariance `J·Σ_cam·Jᵀ` in pixels², before the dilation; the factor is
    /// in [0, 1] and the dilation itself is applied in both modes. The backward pass
    /// differentiates through the factor (into means, log_scales, rotations and logit_opacities)
    /// and must be called with the same value as the forward pass. Same on every device
    /// (`cpu::project::RasterizeMode` and the `antialiased` argument of the CUDA projection
    /// kernels); `false` renders bit-identically to a build without this option.
    pub antialiased: bool,
    /// AbsGS densification statistic (gsplat `absgrad=True`). Only the backward pass reads it, and
    /// only [`SplatGradients::means2d_grad_norm`] changes: with `true` it holds, per splat,
    /// ‖(Σ_p |∂L_p/∂mean2d_x|, Σ_p |∂L_p/∂mean2d_y|)‖ over the pixels p the splat touches, each
    /// pixel's contribution taken in absolute value per component before summing, so contributions
    /// of opposite sign no longer cancel; with `false` (the default) it holds ‖Σ_p ∂L_p/∂mean2d‖,
    /// bit-identical to a build without this option. Both are in the same NDC units (pixel
    /// gradient × (W/2, H/2)); the AbsGS norm is never smaller, so it takes a larger densification
    /// threshold (gsplat: `grow_grad2d` 0.0008 with absgrad vs 0.0002 without). Same on every
    /// device, including the resident training step (`cuda::train::TrainStep::options`).
    ///
    /// Source: Ye et al., "AbsGS: Recovering Fine Details for 3D Gaussian Splatting" (2024);
    /// gsplat `rasterization(absgrad=True)` / `DefaultStrategy(absgrad=True)`.
    pub absgrad: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            background: [0.0; 3],
            antialiased: false,
            absgrad: false,
        }
    }
}

/// Wall time of the rasterizer's stages in one render, milliseconds. Forward fills `project`,
/// `sort` (binning + sort + tile ranges) and `rasterize_forward`; backward fills
/// `rasterize_backward` and `project_backward`. On a GPU each stage is synchronised before its
/// clock stops, so the times are device times plus launch overhead.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct KernelTimings {
    /// Projection (EWA, SH), ms.
    pub project_ms: f64,
    /// Binning, sort and tile ranges, ms.
    pub sort_ms: f64,
    /// Forward rasterization (including the image download on a GPU), ms.
    pub rasterize_forward_ms: f64,
    /// Backward rasterization, ms.
    pub rasterize_backward_ms: f64,
    /// Projection backward (including the gradient download on a GPU), ms.
    pub project_backward_ms: f64,
}

/// Gradients of a scalar loss with respect to every input of
/// [`render_forward`](crate::render_forward).
/// Every field has the shape of the matching [`SplatsRef`] field.
#[derive(Debug, Clone)]
pub struct SplatGradients {
    pub means: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub rotations: Vec<f32>,
    pub logit_opacities: Vec<f32>,
    pub sh_coeffs: Vec<f32>,
    /// `[N]` norm of ∂L/∂means2d expressed in NDC units, i.e. the pixel-space gradient scaled by
    /// (W/2, H/2) as in INRIA 3DGS / gsplat; 0 for culled splats. Used by densification
    /// (threshold 2e-4). With [`RenderOptions::absgrad`], the norm of the per-component sums of
    /// absolute per-pixel contributions instead (AbsGS; gsplat threshold 8e-4), same units.
    pub means2d_grad_norm: Vec<f32>,
    /// Stage times of this backward pass (backward fields only).
    pub timings: KernelTimings,
}

//! Public contract of the rasterizer: forward render of one camera and its backward pass.
//!
//! (Kernels helper: fill in the bodies; the signatures and field meanings below are the contract the
//! trainer in kiln-pipeline codes against. Extend, do not change, without telling the trainer side.)

use crate::{Camera, Error};

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
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            background: [0.0; 3],
        }
    }
}

/// Result of [`render_forward`]: the image plus everything the backward pass needs.
#[derive(Debug, Clone)]
pub struct ForwardOutput {
    /// `[H, W, 3]` rendered RGB, row-major, linear, not clamped.
    pub image: Vec<f32>,
    /// `[H, W]` accumulated alpha (1 − final transmittance).
    pub alpha: Vec<f32>,
    /// `[N]` screen-space radius in pixels (3σ extent); 0 where the splat is culled
    /// (behind the near plane, off screen, or degenerate).
    pub radii: Vec<f32>,
    /// Internal state saved for the backward pass (projected splats, tile ranges, sorted ids,
    /// final transmittance and last contributor per pixel). Opaque to callers.
    pub saved: crate::cpu::SavedForward,
}

/// Gradients of a scalar loss with respect to every input of [`render_forward`].
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
    /// (threshold 2e-4).
    pub means2d_grad_norm: Vec<f32>,
}

/// Render one camera: project, bin into 16×16 tiles, depth-sort, alpha-composite front to back.
///
/// # Errors
/// [`Error::Shape`] when a slice length disagrees with N or K, [`Error::Invalid`] for a camera with a
/// zero size or non-finite intrinsics/pose. Non-finite splat parameters never panic: such splats are
/// culled (radius 0).
pub fn render_forward(
    splats: &SplatsRef<'_>,
    camera: &Camera,
    options: &RenderOptions,
) -> Result<ForwardOutput, Error> {
    crate::cpu::render_forward(splats, camera, options)
}

/// Backward pass of [`render_forward`] given ∂L/∂image (`grad_image`, `[H, W, 3]`).
///
/// # Errors
/// [`Error::Shape`] when `grad_image` is not `[H, W, 3]` or `forward` came from different inputs.
pub fn render_backward(
    splats: &SplatsRef<'_>,
    camera: &Camera,
    options: &RenderOptions,
    forward: &ForwardOutput,
    grad_image: &[f32],
) -> Result<SplatGradients, Error> {
    crate::cpu::render_backward(splats, camera, options, forward, grad_image)
}

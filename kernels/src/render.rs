//! Public contract of the rasterizer: forward render of one camera and its backward pass, on the
//! CPU twin ([`render_forward`], [`render_backward`]) or on any device through a [`Renderer`].

use std::sync::Arc;

use crate::cuda::gpu::{DEFAULT_ALLOC_CAP_BYTES, GpuContext};
use crate::cuda::render::{GpuRenderer, GpuSaved};
use crate::device::Device;
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
    /// final transmittance and last contributor per pixel), in host or device memory.
    pub saved: Saved,
    /// Stage times of this render (forward fields only).
    pub timings: KernelTimings,
}

/// The forward state a backward pass needs, wherever the forward pass ran. Opaque to callers.
#[derive(Debug, Clone)]
pub enum Saved {
    /// From the CPU twin.
    Cpu(crate::cpu::SavedForward),
    /// From a GPU renderer (device buffers, freed when the last clone drops).
    Gpu(Arc<GpuSaved>),
}

impl Saved {
    /// N, the number of splats of the render.
    pub fn splat_count(&self) -> usize {
        match self {
            Saved::Cpu(s) => s.splat_count(),
            Saved::Gpu(s) => s.splat_count(),
        }
    }

    /// I, the tile–splat intersections rasterised (forward and backward work are roughly
    /// proportional to it).
    pub fn intersection_count(&self) -> usize {
        match self {
            Saved::Cpu(s) => s.intersection_count(),
            Saved::Gpu(s) => s.intersection_count(),
        }
    }
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
    /// (threshold 2e-4). With [`RenderOptions::absgrad`], the norm of the per-component sums of
    /// absolute per-pixel contributions instead (AbsGS; gsplat threshold 8e-4), same units.
    pub means2d_grad_norm: Vec<f32>,
    /// Stage times of this backward pass (backward fields only).
    pub timings: KernelTimings,
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
/// [`Error::Shape`] when `grad_image` is not `[H, W, 3]` or `forward` came from different inputs;
/// [`Error::Invalid`] when `forward` came from a GPU renderer (use that [`Renderer::backward`]),
/// or (field `options.antialiased`) when `options.antialiased` differs from the forward pass's.
pub fn render_backward(
    splats: &SplatsRef<'_>,
    camera: &Camera,
    options: &RenderOptions,
    forward: &ForwardOutput,
    grad_image: &[f32],
) -> Result<SplatGradients, Error> {
    crate::cpu::render_backward(splats, camera, options, forward, grad_image)
}

/// Environment variable overriding the per-allocation device memory cap, in bytes
/// ([`DEFAULT_ALLOC_CAP_BYTES`] when unset).
pub const ALLOC_CAP_ENV: &str = "KILN_GPU_ALLOC_CAP";

/// The rasterizer on one device. Cheap to clone (the GPU state is shared).
#[derive(Debug, Clone)]
pub enum Renderer {
    /// The rayon CPU twin.
    Cpu,
    /// The CUDA kernels on a GPU, or on the host emulator (`cuda::emulator`).
    Gpu(Arc<GpuRenderer>),
}

fn alloc_cap() -> Result<usize, Error> {
    match std::env::var(ALLOC_CAP_ENV) {
        Err(_) => Ok(DEFAULT_ALLOC_CAP_BYTES),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| Error::Invalid {
                field: "KILN_GPU_ALLOC_CAP",
                reason: format!("{v:?} is not a positive number of bytes (e.g. 2147483648)"),
            }),
    }
}

impl Renderer {
    /// A renderer on `device`: the CPU twin, or CUDA device N (driver probed, primary context,
    /// kernels loaded).
    ///
    /// # Errors
    /// [`Error::Device`] when CUDA was asked for and cannot be used (no driver, no such device,
    /// kernels rejected); [`Error::Invalid`] for a bad `KILN_GPU_ALLOC_CAP`.
    pub fn open(device: Device) -> Result<Self, Error> {
        match device {
            Device::Cpu => Ok(Renderer::Cpu),
            Device::Cuda(n) => {
                let cap = alloc_cap()?;
                let driver = crate::cuda::driver::CudaDriver::open(n)?;
                tracing::info!(device = %device, name = %crate::cuda::gpu::GpuBackend::name(&driver),
                    ptx = driver.ptx_origin, "CUDA rasterizer ready");
                let ctx = GpuContext::new(Box::new(driver), device.to_string(), cap);
                Ok(Renderer::Gpu(Arc::new(GpuRenderer::new(Arc::new(ctx)))))
            }
        }
    }

    /// The CUDA kernels on the host emulator (slow; for tests and `kiln selftest --device emulator`).
    ///
    /// # Errors
    /// [`Error::Device`] (device `emulator`) when no C++20 compiler is available or the kernels do
    /// not compile; [`Error::Invalid`] for a bad `KILN_GPU_ALLOC_CAP`.
    pub fn emulator() -> Result<Self, Error> {
        Self::emulator_with_cap(alloc_cap()?)
    }

    /// [`Renderer::emulator`] with an explicit per-allocation cap in bytes instead of
    /// `KILN_GPU_ALLOC_CAP` (tests use a small cap to exercise the banded render).
    ///
    /// # Errors
    /// As [`Renderer::emulator`].
    pub fn emulator_with_cap(cap: usize) -> Result<Self, Error> {
        let emu = crate::cuda::emulator::Emulator::open()?;
        let ctx = GpuContext::new(Box::new(emu), "emulator".into(), cap);
        Ok(Renderer::Gpu(Arc::new(GpuRenderer::new(Arc::new(ctx)))))
    }

    /// The device as the ledger records it: `cpu`, `cuda:N` or `emulator`.
    pub fn device_label(&self) -> String {
        match self {
            Renderer::Cpu => "cpu".into(),
            Renderer::Gpu(g) => g.context().device().to_string(),
        }
    }

    /// The device's name (`"cpu"` or the GPU's marketing name, e.g. `"NVIDIA H200"`).
    pub fn device_name(&self) -> String {
        match self {
            Renderer::Cpu => "cpu".into(),
            Renderer::Gpu(g) => g.context().backend().name(),
        }
    }

    /// Total memory of the device, bytes (`None` on the CPU; 0 when the backend cannot tell).
    pub fn device_memory_bytes(&self) -> Option<u64> {
        match self {
            Renderer::Cpu => None,
            Renderer::Gpu(g) => Some(g.context().backend().total_memory() as u64),
        }
    }

    /// Peak device memory allocated by this renderer, bytes (`None` on the CPU).
    pub fn peak_device_bytes(&self) -> Option<usize> {
        match self {
            Renderer::Cpu => None,
            Renderer::Gpu(g) => Some(g.context().peak_bytes()),
        }
    }

    /// Forward render; same contract as [`render_forward`].
    ///
    /// # Errors
    /// As [`render_forward`], plus [`Error::Device`] for device failures.
    pub fn forward(
        &self,
        splats: &SplatsRef<'_>,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<ForwardOutput, Error> {
        match self {
            Renderer::Cpu => render_forward(splats, camera, options),
            Renderer::Gpu(g) => {
                let f = g.forward(splats, camera, options)?;
                Ok(ForwardOutput {
                    image: f.image,
                    alpha: f.alpha,
                    radii: f.radii,
                    saved: Saved::Gpu(Arc::new(f.saved)),
                    timings: f.timings,
                })
            }
        }
    }

    /// The training loss `(1 − λ)·L1 + λ·(1 − SSIM)` of `image` against `target` (both
    /// `[H, W, 3]`, linear RGB) and ∂loss/∂image, on this renderer's device
    /// ([`crate::cpu::loss`] has the formulas and sources). `weights` (`[H, W]` in [0, 1]) make
    /// both terms weighted means; 0 ignores a pixel
    /// ([`crate::cpu::loss::photometric_loss_weighted`]).
    ///
    /// # Errors
    /// [`Error::Shape`] when a slice is not `height × width × 3` or the weights not
    /// `height × width`; [`Error::Device`] for device failures.
    pub fn photometric_loss(
        &self,
        image: &[f32],
        target: &[f32],
        weights: Option<&[f32]>,
        height: usize,
        width: usize,
        lambda: f32,
    ) -> Result<crate::cpu::loss::LossOutput, Error> {
        crate::cpu::loss::check_loss_shapes(height, width, image.len(), target.len())?;
        if let Some(w) = weights
            && w.len() != height * width
        {
            return Err(Error::Shape {
                what: "loss weights [H, W]",
                expected: height * width,
                found: w.len(),
            });
        }
        match self {
            Renderer::Cpu => Ok(crate::cpu::loss::photometric_loss_weighted(
                image, target, weights, height, width, lambda,
            )),
            Renderer::Gpu(g) => g.photometric_loss(image, target, weights, height, width, lambda),
        }
    }

    /// One fused Adam step over a parameter group on this renderer's device, in place; same
    /// contract as [`crate::cpu::adam::adam_step`] (formula and sources there).
    ///
    /// # Errors
    /// [`Error::Shape`] / [`Error::Invalid`] as the CPU twin; [`Error::Device`] for device
    /// failures.
    pub fn adam_step(
        &self,
        param: &mut [f32],
        grad: &[f32],
        m: &mut [f32],
        v: &mut [f32],
        scale: Option<crate::cpu::adam::LrScale<'_>>,
        hyper: &crate::cpu::adam::AdamStep,
    ) -> Result<(), Error> {
        match self {
            Renderer::Cpu => crate::cpu::adam::adam_step(param, grad, m, v, scale, hyper),
            Renderer::Gpu(g) => g.adam_step(param, grad, m, v, scale, hyper),
        }
    }

    /// Backward pass of a [`Renderer::forward`] of this renderer; same contract as
    /// [`render_backward`].
    ///
    /// # Errors
    /// As [`render_backward`]; [`Error::Invalid`] when `forward` came from another kind of renderer.
    pub fn backward(
        &self,
        splats: &SplatsRef<'_>,
        camera: &Camera,
        options: &RenderOptions,
        forward: &ForwardOutput,
        grad_image: &[f32],
    ) -> Result<SplatGradients, Error> {
        match (self, &forward.saved) {
            (Renderer::Cpu, Saved::Cpu(_)) => {
                render_backward(splats, camera, options, forward, grad_image)
            }
            (Renderer::Gpu(g), Saved::Gpu(saved)) => {
                crate::cpu::check_backward_mode(options, saved.rasterize_mode())?;
                g.backward(splats, camera, saved, grad_image, options.absgrad)
            }
            _ => Err(Error::Invalid {
                field: "forward",
                reason: "this forward state comes from a different device's renderer; run the \
                         backward pass on the renderer that ran the forward pass"
                    .into(),
            }),
        }
    }
}

//! Public contract of the rasterizer: forward render of one camera and its backward pass, on the
//! CPU twin ([`render_forward`], [`render_backward`]) or on any device through a [`Renderer`].
//!
//! This file dispatches: it runs the CPU twin (`cpu`) or a GPU renderer (`cuda::render`) and wraps
//! what each returns (its own saved forward state) into [`ForwardOutput`] / [`Saved`]. The data
//! types the devices share live in `types.rs` (re-exported here), so neither device's code imports
//! this file.

use std::sync::Arc;

use crate::cpu::project::RasterizeMode;
use crate::cuda::gpu::{DEFAULT_ALLOC_CAP_BYTES, GpuContext};
use crate::cuda::render::{GpuRenderer, GpuSaved};
use crate::device::Device;
pub use crate::types::{KernelTimings, RenderOptions, SplatGradients, SplatsRef};
use crate::{Camera, Error};

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

/// Render one camera: project, bin into 16×16 tiles, depth-sort, alpha-composite front to back.
///
/// # Errors
/// [`Error::Shape`] when a slice length disagrees with N or K, [`Error::Invalid`] for a camera with a
/// zero size or non-finite intrinsics/pose, or when the tile intersections exceed 2³². Non-finite
/// splat parameters never panic: such splats are culled (radius 0).
pub fn render_forward(
    splats: &SplatsRef<'_>,
    camera: &Camera,
    options: &RenderOptions,
) -> Result<ForwardOutput, Error> {
    let sh_k = crate::cpu::check_render_inputs(splats, camera)?;
    let mode = RasterizeMode::from_antialiased(options.antialiased);
    let f = crate::cpu::forward(
        &crate::cpu::params_of(splats, sh_k),
        camera,
        options.background,
        mode,
    )?;
    Ok(ForwardOutput {
        image: f.image,
        alpha: f.alpha,
        radii: f.radii,
        saved: Saved::Cpu(f.saved),
        timings: f.timings,
    })
}

/// Backward pass of [`render_forward`] given ∂L/∂image (`grad_image`, `[H, W, 3]`).
///
/// # Errors
/// [`Error::Shape`] when `grad_image` is not `[H, W, 3]` or `forward` came from different inputs;
/// [`Error::Invalid`] when `forward` came from a GPU renderer (use that [`Renderer::backward`]),
/// or (field `options.antialiased`) when `options.antialiased` differs from the forward pass's;
/// first, the input errors of [`render_forward`] for `splats` and `camera`.
pub fn render_backward(
    splats: &SplatsRef<'_>,
    camera: &Camera,
    options: &RenderOptions,
    forward: &ForwardOutput,
    grad_image: &[f32],
) -> Result<SplatGradients, Error> {
    let sh_k = crate::cpu::check_render_inputs(splats, camera)?;
    let Saved::Cpu(saved) = &forward.saved else {
        return Err(Error::Invalid {
            field: "forward",
            reason: "this forward state comes from a GPU renderer; call Renderer::backward on it"
                .into(),
        });
    };
    crate::cpu::check_backward_mode(options, saved.mode)?;
    let (g, timings) = crate::cpu::backward(
        &crate::cpu::params_of(splats, sh_k),
        camera,
        options.background,
        saved,
        grad_image,
        options.absgrad,
    )?;
    Ok(SplatGradients {
        means: g.means,
        log_scales: g.log_scales,
        rotations: g.rotations,
        logit_opacities: g.logit_opacities,
        sh_coeffs: g.sh_coeffs,
        means2d_grad_norm: g.means2d_grad_norm,
        timings,
    })
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

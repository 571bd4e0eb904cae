//! Where the splat parameters and their Adam moments live during training, behind one interface
//! so the training loop ([`super::trainer`]) is the same code for every device, and the splat
//! tiler's level refinement steps the same way:
//!
//! - [`ParamStore::Host`]: burn tensors on the CPU backend; a step is the custom autodiff op
//!   ([`super::op::render_loss`]) + `backward()` + the fused Adam step of the CPU twin.
//! - [`ParamStore::Device`]: a [`GpuTrainState`] on the GPU (or the emulator); a step is forward,
//!   fused loss, backward and fused Adam on the device, with only the loss, radii and the
//!   densification statistic copied back.
//!
//! Densification, pruning and opacity resets ([`super::strategy`]) run on the host form
//! (`Gaussians` + `GaussiansAdam`) for both: [`ParamStore::with_host`] hands it out (for
//! `Device`: download, edit, upload).

use std::sync::Arc;
use std::time::Instant;

use kiln_formats::splats::GaussianSplats;
use kiln_kernels::cuda::train::{GpuTrainState, HostTrainState, TrainStep};
use kiln_kernels::{Camera, RenderOptions, Renderer};

use super::adam::AdamConfig;
use super::gaussians::{GaussianGrads, Gaussians, GaussiansAdam, sh_lr_scale};
use super::op::{LossTarget, RenderView};
use super::params::TrainParams;
use super::{STAGE, StepTimings};

/// The parameters and their optimizer state on the training device (see the module docs).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ParamStore {
    /// On the CPU, as burn tensors.
    Host {
        /// The parameters.
        g: Gaussians,
        /// Their Adam moments.
        adam: GaussiansAdam,
    },
    /// Resident on a GPU.
    Device {
        /// Parameters, moments and cached targets on the device.
        state: GpuTrainState,
        /// β1, β2, ε.
        config: AdamConfig,
    },
}

/// What one step reports to the training loop.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// The loss of the step's render, `(1 − λ)·L1 + λ·(1 − SSIM)`; when non-finite, no update was
    /// applied on the host store (the loop stops either way).
    pub loss: f64,
    /// `[N]` screen radii, pixels.
    pub radii: Vec<f32>,
    /// `[N]` ‖∂L/∂means2d‖ (NDC units), `None` when the backward pass did not run.
    pub means2d_grad_norm: Option<Vec<f32>>,
    /// Stage times of this step, ms (`total` left to the caller).
    pub timings: StepTimings,
}

/// Where a step's target image comes from, which decides whether a device store may reuse its
/// cached copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The view's own image: a device store uploads it on the view's first step and reuses it.
    ViewImage,
    /// An image made for this step only (the view's image composited over this step's random
    /// background): uploaded again every step.
    ThisStep,
}

/// What one optimisation step ([`ParamStore::step`]) trains on (shape letters H × W image).
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    /// The view's camera: OpenCV pinhole with `world_to_camera`, W × H its image size.
    pub camera: &'a Camera,
    /// The view's index in the run's training views: keys its cached target on a GPU.
    pub view_index: usize,
    /// `[H, W, 3]` linear RGB in [0, 1]: the view's image, or the image composited over this
    /// step's random background (see `target_kind`).
    pub target: &'a [f32],
    /// Whether `target` is the view's own image or this step's.
    pub target_kind: Target,
    /// `[H, W]` per-pixel loss weights in [0, 1] (0 = ignored pixel); `None` weighs every pixel 1.
    pub weights: Option<&'a [f32]>,
    /// Active SH degree (≤ the degree K holds).
    pub sh_degree: u32,
    /// Background colour (this step's), opacity rule and densification statistic.
    pub options: &'a RenderOptions,
    /// Means learning rate of this step, metres per step ([`TrainParams::lr_means`]).
    pub lr_means: f64,
    /// The step number, 1-based (named in errors).
    pub step: usize,
}

/// Learning rates per group, in group order, for step `lr_means` (metres per step).
fn group_lrs(params: &TrainParams, lr_means: f64) -> [f64; 5] {
    [
        lr_means,
        params.lr_log_scales,
        params.lr_rotations,
        params.lr_logit_opacities,
        params.lr_sh_dc,
    ]
}

fn host_state(g: &Gaussians, adam: &GaussiansAdam) -> HostTrainState {
    let h = g.to_host();
    let k = g.sh_coeffs_per_channel();
    let groups = [
        &adam.means,
        &adam.log_scales,
        &adam.rotations,
        &adam.logit_opacities,
        &adam.sh_coeffs,
    ];
    HostTrainState {
        groups: [
            h.means,
            h.log_scales,
            h.rotations,
            h.logit_opacities,
            h.sh_coeffs,
        ],
        m: groups.map(|a| a.m.clone()),
        v: groups.map(|a| a.v.clone()),
        t: groups.map(|a| a.t),
        k,
    }
}

fn from_host_state(s: HostTrainState, config: AdamConfig) -> (Gaussians, GaussiansAdam) {
    let [means, log_scales, rotations, logit_opacities, sh_coeffs] = s.groups;
    let g = Gaussians::from_host(&GaussianSplats {
        means,
        log_scales,
        rotations,
        logit_opacities,
        sh_coeffs,
        sh_degree: super::gaussians::degree_of_k(s.k),
    });
    let mut adam = GaussiansAdam::new(&g);
    adam.config = config;
    let [m0, m1, m2, m3, m4] = s.m;
    let [v0, v1, v2, v3, v4] = s.v;
    for (a, m, v, t) in [
        (&mut adam.means, m0, v0, s.t[0]),
        (&mut adam.log_scales, m1, v1, s.t[1]),
        (&mut adam.rotations, m2, v2, s.t[2]),
        (&mut adam.logit_opacities, m3, v3, s.t[3]),
        (&mut adam.sh_coeffs, m4, v4, s.t[4]),
    ] {
        (a.m, a.v, a.t) = (m, v, t);
    }
    (g, adam)
}

impl ParamStore {
    /// Puts `g` (fresh moments) on `renderer`'s device: a GPU renderer gets a device-resident
    /// state, the CPU keeps burn tensors.
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] when the device cannot hold the state.
    pub fn new(renderer: &Renderer, g: Gaussians) -> crate::Result<Self> {
        let adam = GaussiansAdam::new(&g);
        match renderer {
            Renderer::Cpu => Ok(Self::Host { g, adam }),
            Renderer::Gpu(gpu) => {
                let state = GpuTrainState::upload(
                    Arc::clone(gpu),
                    &host_state(&g, &adam),
                    adam.sh_lr_scale(),
                )?;
                Ok(Self::Device {
                    state,
                    config: adam.config,
                })
            }
        }
    }

    /// Puts a saved state (a checkpoint's parameters and moments) on `renderer`'s device.
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] when the arrays are inconsistent or the device cannot hold them.
    pub fn from_state(renderer: &Renderer, s: HostTrainState) -> crate::Result<Self> {
        let config = AdamConfig::default();
        match renderer {
            Renderer::Cpu => {
                let (g, adam) = from_host_state(s, config);
                Ok(Self::Host { g, adam })
            }
            Renderer::Gpu(gpu) => Ok(Self::Device {
                state: GpuTrainState::upload(Arc::clone(gpu), &s, &sh_lr_scale(s.k))?,
                config,
            }),
        }
    }

    /// Parameters and moments as host arrays (for a checkpoint).
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for device failures.
    pub fn state(&self) -> crate::Result<HostTrainState> {
        match self {
            Self::Host { g, adam } => Ok(host_state(g, adam)),
            Self::Device { state, .. } => Ok(state.download()?),
        }
    }

    /// N, the splat count.
    pub fn len(&self) -> usize {
        match self {
            Self::Host { g, .. } => g.len(),
            Self::Device { state, .. } => state.len(),
        }
    }

    /// True when N = 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every parameter is finite (device sums; no host copy).
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for device failures.
    pub fn all_finite(&self) -> crate::Result<bool> {
        match self {
            Self::Host { g, .. } => Ok(g.all_finite()),
            Self::Device { state, .. } => Ok(state.all_finite()?),
        }
    }

    /// The parameters as host splats (quaternions as stored).
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for device failures.
    pub fn to_host(&self) -> crate::Result<GaussianSplats> {
        match self {
            Self::Host { g, .. } => Ok(g.to_host()),
            Self::Device { state, .. } => {
                let s = state.download()?;
                let k = s.k;
                let [means, log_scales, rotations, logit_opacities, sh_coeffs] = s.groups;
                Ok(GaussianSplats {
                    means,
                    log_scales,
                    rotations,
                    logit_opacities,
                    sh_coeffs,
                    sh_degree: super::gaussians::degree_of_k(k),
                })
            }
        }
    }

    /// Runs `f` on the host form of the parameters and moments; for a device store the result is
    /// uploaded again (the cached target images stay on the device).
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for device failures.
    pub fn with_host<R>(
        &mut self,
        f: impl FnOnce(&mut Gaussians, &mut GaussiansAdam) -> R,
    ) -> crate::Result<R> {
        match self {
            Self::Host { g, adam } => Ok(f(g, adam)),
            Self::Device { state, config } => {
                let (mut g, mut adam) = from_host_state(state.download()?, *config);
                let r = f(&mut g, &mut adam);
                state.replace(&host_state(&g, &adam))?;
                Ok(r)
            }
        }
    }

    /// One optimisation step on `input`'s view: render over `input.options.background`, loss
    /// `(1 − λ)·L1 + λ·(1 − SSIM)` (λ = `params.lambda_dssim`) against `input.target` weighted per
    /// pixel, gradients, then Adam with `params`' learning rates (the means' one is
    /// `input.lr_means`) and, in the MCMC recipe, its regularisers. Runs on `renderer` for a host
    /// store, on the store's own device otherwise.
    ///
    /// # Errors
    /// [`crate::Error::Kernel`] for rasterizer or device failures; [`crate::Error::Numeric`] when
    /// the CPU backward pass failed inside burn's autodiff.
    pub fn step(
        &mut self,
        renderer: &Renderer,
        params: &TrainParams,
        input: &StepInput<'_>,
    ) -> crate::Result<StepOutput> {
        let lrs = group_lrs(params, input.lr_means);
        match self {
            Self::Device { state, config, .. } => {
                let out = state.step(&TrainStep {
                    camera: input.camera,
                    target_key: input.view_index,
                    target: input.target,
                    refresh_target: input.target_kind == Target::ThisStep,
                    weights: input.weights,
                    sh_degree: input.sh_degree,
                    options: input.options,
                    lambda: params.lambda_dssim,
                    lrs,
                    adam: [config.beta1, config.beta2, config.epsilon],
                    regularisers: params.regularisers(state.len()),
                })?;
                let t = out.timings;
                Ok(StepOutput {
                    loss: out.loss,
                    radii: out.radii,
                    means2d_grad_norm: Some(out.means2d_grad_norm),
                    timings: StepTimings {
                        project: t.project_ms,
                        sort: t.sort_ms,
                        rasterize_forward: t.rasterize_forward_ms,
                        loss: out.loss_ms,
                        rasterize_backward: t.rasterize_backward_ms,
                        project_backward: t.project_backward_ms,
                        backward_other: 0.0,
                        optimizer: out.optimizer_ms,
                        total: 0.0,
                    },
                })
            }
            Self::Host { g, adam } => host_step(g, adam, renderer, params, input),
        }
    }
}

/// [`ParamStore::step`] for burn tensors on the CPU.
fn host_step(
    g: &mut Gaussians,
    adam: &mut GaussiansAdam,
    renderer: &Renderer,
    params: &TrainParams,
    input: &StepInput<'_>,
) -> crate::Result<StepOutput> {
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let leaves = g.leaves();
    let view = RenderView {
        renderer,
        camera: input.camera,
        sh_degree: input.sh_degree,
        options: input.options,
    };
    let target = LossTarget {
        image: input.target,
        weights: input.weights,
        lambda_dssim: params.lambda_dssim,
    };
    let out = super::op::render_loss(leaves.clone(), &view, &target)?;
    let mut timings = StepTimings {
        project: out.timings.project_ms,
        sort: out.timings.sort_ms,
        rasterize_forward: out.timings.rasterize_forward_ms,
        loss: out.loss_ms,
        ..Default::default()
    };
    if !out.loss_value.is_finite() {
        return Ok(StepOutput {
            loss: out.loss_value,
            radii: out.radii,
            means2d_grad_norm: None,
            timings,
        });
    }
    let backward_clock = Instant::now();
    let mut grads = out.loss.backward();
    let backward_ms = ms(backward_clock);
    let means2d_grad_norm = {
        let mut side = out.side_channel.lock().map_err(|_| crate::Error::Numeric {
            stage: STAGE,
            step: input.step,
            problem: "rasterizer side channel poisoned by a panic in the backward pass".into(),
        })?;
        if let Some(e) = side.error.take() {
            return Err(e.into());
        }
        if let Some(t) = side.timings.take() {
            timings.rasterize_backward = t.rasterize_backward_ms;
            timings.project_backward = t.project_backward_ms;
            timings.backward_other =
                (backward_ms - t.rasterize_backward_ms - t.project_backward_ms).max(0.0);
        }
        side.means2d_grad_norm.take()
    };
    let step_grads = GaussianGrads {
        means: leaves.means.grad_remove(&mut grads),
        log_scales: leaves.log_scales.grad_remove(&mut grads),
        rotations: leaves.rotations.grad_remove(&mut grads),
        logit_opacities: leaves.logit_opacities.grad_remove(&mut grads),
        sh_coeffs: leaves.sh_coeffs.grad_remove(&mut grads),
    };
    drop(grads);
    // The leaves and the loss graph share the parameters' buffers; release them so the optimizer
    // holds the only handle and reads the parameters without a copy.
    let (loss_value, radii) = (out.loss_value, out.radii);
    drop((leaves, out.loss));
    let optimizer_clock = Instant::now();
    adam.step(g, step_grads, params, input.lr_means, renderer)?;
    timings.optimizer = ms(optimizer_clock);
    Ok(StepOutput {
        loss: loss_value,
        radii,
        means2d_grad_norm,
        timings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host → device-state form → host is lossless (parameters, moments, step counts).
    #[test]
    fn host_state_round_trips_through_the_device_form() {
        let n = 3;
        let splats = GaussianSplats {
            means: (0..3 * n).map(|i| i as f32 * 0.1).collect(),
            log_scales: vec![-2.0; 3 * n],
            rotations: [1.0, 0.0, 0.0, 0.0].repeat(n),
            logit_opacities: vec![0.5, -1.0, 2.0],
            sh_coeffs: (0..3 * 4 * n).map(|i| i as f32 * 0.01).collect(),
            sh_degree: 1,
        };
        let g = Gaussians::from_host(&splats);
        let mut adam = GaussiansAdam::new(&g);
        adam.means.m = vec![0.25; 3 * n];
        adam.sh_coeffs.v = vec![0.5; 12 * n];
        adam.rotations.t = 7;
        let s = host_state(&g, &adam);
        assert_eq!(s.t, [0, 0, 7, 0, 0]);
        let (g2, adam2) = from_host_state(s.clone(), adam.config);
        assert_eq!(g2.to_host(), splats);
        assert_eq!(host_state(&g2, &adam2), s);
    }
}

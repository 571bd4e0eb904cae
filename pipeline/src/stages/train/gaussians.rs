//! The trainable splat parameters as burn tensors ([`Gaussians`]) and their Adam states
//! ([`GaussiansAdam`]), with conversions to and from the host form
//! [`kiln_formats::splats::GaussianSplats`].
//!
//! The tensors live on the inner backend between steps; each step wraps them as autodiff leaves
//! ([`Gaussians::leaves`]), renders, and the optimizer writes new inner tensors back. Per-group
//! learning rates follow INRIA 3DGS (`scene/gaussian_model.py::training_setup`).

use burn::tensor::{Tensor, TensorData};
use kiln_formats::splats::GaussianSplats;
use kiln_kernels::Renderer;
use kiln_kernels::cpu::adam::LrScale;

use super::adam::{AdamConfig, AdamState, GroupUpdate};
use super::op::{GaussianLeaves, InnerBackend, tensor_to_vec};
use super::params::TrainParams;

type B = InnerBackend;

/// Splat parameters (shape letters: N splats, K SH coefficients per channel).
#[derive(Debug, Clone)]
pub struct Gaussians {
    /// `[N, 3]` world positions, metres.
    pub means: Tensor<B, 2>,
    /// `[N, 3]` ln of per-axis standard deviations (metres).
    pub log_scales: Tensor<B, 2>,
    /// `[N, 4]` quaternions wxyz, not necessarily normalised.
    pub rotations: Tensor<B, 2>,
    /// `[N]` opacity logits.
    pub logit_opacities: Tensor<B, 1>,
    /// `[N, K, 3]` real SH coefficients, coefficient-major (INRIA convention).
    pub sh_coeffs: Tensor<B, 3>,
}

impl Gaussians {
    /// Upload host splats. `host.sh_coeffs` must hold `N·K·3` values, K = (sh_degree + 1)².
    pub fn from_host(host: &GaussianSplats) -> Self {
        let dev = Default::default();
        let n = host.len();
        let k = host.sh_coeffs_per_channel();
        Self {
            means: Tensor::from_data(TensorData::new(host.means.clone(), [n, 3]), &dev),
            log_scales: Tensor::from_data(TensorData::new(host.log_scales.clone(), [n, 3]), &dev),
            rotations: Tensor::from_data(TensorData::new(host.rotations.clone(), [n, 4]), &dev),
            logit_opacities: Tensor::from_data(
                TensorData::new(host.logit_opacities.clone(), [n]),
                &dev,
            ),
            sh_coeffs: Tensor::from_data(TensorData::new(host.sh_coeffs.clone(), [n, k, 3]), &dev),
        }
    }

    /// Number of splats N.
    pub fn len(&self) -> usize {
        self.logit_opacities.dims()[0]
    }

    /// True when N = 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SH coefficients per channel K.
    pub fn sh_coeffs_per_channel(&self) -> usize {
        self.sh_coeffs.dims()[1]
    }

    /// Download to host memory, as stored (quaternions not normalised). `sh_degree` is the
    /// degree implied by K.
    pub fn to_host(&self) -> GaussianSplats {
        let k = self.sh_coeffs_per_channel();
        GaussianSplats {
            means: tensor_to_vec(self.means.clone()),
            log_scales: tensor_to_vec(self.log_scales.clone()),
            rotations: tensor_to_vec(self.rotations.clone()),
            logit_opacities: tensor_to_vec(self.logit_opacities.clone()),
            sh_coeffs: tensor_to_vec(self.sh_coeffs.clone()),
            sh_degree: degree_of_k(k),
        }
    }

    /// True when every parameter is finite, checked with one sum per group on the device (a sum
    /// is non-finite iff some element is non-finite, or on overflow, which only costs a needless
    /// host check). Cheap enough to run every step, unlike a host readback.
    pub fn all_finite(&self) -> bool {
        [
            self.means.clone().sum().into_scalar(),
            self.log_scales.clone().sum().into_scalar(),
            self.rotations.clone().sum().into_scalar(),
            self.logit_opacities.clone().sum().into_scalar(),
            self.sh_coeffs.clone().sum().into_scalar(),
        ]
        .iter()
        .all(|v| v.is_finite())
    }

    /// Wrap every group as an autodiff leaf that requires grad.
    pub fn leaves(&self) -> GaussianLeaves {
        GaussianLeaves {
            means: Tensor::from_inner(self.means.clone()).require_grad(),
            log_scales: Tensor::from_inner(self.log_scales.clone()).require_grad(),
            rotations: Tensor::from_inner(self.rotations.clone()).require_grad(),
            logit_opacities: Tensor::from_inner(self.logit_opacities.clone()).require_grad(),
            sh_coeffs: Tensor::from_inner(self.sh_coeffs.clone()).require_grad(),
        }
    }
}

/// Moves a parameter tensor out of its group, leaving an empty one, so that the Adam step owns
/// the only handle to its buffer and reading it out does not copy (a clone would share it).
fn take<const D: usize>(t: &mut Tensor<B, D>) -> Tensor<B, D> {
    let empty = Tensor::empty([0; D], &t.device());
    std::mem::replace(t, empty)
}

/// SH degree whose K = (degree + 1)² equals `k` (0 for an unexpected K).
pub fn degree_of_k(k: usize) -> u32 {
    match k {
        4 => 1,
        9 => 2,
        16 => 3,
        _ => 0,
    }
}

/// `[K]` per-coefficient SH learning-rate factors: 1 for the DC coefficient, 1/20 for the higher
/// bands (INRIA `scene/gaussian_model.py`, `feature_lr / 20.0`).
pub fn sh_lr_scale(k: usize) -> Vec<f32> {
    let mut scale = vec![1.0f32 / 20.0; k];
    if let Some(dc) = scale.first_mut() {
        *dc = 1.0;
    }
    scale
}

/// Adam states of the five groups plus the per-band SH learning-rate multiplier.
#[derive(Debug, Clone)]
pub struct GaussiansAdam {
    /// β1, β2, ε shared by all groups (INRIA values).
    pub config: AdamConfig,
    /// Moments of `means` `[N, 3]`.
    pub means: AdamState,
    /// Moments of `log_scales` `[N, 3]`.
    pub log_scales: AdamState,
    /// Moments of `rotations` `[N, 4]`.
    pub rotations: AdamState,
    /// Moments of `logit_opacities` `[N]`.
    pub logit_opacities: AdamState,
    /// Moments of `sh_coeffs` `[N, K, 3]`.
    pub sh_coeffs: AdamState,
    /// `[K]`: 1 for the DC band, 1/20 for higher bands (INRIA `feature_lr / 20.0`), applied per
    /// coefficient (stride 3 over `[N, K, 3]`).
    sh_lr_scale: Vec<f32>,
}

/// Gradients of one step, on the inner backend (missing groups are zero).
#[derive(Debug)]
pub struct GaussianGrads {
    /// ∂L/∂means `[N, 3]`.
    pub means: Option<Tensor<B, 2>>,
    /// ∂L/∂log_scales `[N, 3]`.
    pub log_scales: Option<Tensor<B, 2>>,
    /// ∂L/∂rotations `[N, 4]`.
    pub rotations: Option<Tensor<B, 2>>,
    /// ∂L/∂logit_opacities `[N]`.
    pub logit_opacities: Option<Tensor<B, 1>>,
    /// ∂L/∂sh_coeffs `[N, K, 3]`.
    pub sh_coeffs: Option<Tensor<B, 3>>,
}

impl GaussiansAdam {
    /// `[K]` per-coefficient SH learning-rate factors (1 for DC, 1/20 above).
    pub fn sh_lr_scale(&self) -> &[f32] {
        &self.sh_lr_scale
    }

    /// Zero moments for `g`.
    pub fn new(g: &Gaussians) -> Self {
        Self {
            config: AdamConfig::default(),
            means: AdamState::zeros_like(&g.means),
            log_scales: AdamState::zeros_like(&g.log_scales),
            rotations: AdamState::zeros_like(&g.rotations),
            logit_opacities: AdamState::zeros_like(&g.logit_opacities),
            sh_coeffs: AdamState::zeros_like(&g.sh_coeffs),
            sh_lr_scale: sh_lr_scale(g.sh_coeffs_per_channel()),
        }
    }

    /// One Adam step of every group that has a gradient, on `renderer`'s device. `lr_means` is
    /// the scheduled means learning rate in metres per step (already multiplied by the scene
    /// extent).
    ///
    /// # Errors
    /// [`kiln_kernels::Error`] when a gradient's shape disagrees with its moments or the device
    /// fails.
    pub fn step(
        &mut self,
        g: &mut Gaussians,
        grads: GaussianGrads,
        params: &TrainParams,
        lr_means: f64,
        renderer: &Renderer,
    ) -> Result<(), kiln_kernels::Error> {
        let c = self.config;
        let reg = params.regularisers(g.len());
        if let Some(gr) = grads.means {
            g.means = self
                .means
                .step(take(&mut g.means), gr, lr_means, None, &c, renderer)?;
        }
        if let Some(gr) = grads.log_scales {
            let update = GroupUpdate {
                lr: params.lr_log_scales,
                lr_scale: None,
                regulariser: reg[1],
            };
            g.log_scales = self.log_scales.step_regularised(
                take(&mut g.log_scales),
                gr,
                update,
                &c,
                renderer,
            )?;
        }
        if let Some(gr) = grads.rotations {
            g.rotations = self.rotations.step(
                take(&mut g.rotations),
                gr,
                params.lr_rotations,
                None,
                &c,
                renderer,
            )?;
        }
        if let Some(gr) = grads.logit_opacities {
            let update = GroupUpdate {
                lr: params.lr_logit_opacities,
                lr_scale: None,
                regulariser: reg[3],
            };
            g.logit_opacities = self.logit_opacities.step_regularised(
                take(&mut g.logit_opacities),
                gr,
                update,
                &c,
                renderer,
            )?;
        }
        if let Some(gr) = grads.sh_coeffs {
            let scale = LrScale {
                values: &self.sh_lr_scale,
                stride: 3,
            };
            g.sh_coeffs = self.sh_coeffs.step(
                take(&mut g.sh_coeffs),
                gr,
                params.lr_sh_dc,
                Some(scale),
                &c,
                renderer,
            )?;
        }
        Ok(())
    }
}

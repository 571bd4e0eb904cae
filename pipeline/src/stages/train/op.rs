//! The rasterizer as ONE custom burn autodiff op: [`rasterize`].
//!
//! Forward reads the five parameter tensors to host memory, calls
//! [`kiln_kernels::render_forward`] and returns the image `[H, W, 3]` as a tracked tensor. Backward
//! calls [`kiln_kernels::render_backward`] with the saved forward state and registers gradients for
//! all five inputs. Everything else in the trainer (loss, SSIM) is ordinary burn tensor code, so
//! burn's autodiff carries ∂L/∂image back to this op.
//!
//! # Side channel
//! Densification (Kerbl et al. 2023 §5.2) needs two per-splat quantities that are *not* gradients
//! of any parameter: the screen radius (forward) and the norm of ∂L/∂means2d (backward). burn's
//! `Backward::backward` can only register gradients for the op's tensor parents, and it runs inside
//! `loss.backward()`, long after [`rasterize`] returned. So the op hands the caller an
//! [`Arc`]`<`[`Mutex`]`<`[`BackwardSideChannel`]`>>` that its backward fills with
//! `means2d_grad_norm` (or with the kernel error, since `backward` cannot return one). Brush solves
//! the same problem with a zero-sized "refine weight holder" parent tensor; the side channel is
//! simpler on a CPU backend and keeps the op's parents equal to the five real parameters.
//!
//! Source of the op pattern: burn-autodiff 0.21 `ops::{Backward, OpsKind}` (as used by burn's own
//! float ops) and Brush's `crates/brush-render/src/bwd/burn_glue.rs` (`RenderBackwards`).

use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use kiln_kernels::{Camera, ForwardOutput, KernelTimings, RenderOptions, Renderer, SplatsRef};

/// The inner (non-autodiff) backend: burn's pure-Rust CPU backend.
pub type InnerBackend = Flex;
/// The backend the parameters live on during a step: [`InnerBackend`] with autodiff.
pub type TrainBackend = Autodiff<Flex>;

/// What the op's backward pass leaves for the caller (see the module docs for why).
#[derive(Debug, Default)]
pub struct BackwardSideChannel {
    /// `[N]` ‖∂L/∂means2d‖ in NDC units (the kernels' `means2d_grad_norm`); `None` until the
    /// backward pass has run.
    pub means2d_grad_norm: Option<Vec<f32>>,
    /// The kernel's error, when `render_backward` failed (no gradients were registered then).
    pub error: Option<kiln_kernels::Error>,
    /// Stage times of the backward pass (`None` until it has run).
    pub timings: Option<KernelTimings>,
}

/// Output of [`rasterize`].
#[derive(Debug)]
pub struct RasterizeOutput {
    /// `[H, W, 3]` rendered linear RGB, not clamped; tracked when any input requires grad.
    pub image: Tensor<TrainBackend, 3>,
    /// `[N]` screen-space radius in pixels (3σ), 0 where culled.
    pub radii: Vec<f32>,
    /// Filled by the backward pass of this render.
    pub side_channel: Arc<Mutex<BackwardSideChannel>>,
    /// Stage times of the forward render.
    pub timings: KernelTimings,
}

/// The five parameter groups on the autodiff backend (same shapes as
/// [`super::gaussians::Gaussians`]): one step's leaves
/// ([`super::gaussians::Gaussians::leaves`]), or untracked tensors; the input of the render ops
/// ([`rasterize`], [`render_loss`]).
#[derive(Debug, Clone)]
pub struct GaussianLeaves {
    /// `[N, 3]` world positions, metres.
    pub means: Tensor<TrainBackend, 2>,
    /// `[N, 3]` ln σ, metres.
    pub log_scales: Tensor<TrainBackend, 2>,
    /// `[N, 4]` quaternions wxyz.
    pub rotations: Tensor<TrainBackend, 2>,
    /// `[N]` opacity logits.
    pub logit_opacities: Tensor<TrainBackend, 1>,
    /// `[N, K, 3]` SH coefficients.
    pub sh_coeffs: Tensor<TrainBackend, 3>,
}

/// The view one render draws: the device, the camera, the active SH degree and the options.
#[derive(Debug, Clone, Copy)]
pub struct RenderView<'a> {
    /// The rasterizer: the CPU twin or the CUDA kernels.
    pub renderer: &'a Renderer,
    /// OpenCV pinhole with `world_to_camera`; its width × height is the image's W × H.
    pub camera: &'a Camera,
    /// Active SH degree, ≤ the degree implied by K; higher bands get zero gradient.
    pub sh_degree: u32,
    /// Background (linear RGB), opacity rule (`antialiased`) and densification statistic.
    pub options: &'a RenderOptions,
}

/// What [`render_loss`] compares the render with.
#[derive(Debug, Clone, Copy)]
pub struct LossTarget<'a> {
    /// `[H, W, 3]` linear RGB ground truth in [0, 1].
    pub image: &'a [f32],
    /// `[H, W]` per-pixel loss weights in [0, 1] (0 = ignored pixel, see
    /// [`kiln_kernels::cpu::loss::photometric_loss_weighted`]); `None` weighs every pixel 1.
    pub weights: Option<&'a [f32]>,
    /// SSIM weight λ in [0, 1] of `(1 − λ)·L1 + λ·(1 − SSIM)` (INRIA 0.2).
    pub lambda_dssim: f32,
}

/// Everything the backward pass needs; shared (not copied) through an `Arc`.
#[derive(Debug)]
struct SavedRender {
    means: Vec<f32>,
    log_scales: Vec<f32>,
    rotations: Vec<f32>,
    logit_opacities: Vec<f32>,
    sh_coeffs: Vec<f32>,
    sh_degree: u32,
    n: usize,
    k: usize,
    camera: Camera,
    options: RenderOptions,
    renderer: Renderer,
    forward: ForwardOutput,
    side_channel: Arc<Mutex<BackwardSideChannel>>,
    /// For [`render_loss`]: ∂loss/∂image `[H, W, 3]`; the op's output is then the scalar loss and
    /// its upstream gradient scales this.
    loss_grad_image: Option<Vec<f32>>,
}

impl SavedRender {
    fn splats(&self) -> SplatsRef<'_> {
        SplatsRef {
            means: &self.means,
            log_scales: &self.log_scales,
            rotations: &self.rotations,
            logit_opacities: &self.logit_opacities,
            sh_coeffs: &self.sh_coeffs,
            sh_degree: self.sh_degree,
        }
    }
}

#[derive(Debug)]
struct RasterizeBackward;

impl<B: Backend> Backward<B, 5> for RasterizeBackward {
    type State = Arc<SavedRender>;

    fn backward(self, ops: Ops<Self::State, 5>, grads: &mut Gradients, _: &mut Checkpointer) {
        let upstream = grads.consume::<B>(&ops.node);
        let device = B::float_device(&upstream);
        let saved = ops.state;
        let grad_image = match &saved.loss_grad_image {
            Some(g) => {
                let scale = primitive_to_vec::<B, 1>(upstream)
                    .first()
                    .copied()
                    .unwrap_or(0.0);
                g.iter().map(|v| v * scale).collect()
            }
            None => primitive_to_vec::<B, 3>(upstream),
        };
        let result = saved.renderer.backward(
            &saved.splats(),
            &saved.camera,
            &saved.options,
            &saved.forward,
            &grad_image,
        );
        let g = match result {
            Ok(g) => g,
            Err(e) => {
                if let Ok(mut side) = saved.side_channel.lock() {
                    side.error = Some(e);
                }
                return;
            }
        };
        let (n, k) = (saved.n, saved.k);
        let [p_means, p_scales, p_rots, p_opac, p_sh] = ops.parents;
        let mut reg =
            |parent: Option<burn::backend::autodiff::NodeId>, v: Vec<f32>, shape: Vec<usize>| {
                if let Some(id) = parent {
                    let t = B::float_from_data(TensorData::new(v, shape), &device);
                    grads.register::<B>(id, t);
                }
            };
        reg(p_means.map(|p| p.id), g.means, vec![n, 3]);
        reg(p_scales.map(|p| p.id), g.log_scales, vec![n, 3]);
        reg(p_rots.map(|p| p.id), g.rotations, vec![n, 4]);
        reg(p_opac.map(|p| p.id), g.logit_opacities, vec![n]);
        reg(p_sh.map(|p| p.id), g.sh_coeffs, vec![n, k, 3]);
        if let Ok(mut side) = saved.side_channel.lock() {
            side.means2d_grad_norm = Some(g.means2d_grad_norm);
            side.timings = Some(g.timings);
        }
    }
}

/// Read any float tensor to a host `Vec<f32>` (row-major).
pub(crate) fn tensor_to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    // `convert` makes the dtype f32, so `into_vec::<f32>` cannot fail; an empty vector would be
    // reported as a shape error by the kernels.
    t.into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap_or_default()
}

fn primitive_to_vec<B: Backend, const D: usize>(p: FloatTensor<B>) -> Vec<f32> {
    tensor_to_vec(Tensor::<B, D>::from_primitive(TensorPrimitive::Float(p)))
}

/// Render one camera through `renderer` (the CPU twin or the CUDA kernels) as a differentiable
/// burn op. The parameters stay on burn's CPU backend; a GPU renderer copies them to the device
/// and the gradients back. (Training on a GPU does not come through here: it keeps the parameters
/// on the device, see [`super::store`].)
///
/// Inputs (shape letters N splats, K SH coefficients per channel, H × W image):
/// - `splats`: the five parameter tensors ([`GaussianLeaves`]): `means` `[N, 3]` world metres;
///   `log_scales` `[N, 3]` ln σ (metres); `rotations` `[N, 4]` wxyz quaternions (need not be
///   normalised); `logit_opacities` `[N]`; `sh_coeffs` `[N, K, 3]` coefficient-major real SH
///   (INRIA convention, colour = SH + 0.5). Tracked or not.
/// - `view`: the device, the camera (OpenCV pinhole with `world_to_camera`), the active SH degree
///   (≤ the degree implied by K; higher bands get zero gradient) and the options
///   (`background` linear RGB); see [`RenderView`].
///
/// Returns the image `[H, W, 3]`; gradients reach every input that requires grad when
/// `backward()` is called on a scalar that depends on it. The backward pass also writes
/// `means2d_grad_norm` into the returned side channel.
///
/// # Errors
/// [`crate::Error::Kernel`] when the rasterizer rejects the inputs (shape mismatch, bad camera).
/// Non-finite splats are culled by the kernels (radius 0), not rejected. A failure in the backward
/// pass is reported through [`BackwardSideChannel::error`].
pub fn rasterize(splats: GaussianLeaves, view: &RenderView<'_>) -> crate::Result<RasterizeOutput> {
    let device = splats.means.device();
    let params = Params::new(splats);
    let saved = params.render(view)?;
    let (side_channel, timings) = (saved.side_channel.clone(), saved.forward.timings);
    let radii = saved.forward.radii.clone();
    let (h, w) = (view.camera.height as usize, view.camera.width as usize);
    let image = Tensor::<InnerBackend, 3>::from_data(
        TensorData::new(saved.forward.image.clone(), [h, w, 3]),
        &device,
    )
    .into_primitive()
    .tensor();
    Ok(RasterizeOutput {
        image: Tensor::from_primitive(TensorPrimitive::Float(params.finish(saved, image))),
        radii,
        side_channel,
        timings,
    })
}

/// The five parameter tensors of one render as autodiff primitives (graph node + inner tensor).
struct Params {
    tensors: [FloatTensor<TrainBackend>; 5],
    n: usize,
    k: usize,
}

impl Params {
    fn new(splats: GaussianLeaves) -> Self {
        let GaussianLeaves {
            means,
            log_scales,
            rotations,
            logit_opacities,
            sh_coeffs,
        } = splats;
        let [n, k, _] = sh_coeffs.dims();
        Self {
            tensors: [
                means.into_primitive().tensor(),
                log_scales.into_primitive().tensor(),
                rotations.into_primitive().tensor(),
                logit_opacities.into_primitive().tensor(),
                sh_coeffs.into_primitive().tensor(),
            ],
            n,
            k,
        }
    }

    /// Host copies of the parameters, the forward render on `renderer`, and the state the
    /// backward pass needs.
    fn render(&self, view: &RenderView<'_>) -> crate::Result<SavedRender> {
        let RenderView {
            renderer,
            camera,
            sh_degree,
            options,
        } = *view;
        let [m, s, r, o, sh] = &self.tensors;
        let means = primitive_to_vec::<InnerBackend, 2>(m.primitive.clone());
        let log_scales = primitive_to_vec::<InnerBackend, 2>(s.primitive.clone());
        let rotations = primitive_to_vec::<InnerBackend, 2>(r.primitive.clone());
        let logit_opacities = primitive_to_vec::<InnerBackend, 1>(o.primitive.clone());
        let sh_coeffs = primitive_to_vec::<InnerBackend, 3>(sh.primitive.clone());
        let forward = renderer.forward(
            &SplatsRef {
                means: &means,
                log_scales: &log_scales,
                rotations: &rotations,
                logit_opacities: &logit_opacities,
                sh_coeffs: &sh_coeffs,
                sh_degree,
            },
            camera,
            options,
        )?;
        Ok(SavedRender {
            means,
            log_scales,
            rotations,
            logit_opacities,
            sh_coeffs,
            sh_degree,
            n: self.n,
            k: self.k,
            camera: *camera,
            options: *options,
            renderer: renderer.clone(),
            forward,
            side_channel: Arc::new(Mutex::new(BackwardSideChannel::default())),
            loss_grad_image: None,
        })
    }

    /// Registers the op in the autodiff graph: `output` (computed from `saved`) becomes a tensor
    /// whose backward pass is [`RasterizeBackward`] when any parameter is tracked.
    fn finish(
        &self,
        saved: SavedRender,
        output: FloatTensor<InnerBackend>,
    ) -> FloatTensor<TrainBackend> {
        let nodes = self.tensors.each_ref().map(|t| t.node.clone());
        let prep = <RasterizeBackward as Backward<InnerBackend, 5>>::prepare::<NoCheckpointing>(
            RasterizeBackward,
            nodes,
        );
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(Arc::new(saved), output),
            OpsKind::UnTracked(prep) => prep.finish(output),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_formats::splats::GaussianSplats;

    use crate::stages::train::gaussians::Gaussians;

    fn camera() -> Camera {
        Camera {
            width: 24,
            height: 20,
            fx: 30.0,
            fy: 30.0,
            cx: 12.0,
            cy: 10.0,
            world_to_camera: [
                [1.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 0.0, 0.0],
                [0.0, 0.0, 1.0, 3.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        }
    }

    /// `camera` with `options` on the CPU, SH degree 1 (as [`scene`] holds).
    fn view<'a>(camera: &'a Camera, options: &'a RenderOptions) -> RenderView<'a> {
        RenderView {
            renderer: &Renderer::Cpu,
            camera,
            sh_degree: 1,
            options,
        }
    }

    fn scene() -> GaussianSplats {
        let mut s = GaussianSplats {
            sh_degree: 1,
            ..Default::default()
        };
        for i in 0..6 {
            let f = i as f32;
            s.means
                .extend_from_slice(&[0.15 * f - 0.4, 0.1 * (f - 2.5), 0.05 * f]);
            s.log_scales
                .extend_from_slice(&[(0.08 + 0.01 * f).ln(), 0.1f32.ln(), 0.09f32.ln()]);
            s.rotations
                .extend_from_slice(&[1.0, 0.1 * f, -0.05 * f, 0.02]);
            s.logit_opacities.push(0.3 * f - 0.5);
            for k in 0..12 {
                s.sh_coeffs.push(((i * 12 + k) % 7) as f32 * 0.1 - 0.3);
            }
        }
        s
    }

    /// The op's registered gradients are exactly the kernels' backward for ∂L/∂image, and the
    /// side channel receives `means2d_grad_norm`.
    #[test]
    fn op_gradients_equal_the_kernel_backward_for_all_five_inputs() {
        let (s, cam) = (scene(), camera());
        let opts = RenderOptions {
            background: [0.1, 0.2, 0.3],
            ..RenderOptions::default()
        };
        let g = Gaussians::from_host(&s);
        let leaves = g.leaves();
        let out = rasterize(leaves.clone(), &view(&cam, &opts)).unwrap();
        let n_px = (cam.width * cam.height * 3) as usize;
        let weights: Vec<f32> = (0..n_px)
            .map(|i| ((i * 13) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let w = Tensor::<TrainBackend, 3>::from_data(
            TensorData::new(
                weights.clone(),
                [cam.height as usize, cam.width as usize, 3],
            ),
            &Default::default(),
        );
        let grads = (out.image * w).sum().backward();

        let sref = SplatsRef {
            means: &s.means,
            log_scales: &s.log_scales,
            rotations: &s.rotations,
            logit_opacities: &s.logit_opacities,
            sh_coeffs: &s.sh_coeffs,
            sh_degree: 1,
        };
        let fwd = kiln_kernels::render_forward(&sref, &cam, &opts).unwrap();
        assert_eq!(out.radii, fwd.radii);
        let expected = kiln_kernels::render_backward(&sref, &cam, &opts, &fwd, &weights).unwrap();
        assert_eq!(
            tensor_to_vec(leaves.means.grad(&grads).unwrap()),
            expected.means
        );
        assert_eq!(
            tensor_to_vec(leaves.log_scales.grad(&grads).unwrap()),
            expected.log_scales
        );
        assert_eq!(
            tensor_to_vec(leaves.rotations.grad(&grads).unwrap()),
            expected.rotations
        );
        assert_eq!(
            tensor_to_vec(leaves.logit_opacities.grad(&grads).unwrap()),
            expected.logit_opacities
        );
        assert_eq!(
            tensor_to_vec(leaves.sh_coeffs.grad(&grads).unwrap()),
            expected.sh_coeffs
        );
        assert!(expected.means.iter().any(|v| *v != 0.0));
        let side = out.side_channel.lock().unwrap();
        assert_eq!(
            side.means2d_grad_norm.as_deref(),
            Some(&expected.means2d_grad_norm[..])
        );
        assert!(side.error.is_none());
    }

    #[test]
    fn untracked_inputs_render_without_a_graph() {
        let (s, cam) = (scene(), camera());
        let g = Gaussians::from_host(&s);
        let untracked = GaussianLeaves {
            means: Tensor::from_inner(g.means.clone()),
            log_scales: Tensor::from_inner(g.log_scales.clone()),
            rotations: Tensor::from_inner(g.rotations.clone()),
            logit_opacities: Tensor::from_inner(g.logit_opacities.clone()),
            sh_coeffs: Tensor::from_inner(g.sh_coeffs.clone()),
        };
        let out = rasterize(untracked, &view(&cam, &RenderOptions::default())).unwrap();
        assert_eq!(out.image.dims(), [20, 24, 3]);
    }

    #[test]
    fn a_bad_camera_is_a_kernel_error_not_a_panic() {
        let g = Gaussians::from_host(&scene());
        let leaves = g.leaves();
        let cam = Camera {
            fx: f32::NAN,
            ..camera()
        };
        let r = rasterize(leaves, &view(&cam, &RenderOptions::default()));
        assert!(matches!(r, Err(crate::Error::Kernel(_))), "{r:?}");
    }
}

/// Output of [`render_loss`].
#[derive(Debug)]
pub struct RenderLossOutput {
    /// `[1]` the loss, tracked: `backward()` on it reaches every parameter.
    pub loss: Tensor<TrainBackend, 1>,
    /// The loss value, `(1 − λ)·L1 + λ·(1 − SSIM)`.
    pub loss_value: f64,
    /// `[N]` screen-space radius in pixels (3σ), 0 where culled.
    pub radii: Vec<f32>,
    /// Filled by the backward pass of this render.
    pub side_channel: Arc<Mutex<BackwardSideChannel>>,
    /// Stage times of the forward render.
    pub timings: KernelTimings,
    /// Milliseconds spent in the fused loss (forward and gradient).
    pub loss_ms: f64,
}

/// Render one camera and take the training loss against `target` in one differentiable op:
/// `(1 − λ)·L1 + λ·(1 − SSIM)` ([`kiln_kernels::cpu::loss`]), computed with its gradient on the
/// renderer's device (fused; no burn tensors for the image or the SSIM maps).
///
/// Same parameter tensors and view as [`rasterize`]; `target` holds the ground truth, its
/// per-pixel weights and λ ([`LossTarget`]). Source of the loss: Kerbl et al. 2023 eq. 7.
///
/// # Errors
/// As [`rasterize`]; [`crate::Error::Kernel`] when `target.image` is not `[H, W, 3]` or
/// `target.weights` not `[H, W]`.
pub fn render_loss(
    splats: GaussianLeaves,
    view: &RenderView<'_>,
    target: &LossTarget<'_>,
) -> crate::Result<RenderLossOutput> {
    let device = splats.means.device();
    let params = Params::new(splats);
    let mut saved = params.render(view)?;
    let clock = std::time::Instant::now();
    let (h, w) = (view.camera.height as usize, view.camera.width as usize);
    let loss = view.renderer.photometric_loss(
        &saved.forward.image,
        target.image,
        target.weights,
        h,
        w,
        target.lambda_dssim,
    )?;
    let loss_ms = clock.elapsed().as_secs_f64() * 1e3;
    saved.loss_grad_image = Some(loss.grad_image);
    let (side_channel, timings) = (saved.side_channel.clone(), saved.forward.timings);
    let radii = saved.forward.radii.clone();
    let value =
        Tensor::<InnerBackend, 1>::from_data(TensorData::new(vec![loss.loss as f32], [1]), &device)
            .into_primitive()
            .tensor();
    let out = params.finish(saved, value);
    Ok(RenderLossOutput {
        loss: Tensor::from_primitive(TensorPrimitive::Float(out)),
        loss_value: loss.loss,
        radii,
        side_channel,
        timings,
        loss_ms,
    })
}

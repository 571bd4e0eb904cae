//! Photometric loss: (1 − λ)·L1 + λ·(1 − SSIM), written with burn tensor ops so autodiff
//! differentiates it on any backend.
//!
//! Training now takes the loss through the fused op [`super::op::render_loss`], which computes it
//! and its gradient on the rasterizer's device (`kiln_kernels::cpu::loss`, `cuda/loss.cu`); this
//! burn version stays as the independent reference those are tested against, and [`ssim`] is the
//! evaluation metric of `eval.rs`.
//!
//! Sources: Kerbl et al. 2023 §7 (λ = 0.2); Wang, Bovik, Sheikh, Simoncelli, "Image Quality
//! Assessment: From Error Visibility to Structural Similarity", IEEE TIP 2004 (SSIM with an 11×11
//! Gaussian window, σ = 1.5, C1 = (0.01·L)², C2 = (0.03·L)², L = 1); INRIA's `utils/loss_utils.py`
//! `ssim` (zero padding of window/2, mean of the SSIM map over pixels and channels).
//!
//! The 2D Gaussian window is separable, so SSIM runs two depthwise 1D convolutions (1×11 then 11×1)
//! over the five stacked statistics images (x, y, x², y², xy); with zero padding this equals the
//! full 11×11 convolution exactly.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, FloatTensor};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

/// Side of the SSIM window in pixels (Wang et al. 2004).
pub const SSIM_WINDOW: usize = 11;
/// Standard deviation of the SSIM Gaussian window in pixels (Wang et al. 2004).
pub const SSIM_SIGMA: f32 = 1.5;
/// SSIM stabiliser C1 = (K1·L)², K1 = 0.01, dynamic range L = 1.
pub const SSIM_C1: f32 = 0.01 * 0.01;
/// SSIM stabiliser C2 = (K2·L)², K2 = 0.03, dynamic range L = 1.
pub const SSIM_C2: f32 = 0.03 * 0.03;

/// The normalised 1D Gaussian window `[SSIM_WINDOW]` (sums to 1).
pub fn gaussian_window_1d() -> Vec<f32> {
    let half = (SSIM_WINDOW / 2) as f32;
    let w: Vec<f32> = (0..SSIM_WINDOW)
        .map(|i| {
            let x = i as f32 - half;
            (-(x * x) / (2.0 * SSIM_SIGMA * SSIM_SIGMA)).exp()
        })
        .collect();
    let sum: f32 = w.iter().sum();
    w.into_iter().map(|v| v / sum).collect()
}

/// Backends that can blur with the SSIM window. The blur is a linear, self-adjoint map, so its
/// autodiff backward is the same blur applied to the incoming gradient (one custom op,
/// [`Autodiff`] impl below) instead of burn's generic convolution backward, which on `Flex` costs
/// ~8× the forward for these depthwise 1D kernels.
pub trait BlurBackend: Backend {
    /// Separable Gaussian blur ([`SSIM_WINDOW`], σ = [`SSIM_SIGMA`]) of `x` `[1, C, H, W]`, zero
    /// padding, output `[1, C, H, W]`.
    fn ssim_blur(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// The blur itself: a 1×11 then an 11×1 depthwise convolution (burn's depthwise fast path).
fn blur_tensor<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let [_, c, _, _] = x.dims();
    let device = x.device();
    let g = gaussian_window_1d();
    let weight_h = Tensor::<B, 4>::from_data(
        TensorData::new(g.repeat(c), [c, 1, 1, SSIM_WINDOW]),
        &device,
    );
    let weight_v = Tensor::<B, 4>::from_data(
        TensorData::new(g.repeat(c), [c, 1, SSIM_WINDOW, 1]),
        &device,
    );
    let pad = SSIM_WINDOW / 2;
    let x = conv2d(
        x,
        weight_h,
        None,
        ConvOptions::new([1, 1], [0, pad], [1, 1], c),
    );
    conv2d(
        x,
        weight_v,
        None,
        ConvOptions::new([1, 1], [pad, 0], [1, 1], c),
    )
}

fn blur_primitive<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    blur_tensor::<B>(Tensor::from_primitive(TensorPrimitive::Float(x)))
        .into_primitive()
        .tensor()
}

impl BlurBackend for Flex {
    fn ssim_blur(x: FloatTensor<Self>) -> FloatTensor<Self> {
        blur_primitive::<Self>(x)
    }
}

#[derive(Debug)]
struct BlurBackward;

impl<B: Backend> Backward<B, 1> for BlurBackward {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [parent] = ops.parents;
        if let Some(parent) = parent {
            // Zero-padded correlation with a symmetric separable kernel is a symmetric matrix:
            // the adjoint of the blur is the blur.
            grads.register::<B>(parent.id, blur_primitive::<B>(grad));
        }
    }
}

impl<B: Backend, C: CheckpointStrategy> BlurBackend for Autodiff<B, C> {
    fn ssim_blur(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let out = blur_primitive::<B>(x.primitive.clone());
        <BlurBackward as Backward<B, 1>>::prepare::<C>(BlurBackward, [x.node.clone()])
            .compute_bound()
            .stateless(out)
    }
}

/// Mean structural similarity of two images.
///
/// - `a`, `b`: `[H, W, 3]` linear RGB, nominally in [0, 1] (the constants assume L = 1).
///
/// Returns a one-element tensor: the mean of the SSIM map over H × W × 3 (1.0 for identical
/// images). Zero padding at the border, as INRIA's `ssim`. Differentiable in both inputs.
///
/// # Panics
/// When `a` and `b` differ in shape (burn's shape check).
pub fn ssim<B: BlurBackend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 1> {
    let [h, w, c] = a.dims();
    // [H, W, C] → [1, C, H, W]
    let x = a.permute([2, 0, 1]).unsqueeze::<4>();
    let y = b.permute([2, 0, 1]).unsqueeze::<4>();
    // Stack the five statistics so one blur handles them all.
    let stats = Tensor::cat(
        vec![
            x.clone(),
            y.clone(),
            x.clone() * x.clone(),
            y.clone() * y.clone(),
            x * y,
        ],
        1,
    );
    let blurred: Tensor<B, 4> = Tensor::from_primitive(TensorPrimitive::Float(B::ssim_blur(
        stats.into_primitive().tensor(),
    )));
    let part = |i: usize| {
        blurred
            .clone()
            .slice([0..1, i * c..(i + 1) * c, 0..h, 0..w])
    };
    let (mu_x, mu_y, e_xx, e_yy, e_xy) = (part(0), part(1), part(2), part(3), part(4));
    let mu_xx = mu_x.clone() * mu_x.clone();
    let mu_yy = mu_y.clone() * mu_y.clone();
    let mu_xy = mu_x * mu_y;
    let sigma_xx = e_xx - mu_xx.clone();
    let sigma_yy = e_yy - mu_yy.clone();
    let sigma_xy = e_xy - mu_xy.clone();
    let num = (mu_xy.mul_scalar(2.0).add_scalar(SSIM_C1))
        * (sigma_xy.mul_scalar(2.0).add_scalar(SSIM_C2));
    let den = (mu_xx + mu_yy).add_scalar(SSIM_C1) * (sigma_xx + sigma_yy).add_scalar(SSIM_C2);
    (num / den).mean()
}

/// Mean absolute error of two same-shaped images; a one-element tensor.
pub fn l1<B: Backend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> Tensor<B, 1> {
    (a - b).abs().mean()
}

/// The training loss (1 − λ)·L1 + λ·(1 − SSIM) of a render against its ground truth.
///
/// - `render`, `target`: `[H, W, 3]` linear RGB; `target` in [0, 1].
/// - `lambda_dssim`: λ in [0, 1] (INRIA 0.2).
///
/// Returns a one-element tensor, differentiable in `render`. Source: Kerbl et al. 2023 eq. 7.
pub fn photometric_loss<B: BlurBackend>(
    render: Tensor<B, 3>,
    target: Tensor<B, 3>,
    lambda_dssim: f32,
) -> Tensor<B, 1> {
    let l1 = l1(render.clone(), target.clone());
    if lambda_dssim == 0.0 {
        return l1;
    }
    let dssim = ssim(render, target).neg().add_scalar(1.0);
    l1.mul_scalar(1.0 - lambda_dssim) + dssim.mul_scalar(lambda_dssim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::train::op::{InnerBackend, TrainBackend};

    type B = InnerBackend;

    fn image(h: usize, w: usize, f: impl Fn(usize, usize, usize) -> f32) -> Vec<f32> {
        let mut v = Vec::with_capacity(h * w * 3);
        for y in 0..h {
            for x in 0..w {
                for c in 0..3 {
                    v.push(f(y, x, c));
                }
            }
        }
        v
    }

    fn tensor(h: usize, w: usize, v: Vec<f32>) -> Tensor<B, 3> {
        Tensor::from_data(TensorData::new(v, [h, w, 3]), &Default::default())
    }

    fn scalar(t: Tensor<B, 1>) -> f32 {
        t.into_scalar()
    }

    #[test]
    fn window_is_normalised_and_symmetric() {
        let g = gaussian_window_1d();
        assert!((g.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((g[0] - g[10]).abs() < 1e-9);
        assert!(g[5] > g[4]);
    }

    #[test]
    fn ssim_of_identical_images_is_one() {
        let v = image(20, 17, |y, x, c| ((y * 7 + x * 3 + c) % 11) as f32 / 11.0);
        let s = scalar(ssim(tensor(20, 17, v.clone()), tensor(20, 17, v)));
        assert!((s - 1.0).abs() < 1e-5, "ssim {s}");
    }

    /// For constant images a and b the blurred statistics are known in closed form: with zero
    /// padding, μ_x = a·W(p), E[x²] = a²·W(p) where W(p) is the window mass inside the image at
    /// pixel p. In the interior (W = 1) σ terms vanish and SSIM = (2ab + C1)/(a² + b² + C1).
    /// Near the border, σ_x² = a²(W − W²) etc. We compare the full mean against this hand formula.
    #[test]
    fn ssim_of_a_constant_shift_matches_the_closed_form() {
        let (h, w) = (24usize, 24usize);
        let (a, b) = (0.5f32, 0.6f32);
        let s = scalar(ssim(
            tensor(h, w, vec![a; h * w * 3]),
            tensor(h, w, vec![b; h * w * 3]),
        ));
        let g = gaussian_window_1d();
        let mass_1d = |i: usize, n: usize| -> f64 {
            (0..SSIM_WINDOW)
                .filter(|&k| {
                    let j = i as isize + k as isize - (SSIM_WINDOW / 2) as isize;
                    j >= 0 && (j as usize) < n
                })
                .map(|k| g[k] as f64)
                .sum()
        };
        let (a, b, c1, c2) = (a as f64, b as f64, SSIM_C1 as f64, SSIM_C2 as f64);
        let mut total = 0.0;
        for y in 0..h {
            for x in 0..w {
                let m = mass_1d(y, h) * mass_1d(x, w);
                let (mx, my) = (a * m, b * m);
                let sxx = a * a * m - mx * mx;
                let syy = b * b * m - my * my;
                let sxy = a * b * m - mx * my;
                total += ((2.0 * mx * my + c1) * (2.0 * sxy + c2))
                    / ((mx * mx + my * my + c1) * (sxx + syy + c2));
            }
        }
        let expected = total / (h * w) as f64;
        // Interior value, for orientation: (2·0.3 + 1e-4)/(0.61 + 1e-4) ≈ 0.98363.
        assert!(
            (s as f64 - expected).abs() < 1e-4,
            "ssim {s} vs hand {expected}"
        );
        assert!(s < 0.99 && s > 0.95);
    }

    /// The custom blur backward must equal burn's own autodiff of the same convolutions.
    #[test]
    fn blur_op_gradient_matches_conv_autodiff() {
        let (c, h, w) = (2usize, 9usize, 13usize);
        let x: Vec<f32> = (0..c * h * w)
            .map(|i| ((i * 37) % 17) as f32 / 17.0)
            .collect();
        let wts: Vec<f32> = (0..c * h * w)
            .map(|i| ((i * 11) % 7) as f32 - 3.0)
            .collect();
        let dev = Default::default();
        let grad_of = |use_op: bool| {
            let xt: Tensor<TrainBackend, 4> =
                Tensor::from_data(TensorData::new(x.clone(), [1, c, h, w]), &dev).require_grad();
            let wt: Tensor<TrainBackend, 4> =
                Tensor::from_data(TensorData::new(wts.clone(), [1, c, h, w]), &dev);
            let y = if use_op {
                Tensor::from_primitive(TensorPrimitive::Float(TrainBackend::ssim_blur(
                    xt.clone().into_primitive().tensor(),
                )))
            } else {
                blur_tensor(xt.clone())
            };
            let grads = (y * wt).sum().backward();
            crate::stages::train::op::tensor_to_vec(xt.grad(&grads).unwrap())
        };
        let (a, b) = (grad_of(true), grad_of(false));
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() < 1e-5, "{u} vs {v}");
        }
    }

    #[test]
    fn l1_is_the_mean_absolute_difference() {
        let s = scalar(l1(tensor(2, 2, vec![0.2; 12]), tensor(2, 2, vec![0.5; 12])));
        assert!((s - 0.3).abs() < 1e-6);
    }

    #[test]
    fn loss_gradient_flows_to_the_render() {
        let (h, w) = (12usize, 12usize);
        let target = image(h, w, |y, x, c| ((y + 2 * x + c) % 5) as f32 / 5.0);
        let render: Tensor<TrainBackend, 3> = Tensor::from_data(
            TensorData::new(vec![0.5f32; h * w * 3], [h, w, 3]),
            &Default::default(),
        )
        .require_grad();
        let target: Tensor<TrainBackend, 3> =
            Tensor::from_data(TensorData::new(target, [h, w, 3]), &Default::default());
        let loss = photometric_loss(render.clone(), target, 0.2);
        let grads = loss.backward();
        let g = render.grad(&grads).expect("render has a gradient");
        let g = crate::stages::train::op::tensor_to_vec(g);
        assert_eq!(g.len(), h * w * 3);
        assert!(g.iter().all(|v| v.is_finite()));
        assert!(g.iter().any(|v| v.abs() > 0.0));
    }

    /// The fused loss the trainer uses (kiln_kernels::cpu::loss, twin of cuda/loss.cu) equals this
    /// burn loss — value and gradient with respect to the render — on a non-trivial pair.
    #[test]
    fn fused_kernel_loss_matches_the_burn_loss_and_its_autodiff_gradient() {
        let (h, w) = (19usize, 23usize);
        let target = image(h, w, |y, x, c| ((y * 5 + 2 * x + 3 * c) % 13) as f32 / 13.0);
        let render = image(h, w, |y, x, c| {
            ((y * 3 + x * 7 + c) % 17) as f32 / 17.0 + 0.01
        });
        let fused = kiln_kernels::cpu::loss::photometric_loss(&render, &target, h, w, 0.2);
        let r: Tensor<TrainBackend, 3> = Tensor::from_data(
            TensorData::new(render.clone(), [h, w, 3]),
            &Default::default(),
        )
        .require_grad();
        let t: Tensor<TrainBackend, 3> =
            Tensor::from_data(TensorData::new(target, [h, w, 3]), &Default::default());
        let loss = photometric_loss(r.clone(), t, 0.2);
        let value = f64::from(loss.clone().into_scalar());
        let grads = loss.backward();
        let g = crate::stages::train::op::tensor_to_vec(r.grad(&grads).unwrap());
        assert!(
            (fused.loss - value).abs() < 1e-6,
            "fused {} vs burn {value}",
            fused.loss
        );
        let max = g.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in fused.grad_image.iter().zip(&g).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * max,
                "element {i}: fused {a} vs burn {b}"
            );
        }
    }
}

//! Adam on burn tensors, one state per parameter group, with the row surgery densification needs
//! (keep rows, append zero-moment rows).
//!
//! Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (Algorithm 1, with
//! bias correction); hyper-parameters β1 0.9, β2 0.999, ε 1e-15 from INRIA 3DGS
//! (`scene/gaussian_model.py`, `torch.optim.Adam(..., eps=1e-15)`).
//!
//! Written by hand (as Brush's `adam_scaled.rs` is) rather than with `burn::optim::Adam` because
//! densification must edit the moments row by row: kept rows keep their moments, cloned and split
//! rows start from zero, pruned rows disappear.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// Adam hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamConfig {
    /// Decay of the first moment (INRIA 0.9).
    pub beta1: f64,
    /// Decay of the second moment (INRIA 0.999).
    pub beta2: f64,
    /// Denominator guard (INRIA 1e-15).
    pub epsilon: f64,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-15,
        }
    }
}

/// Adam moments of one parameter group of rank `D`; the first axis is the splat axis N.
#[derive(Debug, Clone)]
pub struct AdamState<B: Backend, const D: usize> {
    /// First moment, same shape as the parameter.
    pub m: Tensor<B, D>,
    /// Second moment, same shape as the parameter.
    pub v: Tensor<B, D>,
    /// Steps taken by this group (for bias correction); not reset by densification (as torch).
    pub t: u32,
}

impl<B: Backend, const D: usize> AdamState<B, D> {
    /// Zero moments for a parameter shaped like `param`.
    pub fn zeros_like(param: &Tensor<B, D>) -> Self {
        Self {
            m: param.zeros_like(),
            v: param.zeros_like(),
            t: 0,
        }
    }

    /// One Adam step: returns `param − lr·scale·m̂/(√v̂ + ε)`.
    ///
    /// - `param`, `grad`: same shape `[N, ...]`.
    /// - `lr`: learning rate in parameter units per step.
    /// - `lr_scale`: optional per-element multiplier broadcastable to the parameter (e.g. `[1, K, 1]`
    ///   for SH bands); `None` means 1.
    ///
    /// The first step moves every element with a non-zero gradient by ≈ −lr·sign(grad).
    pub fn step(
        &mut self,
        param: Tensor<B, D>,
        grad: Tensor<B, D>,
        lr: f64,
        lr_scale: Option<&Tensor<B, D>>,
        config: &AdamConfig,
    ) -> Tensor<B, D> {
        self.t += 1;
        let (b1, b2) = (config.beta1, config.beta2);
        self.m = self.m.clone().mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1);
        self.v = self.v.clone().mul_scalar(b2) + (grad.clone() * grad).mul_scalar(1.0 - b2);
        let bc1 = 1.0 - b1.powi(self.t as i32);
        let bc2 = 1.0 - b2.powi(self.t as i32);
        // m̂/(√v̂ + ε) = (m/bc1) / (√v/√bc2 + ε)
        let denom = self
            .v
            .clone()
            .sqrt()
            .div_scalar(bc2.sqrt())
            .add_scalar(config.epsilon);
        let mut update = (self.m.clone() / denom).mul_scalar(lr / bc1);
        if let Some(scale) = lr_scale {
            update = update * scale.clone();
        }
        param - update
    }

    /// Rebuild the moments after densification: rows `keep` (in that order) keep their moments,
    /// then `appended` rows with zero moments follow.
    pub fn remap(&mut self, keep: &Tensor<B, 1, Int>, appended: usize) {
        self.m = remap_rows(self.m.clone(), keep, appended);
        self.v = remap_rows(self.v.clone(), keep, appended);
    }

    /// Zero the moments of every row (used when opacities are reset, as INRIA does).
    pub fn reset(&mut self) {
        self.m = self.m.zeros_like();
        self.v = self.v.zeros_like();
    }
}

/// `cat([t[keep], zeros(appended, ...)])` along the splat axis.
fn remap_rows<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    keep: &Tensor<B, 1, Int>,
    appended: usize,
) -> Tensor<B, D> {
    let mut dims = t.dims();
    let kept = t.clone().select(0, keep.clone());
    if appended == 0 {
        return kept;
    }
    dims[0] = appended;
    let zeros = Tensor::<B, D>::zeros(dims, &t.device());
    Tensor::cat(vec![kept, zeros], 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::train::op::{InnerBackend, tensor_to_vec};
    use burn::tensor::TensorData;

    type B = InnerBackend;

    #[test]
    fn first_step_moves_by_minus_lr_times_sign_of_gradient() {
        // f(x) = Σ (x − c)², ∇ = 2(x − c). First Adam step: m̂ = g, v̂ = g², update = lr·g/|g|.
        let x0 = vec![1.0f32, -2.0, 0.5, 3.0];
        let c = [0.0f32, 0.0, 1.0, 3.0];
        let grad: Vec<f32> = x0.iter().zip(c).map(|(x, c)| 2.0 * (x - c)).collect();
        let dev = Default::default();
        let x = Tensor::<B, 1>::from_data(TensorData::new(x0.clone(), [4]), &dev);
        let g = Tensor::<B, 1>::from_data(TensorData::new(grad.clone(), [4]), &dev);
        let mut st = AdamState::zeros_like(&x);
        let lr = 0.1;
        let x1 = tensor_to_vec(st.step(x, g, lr, None, &AdamConfig::default()));
        for i in 0..4 {
            let expected = x0[i] - lr as f32 * grad[i].signum() * (grad[i] != 0.0) as i32 as f32;
            assert!(
                (x1[i] - expected).abs() < 1e-6,
                "{i}: {} vs {expected}",
                x1[i]
            );
        }
    }

    #[test]
    fn adam_minimises_a_quadratic() {
        let dev = Default::default();
        let c = Tensor::<B, 1>::from_data(TensorData::new(vec![0.3f32, -0.7], [2]), &dev);
        let mut x = Tensor::<B, 1>::zeros([2], &dev);
        let mut st = AdamState::zeros_like(&x);
        for _ in 0..500 {
            let g = (x.clone() - c.clone()).mul_scalar(2.0);
            x = st.step(x, g, 0.01, None, &AdamConfig::default());
        }
        let x = tensor_to_vec(x);
        assert!(
            (x[0] - 0.3).abs() < 1e-2 && (x[1] + 0.7).abs() < 1e-2,
            "{x:?}"
        );
    }

    #[test]
    fn remap_keeps_moments_of_kept_rows_and_zeroes_new_rows() {
        let dev = Default::default();
        let p = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32; 6], [3, 2]), &dev);
        let mut st = AdamState::zeros_like(&p);
        st.m = Tensor::from_data(
            TensorData::new(vec![1.0f32, 1.0, 2.0, 2.0, 3.0, 3.0], [3, 2]),
            &dev,
        );
        st.v = st.m.clone();
        let keep = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![2i32, 0], [2]), &dev);
        st.remap(&keep, 2);
        assert_eq!(st.m.dims(), [4, 2]);
        assert_eq!(
            tensor_to_vec(st.m),
            vec![3.0, 3.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
        );
    }
}

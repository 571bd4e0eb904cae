//! Adam per parameter group: the moments on the host, the step itself fused in one kernel on the
//! renderer's device ([`kiln_kernels::cpu::adam`] on the CPU, `cuda/adam.cu` on a GPU), and the row
//! surgery densification needs (keep rows, append zero-moment rows).
//!
//! Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (Algorithm 1, with
//! bias correction); hyper-parameters β1 0.9, β2 0.999, ε 1e-15 from INRIA 3DGS
//! (`scene/gaussian_model.py`, `torch.optim.Adam(..., eps=1e-15)`).
//!
//! Written by hand (as Brush's `adam_scaled.rs` is) rather than with `burn::optim::Adam` because
//! densification must edit the moments row by row: kept rows keep their moments, cloned and split
//! rows start from zero, pruned rows disappear. One fused pass per group replaces burn's ten
//! tensor ops (each allocating an `[N, …]` temporary).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use kiln_kernels::Renderer;
use kiln_kernels::cpu::adam::{ActivationL1, AdamStep, LrScale};

use super::op::tensor_to_vec;

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

/// How one group moves in one step besides its gradient ([`AdamState::step_regularised`]).
#[derive(Debug, Clone, Copy)]
pub struct GroupUpdate<'a> {
    /// Learning rate, parameter units per step.
    pub lr: f64,
    /// Optional per-column multiplier ([`LrScale`]); `None` means 1.
    pub lr_scale: Option<LrScale<'a>>,
    /// Penalty whose gradient is added to the group's gradient before the step
    /// ([`ActivationL1::None`]: none).
    pub regulariser: ActivationL1,
}

/// Adam moments of one parameter group whose rows (the splat axis N) hold `row` values each.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamState {
    /// First moment, `[N · row]`, laid out as the parameter.
    pub m: Vec<f32>,
    /// Second moment, `[N · row]`.
    pub v: Vec<f32>,
    /// Values per row (3 for means, K·3 for SH coefficients, …).
    pub row: usize,
    /// Steps taken by this group (for bias correction); not reset by densification (as torch).
    pub t: u32,
}

impl AdamState {
    /// Zero moments for a parameter shaped like `param` (`[N, …]`).
    pub fn zeros_like<B: Backend, const D: usize>(param: &Tensor<B, D>) -> Self {
        let dims = param.dims();
        let len: usize = dims.iter().product();
        Self {
            m: vec![0.0; len],
            v: vec![0.0; len],
            row: dims[1..].iter().product::<usize>().max(1),
            t: 0,
        }
    }

    /// One Adam step on `renderer`'s device: returns `param − lr·s·m̂/(√v̂ + ε)`.
    ///
    /// - `param`, `grad`: same shape `[N, ...]`.
    /// - `lr`: learning rate in parameter units per step.
    /// - `lr_scale`: optional per-column multiplier ([`LrScale`]); `None` means 1.
    ///
    /// The first step moves every element with a non-zero gradient by ≈ −lr·sign(grad).
    ///
    /// # Errors
    /// [`kiln_kernels::Error`] when the shapes disagree with the moments (a bug upstream) or the
    /// device fails.
    pub fn step<B: Backend, const D: usize>(
        &mut self,
        param: Tensor<B, D>,
        grad: Tensor<B, D>,
        lr: f64,
        lr_scale: Option<LrScale<'_>>,
        config: &AdamConfig,
        renderer: &Renderer,
    ) -> Result<Tensor<B, D>, kiln_kernels::Error> {
        let update = GroupUpdate {
            lr,
            lr_scale,
            regulariser: ActivationL1::None,
        };
        self.step_regularised(param, grad, update, config, renderer)
    }

    /// [`AdamState::step`] with `update.regulariser`'s gradient term added to `grad` first (the
    /// MCMC recipe's opacity and scale penalties), at `update.lr` scaled by `update.lr_scale`.
    ///
    /// # Errors
    /// As [`AdamState::step`].
    pub fn step_regularised<B: Backend, const D: usize>(
        &mut self,
        param: Tensor<B, D>,
        grad: Tensor<B, D>,
        update: GroupUpdate<'_>,
        config: &AdamConfig,
        renderer: &Renderer,
    ) -> Result<Tensor<B, D>, kiln_kernels::Error> {
        self.t += 1;
        let hyper = AdamStep::new(
            update.lr,
            self.t,
            config.beta1,
            config.beta2,
            config.epsilon,
        )?
        .with_regulariser(update.regulariser);
        let dims = param.dims();
        let device = param.device();
        let mut p = tensor_to_vec(param);
        let g = tensor_to_vec(grad);
        renderer.adam_step(
            &mut p,
            &g,
            &mut self.m,
            &mut self.v,
            update.lr_scale,
            &hyper,
        )?;
        Ok(Tensor::from_data(TensorData::new(p, dims), &device))
    }

    /// Rebuild the moments after densification: rows `keep` (in that order) keep their moments,
    /// then `appended` rows with zero moments follow.
    pub fn remap(&mut self, keep: &[usize], appended: usize) {
        let row = self.row;
        let pick = |x: &[f32]| {
            let mut out = Vec::with_capacity((keep.len() + appended) * row);
            for &i in keep {
                out.extend_from_slice(&x[i * row..(i + 1) * row]);
            }
            out.resize((keep.len() + appended) * row, 0.0);
            out
        };
        self.m = pick(&self.m);
        self.v = pick(&self.v);
    }

    /// Zero the moments of every row (used when opacities are reset, as INRIA does).
    pub fn reset(&mut self) {
        self.m.fill(0.0);
        self.v.fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::train::op::InnerBackend;

    type B = InnerBackend;

    fn tensor(v: Vec<f32>) -> Tensor<B, 1> {
        let n = v.len();
        Tensor::from_data(TensorData::new(v, [n]), &Default::default())
    }

    #[test]
    fn first_step_moves_by_minus_lr_times_sign_of_gradient() {
        // f(x) = Σ (x − c)², ∇ = 2(x − c). First Adam step: m̂ = g, v̂ = g², update = lr·g/|g|.
        let x0 = vec![1.0f32, -2.0, 0.5, 3.0];
        let c = [0.0f32, 0.0, 1.0, 3.0];
        let grad: Vec<f32> = x0.iter().zip(c).map(|(x, c)| 2.0 * (x - c)).collect();
        let x = tensor(x0.clone());
        let mut st = AdamState::zeros_like(&x);
        let lr = 0.1;
        let x1 = st
            .step(
                x,
                tensor(grad.clone()),
                lr,
                None,
                &AdamConfig::default(),
                &Renderer::Cpu,
            )
            .unwrap();
        let x1 = tensor_to_vec(x1);
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
        let c = tensor(vec![0.3f32, -0.7]);
        let mut x = Tensor::<B, 1>::zeros([2], &Default::default());
        let mut st = AdamState::zeros_like(&x);
        for _ in 0..500 {
            let g = (x.clone() - c.clone()).mul_scalar(2.0);
            x = st
                .step(x, g, 0.01, None, &AdamConfig::default(), &Renderer::Cpu)
                .unwrap();
        }
        let x = tensor_to_vec(x);
        assert!(
            (x[0] - 0.3).abs() < 1e-2 && (x[1] + 0.7).abs() < 1e-2,
            "{x:?}"
        );
    }

    #[test]
    fn remap_keeps_moments_of_kept_rows_and_zeroes_new_rows() {
        let p = Tensor::<B, 2>::from_data(
            TensorData::new(vec![1.0f32; 6], [3, 2]),
            &Default::default(),
        );
        let mut st = AdamState::zeros_like(&p);
        assert_eq!(st.row, 2);
        st.m = vec![1.0f32, 1.0, 2.0, 2.0, 3.0, 3.0];
        st.v = st.m.clone();
        st.remap(&[2, 0], 2);
        assert_eq!(st.m, vec![3.0, 3.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(st.v, st.m);
    }

    #[test]
    fn a_step_with_the_wrong_gradient_shape_is_an_error_not_a_panic() {
        let mut st = AdamState::zeros_like(&tensor(vec![0.0; 3]));
        let e = st
            .step(
                tensor(vec![0.0; 3]),
                tensor(vec![0.0; 2]),
                0.1,
                None,
                &AdamConfig::default(),
                &Renderer::Cpu,
            )
            .unwrap_err();
        assert!(e.to_string().contains("adam grad"), "{e}");
    }
}

//! One fused Adam step over a parameter group: the CPU twin of `cuda/adam.cu`.
//!
//! Source: Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1 (with
//! bias correction, ε added to √v̂). Hyper-parameter defaults are INRIA 3DGS's
//! (`scene/gaussian_model.py`: `torch.optim.Adam(..., eps=1e-15)`, β = (0.9, 0.999)).
//!
//! Per element, in this order (the kernel's, so the two agree to the rounding of fused
//! multiply-adds):
//! `m ← m·β1 + g·(1 − β1)`, `v ← v·β2 + g²·(1 − β2)`,
//! `p ← p − (step·(m / (√v / √(1 − β2^t) + ε)))·s`, `step = lr / (1 − β1^t)`, `s` the optional
//! per-column multiplier ([`LrScale`]). Elementwise, so the result does not depend on the rayon
//! thread count.
//!
//! An optional [`ActivationL1`] penalty on the activated parameter is added to the gradient first
//! (`g ← g + w·f'(p)`), which is how the MCMC recipe's opacity and scale regularisers
//! (Kheradmand et al. 2024, §4.3; gsplat `opacity_reg`, `scale_reg`) reach the moments without an
//! extra pass over the group.

use rayon::prelude::*;

use crate::Error;

/// Elements per rayon task: large enough that scheduling costs little next to the arithmetic.
const CHUNK: usize = 1 << 14;

/// An L1 penalty `w · mean(f(p))` on a group's activated values, as a gradient term `w·f'(p)`
/// added before the moments update. The weight already includes the `1 / count` of the mean.
///
/// Source: Kheradmand et al., "3D Gaussian Splatting as Markov Chain Monte Carlo", NeurIPS 2024,
/// §4.3 (L1 on opacities σ(x) and on scales exp(x)); gsplat `simple_trainer.py` `opacity_reg`,
/// `scale_reg`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ActivationL1 {
    /// No penalty.
    #[default]
    None,
    /// `f = sigmoid` (opacities stored as logits): `g += w·σ(p)·(1 − σ(p))`.
    Sigmoid(f32),
    /// `f = exp` (scales stored as logs): `g += w·exp(p)`.
    Exp(f32),
}

impl ActivationL1 {
    /// The kernel's encoding: `(kind, weight)` with kind 0 none, 1 sigmoid, 2 exp.
    pub fn kind_and_weight(self) -> (u32, f32) {
        match self {
            Self::None => (0, 0.0),
            Self::Sigmoid(w) => (1, w),
            Self::Exp(w) => (2, w),
        }
    }

    /// The gradient term at parameter value `p` (`cuda/adam.cu` computes the same, in this order).
    #[inline(always)]
    pub fn grad(self, p: f32) -> f32 {
        match self {
            Self::None => 0.0,
            Self::Sigmoid(w) => {
                let s = 1.0 / (1.0 + (-p).exp());
                w * (s * (1.0 - s))
            }
            Self::Exp(w) => w * p.exp(),
        }
    }
}

/// The scalars of one Adam step, as the kernel receives them (`f32`, derived in `f64`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// `lr / (1 − β1^t)`: learning rate (parameter units per step) with the first-moment bias
    /// correction folded in.
    pub step: f32,
    /// β1, decay of the first moment.
    pub beta1: f32,
    /// `1 − β1`, rounded from `f64`.
    pub one_minus_beta1: f32,
    /// β2, decay of the second moment.
    pub beta2: f32,
    /// `1 − β2`, rounded from `f64`.
    pub one_minus_beta2: f32,
    /// `√(1 − β2^t)`: the second-moment bias correction.
    pub sqrt_bc2: f32,
    /// ε added to the bias-corrected √v (INRIA: 1e-15).
    pub epsilon: f32,
    /// Penalty added to the gradient first ([`ActivationL1::None`] from [`AdamStep::new`]).
    pub regulariser: ActivationL1,
}

impl AdamStep {
    /// The scalars for step `t ≥ 1` (1-based, as in Algorithm 1) with learning rate `lr`.
    ///
    /// # Errors
    /// [`Error::Invalid`] when `t` is 0, `lr` is negative or non-finite, a β is outside `[0, 1)` or
    /// ε is not positive and finite.
    pub fn new(lr: f64, t: u32, beta1: f64, beta2: f64, epsilon: f64) -> Result<Self, Error> {
        let invalid = |field, reason: String| Err(Error::Invalid { field, reason });
        if t == 0 {
            return invalid("adam.t", "steps count from 1 (Algorithm 1's t)".into());
        }
        if !(lr.is_finite() && lr >= 0.0) {
            return invalid("adam.lr", format!("{lr}: must be finite and ≥ 0"));
        }
        for (field, beta) in [("adam.beta1", beta1), ("adam.beta2", beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return invalid(field, format!("{beta}: must be in [0, 1)"));
            }
        }
        if !(epsilon.is_finite() && epsilon > 0.0) {
            return invalid("adam.epsilon", format!("{epsilon}: must be finite and > 0"));
        }
        let t = t.min(i32::MAX as u32) as i32;
        Ok(Self {
            step: (lr / (1.0 - beta1.powi(t))) as f32,
            beta1: beta1 as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            sqrt_bc2: (1.0 - beta2.powi(t)).sqrt() as f32,
            epsilon: epsilon as f32,
            regulariser: ActivationL1::None,
        })
    }

    /// The same step with `regulariser` added to the gradient.
    pub fn with_regulariser(self, regulariser: ActivationL1) -> Self {
        Self {
            regulariser,
            ..self
        }
    }
}

/// A per-column learning-rate multiplier: element `i` is scaled by
/// `values[(i / stride) % values.len()]`. For SH coefficients `[N, K, 3]` with one factor per
/// coefficient, `values` has K entries and `stride` is 3.
#[derive(Debug, Clone, Copy)]
pub struct LrScale<'a> {
    /// The factors (non-empty).
    pub values: &'a [f32],
    /// Consecutive elements sharing one factor (≥ 1).
    pub stride: usize,
}

/// One Adam step in place over a parameter group of `n` elements (any shape, flattened).
///
/// - `param`, `grad`, `m` (first moment), `v` (second moment): all `[n]`.
/// - `scale`: optional per-column multiplier; `None` means 1.
///
/// # Errors
/// [`Error::Shape`] when the four slices differ in length; [`Error::Invalid`] for an empty
/// `scale.values` or a zero `scale.stride`.
pub fn adam_step(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    scale: Option<LrScale<'_>>,
    hyper: &AdamStep,
) -> Result<(), Error> {
    check_adam_inputs(
        param.len(),
        grad.len(),
        m.len(),
        v.len(),
        scale.map(|s| (s.values.len(), s.stride)),
    )?;
    let h = *hyper;
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(c, (((p, g), m), v))| {
            let base = c * CHUNK;
            for j in 0..p.len() {
                let gi = g[j] + h.regulariser.grad(p[j]);
                let mi = m[j] * h.beta1 + gi * h.one_minus_beta1;
                let vi = v[j] * h.beta2 + (gi * gi) * h.one_minus_beta2;
                m[j] = mi;
                v[j] = vi;
                let mut update = (mi / (vi.sqrt() / h.sqrt_bc2 + h.epsilon)) * h.step;
                if let Some(s) = scale {
                    update *= s.values[((base + j) / s.stride) % s.values.len()];
                }
                p[j] -= update;
            }
        });
    Ok(())
}

/// The shape checks of [`adam_step`], shared with the GPU entry points: the four lengths, and the
/// scale's `(factors, stride)` when there is one.
pub(crate) fn check_adam_inputs(
    param: usize,
    grad: usize,
    m: usize,
    v: usize,
    scale: Option<(usize, usize)>,
) -> Result<(), Error> {
    for (what, len) in [
        ("adam grad [n]", grad),
        ("adam first moment m [n]", m),
        ("adam second moment v [n]", v),
    ] {
        if len != param {
            return Err(Error::Shape {
                what,
                expected: param,
                found: len,
            });
        }
    }
    if let Some((factors, stride)) = scale
        && (factors == 0 || stride == 0)
    {
        return Err(Error::Invalid {
            field: "adam.lr_scale",
            reason: format!(
                "{factors} factors with stride {stride}: pass at least one factor and a stride ≥ 1"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Algorithm 1 of Kingma & Ba written out in f64, one element at a time, for `steps` steps of
    /// the quadratic f(x) = Σ (x − c)² (∇ = 2(x − c)).
    fn reference(x0: &[f64], c: &[f64], lr: f64, steps: u32, scale: &[f64]) -> Vec<f64> {
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-15f64);
        let mut x = x0.to_vec();
        let mut m = vec![0.0; x.len()];
        let mut v = vec![0.0; x.len()];
        for t in 1..=steps {
            for i in 0..x.len() {
                let g = 2.0 * (x[i] - c[i]);
                m[i] = b1 * m[i] + (1.0 - b1) * g;
                v[i] = b2 * v[i] + (1.0 - b2) * g * g;
                let m_hat = m[i] / (1.0 - b1.powi(t as i32));
                let v_hat = v[i] / (1.0 - b2.powi(t as i32));
                x[i] -= lr * scale[i] * m_hat / (v_hat.sqrt() + eps);
            }
        }
        x
    }

    fn run(x0: &[f32], c: &[f32], lr: f64, steps: u32, scale: Option<LrScale<'_>>) -> Vec<f32> {
        let mut x = x0.to_vec();
        let mut m = vec![0.0f32; x.len()];
        let mut v = vec![0.0f32; x.len()];
        for t in 1..=steps {
            let g: Vec<f32> = x.iter().zip(c).map(|(x, c)| 2.0 * (x - c)).collect();
            let h = AdamStep::new(lr, t, 0.9, 0.999, 1e-15).unwrap();
            adam_step(&mut x, &g, &mut m, &mut v, scale, &h).unwrap();
        }
        x
    }

    #[test]
    fn first_step_moves_each_element_by_lr_against_its_gradient_sign() {
        // m̂ = g and v̂ = g² after one step, so the update is lr·g/|g| (0 where g = 0).
        let x0 = [1.0f32, -2.0, 0.5, 3.0];
        let c = [0.0f32, 0.0, 1.0, 3.0];
        let x1 = run(&x0, &c, 0.1, 1, None);
        let expected = [0.9f32, -1.9, 0.6, 3.0];
        for i in 0..4 {
            assert!((x1[i] - expected[i]).abs() < 1e-6, "{i}: {x1:?}");
        }
    }

    #[test]
    fn matches_algorithm_1_in_f64_over_many_steps_with_a_per_column_scale() {
        // 6 elements as [2, K = 3, 1]-like rows with stride 1: factors 1, 1/20, 1/20 repeat.
        let x0 = [0.3f32, -1.2, 2.5, 0.0, 4.0, -0.7];
        let c = [1.0f32, 1.0, -1.0, 0.5, 0.0, -0.7];
        let factors = [1.0f32, 0.05, 0.05];
        let got = run(
            &x0,
            &c,
            0.05,
            200,
            Some(LrScale {
                values: &factors,
                stride: 1,
            }),
        );
        let scale64: Vec<f64> = (0..6).map(|i| f64::from(factors[i % 3])).collect();
        let x64: Vec<f64> = x0.iter().map(|&x| f64::from(x)).collect();
        let c64: Vec<f64> = c.iter().map(|&x| f64::from(x)).collect();
        let want = reference(&x64, &c64, 0.05, 200, &scale64);
        for i in 0..6 {
            assert!(
                (f64::from(got[i]) - want[i]).abs() < 1e-4,
                "{i}: {} vs {}",
                got[i],
                want[i]
            );
        }
        // The unscaled elements converge; the 1/20 ones have moved at most 200·0.05/20 = 0.5.
        assert!((got[0] - 1.0).abs() < 1e-2, "{got:?}");
        assert!((got[1] + 1.2).abs() <= 0.5 + 1e-5, "{got:?}");
    }

    #[test]
    fn result_does_not_depend_on_the_thread_count() {
        let n = 3 * CHUNK + 17;
        let p0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let g: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        let factors = [1.0f32, 0.05, 0.05, 0.05];
        let h = AdamStep::new(1e-3, 3, 0.9, 0.999, 1e-15).unwrap();
        let go = |threads: usize| {
            let (mut p, mut m, mut v) = (p0.clone(), vec![0.1f32; n], vec![0.2f32; n]);
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    let s = LrScale {
                        values: &factors,
                        stride: 3,
                    };
                    adam_step(&mut p, &g, &mut m, &mut v, Some(s), &h).unwrap()
                });
            (p, m, v)
        };
        assert_eq!(go(1), go(3));
    }

    #[test]
    fn mismatched_lengths_and_bad_hyper_parameters_are_errors() {
        let h = AdamStep::new(0.1, 1, 0.9, 0.999, 1e-15).unwrap();
        let (mut p, mut m, mut v) = (vec![0.0f32; 4], vec![0.0f32; 4], vec![0.0f32; 3]);
        let e = adam_step(&mut p, &[0.0; 4], &mut m, &mut v, None, &h).unwrap_err();
        assert!(e.to_string().contains("second moment v"), "{e}");
        let e = AdamStep::new(0.1, 0, 0.9, 0.999, 1e-15).unwrap_err();
        assert!(e.to_string().contains("adam.t"), "{e}");
        let e = AdamStep::new(0.1, 1, 1.0, 0.999, 1e-15).unwrap_err();
        assert!(e.to_string().contains("adam.beta1"), "{e}");
        let mut v = vec![0.0f32; 4];
        let s = LrScale {
            values: &[],
            stride: 3,
        };
        let e = adam_step(&mut p, &[0.0; 4], &mut m, &mut v, Some(s), &h).unwrap_err();
        assert!(e.to_string().contains("lr_scale"), "{e}");
    }

    #[test]
    fn regulariser_adds_the_derivative_of_the_activated_value() {
        // d/dx σ(x) = σ(1 − σ) = 1/4 at 0; d/dx e^x = 2 at ln 2.
        assert_eq!(ActivationL1::Sigmoid(0.5).grad(0.0), 0.125);
        assert!((ActivationL1::Exp(0.5).grad(2f32.ln()) - 1.0).abs() < 1e-6);
        assert_eq!(ActivationL1::None.grad(3.0), 0.0);
        // With no image gradient the penalty alone drives the first step: −lr·sign(w·f'(p)).
        let mut p = vec![0.0f32, 1.0];
        let (mut m, mut v) = (vec![0.0f32; 2], vec![0.0f32; 2]);
        let h = AdamStep::new(0.1, 1, 0.9, 0.999, 1e-15)
            .unwrap()
            .with_regulariser(ActivationL1::Exp(1e-3));
        adam_step(&mut p, &[0.0, 0.0], &mut m, &mut v, None, &h).unwrap();
        assert!(
            (p[0] + 0.1).abs() < 1e-6 && (p[1] - 0.9).abs() < 1e-6,
            "{p:?}"
        );
        // The first moment holds (1 − β1)·w·e^p.
        assert!((m[0] - 0.1 * 1e-3).abs() < 1e-9);
    }
}

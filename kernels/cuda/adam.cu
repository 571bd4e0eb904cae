// One fused Adam step (Kingma & Ba, ICLR 2015, Algorithm 1, bias-corrected) over one parameter
// group of `n` floats, in place:
//   m ← β1·m + (1 − β1)·g
//   v ← β2·v + (1 − β2)·g²
//   p ← p − (step · (m / (√v / sqrt_bc2 + ε))) · s
// with step = lr / (1 − β1^t) and sqrt_bc2 = √(1 − β2^t) computed on the host (f64, then f32), and
// s = lr_scale[(i / scale_stride) % scale_period] when `lr_scale` is non-null (the SH band
// multiplier of INRIA 3DGS), 1 otherwise. With reg_kind 1 (sigmoid) or 2 (exp) the gradient first
// gains the L1 penalty term of the activated value, g += w·σ(p)(1 − σ(p)) or g += w·exp(p)
// (MCMC's opacity and scale regularisers, Kheradmand et al. 2024 §4.3). The operation order is the CPU twin's
// (kernels/src/cpu/adam.rs) so the two agree to the rounding of fused multiply-adds.
// One thread per element; no reductions, so a step is deterministic.
extern "C" __global__ void kiln_adam_step(float* __restrict__ param, const float* __restrict__ grad,
                                          float* __restrict__ m, float* __restrict__ v, unsigned int n,
                                          const float* __restrict__ lr_scale, unsigned int scale_stride,
                                          unsigned int scale_period, float step, float beta1,
                                          float one_minus_beta1, float beta2, float one_minus_beta2,
                                          float sqrt_bc2, float epsilon, unsigned int reg_kind,
                                          float reg_weight) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = grad[i];
    if (reg_kind == 1u) {
        float s = 1.0f / (1.0f + expf(-param[i]));
        g = g + reg_weight * (s * (1.0f - s));
    } else if (reg_kind == 2u) {
        g = g + reg_weight * expf(param[i]);
    }
    float mi = m[i] * beta1 + g * one_minus_beta1;
    float vi = v[i] * beta2 + (g * g) * one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    float update = (mi / (sqrtf(vi) / sqrt_bc2 + epsilon)) * step;
    if (lr_scale != nullptr) update = update * lr_scale[(i / scale_stride) % scale_period];
    param[i] = param[i] - update;
}

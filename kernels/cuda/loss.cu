// The training loss (1 − λ)·L1 + λ·(1 − SSIM) and its gradient with respect to the render.
// CPU twin: kernels/src/cpu/loss.rs (formulas and sources there). Images are [H, W, 3]; a stack of
// `maps` images is [maps, H, W, 3]. The 11-tap Gaussian window comes from the host (the CPU twin's
// very floats); zero padding, as INRIA's ssim.
#define KILN_SSIM_WINDOW 11
#define KILN_SSIM_C1 (0.01f * 0.01f)
#define KILN_SSIM_C2 (0.03f * 0.03f)

// The five SSIM statistics of (x, y): [5, H, W, 3] = x, y, x², y², xy. One thread per element.
extern "C" __global__ void kiln_ssim_products(const float* __restrict__ x, const float* __restrict__ y,
                                              unsigned int n, float* __restrict__ stats) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = y[i];
    stats[i] = a;
    stats[n + i] = b;
    stats[2 * n + i] = a * a;
    stats[3 * n + i] = b * b;
    stats[4 * n + i] = a * b;
}

// Horizontal (`vertical` = 0) or vertical (1) pass of the separable blur over a [maps, H, W, 3]
// stack. One thread per element; taps summed in window order, as on the CPU.
extern "C" __global__ void kiln_blur_pass(const float* __restrict__ in, unsigned int maps,
                                          unsigned int height, unsigned int width, unsigned int vertical,
                                          const float* __restrict__ window, float* __restrict__ out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int plane = height * width * 3;
    if (i >= maps * plane) return;
    unsigned int m = i / plane, r = i % plane;
    unsigned int c = r % 3, x = (r / 3) % width, y = r / 3 / width;
    const float* src = in + (size_t)m * plane;
    float acc = 0.0f;
    for (int k = 0; k < KILN_SSIM_WINDOW; ++k) {
        int off = k - KILN_SSIM_WINDOW / 2;
        if (vertical) {
            int yy = (int)y + off;
            if (yy >= 0 && yy < (int)height) acc += window[k] * src[((unsigned int)yy * width + x) * 3 + c];
        } else {
            int xx = (int)x + off;
            if (xx >= 0 && xx < (int)width) acc += window[k] * src[(y * width + (unsigned int)xx) * 3 + c];
        }
    }
    out[i] = acc;
}

// From the blurred moments [5, H, W, 3]: the SSIM map [H, W, 3] and the three partial maps
// [3, H, W, 3] = (∂S/∂μx total, ∂S/∂mxx, ∂S/∂mxy) (cpu/loss.rs::ssim_terms), each multiplied by
// the pixel's weight when `weights` ([H, W]) is non-null (cpu/loss.rs::photometric_loss_weighted).
extern "C" __global__ void kiln_ssim_terms(const float* __restrict__ m, unsigned int n,
                                           const float* __restrict__ weights,
                                           float* __restrict__ ssim_map, float* __restrict__ partials) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mu_x = m[i], mu_y = m[n + i], m_xx = m[2 * n + i], m_yy = m[3 * n + i], m_xy = m[4 * n + i];
    float sigma_xx = m_xx - mu_x * mu_x;
    float sigma_yy = m_yy - mu_y * mu_y;
    float sigma_xy = m_xy - mu_x * mu_y;
    float a = 2.0f * mu_x * mu_y + KILN_SSIM_C1;
    float b = 2.0f * sigma_xy + KILN_SSIM_C2;
    float c = mu_x * mu_x + mu_y * mu_y + KILN_SSIM_C1;
    float d = sigma_xx + sigma_yy + KILN_SSIM_C2;
    float s = (a * b) / (c * d);
    float ds_dmu = (2.0f * mu_y * b) / (c * d) - s * (2.0f * mu_x) / c;
    float ds_dsxx = -s / d;
    float ds_dsxy = 2.0f * a / (c * d);
    float dmu_total = ds_dmu - 2.0f * mu_x * ds_dsxx - mu_y * ds_dsxy;
    if (weights != nullptr) {
        float wi = weights[i / 3];
        s = wi * s;
        dmu_total = wi * dmu_total;
        ds_dsxx = wi * ds_dsxx;
        ds_dsxy = wi * ds_dsxy;
    }
    ssim_map[i] = s;
    partials[i] = dmu_total;
    partials[n + i] = ds_dsxx;
    partials[2 * n + i] = ds_dsxy;
}

// ∂loss/∂x = (1 − λ)·w·sign(x − y)/N − λ·(B0 + 2x·B1 + y·B2)/N, B = the blurred (weighted) partial
// maps, N = `inv_count`⁻¹ (3·H·W, or 3·Σw with weights), w the pixel's weight (1 without
// `weights`); also w·|x − y| per element for the L1 sum.
extern "C" __global__ void kiln_loss_grad(const float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ blurred_partials, unsigned int n,
                                          const float* __restrict__ weights, float inv_count,
                                          float lambda, float* __restrict__ grad, float* __restrict__ abs_diff) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float diff = x[i] - y[i];
    float sign = diff > 0.0f ? 1.0f : (diff < 0.0f ? -1.0f : 0.0f);
    float ad = fabsf(diff);
    if (weights != nullptr) {
        float wi = weights[i / 3];
        ad = ad * wi;
        sign = sign * wi;
    }
    float d_ssim = blurred_partials[i] + 2.0f * x[i] * blurred_partials[n + i] + y[i] * blurred_partials[2 * n + i];
    grad[i] = (1.0f - lambda) * sign * inv_count - lambda * d_ssim * inv_count;
    abs_diff[i] = ad;
}

// Per-block sums of `n` floats (256 threads, fixed-shape tree: deterministic); the host adds the
// block sums in order, in f64.
extern "C" __global__ void kiln_block_sums(const float* __restrict__ values, unsigned int n,
                                           float* __restrict__ block_sums) {
    __shared__ float s[256];
    unsigned int t = threadIdx.x;
    unsigned int i = blockIdx.x * 256 + t;
    s[t] = i < n ? values[i] : 0.0f;
    __syncthreads();
    for (unsigned int stride = 128; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) block_sums[blockIdx.x] = s[0];
}

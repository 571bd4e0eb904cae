// `project_backward`: screen-space gradients → gradients of means, log_scales, rotations,
// logit_opacities and SH coefficients. CPU twin: cpu/project_backward.rs (same chain: conic = Σ2d⁻¹,
// Σ2d = J Σc Jᵀ + EPS2D·I, the clamped EWA Jacobian, Σc = W Σ Wᵀ, Σ = M Mᵀ, M = Rot(q̂)·diag(e^s),
// quaternion normalisation, pinhole mean2d, SH colour with clamped channels passing no gradient,
// sigmoid). One thread per splat.
//
// `antialiased` (0 or 1, cpu RasterizeMode) must be what kiln_project_forward ran with. When 1, the
// opacity was s·c (s = sigmoid(logit), c = Mip-Splatting compensation): ∂L/∂logit = ∂L/∂o·c·s(1 − s),
// and ∂L/∂c = ∂L/∂o·s adds ∂L/∂c·((1 − c²)·Σ2d⁻¹ − (EPS2D/det Σ2d)·I) / 2(c + COMPENSATION_GRAD_EPS)
// to ∂L/∂Σ2d (derivation in cpu/project_backward.rs).
//
// The splat's screen gradient `screen_grads [N, 9]` is the sum of its intersections' rows of
// `isect_grads [I, 9]` (see rasterize_backward.cu), added up by kiln_sum_isect_grads below. Outputs
// are fully written (zeros for culled splats): grad_means [N, 3], grad_log_scales [N, 3],
// grad_rotations [N, 4], grad_logits [N], grad_sh [N, K, 3], means2d_grad_norm [N] (pixel
// gradient × (W/2, H/2)). `screen_abs [N, 2]` (nullable; AbsGS, the per-splat sums of
// rasterize_backward.cu's `isect_abs` by kiln_sum_isect_abs) replaces the mean2d gradient in
// means2d_grad_norm only, in the same units (cpu ndc_grad_norm).

// screen_grads[i] += the splat's rows of one band's `isect_grads [I_band, 9]`, which bin.cu laid
// out contiguously per splat from `offsets[i]`, tiles in row-major order. The running sum starts
// from the value already there, and bands run top to bottom, so a render split into bands adds
// exactly the same terms in exactly the same order as one unsplit pass, and as the CPU twin. One
// thread per splat; `screen_grads` must be zeroed before the first band.
extern "C" __global__ void kiln_sum_isect_grads(const unsigned int* __restrict__ tile_counts,
                                                const unsigned int* __restrict__ offsets, unsigned int n,
                                                const float* __restrict__ isect_grads,
                                                float* __restrict__ screen_grads) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || tile_counts[i] == 0) return;
    float sg[KILN_ISECT_GRAD];
    for (int q = 0; q < KILN_ISECT_GRAD; ++q) sg[q] = screen_grads[(size_t)i * KILN_ISECT_GRAD + q];
    for (unsigned int r = offsets[i], e = offsets[i] + tile_counts[i]; r < e; ++r)
        for (int q = 0; q < KILN_ISECT_GRAD; ++q) sg[q] += isect_grads[(size_t)r * KILN_ISECT_GRAD + q];
    for (int q = 0; q < KILN_ISECT_GRAD; ++q) screen_grads[(size_t)i * KILN_ISECT_GRAD + q] = sg[q];
}

// The same running sum for the AbsGS rows: screen_abs[i] += the splat's rows of one band's
// `isect_abs [I_band, 2]`, in the same order; `screen_abs [N, 2]` zeroed before the first band.
extern "C" __global__ void kiln_sum_isect_abs(const unsigned int* __restrict__ tile_counts,
                                              const unsigned int* __restrict__ offsets, unsigned int n,
                                              const float* __restrict__ isect_abs,
                                              float* __restrict__ screen_abs) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || tile_counts[i] == 0) return;
    float sg[2] = {screen_abs[2 * (size_t)i], screen_abs[2 * (size_t)i + 1]};
    for (unsigned int r = offsets[i], e = offsets[i] + tile_counts[i]; r < e; ++r)
        for (int q = 0; q < 2; ++q) sg[q] += isect_abs[(size_t)r * 2 + q];
    for (int q = 0; q < 2; ++q) screen_abs[2 * (size_t)i + q] = sg[q];
}

// ∂L/∂q for the raw quaternion given ∂L/∂Rot of its unit version (cpu quat_backward).
__device__ void kiln_quat_backward(const float q[4], float norm, const float g[9], float out[4]) {
    float w = q[0], x = q[1], y = q[2], z = q[3];
    float dw = 2.0f * (-z * g[1] + y * g[2] + z * g[3] - x * g[5] - y * g[6] + x * g[7]);
    float dx = 2.0f * (y * g[1] + z * g[2] + y * g[3] - 2.0f * x * g[4] - w * g[5] + z * g[6] + w * g[7] -
                       2.0f * x * g[8]);
    float dy = 2.0f * (-2.0f * y * g[0] + x * g[1] + w * g[2] + x * g[3] + z * g[5] - w * g[6] + z * g[7] -
                       2.0f * y * g[8]);
    float dz = 2.0f * (-2.0f * z * g[0] - w * g[1] + x * g[2] + w * g[3] - 2.0f * z * g[4] + y * g[5] +
                       x * g[6] + y * g[7]);
    float dq[4] = {dw, dx, dy, dz};
    float dot = dq[0] * w + dq[1] * x + dq[2] * y + dq[3] * z;
    for (int k = 0; k < 4; ++k) out[k] = (dq[k] - q[k] * dot) / norm;
}

extern "C" __global__ void kiln_project_backward(
    const float* __restrict__ means, const float* __restrict__ log_scales,
    const float* __restrict__ rotations, const float* __restrict__ logit_opacities,
    const float* __restrict__ sh_coeffs, unsigned int n, unsigned int sh_k, unsigned int sh_degree,
    unsigned int antialiased, KilnCamera cam, const float* __restrict__ conics,
    const float* __restrict__ radii, const float* __restrict__ opacities,
    const float* __restrict__ screen_grads, const float* __restrict__ screen_abs,
    float* __restrict__ grad_means,
    float* __restrict__ grad_log_scales, float* __restrict__ grad_rotations,
    float* __restrict__ grad_logits, float* __restrict__ grad_sh, float* __restrict__ means2d_grad_norm) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int k = 0; k < 3; ++k) grad_means[3 * i + k] = 0.0f;
    for (int k = 0; k < 3; ++k) grad_log_scales[3 * i + k] = 0.0f;
    for (int k = 0; k < 4; ++k) grad_rotations[4 * i + k] = 0.0f;
    grad_logits[i] = 0.0f;
    float* gsh = grad_sh + (size_t)i * sh_k * 3;
    for (unsigned int k = 0; k < sh_k * 3; ++k) gsh[k] = 0.0f;
    means2d_grad_norm[i] = 0.0f;
    if (!(radii[i] > 0.0f)) return;
    KilnGeometry geo;
    if (!kiln_geometry(means, log_scales, rotations, cam, (int)i, geo)) return;

    const float* sg = screen_grads + (size_t)i * KILN_ISECT_GRAD;
    float sg_mean2d[2] = {sg[0], sg[1]};
    float sg_conic[3] = {sg[2], sg[3], sg[4]};
    float sg_color[3] = {sg[5], sg[6], sg[7]};
    float sg_opacity = sg[8];

    // ∂L/∂c and c (antialiased only).
    float d_comp = 0.0f, comp = 0.0f;
    if (antialiased) {
        float s = kiln_sigmoid(logit_opacities[i]);
        comp = kiln_compensation(geo.det_blur_free, geo.det);
        grad_logits[i] = sg_opacity * comp * s * (1.0f - s);
        d_comp = sg_opacity * s;
    } else {
        float op = opacities[i];
        grad_logits[i] = sg_opacity * op * (1.0f - op);
    }

    // Colour → SH coefficients and view direction.
    float dir[3];
    float dir_len = kiln_view_dir(means, cam, (int)i, dir);
    float basis[16];
    kiln_sh_basis(sh_degree, dir, basis);
    const float* sh = sh_coeffs + (size_t)i * sh_k * 3;
    unsigned int active = (sh_degree + 1) * (sh_degree + 1);
    float raw[3] = {0.5f, 0.5f, 0.5f};
    for (unsigned int k = 0; k < active; ++k)
        for (int ch = 0; ch < 3; ++ch) raw[ch] += basis[k] * sh[k * 3 + ch];
    float gc[3];
    for (int ch = 0; ch < 3; ++ch) gc[ch] = raw[ch] >= 0.0f ? sg_color[ch] : 0.0f;
    float d_dir[3] = {0.0f, 0.0f, 0.0f};
    float bgrad[48];
    if (sh_degree > 0) kiln_sh_basis_grad(sh_degree, dir, bgrad);
    for (unsigned int k = 0; k < active; ++k) {
        float coeff_dot = 0.0f;
        for (int ch = 0; ch < 3; ++ch) {
            gsh[k * 3 + ch] = basis[k] * gc[ch];
            coeff_dot += sh[k * 3 + ch] * gc[ch];
        }
        if (sh_degree > 0)
            for (int a = 0; a < 3; ++a) d_dir[a] += coeff_dot * bgrad[k * 3 + a];
    }
    float dd = d_dir[0] * dir[0] + d_dir[1] * dir[1] + d_dir[2] * dir[2];
    float d_mean[3];
    for (int a = 0; a < 3; ++a) d_mean[a] = (d_dir[a] - dir[a] * dd) / dir_len;

    // Conic → Σ2d: ∂Σ2d = −Q·G·Q.
    float ca = conics[3 * i], cb = conics[3 * i + 1], cc = conics[3 * i + 2];
    float q2[4] = {ca, cb, cb, cc};
    float g2[4] = {sg_conic[0], 0.5f * sg_conic[1], 0.5f * sg_conic[1], sg_conic[2]};
    float qg[4], d_cov2d[4];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c) qg[r * 2 + c] = q2[r * 2 + 0] * g2[0 * 2 + c] + q2[r * 2 + 1] * g2[1 * 2 + c];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c)
            d_cov2d[r * 2 + c] = -(qg[r * 2 + 0] * q2[0 * 2 + c] + qg[r * 2 + 1] * q2[1 * 2 + c]);
    // Compensation → Σ2d: ∂c/∂Σ2d = ((1 − r)·Q − (ε/det)·I) / 2c, r = c², Q = Σ2d⁻¹.
    if (antialiased) {
        float r = comp * comp;
        if (r > 0.0f) {
            float scale = d_comp * 0.5f / (comp + KILN_COMPENSATION_GRAD_EPS);
            float diag = KILN_EPS2D / geo.det;
            float one_minus_r = 1.0f - r;
            d_cov2d[0] += scale * (one_minus_r * ca - diag);
            d_cov2d[1] += scale * one_minus_r * cb;
            d_cov2d[2] += scale * one_minus_r * cb;
            d_cov2d[3] += scale * (one_minus_r * cc - diag);
        }
    }

    // Σ2d = J Σc Jᵀ: ∂Σc = Jᵀ G J, ∂J = 2 G J Σc.
    const float* jac = geo.jac;
    float gj[6];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c) gj[r * 3 + c] = d_cov2d[r * 2 + 0] * jac[0 * 3 + c] + d_cov2d[r * 2 + 1] * jac[1 * 3 + c];
    float d_cov_cam[9];
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) d_cov_cam[r * 3 + c] = jac[0 * 3 + r] * gj[0 * 3 + c] + jac[1 * 3 + r] * gj[1 * 3 + c];
    float d_jac[6];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c) {
            float acc = 0.0f;
            for (int k = 0; k < 3; ++k) acc += gj[r * 3 + k] * geo.cov_cam[k * 3 + c];
            d_jac[r * 3 + c] = 2.0f * acc;
        }

    // Camera point: from mean2d and from J.
    const float* pc = geo.p;
    float rz = 1.0f / pc[2];
    float rz2 = rz * rz;
    float fx = cam.fx, fy = cam.fy;
    float dp[3] = {sg_mean2d[0] * fx * rz, sg_mean2d[1] * fy * rz,
                   -(sg_mean2d[0] * fx * pc[0] + sg_mean2d[1] * fy * pc[1]) * rz2};
    float u = -jac[2] / (fx * rz);
    float v = -jac[5] / (fy * rz);
    float d_rz = d_jac[0] * fx - d_jac[2] * fx * u + d_jac[4] * fy - d_jac[5] * fy * v;
    dp[2] -= d_rz * rz2;
    if (!geo.clamped[0]) {
        float d_u = -d_jac[2] * fx * rz;
        dp[0] += d_u * rz;
        dp[2] -= d_u * pc[0] * rz2;
    }
    if (!geo.clamped[1]) {
        float d_v = -d_jac[5] * fy * rz;
        dp[1] += d_v * rz;
        dp[2] -= d_v * pc[1] * rz2;
    }
    const float* W = cam.rot;
    for (int a = 0; a < 3; ++a) d_mean[a] += W[0 * 3 + a] * dp[0] + W[1 * 3 + a] * dp[1] + W[2 * 3 + a] * dp[2];
    for (int a = 0; a < 3; ++a) grad_means[3 * i + a] = d_mean[a];

    // Σc = W Σ Wᵀ → ∂Σ = Wᵀ ∂Σc W; Σ = M Mᵀ → ∂M = 2 ∂Σ M.
    float tmp[9], d_cov[9], d_m[9];
    kiln_mul33_at(W, d_cov_cam, tmp);
    kiln_mul33(tmp, W, d_cov);
    kiln_mul33(d_cov, geo.m, d_m);
    for (int k = 0; k < 9; ++k) d_m[k] *= 2.0f;
    float d_rot[9];
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) d_rot[r * 3 + c] = d_m[r * 3 + c] * geo.scale[c];
    for (int c = 0; c < 3; ++c) {
        float d_s = d_m[0 * 3 + c] * geo.rot[0 * 3 + c] + d_m[1 * 3 + c] * geo.rot[1 * 3 + c] +
                    d_m[2 * 3 + c] * geo.rot[2 * 3 + c];
        grad_log_scales[3 * i + c] = d_s * geo.scale[c];
    }
    float dq[4];
    kiln_quat_backward(geo.quat, geo.quat_norm, d_rot, dq);
    for (int k = 0; k < 4; ++k) grad_rotations[4 * i + k] = dq[k];

    const float* m2d = screen_abs != nullptr ? screen_abs + 2 * (size_t)i : sg_mean2d;
    float nx = m2d[0] * (float)cam.width * 0.5f;
    float ny = m2d[1] * (float)cam.height * 0.5f;
    means2d_grad_norm[i] = sqrtf(nx * nx + ny * ny);
}

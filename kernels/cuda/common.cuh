// Shared device helpers of Kiln's CUDA kernels: the math of the CPU twin (`kernels/src/cpu/`),
// written once for the GPU. The constants (KILN_TILE_SIZE, KILN_ALPHA_THRESHOLD, ...) come from a
// prelude generated from `kernels/src/consts.rs` and `cpu/sh.rs` (see `src/cuda/source.rs`), so the
// two twins cannot drift apart.
//
// Conventions (ARCHITECTURE.md, kernels/src/lib.rs): OpenCV camera frame, `world_to_camera` row-major,
// quaternions wxyz, scales as natural logs, opacities as logits, SH coefficient-major `[N, K, 3]`,
// pixel centres at `x + 0.5`.

#define KILN_FULL_MASK 0xffffffffu
#define KILN_WARP 32
// Values per intersection in the backward pass: mean2d (2), conic (3), colour (3), opacity (1).
#define KILN_ISECT_GRAD 9

// Camera as the kernels see it: filled on the host from `cpu::project::CameraModel<f32>` so that
// derived values (centre, clamp limits) are bit-identical to the CPU twin's. `#[repr(C)]` twin:
// `src/cuda/render.rs::GpuCamera`.
struct KilnCamera {
    float rot[9];      // W, row-major rotation of world_to_camera
    float trans[3];    // t, metres
    float centre[3];   // camera centre in world, metres
    float fx, fy, cx, cy;
    float lim_x[2];    // clamp range of x/z: [-lim_x[0], lim_x[1]]
    float lim_y[2];
    unsigned int width, height, tiles_x, tiles_y;
};

struct KilnGeometry {
    float quat[4];
    float quat_norm;
    float rot[9];
    float scale[3];
    float m[9];        // rot * diag(scale)
    float cov_cam[9];
    float p[3];
    float jac[6];      // 2x3 row-major
    bool clamped[2];
    float cov2d[3];
    float det;            // det Σ2d (with EPS2D), pixels⁴
    float det_blur_free;  // det of J Σc Jᵀ before the EPS2D dilation, pixels⁴ (any sign)
};

__device__ __forceinline__ bool kiln_isfinite(float v) { return isfinite(v); }

__device__ __forceinline__ float kiln_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Rotation of a unit quaternion (w, x, y, z); cpu/project.rs::quat_to_rotmat.
__device__ __forceinline__ void kiln_quat_to_rotmat(const float q[4], float r[9]) {
    float w = q[0], x = q[1], y = q[2], z = q[3];
    r[0] = 1.0f - 2.0f * (y * y + z * z); r[1] = 2.0f * (x * y - w * z); r[2] = 2.0f * (x * z + w * y);
    r[3] = 2.0f * (x * y + w * z); r[4] = 1.0f - 2.0f * (x * x + z * z); r[5] = 2.0f * (y * z - w * x);
    r[6] = 2.0f * (x * z - w * y); r[7] = 2.0f * (y * z + w * x); r[8] = 1.0f - 2.0f * (x * x + y * y);
}

// c = a * b for 3x3 row-major.
__device__ __forceinline__ void kiln_mul33(const float a[9], const float b[9], float c[9]) {
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            c[i * 3 + j] = a[i * 3 + 0] * b[0 * 3 + j] + a[i * 3 + 1] * b[1 * 3 + j] + a[i * 3 + 2] * b[2 * 3 + j];
}

// c = a * b^T for 3x3 row-major.
__device__ __forceinline__ void kiln_mul33_bt(const float a[9], const float b[9], float c[9]) {
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            c[i * 3 + j] = a[i * 3 + 0] * b[j * 3 + 0] + a[i * 3 + 1] * b[j * 3 + 1] + a[i * 3 + 2] * b[j * 3 + 2];
}

// c = a^T * b for 3x3 row-major.
__device__ __forceinline__ void kiln_mul33_at(const float a[9], const float b[9], float c[9]) {
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            c[i * 3 + j] = a[0 * 3 + i] * b[0 * 3 + j] + a[1 * 3 + i] * b[1 * 3 + j] + a[2 * 3 + i] * b[2 * 3 + j];
}

// Projection geometry of one splat (cpu/project.rs::geometry); false when culled.
__device__ bool kiln_geometry(const float* means, const float* log_scales, const float* rotations,
                              const KilnCamera& cam, int i, KilnGeometry& g) {
    float mx = means[3 * i], my = means[3 * i + 1], mz = means[3 * i + 2];
    const float* R = cam.rot;
    g.p[0] = (R[0] * mx + R[1] * my + R[2] * mz) + cam.trans[0];
    g.p[1] = (R[3] * mx + R[4] * my + R[5] * mz) + cam.trans[1];
    g.p[2] = (R[6] * mx + R[7] * my + R[8] * mz) + cam.trans[2];
    if (!(kiln_isfinite(g.p[0]) && kiln_isfinite(g.p[1]) && kiln_isfinite(g.p[2])) || g.p[2] < KILN_NEAR_PLANE)
        return false;
    float q[4] = {rotations[4 * i], rotations[4 * i + 1], rotations[4 * i + 2], rotations[4 * i + 3]};
    float n = sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    if (!(n > 0.0f && kiln_isfinite(n))) return false;
    for (int k = 0; k < 4; ++k) g.quat[k] = q[k] / n;
    g.quat_norm = n;
    kiln_quat_to_rotmat(g.quat, g.rot);
    for (int k = 0; k < 3; ++k) g.scale[k] = expf(log_scales[3 * i + k]);
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 3; ++c) g.m[r * 3 + c] = g.rot[r * 3 + c] * g.scale[c];
    float cov[9], tmp[9];
    kiln_mul33_bt(g.m, g.m, cov);
    kiln_mul33(R, cov, tmp);
    kiln_mul33_bt(tmp, R, g.cov_cam);
    // EWA Jacobian with the clamped x/z, y/z (cpu/project.rs::ewa_jacobian).
    float rz = 1.0f / g.p[2];
    float u0 = g.p[0] * rz, v0 = g.p[1] * rz;
    float u = fminf(fmaxf(u0, -cam.lim_x[0]), cam.lim_x[1]);
    float v = fminf(fmaxf(v0, -cam.lim_y[0]), cam.lim_y[1]);
    g.jac[0] = cam.fx * rz; g.jac[1] = 0.0f; g.jac[2] = -cam.fx * u * rz;
    g.jac[3] = 0.0f; g.jac[4] = cam.fy * rz; g.jac[5] = -cam.fy * v * rz;
    g.clamped[0] = u != u0;
    g.clamped[1] = v != v0;
    // Σ2d = J Σc Jᵀ + EPS2D·I.
    float js[6];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 3; ++c)
            js[r * 3 + c] = g.jac[r * 3 + 0] * g.cov_cam[0 * 3 + c] + g.jac[r * 3 + 1] * g.cov_cam[1 * 3 + c] +
                            g.jac[r * 3 + 2] * g.cov_cam[2 * 3 + c];
    float c2[4];
    for (int r = 0; r < 2; ++r)
        for (int c = 0; c < 2; ++c)
            c2[r * 2 + c] = js[r * 3 + 0] * g.jac[c * 3 + 0] + js[r * 3 + 1] * g.jac[c * 3 + 1] +
                            js[r * 3 + 2] * g.jac[c * 3 + 2];
    g.cov2d[0] = c2[0] + KILN_EPS2D;
    g.cov2d[1] = 0.5f * (c2[1] + c2[2]);
    g.cov2d[2] = c2[3] + KILN_EPS2D;
    g.det = g.cov2d[0] * g.cov2d[2] - g.cov2d[1] * g.cov2d[1];
    g.det_blur_free = c2[0] * c2[3] - g.cov2d[1] * g.cov2d[1];
    if (!kiln_isfinite(g.det) || g.det <= 0.0f) return false;
    return true;
}

// Mip-Splatting opacity compensation sqrt(max(det_blur_free / det, 0)) in [0, 1] (Yu et al., CVPR
// 2024, Eq. 9–10); cpu/project.rs::compensation.
__device__ __forceinline__ float kiln_compensation(float det_blur_free, float det) {
    return sqrtf(fmaxf(det_blur_free / det, 0.0f));
}

// Unit view direction from the camera centre to splat i, and its length (cpu/project.rs::view_dir).
__device__ __forceinline__ float kiln_view_dir(const float* means, const KilnCamera& cam, int i, float dir[3]) {
    float v0 = means[3 * i] - cam.centre[0], v1 = means[3 * i + 1] - cam.centre[1], v2 = means[3 * i + 2] - cam.centre[2];
    float n = sqrtf(v0 * v0 + v1 * v1 + v2 * v2);
    dir[0] = v0 / n; dir[1] = v1 / n; dir[2] = v2 / n;
    return n;
}

// SH basis [16] at a unit direction, entries beyond (degree + 1)² zero (cpu/sh.rs::sh_basis).
__device__ void kiln_sh_basis(unsigned int degree, const float dir[3], float b[16]) {
    float x = dir[0], y = dir[1], z = dir[2];
    for (int k = 0; k < 16; ++k) b[k] = 0.0f;
    b[0] = KILN_SH_C0;
    if (degree >= 1) {
        b[1] = -KILN_SH_C1 * y;
        b[2] = KILN_SH_C1 * z;
        b[3] = -KILN_SH_C1 * x;
    }
    if (degree >= 2) {
        float xx = x * x, yy = y * y, zz = z * z;
        b[4] = KILN_SH_C2_0 * x * y;
        b[5] = KILN_SH_C2_1 * y * z;
        b[6] = KILN_SH_C2_2 * (2.0f * zz - xx - yy);
        b[7] = KILN_SH_C2_3 * x * z;
        b[8] = KILN_SH_C2_4 * (xx - yy);
        if (degree >= 3) {
            b[9] = KILN_SH_C3_0 * y * (3.0f * xx - yy);
            b[10] = KILN_SH_C3_1 * x * y * z;
            b[11] = KILN_SH_C3_2 * y * (4.0f * zz - xx - yy);
            b[12] = KILN_SH_C3_3 * z * (2.0f * zz - 3.0f * xx - 3.0f * yy);
            b[13] = KILN_SH_C3_4 * x * (4.0f * zz - xx - yy);
            b[14] = KILN_SH_C3_5 * z * (xx - yy);
            b[15] = KILN_SH_C3_6 * x * (xx - 3.0f * yy);
        }
    }
}

// ∂basis_k/∂(x, y, z) [16][3] (cpu/sh.rs::sh_basis_grad).
__device__ void kiln_sh_basis_grad(unsigned int degree, const float dir[3], float g[48]) {
    float x = dir[0], y = dir[1], z = dir[2];
    for (int k = 0; k < 48; ++k) g[k] = 0.0f;
    if (degree >= 1) {
        g[1 * 3 + 1] = -KILN_SH_C1;
        g[2 * 3 + 2] = KILN_SH_C1;
        g[3 * 3 + 0] = -KILN_SH_C1;
    }
    if (degree >= 2) {
        g[4 * 3 + 0] = KILN_SH_C2_0 * y; g[4 * 3 + 1] = KILN_SH_C2_0 * x;
        g[5 * 3 + 1] = KILN_SH_C2_1 * z; g[5 * 3 + 2] = KILN_SH_C2_1 * y;
        g[6 * 3 + 0] = KILN_SH_C2_2 * -2.0f * x; g[6 * 3 + 1] = KILN_SH_C2_2 * -2.0f * y; g[6 * 3 + 2] = KILN_SH_C2_2 * 4.0f * z;
        g[7 * 3 + 0] = KILN_SH_C2_3 * z; g[7 * 3 + 2] = KILN_SH_C2_3 * x;
        g[8 * 3 + 0] = KILN_SH_C2_4 * 2.0f * x; g[8 * 3 + 1] = KILN_SH_C2_4 * -2.0f * y;
        if (degree >= 3) {
            float xx = x * x, yy = y * y, zz = z * z;
            g[9 * 3 + 0] = KILN_SH_C3_0 * 6.0f * x * y; g[9 * 3 + 1] = KILN_SH_C3_0 * 3.0f * (xx - yy);
            g[10 * 3 + 0] = KILN_SH_C3_1 * y * z; g[10 * 3 + 1] = KILN_SH_C3_1 * x * z; g[10 * 3 + 2] = KILN_SH_C3_1 * x * y;
            g[11 * 3 + 0] = KILN_SH_C3_2 * -2.0f * x * y;
            g[11 * 3 + 1] = KILN_SH_C3_2 * (4.0f * zz - xx - 3.0f * yy);
            g[11 * 3 + 2] = KILN_SH_C3_2 * 8.0f * y * z;
            g[12 * 3 + 0] = KILN_SH_C3_3 * -6.0f * x * z;
            g[12 * 3 + 1] = KILN_SH_C3_3 * -6.0f * y * z;
            g[12 * 3 + 2] = KILN_SH_C3_3 * (6.0f * zz - 3.0f * (xx + yy));
            g[13 * 3 + 0] = KILN_SH_C3_4 * (4.0f * zz - 3.0f * xx - yy);
            g[13 * 3 + 1] = KILN_SH_C3_4 * -2.0f * x * y;
            g[13 * 3 + 2] = KILN_SH_C3_4 * 8.0f * x * z;
            g[14 * 3 + 0] = KILN_SH_C3_5 * 2.0f * x * z;
            g[14 * 3 + 1] = KILN_SH_C3_5 * -2.0f * y * z;
            g[14 * 3 + 2] = KILN_SH_C3_5 * (xx - yy);
            g[15 * 3 + 0] = KILN_SH_C3_6 * 3.0f * (xx - yy);
            g[15 * 3 + 1] = KILN_SH_C3_6 * -6.0f * x * y;
        }
    }
}

// Tile box [min, max) of the square mean2d ± radius, clipped to the grid (cpu/project.rs::tile_bbox).
// fmaxf/fminf treat NaN like Rust's max/min (the other operand wins), so NaN gives an empty box.
__device__ __forceinline__ void kiln_tile_bbox(float mx, float my, float radius, unsigned int tiles_x,
                                               unsigned int tiles_y, unsigned int rect[4]) {
    const float ts = (float)KILN_TILE_SIZE;
    rect[0] = (unsigned int)fminf(fmaxf(floorf((mx - radius) / ts), 0.0f), (float)tiles_x);
    rect[1] = (unsigned int)fminf(fmaxf(floorf((my - radius) / ts), 0.0f), (float)tiles_y);
    rect[2] = (unsigned int)fminf(fmaxf(ceilf((mx + radius) / ts), 0.0f), (float)tiles_x);
    rect[3] = (unsigned int)fminf(fmaxf(ceilf((my + radius) / ts), 0.0f), (float)tiles_y);
}

// Sum over a warp by butterfly shuffles (every lane ends with the same total, summed in the same
// order on every lane, so the result is deterministic).
__device__ __forceinline__ float kiln_warp_sum(float v) {
    for (int offset = KILN_WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(KILN_FULL_MASK, v, offset);
    return v;
}

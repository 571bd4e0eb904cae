// `project`: 3D Gaussians → screen-space splats (EWA), SH colour, sigmoid opacity, tile box.
// CPU twin: kernels/src/cpu/project.rs (project_one). One thread per splat.
//
// `antialiased` (0 or 1, cpu RasterizeMode): when 1 the opacity is sigmoid(logit) times the
// Mip-Splatting compensation sqrt(max(det(J Σc Jᵀ) / det Σ2d, 0)) (Yu et al., CVPR 2024, Eq. 9–10).
//
// Outputs, N splats: xys [N, 2] pixels; conics [N, 3]; depths [N] metres; radii [N] pixels (0 when
// culled); opacities [N]; colors [N, 3] (clamped at 0); tile_rects [N, 4] (tx0, ty0, tx1, ty1);
// tile_counts [N] (tiles touched, 0 when culled).
extern "C" __global__ void kiln_project_forward(
    const float* __restrict__ means, const float* __restrict__ log_scales,
    const float* __restrict__ rotations, const float* __restrict__ logit_opacities,
    const float* __restrict__ sh_coeffs, unsigned int n, unsigned int sh_k, unsigned int sh_degree,
    unsigned int antialiased, KilnCamera cam, float* __restrict__ xys, float* __restrict__ conics,
    float* __restrict__ depths, float* __restrict__ radii, float* __restrict__ opacities, float* __restrict__ colors,
    unsigned int* __restrict__ tile_rects, unsigned int* __restrict__ tile_counts) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // Culled unless every check below passes.
    radii[i] = 0.0f;
    tile_counts[i] = 0;
    for (int k = 0; k < 4; ++k) tile_rects[4 * i + k] = 0;
    KilnGeometry g;
    if (!kiln_geometry(means, log_scales, rotations, cam, (int)i, g)) return;
    float a = g.cov2d[0], b = g.cov2d[1], c = g.cov2d[2];
    float conic[3] = {c / g.det, -b / g.det, a / g.det};
    float mid = 0.5f * (a + c);
    float lambda_max = mid + sqrtf(fmaxf(mid * mid - g.det, 0.0f));
    float radius = ceilf(KILN_GAUSSIAN_EXTENT * sqrtf(lambda_max));
    float rz = 1.0f / g.p[2];
    float mean2d[2] = {cam.fx * g.p[0] * rz + cam.cx, cam.fy * g.p[1] * rz + cam.cy};
    float dir[3];
    kiln_view_dir(means, cam, (int)i, dir);
    float basis[16];
    kiln_sh_basis(sh_degree, dir, basis);
    const float* sh = sh_coeffs + (size_t)i * sh_k * 3;
    float rgb[3] = {0.5f, 0.5f, 0.5f};
    unsigned int active = (sh_degree + 1) * (sh_degree + 1);
    for (unsigned int k = 0; k < active; ++k)
        for (int ch = 0; ch < 3; ++ch) rgb[ch] += basis[k] * sh[k * 3 + ch];
    float opacity = kiln_sigmoid(logit_opacities[i]);
    if (antialiased) opacity = opacity * kiln_compensation(g.det_blur_free, g.det);
    bool finite = kiln_isfinite(conic[0]) && kiln_isfinite(conic[1]) && kiln_isfinite(conic[2]) &&
                  kiln_isfinite(mean2d[0]) && kiln_isfinite(mean2d[1]) && kiln_isfinite(rgb[0]) &&
                  kiln_isfinite(rgb[1]) && kiln_isfinite(rgb[2]) && kiln_isfinite(radius) && radius > 0.0f &&
                  kiln_isfinite(opacity);
    if (!finite) return;
    unsigned int rect[4];
    kiln_tile_bbox(mean2d[0], mean2d[1], radius, cam.tiles_x, cam.tiles_y, rect);
    if (rect[0] >= rect[2] || rect[1] >= rect[3]) return;
    xys[2 * i] = mean2d[0];
    xys[2 * i + 1] = mean2d[1];
    for (int k = 0; k < 3; ++k) conics[3 * i + k] = conic[k];
    depths[i] = g.p[2];
    radii[i] = radius;
    opacities[i] = opacity;
    for (int ch = 0; ch < 3; ++ch) colors[3 * i + ch] = fmaxf(rgb[ch], 0.0f);
    for (int k = 0; k < 4; ++k) tile_rects[4 * i + k] = rect[k];
    tile_counts[i] = (rect[2] - rect[0]) * (rect[3] - rect[1]);
}

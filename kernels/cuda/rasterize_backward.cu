// `rasterize_backward`: ∂L/∂pixel → per-intersection ∂L/∂(mean2d, conic, colour, opacity), walking
// each pixel's contributors back to front. CPU twin: cpu/rasterize_backward.rs (same recurrences:
// T_i = T_{i+1} / (1 − α_i); ∂C/∂α_i = c_i·T_i − (behind + T_final·bg) / (1 − α_i); no σ gradient
// where α was clamped at MAX_ALPHA).
//
// One 16×16 block per tile, one thread per pixel. For each splat of the tile (back to front) the
// block sums its 9 gradient values over the pixels — per warp by shuffles, then across the 8 warps
// in a fixed order — and thread 0 writes them to the intersection's slot in the UNSORTED list
// (`sorted_values[k]`, see bin.cu). No atomics, so the result is deterministic; a splat no pixel of
// the tile hit is skipped (its slots stay zero: the caller zeroes them).
//
// Output, I intersections: isect_grads [I, 9] = (mean2d x, y, conic a, b, c, colour r, g, b, opacity).
// Optional output (AbsGS, gsplat `absgrad`; null when not asked for): isect_abs [I, 2] =
// (Σ_p |∂L_p/∂mean2d x|, Σ_p |∂L_p/∂mean2d y|) over the tile's pixels p, each pixel's term taken in
// absolute value before the same warp-then-block sum; pixels per displacement pixel, like mean2d.
// Ye et al., "AbsGS: Recovering Fine Details for 3D Gaussian Splatting" (2024).
#define KILN_BWD_BATCH (KILN_TILE_SIZE * KILN_TILE_SIZE)
#define KILN_BWD_WARPS (KILN_BWD_BATCH / KILN_WARP)

// The grid covers the tile rows [tile_y0, tile_y0 + gridDim.y) (one band, as the forward pass).
extern "C" __global__ void kiln_rasterize_backward(
    const float* __restrict__ xys, const float* __restrict__ conics, const float* __restrict__ opacities,
    const float* __restrict__ colors, const unsigned int* __restrict__ sorted_ids,
    const unsigned int* __restrict__ sorted_values, const unsigned int* __restrict__ tile_ranges,
    const float* __restrict__ final_t, const unsigned int* __restrict__ n_contrib,
    const float* __restrict__ grad_image, unsigned int width, unsigned int height, unsigned int tiles_x,
    unsigned int tile_y0, float bg_r, float bg_g, float bg_b, float* __restrict__ isect_grads,
    float* __restrict__ isect_abs) {
    __shared__ float s_xy[KILN_BWD_BATCH][2];
    __shared__ float s_conic[KILN_BWD_BATCH][3];
    __shared__ float s_opacity[KILN_BWD_BATCH];
    __shared__ float s_color[KILN_BWD_BATCH][3];
    __shared__ float s_warp[KILN_BWD_WARPS][KILN_ISECT_GRAD];
    __shared__ float s_warp_abs[KILN_BWD_WARPS][2];
    __shared__ unsigned int s_max_n;
    unsigned int tile_y = tile_y0 + blockIdx.y;
    unsigned int tile = tile_y * tiles_x + blockIdx.x;
    unsigned int px = blockIdx.x * KILN_TILE_SIZE + threadIdx.x;
    unsigned int py = tile_y * KILN_TILE_SIZE + threadIdx.y;
    unsigned int t = threadIdx.y * KILN_TILE_SIZE + threadIdx.x;
    unsigned int lane = t % KILN_WARP, warp = t / KILN_WARP;
    bool inside = px < width && py < height;
    float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
    unsigned int start = tile_ranges[2 * tile];

    float g[3] = {0.0f, 0.0f, 0.0f};
    float T = 1.0f, t_final = 1.0f, bg_dot = 0.0f;
    unsigned int n = 0;
    if (inside) {
        unsigned int pix = py * width + px;
        for (int c = 0; c < 3; ++c) g[c] = grad_image[3 * pix + c];
        // A pixel with zero upstream gradient contributes nothing (as on the CPU).
        n = (g[0] == 0.0f && g[1] == 0.0f && g[2] == 0.0f) ? 0 : n_contrib[pix];
        T = final_t[pix];
        t_final = T;
        bg_dot = bg_r * g[0] + bg_g * g[1] + bg_b * g[2];
    }
    float behind[3] = {0.0f, 0.0f, 0.0f};
    if (t == 0) s_max_n = 0;
    __syncthreads();
    atomicMax(&s_max_n, n);
    __syncthreads();
    unsigned int max_n = s_max_n;

    // Batches of the first max_n entries, back to front: [lo, hi) with hi descending.
    for (unsigned int hi = max_n; hi > 0;) {
        unsigned int lo = hi > KILN_BWD_BATCH ? hi - KILN_BWD_BATCH : 0;
        __syncthreads();
        if (lo + t < hi) {
            unsigned int id = sorted_ids[start + lo + t];
            s_xy[t][0] = xys[2 * id];
            s_xy[t][1] = xys[2 * id + 1];
            for (int c = 0; c < 3; ++c) s_conic[t][c] = conics[3 * id + c];
            s_opacity[t] = opacities[id];
            for (int c = 0; c < 3; ++c) s_color[t][c] = colors[3 * id + c];
        }
        __syncthreads();
        for (unsigned int jj = hi; jj > lo; --jj) {
            unsigned int j = jj - 1;  // index in the tile's list
            unsigned int b = j - lo;  // index in the batch
            float v[KILN_ISECT_GRAD];
            for (int q = 0; q < KILN_ISECT_GRAD; ++q) v[q] = 0.0f;
            bool hit = false;
            if (j < n) {
                float dx = s_xy[b][0] - fx, dy = s_xy[b][1] - fy;
                float sigma = 0.5f * (s_conic[b][0] * dx * dx + s_conic[b][2] * dy * dy) + s_conic[b][1] * dx * dy;
                float vis = expf(-sigma);
                float alpha = fminf(KILN_MAX_ALPHA, s_opacity[b] * vis);
                if (sigma >= 0.0f && alpha >= KILN_ALPHA_THRESHOLD) {
                    hit = true;
                    float ra = 1.0f / (1.0f - alpha);
                    T = T * ra;
                    float weight = alpha * T;
                    float v_alpha = 0.0f;
                    for (int c = 0; c < 3; ++c) {
                        v[5 + c] = weight * g[c];
                        v_alpha += (s_color[b][c] * T - behind[c] * ra) * g[c];
                        behind[c] += s_color[b][c] * weight;
                    }
                    v_alpha -= t_final * ra * bg_dot;
                    if (s_opacity[b] * vis <= KILN_MAX_ALPHA) {
                        float v_sigma = -s_opacity[b] * vis * v_alpha;
                        v[2] = 0.5f * dx * dx * v_sigma;
                        v[3] = dx * dy * v_sigma;
                        v[4] = 0.5f * dy * dy * v_sigma;
                        v[0] = (s_conic[b][0] * dx + s_conic[b][1] * dy) * v_sigma;
                        v[1] = (s_conic[b][1] * dx + s_conic[b][2] * dy) * v_sigma;
                        v[8] = vis * v_alpha;
                    }
                }
            }
            if (__syncthreads_or(hit ? 1 : 0) == 0) continue;
            for (int q = 0; q < KILN_ISECT_GRAD; ++q) {
                float s = kiln_warp_sum(v[q]);
                if (lane == 0) s_warp[warp][q] = s;
            }
            // `isect_abs` is the same for every thread, so all lanes shuffle together.
            if (isect_abs != nullptr) {
                for (int q = 0; q < 2; ++q) {
                    float s = kiln_warp_sum(fabsf(v[q]));
                    if (lane == 0) s_warp_abs[warp][q] = s;
                }
            }
            __syncthreads();
            if (t < KILN_ISECT_GRAD) {
                float s = 0.0f;
                for (int w = 0; w < KILN_BWD_WARPS; ++w) s += s_warp[w][t];
                isect_grads[(size_t)sorted_values[start + j] * KILN_ISECT_GRAD + t] = s;
            } else if (isect_abs != nullptr && t < KILN_ISECT_GRAD + 2) {
                unsigned int q = t - KILN_ISECT_GRAD;
                float s = 0.0f;
                for (int w = 0; w < KILN_BWD_WARPS; ++w) s += s_warp_abs[w][q];
                isect_abs[(size_t)sorted_values[start + j] * 2 + q] = s;
            }
        }
        hi = lo;
    }
}

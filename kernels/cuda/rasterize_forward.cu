// `rasterize_forward`: front-to-back alpha compositing, one 16×16 block per tile, one thread per
// pixel, splats staged through shared memory in batches of KILN_BATCH. CPU twin:
// cpu/rasterize_forward.rs (same per-pixel rule: skip σ < 0 or α < ALPHA_THRESHOLD; stop before a
// splat that would bring T below TRANSMITTANCE_THRESHOLD; α = min(MAX_ALPHA, opacity·e^(−σ))).
//
// Outputs: image [H, W, 3] = Σ colour·α·T + T_final·background; final_t [H, W]; n_contrib [H, W]
// (entries of the tile's list walked up to and including the last contributor). The grid covers the
// tile rows [tile_y0, tile_y0 + gridDim.y): one band of a render split to bound buffer sizes.
#define KILN_BATCH (KILN_TILE_SIZE * KILN_TILE_SIZE)

extern "C" __global__ void kiln_rasterize_forward(
    const float* __restrict__ xys, const float* __restrict__ conics, const float* __restrict__ opacities,
    const float* __restrict__ colors, const unsigned int* __restrict__ sorted_ids,
    const unsigned int* __restrict__ tile_ranges, unsigned int width, unsigned int height,
    unsigned int tiles_x, unsigned int tile_y0, float bg_r, float bg_g, float bg_b, float* __restrict__ image,
    float* __restrict__ final_t, unsigned int* __restrict__ n_contrib) {
    __shared__ float s_xy[KILN_BATCH][2];
    __shared__ float s_conic[KILN_BATCH][3];
    __shared__ float s_opacity[KILN_BATCH];
    __shared__ float s_color[KILN_BATCH][3];
    unsigned int tile_y = tile_y0 + blockIdx.y;
    unsigned int tile = tile_y * tiles_x + blockIdx.x;
    unsigned int px = blockIdx.x * KILN_TILE_SIZE + threadIdx.x;
    unsigned int py = tile_y * KILN_TILE_SIZE + threadIdx.y;
    unsigned int t = threadIdx.y * KILN_TILE_SIZE + threadIdx.x;
    bool inside = px < width && py < height;
    float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
    unsigned int start = tile_ranges[2 * tile], end = tile_ranges[2 * tile + 1];
    float T = 1.0f;
    float rgb[3] = {0.0f, 0.0f, 0.0f};
    unsigned int last = 0;
    bool done = !inside;
    for (unsigned int batch = start; batch < end; batch += KILN_BATCH) {
        // Every thread takes part in the barrier count, finished or not.
        if (__syncthreads_count(done ? 1 : 0) == KILN_BATCH) break;
        unsigned int k = batch + t;
        if (k < end) {
            unsigned int id = sorted_ids[k];
            s_xy[t][0] = xys[2 * id];
            s_xy[t][1] = xys[2 * id + 1];
            for (int c = 0; c < 3; ++c) s_conic[t][c] = conics[3 * id + c];
            s_opacity[t] = opacities[id];
            for (int c = 0; c < 3; ++c) s_color[t][c] = colors[3 * id + c];
        }
        __syncthreads();
        unsigned int count = end - batch < KILN_BATCH ? end - batch : KILN_BATCH;
        for (unsigned int j = 0; j < count && !done; ++j) {
            float dx = s_xy[j][0] - fx, dy = s_xy[j][1] - fy;
            float sigma = 0.5f * (s_conic[j][0] * dx * dx + s_conic[j][2] * dy * dy) + s_conic[j][1] * dx * dy;
            if (sigma < 0.0f) continue;
            float alpha = fminf(KILN_MAX_ALPHA, s_opacity[j] * expf(-sigma));
            if (alpha < KILN_ALPHA_THRESHOLD) continue;
            float next_t = T * (1.0f - alpha);
            if (next_t < KILN_TRANSMITTANCE_THRESHOLD) {
                done = true;
                break;
            }
            float weight = alpha * T;
            for (int c = 0; c < 3; ++c) rgb[c] += s_color[j][c] * weight;
            T = next_t;
            last = batch - start + j + 1;
        }
    }
    if (inside) {
        unsigned int pix = py * width + px;
        image[3 * pix] = rgb[0] + T * bg_r;
        image[3 * pix + 1] = rgb[1] + T * bg_g;
        image[3 * pix + 2] = rgb[2] + T * bg_b;
        final_t[pix] = T;
        n_contrib[pix] = last;
    }
}

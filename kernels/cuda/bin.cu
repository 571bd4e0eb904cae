// `bin`: one (key, value) pair per splat-tile intersection. CPU twin: kernels/src/cpu/bin.rs.
// Key = tile_id << 32 | depth bits (tile_id = ty * tiles_x + tx; a positive finite float's bits
// increase with its value). Value = the intersection's own index in this unsorted list, so that
// after a stable sort each sorted entry knows where it came from (the backward pass writes its
// per-intersection gradients there, and each splat then sums its own contiguous range in a fixed
// order: deterministic without atomics). `offsets [N]` is the exclusive scan of `tile_counts`.
// One thread per splat; a splat's tiles are emitted in row-major order, as on the CPU.
//
// A render may be split into bands of tile rows [row_lo, row_hi) so that no intersection buffer
// exceeds the allocation cap: `tile_counts`/`offsets` are then the band's (kiln_band_counts) and only
// the band's tiles are emitted. One band covering every row is the unsplit render.
extern "C" __global__ void kiln_bin_emit(const float* __restrict__ depths,
                                         const unsigned int* __restrict__ tile_rects,
                                         const unsigned int* __restrict__ tile_counts,
                                         const unsigned int* __restrict__ offsets, unsigned int n,
                                         unsigned int tiles_x, unsigned int row_lo, unsigned int row_hi,
                                         unsigned long long* __restrict__ keys,
                                         unsigned int* __restrict__ values,
                                         unsigned int* __restrict__ isect_splat) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || tile_counts[i] == 0) return;
    unsigned long long depth_bits = (unsigned long long)__float_as_uint(depths[i]);
    unsigned int off = offsets[i];
    unsigned int y0 = tile_rects[4 * i + 1] > row_lo ? tile_rects[4 * i + 1] : row_lo;
    unsigned int y1 = tile_rects[4 * i + 3] < row_hi ? tile_rects[4 * i + 3] : row_hi;
    for (unsigned int ty = y0; ty < y1; ++ty) {
        for (unsigned int tx = tile_rects[4 * i]; tx < tile_rects[4 * i + 2]; ++tx) {
            unsigned long long tile = (unsigned long long)ty * tiles_x + tx;
            keys[off] = (tile << 32) | depth_bits;
            values[off] = off;
            isect_splat[off] = i;
            ++off;
        }
    }
}

// Tiles of each splat inside the band of tile rows [row_lo, row_hi): counts [N]. One thread per
// splat.
extern "C" __global__ void kiln_band_counts(const unsigned int* __restrict__ tile_rects, unsigned int n,
                                            unsigned int row_lo, unsigned int row_hi,
                                            unsigned int* __restrict__ counts) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int y0 = tile_rects[4 * i + 1] > row_lo ? tile_rects[4 * i + 1] : row_lo;
    unsigned int y1 = tile_rects[4 * i + 3] < row_hi ? tile_rects[4 * i + 3] : row_hi;
    unsigned int cols = tile_rects[4 * i + 2] - tile_rects[4 * i];
    counts[i] = y1 > y0 ? (y1 - y0) * cols : 0u;
}

// After the sort: sorted_ids[k] = splat of the intersection that landed at sorted position k.
extern "C" __global__ void kiln_gather_ids(const unsigned int* __restrict__ sorted_values,
                                           const unsigned int* __restrict__ isect_splat,
                                           unsigned int count, unsigned int* __restrict__ sorted_ids) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    sorted_ids[k] = isect_splat[sorted_values[k]];
}

// Per-tile [start, end) into the sorted list; `ranges [T, 2]` must be zeroed first (empty tiles stay
// [0, 0)). One thread per sorted intersection.
extern "C" __global__ void kiln_tile_ranges(const unsigned long long* __restrict__ sorted_keys,
                                            unsigned int count, unsigned int* __restrict__ ranges) {
    unsigned int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    unsigned int tile = (unsigned int)(sorted_keys[k] >> 32);
    if (k == 0 || (unsigned int)(sorted_keys[k - 1] >> 32) != tile) ranges[2 * tile] = k;
    if (k + 1 == count || (unsigned int)(sorted_keys[k + 1] >> 32) != tile) ranges[2 * tile + 1] = k + 1;
}

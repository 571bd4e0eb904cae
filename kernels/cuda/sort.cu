// Stable LSD radix sort of (u64 key, u32 value) pairs, 8 bits per pass. CPU twin: cpu/sort.rs
// (which orders by tile, then depth, then splat id; a stable sort of the bin list, whose values
// follow splat order, gives exactly that order).
//
// One pass over bits [shift, shift + 8): `kiln_radix_histogram` counts each block's digits into
// `hist[digit * blocks + block]`; the scan (scan.cu) over that digit-major array turns the counts
// into each (digit, block)'s first output slot; `kiln_radix_scatter` writes each block's items there
// in input order. Stability inside a block comes from processing KILN_SORT_THREADS items per round
// in thread order, ranking equal digits within a warp with `__match_any_sync` and across warps with
// per-warp counts in shared memory. Needs sm_70+ (`__match_any_sync`).
#define KILN_SORT_THREADS 256
#define KILN_SORT_WARPS (KILN_SORT_THREADS / KILN_WARP)
#define KILN_SORT_ROUNDS 16
#define KILN_SORT_CHUNK (KILN_SORT_THREADS * KILN_SORT_ROUNDS)
#define KILN_RADIX 256

extern "C" __global__ void kiln_radix_histogram(const unsigned long long* __restrict__ keys, unsigned int n,
                                                unsigned int shift, unsigned int blocks,
                                                unsigned int* __restrict__ hist) {
    __shared__ unsigned int counts[KILN_RADIX];
    unsigned int t = threadIdx.x;
    counts[t] = 0;
    __syncthreads();
    unsigned int lo = blockIdx.x * KILN_SORT_CHUNK;
    unsigned int hi = lo + KILN_SORT_CHUNK < n ? lo + KILN_SORT_CHUNK : n;
    for (unsigned int k = lo + t; k < hi; k += KILN_SORT_THREADS)
        atomicAdd(&counts[(unsigned int)(keys[k] >> shift) & (KILN_RADIX - 1)], 1u);
    __syncthreads();
    hist[t * blocks + blockIdx.x] = counts[t];
}

extern "C" __global__ void kiln_radix_scatter(const unsigned long long* __restrict__ keys_in,
                                              const unsigned int* __restrict__ values_in, unsigned int n,
                                              unsigned int shift, unsigned int blocks,
                                              const unsigned int* __restrict__ slots,
                                              unsigned long long* __restrict__ keys_out,
                                              unsigned int* __restrict__ values_out) {
    __shared__ unsigned int base[KILN_RADIX];
    __shared__ unsigned int warp_counts[KILN_SORT_WARPS][KILN_RADIX];
    unsigned int t = threadIdx.x;
    unsigned int lane = t % KILN_WARP, warp = t / KILN_WARP;
    base[t] = slots[t * blocks + blockIdx.x];
    for (unsigned int w = 0; w < KILN_SORT_WARPS; ++w) warp_counts[w][t] = 0;
    __syncthreads();
    unsigned int lo = blockIdx.x * KILN_SORT_CHUNK;
    unsigned int hi = lo + KILN_SORT_CHUNK < n ? lo + KILN_SORT_CHUNK : n;
    for (unsigned int round_lo = lo; round_lo < hi; round_lo += KILN_SORT_THREADS) {
        unsigned int k = round_lo + t;
        bool valid = k < hi;
        unsigned long long key = valid ? keys_in[k] : 0ull;
        // Invalid lanes take digit KILN_RADIX, which no valid lane shares.
        unsigned int digit = valid ? ((unsigned int)(key >> shift) & (KILN_RADIX - 1)) : KILN_RADIX;
        unsigned int peers = __match_any_sync(KILN_FULL_MASK, digit);
        unsigned int rank = __popc(peers & ((1u << lane) - 1u));
        bool leader = rank == 0;
        if (valid && leader) warp_counts[warp][digit] = __popc(peers);
        __syncthreads();
        // Thread t owns digit t: exclusive offsets of each warp within this round.
        unsigned int run = 0;
        for (unsigned int w = 0; w < KILN_SORT_WARPS; ++w) {
            unsigned int c = warp_counts[w][t];
            warp_counts[w][t] = run;
            run += c;
        }
        __syncthreads();
        if (valid) {
            unsigned int pos = base[digit] + warp_counts[warp][digit] + rank;
            keys_out[pos] = key;
            values_out[pos] = values_in[k];
        }
        __syncthreads();
        base[t] += run;
        for (unsigned int w = 0; w < KILN_SORT_WARPS; ++w) warp_counts[w][t] = 0;
        __syncthreads();
    }
}

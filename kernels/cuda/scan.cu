// Exclusive prefix sum of `n` u32 values with a u64 total, over chunks of KILN_SCAN_CHUNK values,
// one block of KILN_SCAN_THREADS threads per chunk, in three launches:
//   kiln_scan_chunk_sums    each chunk's sum (u64);
//   kiln_scan_chunk_offsets those sums scanned in place by one block (n / 4096 of them: 160 for a
//                           640k-entry radix histogram), and the total;
//   kiln_scan_apply         each chunk's exclusive sums from its offset.
// Used for tile-count offsets (n = splats) and radix-sort histograms (n = 256 × sort blocks). The
// first version scanned everything in one block, which left 131 of an H200's 132 multiprocessors
// idle: 2.8 ms per radix pass of a 1M-splat, 1080×1920 render, half of its sort (ncu).
// Within a chunk each thread owns KILN_SCAN_ITEMS consecutive values (its segment). `total` gets
// the u64 sum so the host can detect a list longer than 2^32 before trusting `out`. Integer sums:
// the result does not depend on the launch shape.
#define KILN_SCAN_THREADS 256
#define KILN_SCAN_ITEMS 16
#define KILN_SCAN_CHUNK (KILN_SCAN_THREADS * KILN_SCAN_ITEMS)

// Exclusive scan of one value per thread across the block (Hillis–Steele in `s`, which holds
// KILN_SCAN_THREADS values); `*total` gets the block's sum on every thread.
__device__ unsigned long long kiln_block_exclusive_scan(unsigned long long v, unsigned long long* s,
                                                        unsigned long long* total) {
    unsigned int t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (unsigned int d = 1; d < KILN_SCAN_THREADS; d *= 2) {
        unsigned long long add = t >= d ? s[t - d] : 0ull;
        __syncthreads();
        s[t] += add;
        __syncthreads();
    }
    *total = s[KILN_SCAN_THREADS - 1];
    unsigned long long exclusive = s[t] - v;
    // `s` is reused by the caller's next scan.
    __syncthreads();
    return exclusive;
}

// The sum of this thread's segment of chunk blockIdx.x.
__device__ unsigned long long kiln_segment_sum(const unsigned int* __restrict__ in, unsigned int n) {
    unsigned long long lo = (unsigned long long)blockIdx.x * KILN_SCAN_CHUNK + threadIdx.x * KILN_SCAN_ITEMS;
    unsigned long long sum = 0;
    for (unsigned int j = 0; j < KILN_SCAN_ITEMS; ++j)
        if (lo + j < n) sum += in[lo + j];
    return sum;
}

extern "C" __global__ void kiln_scan_chunk_sums(const unsigned int* __restrict__ in, unsigned int n,
                                                unsigned long long* __restrict__ chunk_sums) {
    __shared__ unsigned long long s[KILN_SCAN_THREADS];
    unsigned long long block_total;
    kiln_block_exclusive_scan(kiln_segment_sum(in, n), s, &block_total);
    if (threadIdx.x == 0) chunk_sums[blockIdx.x] = block_total;
}

// One block: `sums` [chunks] becomes each chunk's exclusive offset; `total` the sum of all.
extern "C" __global__ void kiln_scan_chunk_offsets(unsigned long long* __restrict__ sums, unsigned int chunks,
                                                   unsigned long long* __restrict__ total) {
    __shared__ unsigned long long s[KILN_SCAN_THREADS];
    unsigned long long carry = 0;
    for (unsigned int base = 0; base < chunks; base += KILN_SCAN_THREADS) {
        unsigned int k = base + threadIdx.x;
        unsigned long long round_total;
        unsigned long long exclusive = kiln_block_exclusive_scan(k < chunks ? sums[k] : 0ull, s, &round_total);
        if (k < chunks) sums[k] = carry + exclusive;
        carry += round_total;
    }
    if (threadIdx.x == 0) total[0] = carry;
}

extern "C" __global__ void kiln_scan_apply(const unsigned int* __restrict__ in, unsigned int n,
                                           const unsigned long long* __restrict__ offsets,
                                           unsigned int* __restrict__ out) {
    __shared__ unsigned long long s[KILN_SCAN_THREADS];
    unsigned long long block_total;
    unsigned long long run =
        offsets[blockIdx.x] + kiln_block_exclusive_scan(kiln_segment_sum(in, n), s, &block_total);
    unsigned long long lo = (unsigned long long)blockIdx.x * KILN_SCAN_CHUNK + threadIdx.x * KILN_SCAN_ITEMS;
    for (unsigned int j = 0; j < KILN_SCAN_ITEMS; ++j) {
        if (lo + j >= n) break;
        unsigned int v = in[lo + j];
        out[lo + j] = (unsigned int)run;
        run += v;
    }
}

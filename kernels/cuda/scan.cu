// Exclusive prefix sum of `n` u32 values with a u64 total, in ONE block of KILN_SCAN_THREADS
// threads: each thread sums a contiguous segment, the block scans the segment sums, then each
// thread writes its segment. O(n / threads) per thread; used for tile-count offsets (n = splats)
// and radix-sort histograms (n = 256 × blocks), where one pass over device memory is the cost.
// `total` gets the u64 sum so the host can detect a list longer than 2^32 before trusting `out`.
#define KILN_SCAN_THREADS 1024

extern "C" __global__ void kiln_exclusive_scan(const unsigned int* __restrict__ in, unsigned int n,
                                               unsigned int* __restrict__ out,
                                               unsigned long long* __restrict__ total) {
    __shared__ unsigned long long sums[KILN_SCAN_THREADS];
    unsigned int t = threadIdx.x;
    unsigned int seg = (n + KILN_SCAN_THREADS - 1) / KILN_SCAN_THREADS;
    unsigned int lo = t * seg;
    unsigned int hi = lo + seg < n ? lo + seg : n;
    unsigned long long s = 0;
    for (unsigned int k = lo; k < hi; ++k) s += in[k];
    sums[t] = s;
    __syncthreads();
    if (t == 0) {
        unsigned long long run = 0;
        for (unsigned int k = 0; k < KILN_SCAN_THREADS; ++k) {
            unsigned long long v = sums[k];
            sums[k] = run;
            run += v;
        }
        total[0] = run;
    }
    __syncthreads();
    unsigned long long run = sums[t];
    for (unsigned int k = lo; k < hi; ++k) {
        unsigned int v = in[k];
        out[k] = (unsigned int)run;
        run += v;
    }
}

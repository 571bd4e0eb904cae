// Host emulation of the CUDA execution model, just enough to run Kiln's kernels on a CPU so CI
// (which has no GPU) checks the kernels' math and the host launch code against the CPU twin.
// Used only by `src/cuda/emulator.rs`, which compiles prelude + this header + common.cuh + the
// kernel files + a generated launch table with the system C++ compiler (C++20).
//
// Model: the blocks of a launch run one after another; the threads of a block run as real OS
// threads, so `__syncthreads` (std::barrier), warp shuffles/votes (a per-warp exchange slot and
// barrier) and shared-memory atomics behave as on a GPU. `__shared__` becomes `static`: correct
// because blocks never overlap in time. Every warp must execute a warp intrinsic convergently (all
// 32 lanes), which Kiln's kernels do (full masks only).
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <math.h>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

namespace kiln_emu {
struct Block {
    std::barrier<> block_bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    std::vector<uint32_t> warp_slots;  // 32 per warp
    std::atomic<int> vote{0};
    Block(unsigned int threads)
        : block_bar((std::ptrdiff_t)threads), warp_slots(((threads + 31) / 32) * 32, 0) {
        for (unsigned int w = 0; w < (threads + 31) / 32; ++w) {
            unsigned int lanes = threads - w * 32 < 32 ? threads - w * 32 : 32;
            warp_bars.emplace_back(new std::barrier<>((std::ptrdiff_t)lanes));
        }
    }
};
inline thread_local Block* block = nullptr;
inline thread_local unsigned int linear = 0;  // thread index within the block
}  // namespace kiln_emu

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

inline void __syncthreads() { kiln_emu::block->block_bar.arrive_and_wait(); }

inline int kiln_emu_vote(int add) {
    auto* b = kiln_emu::block;
    b->block_bar.arrive_and_wait();
    if (add) b->vote.fetch_add(1);
    b->block_bar.arrive_and_wait();
    int r = b->vote.load();
    b->block_bar.arrive_and_wait();
    if (kiln_emu::linear == 0) b->vote.store(0);
    return r;
}
inline int __syncthreads_count(int p) { return kiln_emu_vote(p ? 1 : 0); }
inline int __syncthreads_or(int p) { return kiln_emu_vote(p ? 1 : 0) > 0 ? 1 : 0; }

template <class F>
inline uint32_t kiln_emu_warp(uint32_t mine, F&& read) {
    auto* b = kiln_emu::block;
    unsigned int warp = kiln_emu::linear / 32, lane = kiln_emu::linear % 32;
    uint32_t* slots = &b->warp_slots[warp * 32];
    slots[lane] = mine;
    b->warp_bars[warp]->arrive_and_wait();
    uint32_t r = read(slots, lane);
    b->warp_bars[warp]->arrive_and_wait();
    return r;
}

inline float __shfl_xor_sync(unsigned int, float v, int mask) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    uint32_t r = kiln_emu_warp(bits, [&](uint32_t* s, unsigned int lane) { return s[(lane ^ (unsigned)mask) % 32]; });
    float out;
    std::memcpy(&out, &r, 4);
    return out;
}

inline unsigned int __match_any_sync(unsigned int, unsigned int v) {
    return kiln_emu_warp(v, [&](uint32_t* s, unsigned int) {
        unsigned int m = 0;
        for (unsigned int l = 0; l < 32; ++l)
            if (s[l] == v) m |= 1u << l;
        return m;
    });
}

inline int __popc(unsigned int v) { return __builtin_popcount(v); }
inline unsigned int __float_as_uint(float v) {
    unsigned int u;
    std::memcpy(&u, &v, 4);
    return u;
}
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { return std::atomic_ref<unsigned int>(*p).fetch_add(v); }
inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
    std::atomic_ref<unsigned int> a(*p);
    unsigned int old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {
    }
    return old;
}
using std::isfinite;

namespace kiln_emu {
// Runs `body` on every thread of every block of the grid.
// Launches are serialised: `__shared__` statics, gridDim and blockDim are process-wide.
inline std::mutex launch_mutex;
inline void run_grid(dim3 grid, dim3 blk, const std::function<void()>& body) {
    std::lock_guard<std::mutex> guard(launch_mutex);
    gridDim = grid;
    blockDim = blk;
    unsigned int threads = blk.x * blk.y * blk.z;
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx) {
                Block b(threads);
                std::vector<std::thread> pool;
                pool.reserve(threads);
                for (unsigned int t = 0; t < threads; ++t) {
                    pool.emplace_back([&, t] {
                        block = &b;
                        linear = t;
                        blockIdx = dim3{bx, by, bz};
                        threadIdx = dim3{t % blk.x, (t / blk.x) % blk.y, t / (blk.x * blk.y)};
                        body();
                        // A finished thread no longer takes part in barriers (as on a GPU).
                        b.warp_bars[t / 32]->arrive_and_drop();
                        b.block_bar.arrive_and_drop();
                    });
                }
                for (auto& th : pool) th.join();
            }
}

template <class... A, std::size_t... I>
void call_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}
template <class... A>
void call(void (*f)(A...), void** args) {
    call_impl(f, args, std::index_sequence_for<A...>{});
}
}  // namespace kiln_emu

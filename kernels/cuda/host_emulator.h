// Host emulation of the CUDA execution model, just enough to run Kiln's kernels on a CPU so CI
// (which has no GPU) checks the kernels' math and the host launch code against the CPU twin.
// Used only by `src/cuda/emulator.rs`, which compiles this header + prelude + common.cuh + the
// kernel files + a generated launch table with the system C++ compiler (C++20).
//
// Model: the blocks of a launch run one after another on the calling OS thread; the threads of a
// block run as cooperative user-space fibers on that same thread, each on its own stack. A
// round-robin scheduler resumes each runnable fiber until it reaches a sync point, where it yields
// back: `__syncthreads`/`__syncthreads_count`/`__syncthreads_or` wait at the block barrier; warp
// shuffles/votes (`__shfl_xor_sync`, `__match_any_sync`: a per-warp exchange slot between two warp
// barriers) wait at their warp's barrier. A barrier is released when every not-yet-finished fiber
// of its scope (block, or warp) waits at it; a fiber that has returned from the kernel no longer
// counts, like an exited thread on a GPU. If no barrier can be released (e.g. some fibers wait at
// the block barrier while others of the same warp wait at a warp intrinsic), the emulator prints
// the state to stderr and aborts rather than hanging.
//
// Why fibers rather than one OS thread per GPU thread (the previous model): the semantics are the
// same, but a barrier costs a few user-space context switches instead of futex sleeps and wake-ups
// of hundreds of OS threads, which made the emulator several times slower (mostly kernel time) on
// small CI machines. The switch itself is a short assembly routine on x86-64 (glibc's swapcontext
// makes a signal-mask system call on every switch, which then dominated the run time); elsewhere,
// or with KILN_EMU_UCONTEXT defined, it is POSIX ucontext (makecontext/swapcontext).
//
// Consequences: `threadIdx`, `blockIdx` and the thread's linear index are plain globals that the
// scheduler sets before resuming a fiber. `__shared__` becomes `static`: correct because blocks
// never overlap in time. Atomics are plain read-modify-writes: only one fiber runs at a time and
// none yields inside them. Launches are serialised by `launch_mutex` (tests launch from parallel
// threads; the globals above, the `__shared__` statics and the fiber stacks are process-wide).
// Every warp must execute a warp intrinsic convergently (all live lanes), which Kiln's kernels do
// (full masks only). Each fiber has a 128 KiB stack with a guard page: a kernel needing more
// faults rather than corrupting memory.
#pragma once
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <math.h>
#include <mutex>
#include <utility>
#include <vector>

struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

// Per-fiber state, switched by the scheduler (see kiln_emu::run_block).
inline dim3 threadIdx;
inline dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

// Context switch. glibc's swapcontext saves and restores the signal mask with a system call on
// every switch, which dominated the emulator's run time; on x86-64 a short routine switching the
// callee-saved registers (plus MXCSR and the x87 control word) replaces it. Elsewhere, or with
// KILN_EMU_UCONTEXT defined, the portable ucontext path runs.
#if defined(__x86_64__) && !defined(KILN_EMU_UCONTEXT)
#define KILN_EMU_ASM_SWITCH 1
// kiln_emu_switch(save, to): pushes the callee-saved state, stores the stack pointer to *save,
// loads `to` as the stack pointer and pops the state saved there (see `start_fiber` for the
// layout of a fresh fiber's stack).
extern "C" __attribute__((visibility("hidden"))) void kiln_emu_switch(void** save, void* to);
asm(R"(
    .pushsection .text
    .globl kiln_emu_switch
    .hidden kiln_emu_switch
    .type kiln_emu_switch, @function
kiln_emu_switch:
    .cfi_startproc
    .byte 0xf3, 0x0f, 0x1e, 0xfa
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size kiln_emu_switch, .-kiln_emu_switch
    .popsection
)");
#endif

namespace kiln_emu {
enum class State : unsigned char { Ready, BlockWait, WarpWait, Done };

struct Fiber {
#ifdef KILN_EMU_ASM_SWITCH
    void* sp = nullptr;
#else
    ucontext_t ctx;
#endif
    State state = State::Ready;
};

// The running launch's block state. Only touched by the OS thread that holds `launch_mutex`.
inline std::vector<Fiber> fibers;
inline std::vector<uint32_t> warp_slots;  // 32 per warp
inline unsigned int vote = 0;
inline unsigned int linear = 0;  // the running fiber's thread index within the block
#ifdef KILN_EMU_ASM_SWITCH
inline void* scheduler_sp = nullptr;
#else
inline ucontext_t scheduler;
#endif
inline const std::function<void()>* kernel_body = nullptr;

// Fiber stacks: one per thread of the largest block seen so far, each with a guard page below it
// (a stack overflow faults instead of corrupting a neighbour). Kept across blocks and launches.
constexpr std::size_t stack_bytes = 128 * 1024;
inline std::vector<char*> stacks;
inline std::size_t page_bytes() {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (std::size_t)p : 4096;
}
inline void ensure_stacks(unsigned int threads) {
    std::size_t page = page_bytes();
    while (stacks.size() < threads) {
        void* m = mmap(nullptr, stack_bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            std::fprintf(stderr, "kiln emulator: cannot map a %zu-byte fiber stack\n", stack_bytes + page);
            std::abort();
        }
        mprotect(m, page, PROT_NONE);
        stacks.push_back(static_cast<char*>(m) + page);
    }
}

// Yields the running fiber to the scheduler, which resumes it once the barrier it waits at is
// released (`state` is then back to Ready).
inline void wait(State s) {
    Fiber& f = fibers[linear];
    f.state = s;
#ifdef KILN_EMU_ASM_SWITCH
    kiln_emu_switch(&f.sp, scheduler_sp);
#else
    swapcontext(&f.ctx, &scheduler);
#endif
}

// Switches from the scheduler to fiber `f` until it waits or finishes.
inline void resume(Fiber& f) {
#ifdef KILN_EMU_ASM_SWITCH
    kiln_emu_switch(&scheduler_sp, f.sp);
#else
    swapcontext(&scheduler, &f.ctx);
#endif
}

// A fiber's whole life: the kernel body, then back to the scheduler for good.
extern "C" inline void kiln_emu_fiber_main() {
    (*kernel_body)();
    // Finished: no longer takes part in barriers (as on a GPU).
    fibers[linear].state = State::Done;
#ifdef KILN_EMU_ASM_SWITCH
    void* dead;
    kiln_emu_switch(&dead, scheduler_sp);
    __builtin_unreachable();
#endif
    // ucontext: returning resumes `uc_link`, the scheduler.
}

// Makes fiber `f` start `kiln_emu_fiber_main` on `stack` when next resumed.
inline void start_fiber(Fiber& f, char* stack) {
#ifdef KILN_EMU_ASM_SWITCH
    // From the top: a zero return address (ends backtraces), the entry address that
    // kiln_emu_switch's `ret` jumps to (16-byte aligned, so the entry sees the ABI's call
    // alignment), six zeroed callee-saved registers, then MXCSR and the x87 control word.
    uintptr_t top = ((uintptr_t)(stack + stack_bytes)) & ~(uintptr_t)15;
    uint64_t* p = (uint64_t*)(top - 16);
    p[1] = 0;
    p[0] = (uint64_t)(uintptr_t)&kiln_emu_fiber_main;
    uint64_t* q = p - 6;
    for (int i = 0; i < 6; ++i) q[i] = 0;
    uint32_t* ctl = (uint32_t*)(q - 1);
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    ctl[0] = mxcsr;
    ctl[1] = fpucw;
    f.sp = (void*)(q - 1);
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = stack_bytes;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, kiln_emu_fiber_main, 0);
#endif
}

// No barrier can be released: report and abort rather than hang.
[[noreturn]] inline void deadlock(unsigned int threads) {
    unsigned int at_block = 0, at_warp = 0, done = 0;
    for (unsigned int t = 0; t < threads; ++t) {
        at_block += fibers[t].state == State::BlockWait;
        at_warp += fibers[t].state == State::WarpWait;
        done += fibers[t].state == State::Done;
    }
    std::fprintf(stderr,
                 "kiln emulator: deadlock in block (%u, %u, %u) of grid (%u, %u, %u), block (%u, %u, %u): "
                 "%u threads finished, %u wait at a block barrier (__syncthreads*), %u wait at a warp "
                 "intrinsic, and no barrier can be released (some barrier is not reached by every live "
                 "thread of its block or warp). Per warp (B block barrier, W warp intrinsic, . finished):\n",
                 blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
                 blockDim.z, done, at_block, at_warp);
    for (unsigned int w = 0; w * 32 < threads; ++w) {
        unsigned int hi = w * 32 + 32 < threads ? w * 32 + 32 : threads;
        std::fprintf(stderr, "  warp %u: ", w);
        for (unsigned int t = w * 32; t < hi; ++t) {
            State s = fibers[t].state;
            std::fputc(s == State::Done ? '.' : s == State::BlockWait ? 'B' : s == State::WarpWait ? 'W' : 'R', stderr);
        }
        std::fputc('\n', stderr);
    }
    std::fflush(stderr);
    std::abort();
}

// Runs one block (blockIdx already set) to completion.
inline void run_block(unsigned int threads) {
    const dim3 blk = blockDim;
    for (unsigned int t = 0; t < threads; ++t) {
        fibers[t].state = State::Ready;
        start_fiber(fibers[t], stacks[t]);
    }
    vote = 0;
    unsigned int live = threads;
    while (live > 0) {
        // Resume every runnable fiber until it waits or finishes.
        for (unsigned int t = 0; t < threads; ++t) {
            Fiber& f = fibers[t];
            if (f.state != State::Ready) continue;
            linear = t;
            threadIdx = dim3{t % blk.x, (t / blk.x) % blk.y, t / (blk.x * blk.y)};
            resume(f);
            if (f.state == State::Done) --live;
        }
        if (live == 0) break;
        // Every live fiber now waits at a barrier. Release the block barrier if all of them wait
        // there, else every warp whose live lanes all wait at its warp barrier.
        bool released = false;
        unsigned int at_block = 0;
        for (unsigned int t = 0; t < threads; ++t) at_block += fibers[t].state == State::BlockWait;
        if (at_block == live) {
            for (unsigned int t = 0; t < threads; ++t)
                if (fibers[t].state == State::BlockWait) fibers[t].state = State::Ready;
            released = true;
        } else {
            for (unsigned int w = 0; w * 32 < threads; ++w) {
                unsigned int lo = w * 32, hi = lo + 32 < threads ? lo + 32 : threads;
                bool all = true, any = false;
                for (unsigned int t = lo; t < hi; ++t) {
                    State s = fibers[t].state;
                    if (s == State::Done) continue;
                    if (s != State::WarpWait) {
                        all = false;
                        break;
                    }
                    any = true;
                }
                if (all && any) {
                    for (unsigned int t = lo; t < hi; ++t)
                        if (fibers[t].state == State::WarpWait) fibers[t].state = State::Ready;
                    released = true;
                }
            }
        }
        if (!released) deadlock(threads);
    }
}
}  // namespace kiln_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

inline void __syncthreads() { kiln_emu::wait(kiln_emu::State::BlockWait); }

inline int kiln_emu_vote(int add) {
    __syncthreads();
    if (add) kiln_emu::vote += 1;
    __syncthreads();
    int r = (int)kiln_emu::vote;
    __syncthreads();
    if (kiln_emu::linear == 0) kiln_emu::vote = 0;
    return r;
}
inline int __syncthreads_count(int p) { return kiln_emu_vote(p ? 1 : 0); }
inline int __syncthreads_or(int p) { return kiln_emu_vote(p ? 1 : 0) > 0 ? 1 : 0; }

template <class F>
inline uint32_t kiln_emu_warp(uint32_t mine, F&& read) {
    unsigned int warp = kiln_emu::linear / 32, lane = kiln_emu::linear % 32;
    uint32_t* slots = &kiln_emu::warp_slots[warp * 32];
    slots[lane] = mine;
    kiln_emu::wait(kiln_emu::State::WarpWait);
    uint32_t r = read(slots, lane);
    kiln_emu::wait(kiln_emu::State::WarpWait);
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
// Plain read-modify-writes: fibers never yield inside them and only one OS thread runs a launch.
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
    unsigned int old = *p;
    *p = old + v;
    return old;
}
inline unsigned int atomicMax(unsigned int* p, unsigned int v) {
    unsigned int old = *p;
    if (old < v) *p = v;
    return old;
}
using std::isfinite;

namespace kiln_emu {
// Runs `body` on every thread of every block of the grid (blocks in order, each block's threads as
// fibers on the calling OS thread). Launches are serialised: `__shared__` statics, the per-fiber
// globals, gridDim, blockDim and the fiber stacks are process-wide.
inline std::mutex launch_mutex;
inline void run_grid(dim3 grid, dim3 blk, const std::function<void()>& body) {
    std::lock_guard<std::mutex> guard(launch_mutex);
    gridDim = grid;
    blockDim = blk;
    unsigned int threads = blk.x * blk.y * blk.z;
    if (threads == 0) return;
    ensure_stacks(threads);
    fibers.assign(threads, Fiber{});
    warp_slots.assign(((threads + 31) / 32) * 32, 0);
    kernel_body = &body;
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx) {
                blockIdx = dim3{bx, by, bz};
                run_block(threads);
            }
    kernel_body = nullptr;
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

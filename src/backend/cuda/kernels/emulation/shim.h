// A CPU emulation of the CUDA execution model, just enough to run ember's kernels unchanged under g++ (see
// host_source.py), so that their logic is checked before any GPU runs them.
//
// Every thread of a block is a fiber on the calling OS thread (its own stack, switched by fiber_switch below), run
// by a round-robin scheduler: a thread runs until it waits at a barrier or returns. __syncthreads is a barrier of
// the block's threads; a warp shuffle writes the lane's value to a per-warp slot array, waits at the warp's barrier,
// reads its source lane's slot and waits again. A thread that returns leaves both barriers (drop), as an exited
// thread stops counting on a GPU.
// Blocks run one after another, so `__shared__` can be `static`: one copy, used by one block at a time.
// Fibers rather than OS threads: a block of 256 OS threads meeting at barriers spent nearly all its time in the
// kernel's scheduler (the whole emulation took some 12 minutes on 2 cores, against about a minute now); a fiber
// switch is a dozen instructions. A round in which no thread moves while some still wait is a deadlock (a
// __syncthreads or warp shuffle that not every thread reaches, which hangs or misbehaves on a GPU): the emulation
// says so and aborts.
//
// What this cannot show: speed, memory alignment faults (a misaligned float4 load is legal on x86), shared-memory
// and register limits, races between threads (a fiber runs until it waits, so their interleaving is one of many),
// and anything about the driver (graphs, streams). Floating point is IEEE single precision like the GPU's; compile
// with -ffp-contract=off, the twin of NVRTC's --fmad=false.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <functional>
#include <vector>

struct uint3_ {
    unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline thread_local uint3_ threadIdx;
inline thread_local uint3_ blockIdx;
inline dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct float4 {
    float x, y, z, w;
};
struct uint4 {
    unsigned x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
using std::max;
using std::min;
inline float __int_as_float(int i) {
    float f;
    std::memcpy(&f, &i, 4);
    return f;
}

// A barrier of fibers: released when every thread still counting has arrived; the last to arrive goes on, the
// others yield to the scheduler until the generation changes.
struct FiberBarrier {
    unsigned expected = 0, arrived = 0;
    uint64_t generation = 0;
};
struct WarpState {
    FiberBarrier barrier;
    uint64_t slots[32];
};
inline thread_local WarpState* this_warp;
inline thread_local FiberBarrier* this_block;

#if !defined(__x86_64__)
#error "the emulation's fiber switch is written for x86-64 (System V ABI)"
#endif
// Saves the callee-saved registers on the current stack, stores its pointer in *save, and resumes the stack at
// `load` (saved the same way, or prepared by start_fiber). Everything else is caller-saved in the System V ABI;
// the kernels change neither MXCSR nor the x87 control word, so those are not switched.
extern "C" void fiber_switch(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .type fiber_switch, @function
fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fiber_switch, .-fiber_switch
)");

inline thread_local void* scheduler_stack;
inline thread_local void** running_stack;
// Arrivals and departures so far: the scheduler's measure of progress.
inline thread_local uint64_t barrier_events;

inline void yield_to_scheduler() { fiber_switch(running_stack, scheduler_stack); }

inline void release_if_complete(FiberBarrier& b) {
    if (b.arrived > 0 && b.arrived == b.expected) {
        b.arrived = 0;
        b.generation++;
    }
}
inline void arrive_and_wait(FiberBarrier& b) {
    barrier_events++;
    b.arrived++;
    const uint64_t generation = b.generation;
    release_if_complete(b);
    while (b.generation == generation) yield_to_scheduler();
}
inline void arrive_and_drop(FiberBarrier& b) {
    barrier_events++;
    b.expected--;
    release_if_complete(b);
}

inline void __syncthreads() { arrive_and_wait(*this_block); }

template <class T>
T shuffle_from(T v, int source_lane) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    this_warp->slots[threadIdx.x % 32] = bits;
    arrive_and_wait(this_warp->barrier);
    const uint64_t got = this_warp->slots[source_lane & 31];
    arrive_and_wait(this_warp->barrier);  // nobody overwrites a slot before every lane has read
    T out;
    std::memcpy(&out, &got, sizeof(T));
    return out;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    return shuffle_from(v, (int)(threadIdx.x % 32) ^ lane_mask);
}
template <class T>
T __shfl_sync(unsigned, T v, int source_lane) {
    return shuffle_from(v, source_lane);
}

// The four signed bytes of a times those of b, summed into c: PTX's dp4a.s32.s32, which __dp4a emits (sm_61 on).
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}

// IEEE binary16 conversions, round to nearest even: what PTX's cvt.f32.f16 and cvt.rn.f16.f32 compute.
inline float host_f16_to_f32(unsigned short h) {
    const unsigned sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    float v;
    if (exponent == 0) v = std::ldexp((float)mantissa, -24);
    else if (exponent == 31) v = mantissa ? NAN : INFINITY;
    else v = std::ldexp((float)(mantissa | 1024), (int)exponent - 25);
    return sign ? -v : v;
}
inline unsigned short host_f32_to_f16(float f) {
    const _Float16 h = (_Float16)f;  // GCC's binary16 rounds to nearest even
    unsigned short bits;
    std::memcpy(&bits, &h, 2);
    return bits;
}

// One emulated thread: its saved stack pointer and where it is in the block.
struct Fiber {
    void* stack_pointer;
    uint3_ index;
    unsigned warp;
    bool done = false;
};
inline thread_local const std::function<void()>* fiber_kernel;
inline thread_local Fiber* running_fiber;

[[noreturn]] inline void fiber_main() {
    Fiber* self = running_fiber;
    (*fiber_kernel)();
    arrive_and_drop(this_warp->barrier);
    arrive_and_drop(*this_block);
    self->done = true;
    fiber_switch(&self->stack_pointer, scheduler_stack);  // never resumed
    __builtin_unreachable();
}

// Stacks reused from block to block (uninitialised memory: the pages a kernel never touches are never committed).
constexpr size_t FIBER_STACK_BYTES = 256 * 1024;
inline std::vector<std::unique_ptr<char[]>>& fiber_stacks(size_t n) {
    static thread_local std::vector<std::unique_ptr<char[]>> stacks;
    while (stacks.size() < n) stacks.emplace_back(new char[FIBER_STACK_BYTES]);
    return stacks;
}

// A fresh stack that fiber_switch resumes into fiber_main: six zero registers, then fiber_main as the return
// address, placed so that fiber_main starts with the stack aligned as after a call (rsp = 8 modulo 16).
inline void* start_fiber(char* stack) {
    auto top = reinterpret_cast<uintptr_t>(stack + FIBER_STACK_BYTES) & ~uintptr_t(15);
    auto* words = reinterpret_cast<uintptr_t*>(top);
    words[-1] = 0;  // fiber_main's own return address: it never returns
    words[-2] = reinterpret_cast<uintptr_t>(&fiber_main);
    for (int r = 3; r <= 8; r++) words[-r] = 0;
    return &words[-8];
}

// Runs `kernel` (a callable that invokes the kernel function) over `grid` blocks of `block` threads.
template <class F>
void launch(dim3 grid, dim3 block, F kernel) {
    blockDim = block;
    gridDim = grid;
    const unsigned n = block.x * block.y * block.z, n_warps = (n + 31) / 32;
    const std::function<void()> body = kernel;
    auto& stacks = fiber_stacks(n);
    std::vector<Fiber> fibers(n);
    std::vector<WarpState> warps(n_warps);
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                FiberBarrier block_barrier{n, 0, 0};
                for (unsigned w = 0; w < n_warps; w++) warps[w].barrier = FiberBarrier{std::min(32u, n - 32 * w), 0, 0};
                for (unsigned t = 0; t < n; t++) {
                    Fiber& f = fibers[t];
                    f.index = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                    f.warp = t / 32;
                    f.done = false;
                    f.stack_pointer = start_fiber(stacks[t].get());
                }
                blockIdx = {bx, by, bz};
                this_block = &block_barrier;
                fiber_kernel = &body;
                for (unsigned remaining = n; remaining > 0;) {
                    const uint64_t events_before = barrier_events;
                    unsigned finished = 0;
                    for (Fiber& f : fibers) {
                        if (f.done) continue;
                        threadIdx = f.index;
                        this_warp = &warps[f.warp];
                        running_fiber = &f;
                        running_stack = &f.stack_pointer;
                        fiber_switch(&scheduler_stack, f.stack_pointer);
                        finished += f.done;
                    }
                    remaining -= finished;
                    if (remaining > 0 && finished == 0 && barrier_events == events_before) {
                        std::fprintf(stderr, "emulation: deadlock in block (%u,%u,%u): %u threads wait at barriers "
                                             "that never release (a __syncthreads or shuffle not every thread "
                                             "reaches)\n", bx, by, bz, remaining);
                        std::abort();
                    }
                }
            }
}

// A CPU emulation of the CUDA execution model, just enough to run ember's kernels unchanged under g++ (see
// host_source.py), so that their logic is checked before any GPU runs them.
//
// Every thread of a block is an OS thread. __syncthreads is a barrier of the block's threads; a warp shuffle
// writes the lane's value to a per-warp slot array, waits at the warp's barrier, reads its source lane's slot and
// waits again. Blocks run one after another, so `__shared__` can be `static`: one copy, used by one block at a time.
// A thread that returns leaves both barriers (arrive_and_drop), as an exited thread stops counting on a GPU.
//
// What this cannot show: speed, memory alignment faults (a misaligned float4 load is legal on x86), shared-memory
// and register limits, and anything about the driver (graphs, streams). Floating point is IEEE single precision
// like the GPU's; compile with -ffp-contract=off, the twin of NVRTC's --fmad=false.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
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

struct WarpState {
    std::barrier<>* barrier;
    uint64_t slots[32];
};
inline thread_local WarpState* this_warp;
inline thread_local std::barrier<>* this_block;

inline void __syncthreads() { this_block->arrive_and_wait(); }

template <class T>
T shuffle_from(T v, int source_lane) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    this_warp->slots[threadIdx.x % 32] = bits;
    this_warp->barrier->arrive_and_wait();
    const uint64_t got = this_warp->slots[source_lane & 31];
    this_warp->barrier->arrive_and_wait();  // nobody overwrites a slot before every lane has read
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

// Runs `kernel` (a callable that invokes the kernel function) over `grid` blocks of `block` threads.
template <class F>
void launch(dim3 grid, dim3 block, F kernel) {
    blockDim = block;
    gridDim = grid;
    const unsigned n = block.x * block.y * block.z, n_warps = (n + 31) / 32;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::barrier<> block_barrier(n);
                std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
                std::vector<WarpState> warps(n_warps);
                for (unsigned w = 0; w < n_warps; w++) {
                    warp_barriers.emplace_back(new std::barrier<>(std::min(32u, n - 32 * w)));
                    warps[w].barrier = warp_barriers[w].get();
                }
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < n; t++) {
                    threads.emplace_back([&, t] {
                        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                        blockIdx = {bx, by, bz};
                        this_block = &block_barrier;
                        this_warp = &warps[t / 32];
                        kernel();
                        this_warp->barrier->arrive_and_drop();
                        this_block->arrive_and_drop();
                    });
                }
                for (auto& thread : threads) thread.join();
            }
}

// Definitions shared by every kernel of the CUDA backend. `module.rs` compiles this file followed by each `.cu`
// file as one NVRTC program.
//
// Batch invariance: a token's results must not depend on what else is in its step (the CPU backend promises the
// same, and `tests/batch_invariance.rs` holds it to it), yet a step of a few tokens runs `project_small` and a
// larger one `matmul_tiled`. Both therefore compute every dot product in one order, written once here: each 32-wide
// block as 4 slices of 8 products chained with explicit FMAs (`slice_dot`), the slices summed as (s0 + s1) +
// (s2 + s3) (`block_dot`), the blocks summed in column order. The program is compiled with --fmad=false so that
// the compiler contracts no other multiply-add differently in the two kernels; every FMA is written out.
//
// No include directive anywhere: NVRTC must compile these without the CUDA toolkit's headers (the PyPI wheel CI
// uses ships only nvrtc.h), so half-precision conversions are the PTX instructions `cuda_fp16.h` itself emits.
//
// Argument structs (`struct Projection`, ...) are mirrored field for field by `#[repr(C)]` structs in `launch.rs`;
// both sides assert the size. Pointers first, then 32-bit fields, so that neither side needs hidden padding.

typedef unsigned int u32;
typedef unsigned short u16;

#define FULL_MASK 0xffffffffu

// Quantized block types, as `QuantType` numbers them in `packing.rs`.
#define TYPE_Q4_0 0
#define TYPE_Q4_1 1
#define TYPE_Q8_0 2

// Every quantized block covers 32 consecutive elements of a row (ggml's QK).
#define QK 32

// Threads of every block that computes an RMSNorm (`rms_norm`, and `project_small` where the norm is fused): the
// sum of squares is split by thread, so one block size keeps the fused and the unfused norm equal bit for bit.
#define NORM_THREADS 128

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Round to nearest even, as `half::f16::from_f32` does on the CPU path.
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float neg_infinity() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

// The sum of `v` over the block, returned to every thread. `scratch` holds 32 floats of shared memory. Every
// thread of the block must call it (it synchronizes), and blockDim.x must be a multiple of 32.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // a previous call may still be reading `scratch`
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}

// ---- Packed quantized matrices ----
//
// `packing.rs` splits each ggml block into its quants and its scales (so both load aligned):
//   qs: [rows][blocks per row][QWORDS] u32, the block's quant bytes unchanged (little-endian words);
//   sc: [rows][blocks per row] u32, f16 bits of d in the low half, of m (Q4_1 only) in the high half.
// A block is read as 4 slices of 8 elements; slice s of a 4-bit block is word s, whose byte i holds element
// 4s + i in its low nibble and element 4s + 16 + i in its high nibble (ggml's order); slice s of a Q8_0 block is
// words 2s and 2s + 1, elements 8s .. 8s + 7.

template <int TYPE> struct Quant;
template <> struct Quant<TYPE_Q4_0> { static const int QWORDS = 4; };
template <> struct Quant<TYPE_Q4_1> { static const int QWORDS = 4; };
template <> struct Quant<TYPE_Q8_0> { static const int QWORDS = 8; };

// Offsets within the block of slice s's two runs of 4 elements.
template <int TYPE>
__device__ __forceinline__ void slice_offsets(int s, int& first, int& second) {
    if (TYPE == TYPE_Q8_0) {
        first = 8 * s;
        second = 8 * s + 4;
    } else {
        first = 4 * s;
        second = 4 * s + 16;
    }
}

// Dequantizes slice s of the block at `qb` (its QWORDS words) with scale word `scale`: `a` gets the elements at
// the slice's first offset, `b` those at its second. The formulas are ggml's (and `blocks.rs`'s): Q8_0 x = d·q,
// Q4_1 x = d·q + m, Q4_0 x = d·(q − 8).
template <int TYPE>
__device__ __forceinline__ void slice_dequant(const u32* qb, u32 scale, int s, float a[4], float b[4]) {
    const float d = f16_to_f32((u16)(scale & 0xffffu));
    if (TYPE == TYPE_Q8_0) {
        const u32 w0 = qb[2 * s], w1 = qb[2 * s + 1];
        for (int i = 0; i < 4; i++) {
            a[i] = d * (float)(signed char)((w0 >> (8 * i)) & 0xffu);
            b[i] = d * (float)(signed char)((w1 >> (8 * i)) & 0xffu);
        }
    } else if (TYPE == TYPE_Q4_1) {
        const u32 w = qb[s];
        const float m = f16_to_f32((u16)(scale >> 16));
        for (int i = 0; i < 4; i++) {
            a[i] = d * (float)((w >> (8 * i)) & 0xfu) + m;
            b[i] = d * (float)((w >> (8 * i + 4)) & 0xfu) + m;
        }
    } else {
        const u32 w = qb[s];
        for (int i = 0; i < 4; i++) {
            a[i] = d * (float)((int)((w >> (8 * i)) & 0xfu) - 8);
            b[i] = d * (float)((int)((w >> (8 * i + 4)) & 0xfu) - 8);
        }
    }
}

__device__ __forceinline__ float4 load_float4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// One slice's share of a dot product: the products of its 8 elements, in element order, chained with FMAs.
__device__ __forceinline__ float slice_dot(const float wa[4], const float wb[4], float4 xa, float4 xb) {
    float r = wa[0] * xa.x;
    r = fmaf(wa[1], xa.y, r);
    r = fmaf(wa[2], xa.z, r);
    r = fmaf(wa[3], xa.w, r);
    r = fmaf(wb[0], xb.x, r);
    r = fmaf(wb[1], xb.y, r);
    r = fmaf(wb[2], xb.z, r);
    r = fmaf(wb[3], xb.w, r);
    return r;
}

// A block's dot product from its slices' shares: the order in which a butterfly over 4 lanes (xor 1, then xor 2)
// adds them, so that a warp and a single thread agree bit for bit.
__device__ __forceinline__ float block_dot(float s0, float s1, float s2, float s3) { return (s0 + s1) + (s2 + s3); }

// x ⊙ (1 / rms) ⊙ w for 4 elements, in the order `rms_norm` computes them: (x · inv) · w.
__device__ __forceinline__ float4 normalize4(float4 x, float inv, float4 w) {
    return make_float4(x.x * inv * w.x, x.y * inv * w.y, x.z * inv * w.z, x.w * inv * w.w);
}

// 1 / rms of a row of `width` floats, returned to every thread: the one formula of the fused and the unfused norm
// (the CPU's 1 / sqrt(mean + eps), not the approximate rsqrtf), summed in the order of a block of NORM_THREADS.
__device__ float inverse_rms(const float* x, int width, float eps, float* scratch) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < width; i += blockDim.x) ss = fmaf(x[i], x[i], ss);
    ss = block_sum(ss, scratch);
    return 1.0f / sqrtf(ss / (float)width + eps);
}

// silu(g)·u as the CPU's scalar kernel writes it: g / (1 + e^−g) · u.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

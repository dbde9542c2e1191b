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

// Weight types, as `PackedType` numbers them in `packing.rs`.
#define TYPE_Q4_0 0
#define TYPE_Q4_1 1
#define TYPE_Q8_0 2
#define TYPE_Q5_0 3
#define TYPE_Q5_1 4
#define TYPE_Q2_K 5
#define TYPE_Q3_K 6
#define TYPE_Q4_K 7
#define TYPE_Q5_K 8
#define TYPE_Q6_K 9
#define TYPE_F16 10
#define TYPE_BF16 11
#define TYPE_F32 12
#define TYPE_MXFP4 13
#define TYPE_IQ4_NL 14
#define TYPE_IQ4_XS 15
#define TYPE_IQ3_XXS 16
#define TYPE_IQ3_S 17
#define TYPE_IQ2_XXS 18
#define TYPE_IQ2_XS 19
#define TYPE_IQ2_S 20
#define TYPE_IQ1_S 21
#define TYPE_IQ1_M 22
#define TYPE_TQ1_0 23
#define TYPE_TQ2_0 24

// Calls X(suffix, TYPE) for every weight type: each kernel that reads weights is instantiated once per type, named
// with the suffix (`project_small_q4_k`), the list `PackedType::ALL` and `kernel_suffix` give on the Rust side.
// A backend compiles only the types its model has: `module.rs` then defines EMBER_WEIGHT_TYPES, their list, first.
#ifdef EMBER_WEIGHT_TYPES
#define FOR_EACH_WEIGHT_TYPE(X) EMBER_WEIGHT_TYPES(X)
#else
#define FOR_EACH_WEIGHT_TYPE(X) \
    X(q4_0, TYPE_Q4_0) X(q4_1, TYPE_Q4_1) X(q8_0, TYPE_Q8_0) X(q5_0, TYPE_Q5_0) X(q5_1, TYPE_Q5_1) \
    X(q2_k, TYPE_Q2_K) X(q3_k, TYPE_Q3_K) X(q4_k, TYPE_Q4_K) X(q5_k, TYPE_Q5_K) X(q6_k, TYPE_Q6_K) \
    X(f16, TYPE_F16) X(bf16, TYPE_BF16) X(f32, TYPE_F32) X(mxfp4, TYPE_MXFP4) \
    X(iq4_nl, TYPE_IQ4_NL) X(iq4_xs, TYPE_IQ4_XS) X(iq3_xxs, TYPE_IQ3_XXS) X(iq3_s, TYPE_IQ3_S) \
    X(iq2_xxs, TYPE_IQ2_XXS) X(iq2_xs, TYPE_IQ2_XS) X(iq2_s, TYPE_IQ2_S) X(iq1_s, TYPE_IQ1_S) X(iq1_m, TYPE_IQ1_M) \
    X(tq1_0, TYPE_TQ1_0) X(tq2_0, TYPE_TQ2_0)
#endif
// The same for the routed experts' kernels (moe.cu), which a backend compiles for its experts' types only (none for
// a dense model): `module.rs` defines EMBER_EXPERT_TYPES beside EMBER_WEIGHT_TYPES; without it, every type.
#ifdef EMBER_EXPERT_TYPES
#define FOR_EACH_EXPERT_TYPE(X) EMBER_EXPERT_TYPES(X)
#else
#define FOR_EACH_EXPERT_TYPE(X) FOR_EACH_WEIGHT_TYPE(X)
#endif

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

// RoPE of one pair (x0, x1) by (c, s), as the CPU's `rope_pair`: x0·c − x1·s and x1·c + x0·s, each an FMA over the
// other product rounded, so that a rotated query or key is the CPU's bit for bit (rope_kv.cu, latent.cu) and a
// cache stores the same bytes on both backends.
__device__ __forceinline__ void rope_pair(float& x0, float& x1, float c, float s) {
    const float r0 = fmaf(x0, c, -(x1 * s)), r1 = fmaf(x1, c, x0 * s);
    x0 = r0;
    x1 = r1;
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

// ---- Packed weight matrices ----
//
// `packing.rs` writes every weight type as groups of 32 consecutive elements of a row (ggml's QK; a K-quant
// super-block of 256 is 8 groups), each group in two aligned arrays:
//   qs: [rows][groups per row][QWORDS] u32, the group's values;
//   sc: [rows][groups per row][SWORDS] u32, what turns them into weights.
// A group is read as 4 slices of 8 elements; slice s covers elements 4s .. 4s + 3 and 4s + 16 .. 4s + 19 (ggml's
// 4-bit order, so Q4_0 and Q4_1 keep their bytes), except Q8_0, whose slice s is elements 8s .. 8s + 7.
//
// The quantized types store an unsigned code u per element in up to three planes, laid out so that one slice reads
// one word (or half a word, or a byte) of each:
//   nibbles (4 words): byte i of word s holds u of element 4s + i in its low and of 4s + 16 + i in its high nibble;
//   pairs   (2 words): the 16 bits at 16·(s % 2) of word s / 2 hold 2 bits of element 4s + i at bit 2i and of
//                      4s + 16 + i at bit 8 + 2i;
//   bits    (1 word):  byte s holds 1 bit of element 4s + i at bit i and of 4s + 16 + i at bit 4 + i.
// Q4_*, MXFP4, IQ4_*, IQ3_*: nibbles. Q5_*: nibbles, then bits (u's bit 4). Q6_K: nibbles, then pairs (bits 4,
// 5). Q2_K, TQ*: pairs. Q3_K, IQ2_*, IQ1_*: pairs, then bits (bit 2). Q8_0 keeps its signed bytes (8 words). F16
// and BF16: 16 words of two elements, F32: 32 words, in element order (which the slices' offsets read as they are).
//
// Scale words: Q4_0, Q5_0, Q8_0: f16 d; Q4_1, Q5_1: f16 d | f16 m << 16. K-quants (2 words): the super-block's
// f16 d | f16 dmin << 16, then the group's integer scales and minima as bytes: signed scale of elements 0..16,
// of 16..32, unsigned minimum of 0..16, of 16..32. Floats have none (SWORDS 0). The formulas are ggml's (and
// `blocks.rs` / `kquants.rs`'s): Q4_0 d·(u − 8), Q5_0 d·(u − 16), Q4_1 and Q5_1 d·u + m, Q8_0 d·q; K-quants
// (d·scale)·(u − OFFSET) − dmin·min, OFFSET 0 but Q3_K 4 and Q6_K 32, no minimum for Q3_K and Q6_K. Every product
// of two stored numbers here is exact in f32 (11 by at most 8 significant bits), as on the CPU.
// MXFP4: u is a code of E2M1's doubled values (ggml's kvalues_mxfp4: 0, 1, 2, 3, 4, 6, 8, 12, then their negatives,
// code 8 being 0), its scale word the f32 bits of its E8M0 scale halved, 2^(e − 128), and the weight d·kvalue
// (`mxfp4.rs`). That scale is subnormal for e 0 and 1, which the kernels keep: --ftz=false is NVRTC's default, and
// module.rs leaves it.
// The codebook types (IQ4_NL, IQ4_XS, the IQ types on lattice grids IQ3_XXS .. IQ1_M, the ternary TQ1_0 and TQ2_0):
// u is a code into the type's 16 signed integer levels (`Levels` below), decoded from the file's grids by `coded.rs`
// (IQ4's bytes as stored), in the planes its bits need: 4 bits in nibbles (IQ4_*, IQ3_*), 3 in pairs and bits
// (IQ2_*, IQ1_*: bit 2 in the bits plane, as Q3_K), 2 in pairs (TQ*, as Q2_K); the weight is scale·level. Scale words: the f32 bits of the group's scale (IQ4_NL's d; IQ4_XS's d·(ls − 32); a coded type's
// d·scale), or for IQ2_XS, IQ2_S and IQ1_M, whose halves of 32 have their own scales, one word per half (elements
// 0..16, then 16..32). Each scale is exact in f32 (an f16 times a small integer and a power of two), the factor
// the CPU's dequantization multiplies the level by, so scale·level is its value bit for bit.

// OFFSET: what the K-quant formula subtracts from u (0 for the other types, which do not use it).
template <int TYPE> struct Quant;
template <> struct Quant<TYPE_Q4_0> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_Q4_1> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_Q8_0> { static const int QWORDS = 8, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_Q5_0> { static const int QWORDS = 5, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_Q5_1> { static const int QWORDS = 5, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_Q2_K> { static const int QWORDS = 2, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_Q3_K> { static const int QWORDS = 3, SWORDS = 2, OFFSET = 4; };
template <> struct Quant<TYPE_Q4_K> { static const int QWORDS = 4, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_Q5_K> { static const int QWORDS = 5, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_Q6_K> { static const int QWORDS = 6, SWORDS = 2, OFFSET = 32; };
template <> struct Quant<TYPE_F16> { static const int QWORDS = 16, SWORDS = 0, OFFSET = 0; };
template <> struct Quant<TYPE_BF16> { static const int QWORDS = 16, SWORDS = 0, OFFSET = 0; };
template <> struct Quant<TYPE_F32> { static const int QWORDS = 32, SWORDS = 0, OFFSET = 0; };
template <> struct Quant<TYPE_MXFP4> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ4_NL> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ4_XS> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ3_XXS> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ3_S> { static const int QWORDS = 4, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ2_XXS> { static const int QWORDS = 3, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ2_XS> { static const int QWORDS = 3, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_IQ2_S> { static const int QWORDS = 3, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_IQ1_S> { static const int QWORDS = 3, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_IQ1_M> { static const int QWORDS = 3, SWORDS = 2, OFFSET = 0; };
template <> struct Quant<TYPE_TQ1_0> { static const int QWORDS = 2, SWORDS = 1, OFFSET = 0; };
template <> struct Quant<TYPE_TQ2_0> { static const int QWORDS = 2, SWORDS = 1, OFFSET = 0; };

// A codebook type's levels, byte c of LO (codes 0..7) or of HI (8..15) the signed level of code c: `PackedType::
// levels` on the Rust side (ggml's kvalues_iq4nl; `CodedBlock::LEVELS` of coded.rs), which packing.rs's tests
// check these lines against. Unused codes are 0.
template <int TYPE> struct Levels { static const unsigned long long LO = 0, HI = 0; };
template <> struct Levels<TYPE_IQ4_NL> { static const unsigned long long LO = 0xf6eaddcfbfad9881ull, HI = 0x7159453526190d01ull; };
template <> struct Levels<TYPE_IQ4_XS> { static const unsigned long long LO = 0xf6eaddcfbfad9881ull, HI = 0x7159453526190d01ull; };
template <> struct Levels<TYPE_IQ3_XXS> { static const unsigned long long LO = 0x3e342c241c140c04ull, HI = 0xc2ccd4dce4ecf4fcull; };
template <> struct Levels<TYPE_IQ3_S> { static const unsigned long long LO = 0x0f0d0b0907050301ull, HI = 0xf1f3f5f7f9fbfdffull; };
template <> struct Levels<TYPE_IQ2_XXS> { static const unsigned long long LO = 0x00d5e7f8002b1908ull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_IQ2_XS> { static const unsigned long long LO = 0x00d5e7f8002b1908ull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_IQ2_S> { static const unsigned long long LO = 0x00d5e7f8002b1908ull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_IQ1_S> { static const unsigned long long LO = 0x0007fff7000901f9ull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_IQ1_M> { static const unsigned long long LO = 0x0007fff7000901f9ull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_TQ1_0> { static const unsigned long long LO = 0x00000000020100ffull, HI = 0x0000000000000000ull; };
template <> struct Levels<TYPE_TQ2_0> { static const unsigned long long LO = 0x00000000020100ffull, HI = 0x0000000000000000ull; };

template <int TYPE> __device__ __forceinline__ constexpr bool is_codebook() { return TYPE >= TYPE_IQ4_NL && TYPE <= TYPE_TQ2_0; }

// Code c's level: a byte of one of two constants, no table in memory (as mxfp4_value).
template <int TYPE>
__device__ __forceinline__ int codebook_level(int c) {
    const unsigned long long word = c & 8 ? Levels<TYPE>::HI : Levels<TYPE>::LO;
    return (int)(signed char)(unsigned char)((word >> (8 * (c & 7))) & 0xffull);
}

template <int TYPE> __device__ __forceinline__ constexpr bool is_k_quant() { return TYPE >= TYPE_Q2_K && TYPE <= TYPE_Q6_K; }

// Offsets within the group of slice s's two runs of 4 elements.
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

// The planes of slice s, each adding its field to the codes ua (first run) and ub (second run), shifted left by
// `shift`.
__device__ __forceinline__ void add_nibbles(const u32* plane, int s, int shift, int ua[4], int ub[4]) {
    const u32 w = plane[s];
    for (int i = 0; i < 4; i++) {
        ua[i] |= (int)((w >> (8 * i)) & 0xfu) << shift;
        ub[i] |= (int)((w >> (8 * i + 4)) & 0xfu) << shift;
    }
}
__device__ __forceinline__ void add_pairs(const u32* plane, int s, int shift, int ua[4], int ub[4]) {
    const u32 w = plane[s / 2] >> (16 * (s % 2));
    for (int i = 0; i < 4; i++) {
        ua[i] |= (int)((w >> (2 * i)) & 3u) << shift;
        ub[i] |= (int)((w >> (8 + 2 * i)) & 3u) << shift;
    }
}
__device__ __forceinline__ void add_bits(const u32* plane, int s, int shift, int ua[4], int ub[4]) {
    const u32 w = plane[0] >> (8 * s);
    for (int i = 0; i < 4; i++) {
        ua[i] |= (int)((w >> i) & 1u) << shift;
        ub[i] |= (int)((w >> (4 + i)) & 1u) << shift;
    }
}

// The unsigned codes of slice s of a quantized group (not Q8_0).
template <int TYPE>
__device__ __forceinline__ void slice_codes(const u32* qg, int s, int ua[4], int ub[4]) {
    for (int i = 0; i < 4; i++) ua[i] = ub[i] = 0;
    // The codebook types with codes of 2 or 3 bits (QWORDS 2 or 3) lay them out as Q2_K and Q3_K do.
    if (TYPE == TYPE_Q2_K || TYPE == TYPE_Q3_K || (is_codebook<TYPE>() && Quant<TYPE>::QWORDS < 4)) {
        add_pairs(qg, s, 0, ua, ub);
        if (TYPE == TYPE_Q3_K || (is_codebook<TYPE>() && Quant<TYPE>::QWORDS == 3)) add_bits(qg + 2, s, 2, ua, ub);
    } else {
        add_nibbles(qg, s, 0, ua, ub);
        if (TYPE == TYPE_Q5_0 || TYPE == TYPE_Q5_1 || TYPE == TYPE_Q5_K) add_bits(qg + 4, s, 4, ua, ub);
        if (TYPE == TYPE_Q6_K) add_pairs(qg + 4, s, 4, ua, ub);
    }
}

__device__ __forceinline__ float bf16_to_f32(u32 bits) { return __int_as_float((int)(bits << 16)); }

// MXFP4's value of code c (0..16): the magnitudes 0, 1, 2, 3, 4, 6, 8, 12 of codes 0..7 as the nibbles of one
// word, negated for codes 8..15. No table in memory: a per-thread array indexed at run time would live in local
// memory.
__device__ __forceinline__ int mxfp4_value(int c) {
    const int magnitude = (int)((0xc8643210u >> (4 * (c & 7))) & 0xfu);
    return c & 8 ? -magnitude : magnitude;
}

// Dequantizes slice s of the group whose values are at `qg` (QWORDS words) and scales at `sg` (SWORDS words): `a`
// gets the elements at the slice's first offset, `b` those at its second.
template <int TYPE>
__device__ __forceinline__ void slice_dequant(const u32* qg, const u32* sg, int s, float a[4], float b[4]) {
    if (TYPE == TYPE_F32) {
        for (int i = 0; i < 4; i++) {
            a[i] = __int_as_float((int)qg[4 * s + i]);
            b[i] = __int_as_float((int)qg[16 + 4 * s + i]);
        }
    } else if (TYPE == TYPE_F16 || TYPE == TYPE_BF16) {
        for (int i = 0; i < 4; i++) {
            const u32 wa = qg[2 * s + i / 2] >> (16 * (i % 2)), wb = qg[8 + 2 * s + i / 2] >> (16 * (i % 2));
            a[i] = TYPE == TYPE_F16 ? f16_to_f32((u16)(wa & 0xffffu)) : bf16_to_f32(wa & 0xffffu);
            b[i] = TYPE == TYPE_F16 ? f16_to_f32((u16)(wb & 0xffffu)) : bf16_to_f32(wb & 0xffffu);
        }
    } else if (TYPE == TYPE_Q8_0) {
        const float d = f16_to_f32((u16)(sg[0] & 0xffffu));
        const u32 w0 = qg[2 * s], w1 = qg[2 * s + 1];
        for (int i = 0; i < 4; i++) {
            a[i] = d * (float)(signed char)((w0 >> (8 * i)) & 0xffu);
            b[i] = d * (float)(signed char)((w1 >> (8 * i)) & 0xffu);
        }
    } else if (TYPE == TYPE_MXFP4) {
        int ua[4], ub[4];
        slice_codes<TYPE>(qg, s, ua, ub);
        const float d = __int_as_float((int)sg[0]);
        for (int i = 0; i < 4; i++) {
            a[i] = d * (float)mxfp4_value(ua[i]);
            b[i] = d * (float)mxfp4_value(ub[i]);
        }
    } else if (is_codebook<TYPE>()) {
        int ua[4], ub[4];
        slice_codes<TYPE>(qg, s, ua, ub);
        // The first run is in the group's first half (elements 4s .. 4s + 3), the second in its second.
        const float da = __int_as_float((int)sg[0]);
        const float db = Quant<TYPE>::SWORDS == 2 ? __int_as_float((int)sg[Quant<TYPE>::SWORDS - 1]) : da;
        for (int i = 0; i < 4; i++) {
            a[i] = da * (float)codebook_level<TYPE>(ua[i]);
            b[i] = db * (float)codebook_level<TYPE>(ub[i]);
        }
    } else if (is_k_quant<TYPE>()) {
        int ua[4], ub[4];
        slice_codes<TYPE>(qg, s, ua, ub);
        const float d = f16_to_f32((u16)(sg[0] & 0xffffu)), dmin = f16_to_f32((u16)(sg[0] >> 16));
        const u32 ints = sg[1];
        const float scale_a = d * (float)(signed char)(ints & 0xffu), scale_b = d * (float)(signed char)((ints >> 8) & 0xffu);
        const float min_a = dmin * (float)((ints >> 16) & 0xffu), min_b = dmin * (float)(ints >> 24);
        const int offset = Quant<TYPE>::OFFSET;
        for (int i = 0; i < 4; i++) {
            a[i] = scale_a * (float)(ua[i] - offset);
            b[i] = scale_b * (float)(ub[i] - offset);
            if (TYPE != TYPE_Q3_K && TYPE != TYPE_Q6_K) {
                a[i] = a[i] - min_a;
                b[i] = b[i] - min_b;
            }
        }
    } else {
        int ua[4], ub[4];
        slice_codes<TYPE>(qg, s, ua, ub);
        const float d = f16_to_f32((u16)(sg[0] & 0xffffu));
        if (TYPE == TYPE_Q4_1 || TYPE == TYPE_Q5_1) {
            const float m = f16_to_f32((u16)(sg[0] >> 16));
            for (int i = 0; i < 4; i++) {
                a[i] = d * (float)ua[i] + m;
                b[i] = d * (float)ub[i] + m;
            }
        } else {
            const int offset = TYPE == TYPE_Q5_0 ? 16 : 8;
            for (int i = 0; i < 4; i++) {
                a[i] = d * (float)(ua[i] - offset);
                b[i] = d * (float)(ub[i] - offset);
            }
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

// Tokens a warp's row dot product serves at once (`project_small`'s batch, `MMV_MAX_TOKENS` of calls.rs).
#define MMV_MAX_TOKENS 8

// acc[t] = W[row]·x'[t] for t < n_tokens (rows of k floats at x), where x' is x normalized (x · inv_rms[t] · norm_w)
// when norm_w is set. Every lane of the warp must call it; every lane gets the sums. The one order of a warp's dot
// product, shared by `project_small` and the mixture-of-experts kernels.
template <int TYPE>
__device__ __forceinline__ void warp_row_dot(const u32* qs, const u32* sc, size_t row, const float* x, int k,
                                             int n_tokens, const float* norm_w, const float* inv_rms,
                                             float acc[MMV_MAX_TOKENS]) {
    const int lane = threadIdx.x % 32, s = lane % 4, nb = k / QK;
    int first, second;
    slice_offsets<TYPE>(s, first, second);
#pragma unroll
    for (int t = 0; t < MMV_MAX_TOKENS; t++) acc[t] = 0.0f;
    for (int b0 = 0; b0 < nb; b0 += 8) {
        const int b = b0 + lane / 4;
        const bool valid = b < nb;
        float wa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, wb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float4 na = make_float4(1.0f, 1.0f, 1.0f, 1.0f), nb4 = na;
        const int col = b * QK;
        if (valid) {
            const size_t block = row * nb + b;
            slice_dequant<TYPE>(qs + block * Quant<TYPE>::QWORDS, sc + block * Quant<TYPE>::SWORDS, s, wa, wb);
            if (norm_w) {
                na = load_float4(norm_w + col + first);
                nb4 = load_float4(norm_w + col + second);
            }
        }
#pragma unroll
        for (int t = 0; t < MMV_MAX_TOKENS; t++) {
            if (t < n_tokens) {
                float share = 0.0f;
                if (valid) {
                    const float* xt = x + (size_t)t * k + col;
                    float4 xa = load_float4(xt + first), xb = load_float4(xt + second);
                    if (norm_w) {
                        xa = normalize4(xa, inv_rms[t], na);
                        xb = normalize4(xb, inv_rms[t], nb4);
                    }
                    share = slice_dot(wa, wb, xa, xb);
                }
                // The block's share on its 4 lanes: (s0 + s1) + (s2 + s3), as block_dot adds them.
                share += __shfl_xor_sync(FULL_MASK, share, 1);
                share += __shfl_xor_sync(FULL_MASK, share, 2);
                // Blocks b0 .. b0 + 7 into the sum, in column order.
                for (int g = 0; g < 8 && b0 + g < nb; g++) acc[t] += __shfl_sync(FULL_MASK, share, 4 * g);
            }
        }
    }
}

// Rows of weights a tile of `tile_products` covers, and its block size.
#define MM_BM 64
#define MM_THREADS 256

// A tile's products, shared by `matmul_tiled` and the grouped mixture-of-experts kernels: rows row0 .. row0 + 63
// (those below `rows`) of the matrix whose row 0 is packed row `first_row` of (qs, sc), times up to 16·TN tokens
// whose input rows (k floats each) `input(j)` gives, null past the tile's last token. A classic shared-memory
// tiling: each step dequantizes the 64 rows' next block of 32 columns into shared memory (each weight once per
// tile, not once per token) and stages the tokens' 32 columns beside it; every thread accumulates 4 rows × TN
// tokens, acc[i][j] for row row0 + tid % 16 + 16 i and token tid / 16 + 16 j. The products are summed in this
// file's order (the order `warp_row_dot` sums them in), so a token's result is the same bits in either kernel.
// Every thread of the MM_THREADS-thread block must call it (it synchronizes the block).
template <int TYPE, int TN, class Input>
__device__ __forceinline__ void tile_products(const u32* qs, const u32* sc, size_t first_row, int rows, int k,
                                              int row0, const Input& input, float acc[4][TN]) {
    const int BN = 16 * TN;
    // Column-major tiles ([k][row], [k][token]) so that the inner loop reads a row of each.
    __shared__ float ws[QK][MM_BM + 4];
    __shared__ float xs[QK][16 * TN + 4];

    const int tid = threadIdx.x, tr = tid % 16, tc = tid / 16, nb = k / QK;
    // The weight slice this thread dequantizes at each step: row wr of the tile, slice ws_s of its block.
    const int wr = tid / 4, ws_s = tid % 4;
    int first, second;
    slice_offsets<TYPE>(ws_s, first, second);

#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int b = 0; b < nb; b++) {
        float wa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, wb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (row0 + wr < rows) {
            const size_t block = (first_row + row0 + wr) * nb + b;
            slice_dequant<TYPE>(qs + block * Quant<TYPE>::QWORDS, sc + block * Quant<TYPE>::SWORDS, ws_s, wa, wb);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            ws[first + i][wr] = wa[i];
            ws[second + i][wr] = wb[i];
        }
        // BN tokens × 32 columns, as float4s: 8 per token.
        for (int idx = tid; idx < BN * 8; idx += MM_THREADS) {
            const int tok = idx / 8, c4 = idx % 8;
            const float* x = input(tok);
            const float4 v = x ? load_float4(x + b * QK + 4 * c4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            xs[4 * c4 + 0][tok] = v.x;
            xs[4 * c4 + 1][tok] = v.y;
            xs[4 * c4 + 2][tok] = v.z;
            xs[4 * c4 + 3][tok] = v.w;
        }
        __syncthreads();
        // This block's dot products, in this file's order: each slice's 8 products chained as `slice_dot` chains
        // them, the slices combined by `block_dot`, then into the sum.
        float part[4][4][TN];  // [slice][row][token]
#pragma unroll
        for (int s = 0; s < 4; s++) {
            int f, g;
            slice_offsets<TYPE>(s, f, g);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const int kk = e < 4 ? f + e : g + e - 4;
                float w[4], xv[TN];
#pragma unroll
                for (int i = 0; i < 4; i++) w[i] = ws[kk][tr + 16 * i];
#pragma unroll
                for (int j = 0; j < TN; j++) xv[j] = xs[kk][tc + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < TN; j++) {
                        part[s][i][j] = e == 0 ? w[i] * xv[j] : fmaf(w[i], xv[j], part[s][i][j]);
                    }
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) acc[i][j] += block_dot(part[0][i][j], part[1][i][j], part[2][i][j], part[3][i][j]);
        __syncthreads();
    }
}

// Whether entry (v, i) comes before entry (w, j) in a top-k's order: the larger value first, the lower index first
// among equals (`top_k` of logits, `moe_route` of experts).
__device__ __forceinline__ bool before(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

// The block's first entry in `before`'s order, from each thread's own (v, i): the warp's by shuffles, then thread 0
// merges the warps' through `best_v` / `best_i` (shared, one slot per warp). Only thread 0's (v, i) is the block's
// result; every thread must call it (it synchronizes the block). The rounds of top_k.cu and moe.cu's routing.
__device__ __forceinline__ void block_first(float& v, int& i, float* best_v, int* best_i, int n_warps) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float ov = __shfl_xor_sync(FULL_MASK, v, offset);
        const int oi = __shfl_xor_sync(FULL_MASK, i, offset);
        if (before(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    if (threadIdx.x % 32 == 0) {
        best_v[threadIdx.x / 32] = v;
        best_i[threadIdx.x / 32] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < n_warps; w++) {
            if (before(best_v[w], best_i[w], v, i)) {
                v = best_v[w];
                i = best_i[w];
            }
        }
    }
}

// The gated unit's activations, numbered as `FfnActivation` (`act` of the kernels that apply one).
#define ACT_SILU 0
#define ACT_GELU_TANH 1

// act(g)·u with the CPU's formulas: silu(g) = g / (1 + e^−g); GELU's tanh approximation
// 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))), tanh z written 1 − 2 / (1 + e^2z) as `numerics::gelu_tanh` does.
__device__ __forceinline__ float gated_mul(float g, float u, int act) {
    if (act == ACT_GELU_TANH) {
        const float z = 0.7978845608028654f * (g + 0.044715f * (g * g * g));
        const float tanh_z = 1.0f - 2.0f / (1.0f + expf(2.0f * z));
        return 0.5f * g * (1.0f + tanh_z) * u;
    }
    return g / (1.0f + expf(-g)) * u;
}

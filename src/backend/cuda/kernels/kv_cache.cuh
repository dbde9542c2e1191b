// The KV cache's element types (`KvCacheType`, backend/kv_cache_type.rs), as rope_kv.cu and latent.cu store rows
// of them and attention.cu reads them. `module.rs` compiles this file right after common.cuh, before every kernel
// file.
//
// A plane (a layer's keys or values) is `[slots][row]` in 16-bit words, rows as the CPU's `cpu/kv_cache.rs` lays
// them out byte for byte, so that the engine's block tables and a cache's bytes mean the same on both backends:
//   f16   one word per element;
//   q8_0  ggml's `block_q8_0` per 32 elements (34 bytes, 17 words): the f16 scale d, then 32 signed bytes v,
//         element j = d · v[j];
//   q4_0  ggml's `block_q4_0` per 32 elements (18 bytes, 9 words): the f16 scale d, then 16 bytes whose low nibbles
//         are elements 0..15 and high nibbles elements 16..31, each stored as v + 8, element j = d · v[j].
// Every word is 2-byte aligned (blocks of 34 and 18 bytes), so the kernels read and write words, never wider.
//
// Blocks are quantized once, when a position is stored, with ggml's reference rounding exactly as the CPU's
// `kv_quant.rs` does (same operations in the same order, no contraction: the program is compiled with
// --fmad=false), so that the same floats give the same bytes on both backends.

// `kv_type_code` of kv_cache.rs.
#define KV_F16 0
#define KV_Q8_0 1
#define KV_Q4_0 2

// Words of one 32-element block of a block type.
#define KV_Q8_0_WORDS 17
#define KV_Q4_0_WORDS 9

// Calls X(key suffix, value suffix, KEY_TYPE, VALUE_TYPE) for every pair of types attention.cu is instantiated
// for, named `attention_{keys}_{values}`. A backend compiles its own pair only: `module.rs` then defines
// EMBER_KV_TYPES, its list, first (`KernelTypes::kv_caches`). Keys first, then values, in `KvCacheType::ALL`'s order.
#ifdef EMBER_KV_TYPES
#define FOR_EACH_KV_PAIR(X) EMBER_KV_TYPES(X)
#else
#define FOR_EACH_KV_PAIR(X) \
    X(f16, f16, KV_F16, KV_F16) X(f16, q8_0, KV_F16, KV_Q8_0) X(f16, q4_0, KV_F16, KV_Q4_0) \
    X(q8_0, f16, KV_Q8_0, KV_F16) X(q8_0, q8_0, KV_Q8_0, KV_Q8_0) X(q8_0, q4_0, KV_Q8_0, KV_Q4_0) \
    X(q4_0, f16, KV_Q4_0, KV_F16) X(q4_0, q8_0, KV_Q4_0, KV_Q8_0) X(q4_0, q4_0, KV_Q4_0, KV_Q4_0)
#endif

// Words of a row of `width` elements (a multiple of 32 for the block types).
__device__ __forceinline__ int kv_row_words(int type, int width) {
    return type == KV_F16 ? width : type == KV_Q8_0 ? width / QK * KV_Q8_0_WORDS : width / QK * KV_Q4_0_WORDS;
}

// Two bytes as the little-endian word that holds them.
__device__ __forceinline__ u16 kv_byte_pair(int lo, int hi) { return (u16)((lo & 0xff) | ((hi & 0xff) << 8)); }

// 32 elements of x into a q8_0 block at dst, as `BlockQ8_0::quantize`: d = max |x| / 127, v = round(x / d) (half
// away from zero: roundf, Rust's `round`), with x / d computed as x · (1 / d).
__device__ void kv_quantize_q8_0(const float* x, u16* dst) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[0] = f32_to_f16(d);
    for (int j = 0; j < QK; j += 2) dst[1 + j / 2] = kv_byte_pair((int)roundf(x[j] * id), (int)roundf(x[j + 1] * id));
}

// 32 elements of x into a q4_0 block at dst, as `BlockQ4_0::quantize`: d = m / −8 where m is the first element of
// the largest magnitude (its sign kept), code = min(15, trunc(x / d + 8.5)).
__device__ void kv_quantize_q4_0(const float* x, u16* dst) {
    float amax = 0.0f, signed_max = 0.0f;
    for (int j = 0; j < QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            signed_max = x[j];
        }
    }
    const float d = signed_max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[0] = f32_to_f16(d);
    // x · id lies in [−8, 8], so x · id + 8.5 is positive and the conversion truncates as Rust's `as i8` does.
    int code[QK];
    for (int j = 0; j < QK; j++) code[j] = min(15, (int)(x[j] * id + 8.5f));
    for (int j = 0; j < QK / 2; j += 2) {
        dst[1 + j / 2] = kv_byte_pair(code[j] | (code[16 + j] << 4), code[j + 1] | (code[17 + j] << 4));
    }
}

// Stores the `width` floats at x (visible to every thread of the block) as a row of `type` at `row`: every thread
// of the block takes its share, an element of f16 or a block of 32.
__device__ void kv_store_row(u16* row, const float* x, int width, int type) {
    if (type == KV_F16) {
        for (int i = threadIdx.x; i < width; i += blockDim.x) row[i] = f32_to_f16(x[i]);
        return;
    }
    for (int b = threadIdx.x; b < width / QK; b += blockDim.x) {
        if (type == KV_Q8_0) kv_quantize_q8_0(x + b * QK, row + b * KV_Q8_0_WORDS);
        else kv_quantize_q4_0(x + b * QK, row + b * KV_Q4_0_WORDS);
    }
}

// Element j of a row of a block type: its block's scale, and its integer (−127..=127 for q8_0, −8..=7 for q4_0).
__device__ __forceinline__ float kv_scale(const u16* row, int j, int type) {
    return f16_to_f32(row[j / QK * (type == KV_Q8_0 ? KV_Q8_0_WORDS : KV_Q4_0_WORDS)]);
}

__device__ __forceinline__ int kv_value(const u16* row, int j, int type) {
    const int i = j % QK;
    if (type == KV_Q8_0) {
        const u16 word = row[j / QK * KV_Q8_0_WORDS + 1 + i / 2];
        return (int)(signed char)((word >> (8 * (i % 2))) & 0xff);
    }
    const u16 word = row[j / QK * KV_Q4_0_WORDS + 1 + (i % 16) / 2];
    const int byte = (word >> (8 * (i % 2))) & 0xff;
    return (i < 16 ? byte & 0xf : byte >> 4) - 8;
}

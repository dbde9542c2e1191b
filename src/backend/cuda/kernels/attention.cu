// Causal grouped-query attention over the paged KV cache, for prefill chunks and decodes alike: the second half
// of `LlamaBackend::attention`, after `rope_store` has put every new token's key and value in the cache.
//
// As on the CPU, a query at position p reads keys and values 0..=p of its own sequence from the cache, its own
// included (p + 1 − window ..= p in a sliding-window layer), so a token's result does not depend on whether it came in a prompt chunk or as a decode.
//
// One block per (token, KV head, chunk of up to ATT_MAX_GROUP query heads): the block serves the query heads of
// its chunk, which share the KV head, so each key and value row is read once for all of them; a KV head with more
// query heads (DeepSeek's latent attention: every head on one compressed row) has several chunks on the grid's z. Positions are walked in chunks of ATT_CHUNK with an online softmax
// (running maximum and sum per head, rescaling the accumulator when the maximum grows), so shared memory does not
// grow with the context. Position j of a sequence is row table[j / block_size]·block_size + j % block_size of
// the cache (`SeqChunk`'s rule).
//
// The values are `value_dim` wide, at `kv_head · value_dim` in rows as wide as the key rows (kv_dim): the value
// cache's own rows (`value_dim` = `head_dim`), or the key rows themselves, whose first `value_dim` elements are the
// values (DeepSeek's keys-only cache: one KV head, `v_cache` = `k_cache`, `value_dim` = `kv_lora_rank`). Two widths:
// `attention_*` for heads up to 256 wide, `attention_wide_*` for up to 576 (DeepSeek's 512 + 64), which holds more
// per thread; each instantiated per pair of key and value types (kv_cache.cuh): `attention_q8_0_q4_0` reads q8_0
// keys and q4_0 values.
//
// Keys and values of the block types are read with the CPU's arithmetic (`cpu/kernels/scalar/attention_quant.rs`),
// not dequantized to floats: the block's queries are quantized to 8 bits per 32 elements as the CPU quantizes them
// (`quantize_row_q8a`), each key block's score share is the exact integer dot product of the two blocks' integers,
// and the score is fma(d_key · d_query, dot, score) over the head's blocks in order, so that a score is the CPU's
// bit for bit. Dequantizing the keys against float queries instead would differ from the CPU by the queries'
// 8-bit rounding, which is larger than the f16 path's difference from it. A value element adds
// fma(weight · d, v, acc), the CPU's operation; only the softmax weights and the order of the positions' sums
// differ from the CPU, as they do for f16.
//
// With sinks (gpt-oss), each query head's softmax has one more logit, its sink, which attends to no value: it joins
// the head's running maximum and sum once the positions are done, as ggml's `soft_max_ext` with sinks (and the CPU's
// `RowAttention::run`) computes it.

#define ATT_THREADS 128
#define ATT_CHUNK ATT_THREADS
#define ATT_MAX_GROUP 8
#define ATT_MAX_HEAD_DIM 256
#define ATT_WIDE_MAX_HEAD_DIM 576

struct Attention {
    const float* q;            // [n_tokens][n_head · head_dim], rotated
    float* out;                // [n_tokens][n_head · value_dim]
    const u16* k_cache;        // this layer's keys, [slots][row of kv_dim of the key type] (kv_cache.cuh)
    const u16* v_cache;        // this layer's values, likewise (k_cache itself for a keys-only cache)
    const int* positions;      // [n_tokens], −1 for a padding row (its output is zero)
    const int* table_offsets;  // [n_tokens]: where the token's block table starts in block_tables
    const int* block_tables;   // every sequence's block table, concatenated
    const float* sinks;        // [n_head]: each query head's sink logit (unscaled, uncapped); null: none
    int n_tokens;
    int n_head;
    int n_head_kv;             // divides n_head
    int head_dim;              // a multiple of 8 (of 32 for keys in blocks), ≤ the instantiation's largest
    int value_dim;             // each KV head's value width, ≤ the instantiation's largest, a multiple of 32 for
                               // values in blocks; n_head_kv · value_dim ≤ kv_dim
    int pad_;
    int block_size;            // positions per cache block
    float scale;               // what multiplies each query·key product (`LlamaConfig::attention_scale`)
    int window;                // a query sees the last `window` positions only; 0: all of them
    float softcap;             // scaled scores become softcap · tanh(score / softcap) (Gemma 2); 0: none
};
static_assert(sizeof(Attention) == 104, "Attention must match AttentionArgs in args.rs");

// The maximum (is_max) or sum over the block of each of the `group` values in v; every thread gets them.
__device__ void block_reduce_group(float v[ATT_MAX_GROUP], int group, bool is_max,
                                   float (*scratch)[ATT_THREADS / 32]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // the previous reduction may still be reading `scratch`
#pragma unroll
    for (int h = 0; h < ATT_MAX_GROUP; h++) {
        if (h < group) {
            const float r = is_max ? warp_max(v[h]) : warp_sum(v[h]);
            if (lane == 0) scratch[h][warp] = r;
        }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < ATT_MAX_GROUP; h++) {
        if (h < group) {
            float r = scratch[h][0];
            for (int w = 1; w < ATT_THREADS / 32; w++) r = is_max ? fmaxf(r, scratch[h][w]) : r + scratch[h][w];
            v[h] = r;
        }
    }
}

// The group's scaled queries (q_sh, `n` floats) quantized for keys in blocks, as the CPU's `quantize_row_q8a`:
// per 32 elements d = max |x| / 127 and codes round(x · (1 / d)), ties to even (rintf, Rust's round_ties_even);
// codes 4 to a word (`__dp4a`'s operands), each block's scale, and the sum of its codes (q4_0's keys are stored
// as v + 8: their dot product is the nibbles' minus 8 · Σ codes). The block's threads share the work; the caller
// synchronizes before reading the results.
__device__ void quantize_queries(const float* q_sh, int n, int* codes, float* scales, int* sums) {
    for (int b = threadIdx.x; b < n / QK; b += blockDim.x) {
        const float* x = q_sh + b * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j += 4) {
            u32 word = 0;
            for (int e = 0; e < 4; e++) {
                const int c = (int)rintf(x[j + e] * id);
                sum += c;
                word |= (u32)(c & 0xff) << (8 * e);
            }
            codes[b * (QK / 4) + j / 4] = (int)word;
        }
        scales[b] = d;
        sums[b] = sum;
    }
}

// The scores of the `group` heads' quantized queries against one key of blocks (`key`: its head's D / 32 blocks),
// added into score[h] (0 on entry): per block, the integer dot product, then fma(d_key · d_query, dot, score), as
// the CPU's `attention_scores_q`.
template <int KT>
__device__ __forceinline__ void score_key_blocks(const u16* key, int D, int group, const int* codes,
                                                 const float* scales, const int* sums, float score[ATT_MAX_GROUP]) {
    constexpr int WORDS = KT == KV_Q8_0 ? KV_Q8_0_WORDS : KV_Q4_0_WORDS;
    const int nb = D / QK;
    for (int b = 0; b < nb; b++) {
        const u16* block = key + b * WORDS;
        const float dk = f16_to_f32(block[0]);
        // The block's integers 4 to a word: q8_0's 32 bytes as they are; q4_0's 16 bytes, elements 0..15 the low
        // nibbles (lo) and 16..31 the high ones (hi), each v + 8.
        int w[8];
        if (KT == KV_Q8_0) {
#pragma unroll
            for (int i = 0; i < 8; i++) w[i] = (int)((u32)block[1 + 2 * i] | ((u32)block[2 + 2 * i] << 16));
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const u32 bytes = (u32)block[1 + 2 * i] | ((u32)block[2 + 2 * i] << 16);
                w[i] = (int)(bytes & 0x0f0f0f0fu);
                w[4 + i] = (int)((bytes >> 4) & 0x0f0f0f0fu);
            }
        }
#pragma unroll
        for (int h = 0; h < ATT_MAX_GROUP; h++) {
            if (h < group) {
                const int qb = h * nb + b;
                const int* q = codes + qb * (QK / 4);
                int dot = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) dot = __dp4a(w[i], q[i], dot);
                if (KT == KV_Q4_0) dot -= 8 * sums[qb];
                score[h] = fmaf(dk * scales[qb], (float)dot, score[h]);
            }
        }
    }
}

// KT, VT: the key and value types (KV_* of kv_cache.cuh).
template <int MAX_D, int KT, int VT>
__device__ void attend(const Attention& p) {
    // Outputs (query head, value dimension) per thread.
    constexpr int MAX_OUT = ATT_MAX_GROUP * MAX_D / ATT_THREADS;
    __shared__ float q_sh[ATT_MAX_GROUP * MAX_D];             // the chunk's queries, scaled
    __shared__ float s_sh[ATT_MAX_GROUP][ATT_CHUNK];          // the chunk's scores, then weights
    __shared__ int slot_sh[ATT_CHUNK];                        // the chunk's cache rows
    __shared__ float scratch[ATT_MAX_GROUP][ATT_THREADS / 32];
    // Keys in blocks: the queries quantized (`quantize_queries`).
    __shared__ int qcodes_sh[ATT_MAX_GROUP * MAX_D / 4];
    __shared__ float qscale_sh[ATT_MAX_GROUP * MAX_D / QK];
    __shared__ int qsum_sh[ATT_MAX_GROUP * MAX_D / QK];

    // Tokens on x, which allows 2^31 − 1 blocks; KV heads on y; chunks of a KV head's query heads on z.
    const int t = blockIdx.x, kv_head = blockIdx.y, tid = threadIdx.x;
    const int D = p.head_dim, VD = p.value_dim, kv_dim = p.n_head_kv * D;
    const int head0 = kv_head * (p.n_head / p.n_head_kv) + blockIdx.z * ATT_MAX_GROUP;
    const int group = min(ATT_MAX_GROUP, (kv_head + 1) * (p.n_head / p.n_head_kv) - head0);
    const int width = group * VD;  // this block's outputs
    const int pos = p.positions[t];
    float* out = p.out + (size_t)t * p.n_head * VD + (size_t)head0 * VD;
    if (pos < 0) {
        for (int i = tid; i < width; i += ATT_THREADS) out[i] = 0.0f;
        return;
    }
    const float* q = p.q + (size_t)t * p.n_head * D + (size_t)head0 * D;
    for (int i = tid; i < group * D; i += ATT_THREADS) q_sh[i] = q[i] * p.scale;
    const int* table = p.block_tables + p.table_offsets[t];
    // Rows of words (kv_cache.cuh); the KV head's key and value heads within them.
    const int k_row = kv_row_words(KT, kv_dim), v_row = kv_row_words(VT, kv_dim);
    const int kv_offset = kv_row_words(KT, kv_head * D);
    const u16* values = p.v_cache + kv_row_words(VT, kv_head * VD);
    if (KT != KV_F16) {
        __syncthreads();  // q_sh was written by every thread
        quantize_queries(q_sh, group * D, qcodes_sh, qscale_sh, qsum_sh);
    }

    float running_max[ATT_MAX_GROUP], running_sum[ATT_MAX_GROUP], acc[MAX_OUT];
#pragma unroll
    for (int h = 0; h < ATT_MAX_GROUP; h++) {
        running_max[h] = neg_infinity();
        running_sum[h] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < MAX_OUT; j++) acc[j] = 0.0f;
    __syncthreads();

    const int first = p.window > 0 ? max(0, pos + 1 - p.window) : 0;
    for (int c0 = first; c0 <= pos; c0 += ATT_CHUNK) {
        const int n = min(ATT_CHUNK, pos + 1 - c0);
        // Scores: thread i takes position c0 + i and dots its key with every query of the group.
        float score[ATT_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < ATT_MAX_GROUP; h++) score[h] = neg_infinity();
        if (tid < n) {
            const int j = c0 + tid;
            const int slot = table[j / p.block_size] * p.block_size + j % p.block_size;
            slot_sh[tid] = slot;
            const u16* key = p.k_cache + (size_t)slot * k_row + kv_offset;
#pragma unroll
            for (int h = 0; h < ATT_MAX_GROUP; h++) score[h] = 0.0f;
            if (KT != KV_F16) {
                score_key_blocks<KT>(key, D, group, qcodes_sh, qscale_sh, qsum_sh, score);
            } else {
                for (int d = 0; d < D; d += 8) {
                    // 8 halves, 16-byte aligned: kv_dim, kv_offset and d are multiples of 8.
                    const uint4 raw = *reinterpret_cast<const uint4*>(key + d);
                    const u32 words[4] = {raw.x, raw.y, raw.z, raw.w};
                    float k8[8];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        k8[2 * e] = f16_to_f32((u16)(words[e] & 0xffffu));
                        k8[2 * e + 1] = f16_to_f32((u16)(words[e] >> 16));
                    }
#pragma unroll
                    for (int h = 0; h < ATT_MAX_GROUP; h++) {
                        if (h < group) {
#pragma unroll
                            for (int e = 0; e < 8; e++) score[h] = fmaf(q_sh[h * D + d + e], k8[e], score[h]);
                        }
                    }
                }
            }
            if (p.softcap > 0.0f) {
#pragma unroll
                for (int h = 0; h < ATT_MAX_GROUP; h++) score[h] = p.softcap * tanhf(score[h] / p.softcap);
            }
#pragma unroll
            for (int h = 0; h < ATT_MAX_GROUP; h++) {
                if (h < group) s_sh[h][tid] = score[h];
            }
        }
        // The chunk's maximum per head, then the new running maximum and the weights exp(score − maximum).
        float chunk[ATT_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < ATT_MAX_GROUP; h++) chunk[h] = score[h];
        block_reduce_group(chunk, group, true, scratch);
        float rescale[ATT_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < ATT_MAX_GROUP; h++) {
            if (h < group) {
                const float new_max = fmaxf(running_max[h], chunk[h]);
                // exp(−∞ − finite) is 0: the first chunk rescales an empty accumulator.
                rescale[h] = expf(running_max[h] - new_max);
                running_max[h] = new_max;
                float w = 0.0f;
                if (tid < n) {
                    w = expf(s_sh[h][tid] - new_max);
                    s_sh[h][tid] = w;
                }
                chunk[h] = w;
            }
        }
        block_reduce_group(chunk, group, false, scratch);  // also makes the weights visible to every thread
#pragma unroll
        for (int h = 0; h < ATT_MAX_GROUP; h++) {
            if (h < group) running_sum[h] = running_sum[h] * rescale[h] + chunk[h];
        }
        // Values: thread tid owns outputs tid, tid + ATT_THREADS, ... of the chunk's width (head h, dimension d).
#pragma unroll
        for (int j = 0; j < MAX_OUT; j++) {
            const int o = tid + j * ATT_THREADS;
            if (o < width) {
                const int h = o / VD, d = o % VD;
                float a = acc[j] * rescale[h];
                if (VT == KV_F16) {
                    for (int i = 0; i < n; i++) {
                        a = fmaf(s_sh[h][i], f16_to_f32(values[(size_t)slot_sh[i] * v_row + d]), a);
                    }
                } else {
                    // fma(weight · d, v, acc), as the CPU's `attention_values_q`.
                    for (int i = 0; i < n; i++) {
                        const u16* row = values + (size_t)slot_sh[i] * v_row;
                        a = fmaf(s_sh[h][i] * kv_scale(row, d, VT), (float)kv_value(row, d, VT), a);
                    }
                }
                acc[j] = a;
            }
        }
        __syncthreads();  // before the next chunk overwrites s_sh and slot_sh
    }
#pragma unroll
    for (int j = 0; j < MAX_OUT; j++) {
        const int o = tid + j * ATT_THREADS;
        if (o < width) {
            const int h = o / VD;
            float a = acc[j], sum = running_sum[h];
            if (p.sinks) {
                // The sink as one more chunk of one score: the maximum, the rescale, its weight in the sum only.
                const float sink = p.sinks[head0 + h];
                const float new_max = fmaxf(running_max[h], sink);
                const float rescale = expf(running_max[h] - new_max);
                sum = sum * rescale + expf(sink - new_max);
                a *= rescale;
            }
            out[o] = a / sum;
        }
    }
}

// `attention_{keys}_{values}` and `attention_wide_{keys}_{values}` of each pair of types the program is compiled for.
#define ATTENTION_KERNELS(K, V, KT, VT)                                                                          \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_##K##_##V(const Attention p) {          \
        attend<ATT_MAX_HEAD_DIM, KT, VT>(p);                                                                      \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_wide_##K##_##V(const Attention p) {     \
        attend<ATT_WIDE_MAX_HEAD_DIM, KT, VT>(p);                                                                 \
    }
FOR_EACH_KV_PAIR(ATTENTION_KERNELS)

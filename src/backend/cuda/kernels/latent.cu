// DeepSeek's multi-head latent attention (`model/llama/latent.rs`; the CPU's `cpu/latent.rs`): the steps around the
// projections (matvec.cu, matmul.cu, per head over the stacked `attn_k_b` / `attn_v_b`) and the attention
// (attention.cu, values read from the key rows' first `kv_lora_rank` elements):
//
//   latent_keys     one block per token: its key row `c | k_pe` (`attn_kv_a_mqa`'s output) into the keys-only cache
//                   at its slot, in the keys' type (kv_cache.cuh): `c` RMS-normalized by `attn_kv_a_norm` (as
//                   rms_norm.cu), `k_pe` rotated on adjacent pairs (as rope_kv.cu);
//   heads_copy      rows of `width` between a token-major layout ([token][head · stride]) and a head-major one
//                   ([head][token][width]), either way: the per-head projections read and write contiguous rows;
//   latent_queries  one block per token: each head's absorbed query `Wk_b[h]·q_nope` (head-major) followed by its
//                   rotated `q_pe`, the rows the attention reads.
//
// Rotations use the step's cos/sin table of the layer's RoPE base (`rope_table`), as `rope_store` does.

#define LATENT_THREADS 128
// Widest key row `latent_keys` stores (`ATTENTION_WIDE_MAX_HEAD_DIM`: DeepSeek's 512 + 64).
#define LATENT_MAX_WIDTH 576
static_assert(LATENT_THREADS == NORM_THREADS, "the key norm must sum like rms_norm");

struct LatentKeys {
    const float* kv;       // [n_tokens][rank + rope_dim]: the compressed key rows and their RoPE parts
    const float* norm_w;   // [rank]: attn_kv_a_norm
    const float* cos;      // [n_tokens][rope_dim / 2]
    const float* sin;      // [n_tokens][rope_dim / 2]
    const int* positions;  // [n_tokens], −1 for a padding row (left alone)
    const int* slots;      // [n_tokens], the cache row of each token, −1 for none
    u16* k_cache;          // this layer's keys, [slots][row of rank + rope_dim of k_type] (kv_cache.cuh)
    int n_tokens;
    int rank;              // kv_lora_rank
    int rope_dim;          // even; rank + rope_dim ≤ LATENT_MAX_WIDTH, a multiple of 32 for a block type
    float eps;
    int k_type;            // KV_* of kv_cache.cuh
    int pad_;
};
static_assert(sizeof(LatentKeys) == 80, "LatentKeys must match LatentKeysArgs in args.rs");

extern "C" __global__ void __launch_bounds__(LATENT_THREADS) latent_keys(const LatentKeys p) {
    __shared__ float scratch[32];
    // The row, then stored whole: a block of a quantized type takes 32 elements that several threads computed.
    __shared__ float row[LATENT_MAX_WIDTH];
    const int t = blockIdx.x;
    if (p.positions[t] < 0 || p.slots[t] < 0) return;
    const int width = p.rank + p.rope_dim, half = p.rope_dim / 2;
    const float* x = p.kv + (size_t)t * width;
    const float inv = inverse_rms(x, p.rank, p.eps, scratch);
    for (int i = threadIdx.x; i < p.rank; i += blockDim.x) row[i] = x[i] * inv * p.norm_w[i];
    const float* cos = p.cos + (size_t)t * half;
    const float* sin = p.sin + (size_t)t * half;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float x0 = x[p.rank + 2 * j], x1 = x[p.rank + 2 * j + 1];
        rope_pair(x0, x1, cos[j], sin[j]);
        row[p.rank + 2 * j] = x0;
        row[p.rank + 2 * j + 1] = x1;
    }
    __syncthreads();
    kv_store_row(p.k_cache + (size_t)p.slots[t] * kv_row_words(p.k_type, width), row, width, p.k_type);
}

struct HeadsCopy {
    const float* src;
    float* dst;
    int n_head;
    int n_tokens;
    int width;      // elements of each (head, token) row
    int src_head;   // elements from one head's row to the next's in src (for the same token)
    int src_token;  // elements from one token's row to the next's in src (for the same head)
    int dst_head;
    int dst_token;
    int pad_;
};
static_assert(sizeof(HeadsCopy) == 48, "HeadsCopy must match HeadsCopyArgs in args.rs");

#define HEADS_COPY_THREADS 256

// dst[h · dst_head + t · dst_token + i] = src[h · src_head + t · src_token + i]; one thread per element.
extern "C" __global__ void __launch_bounds__(HEADS_COPY_THREADS) heads_copy(const HeadsCopy p) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)p.n_head * p.n_tokens * p.width) return;
    const int e = (int)(i % p.width), row = (int)(i / p.width), t = row % p.n_tokens, h = row / p.n_tokens;
    p.dst[(size_t)h * p.dst_head + (size_t)t * p.dst_token + e] = p.src[(size_t)h * p.src_head + (size_t)t * p.src_token + e];
}

struct LatentQueries {
    const float* absorbed;  // [n_head][n_tokens][rank]: Wk_b[h]·q_nope of each head and token
    const float* q;         // [n_tokens][n_head · (nope + rope_dim)]: the projected queries
    const float* cos;       // [n_tokens][rope_dim / 2]
    const float* sin;       // [n_tokens][rope_dim / 2]
    float* out;             // [n_tokens][n_head · (rank + rope_dim)]
    int n_tokens;
    int n_head;
    int rank;
    int nope;
    int rope_dim;
    int pad_;
};
static_assert(sizeof(LatentQueries) == 64, "LatentQueries must match LatentQueriesArgs in args.rs");

// out[t][h] = absorbed[h][t] | rope(q[t][h][nope ..]), the rotation on adjacent pairs.
extern "C" __global__ void __launch_bounds__(LATENT_THREADS) latent_queries(const LatentQueries p) {
    const int t = blockIdx.x, half = p.rope_dim / 2, width = p.rank + p.rope_dim, q_head = p.nope + p.rope_dim;
    float* out = p.out + (size_t)t * p.n_head * width;
    for (int i = threadIdx.x; i < p.n_head * p.rank; i += blockDim.x) {
        const int h = i / p.rank, e = i % p.rank;
        out[(size_t)h * width + e] = p.absorbed[((size_t)h * p.n_tokens + t) * p.rank + e];
    }
    const float* cos = p.cos + (size_t)t * half;
    const float* sin = p.sin + (size_t)t * half;
    for (int i = threadIdx.x; i < p.n_head * half; i += blockDim.x) {
        const int h = i / half, j = i % half;
        const float* pe = p.q + ((size_t)t * p.n_head + h) * q_head + p.nope;
        float x0 = pe[2 * j], x1 = pe[2 * j + 1];
        rope_pair(x0, x1, cos[j], sin[j]);
        out[(size_t)h * width + p.rank + 2 * j] = x0;
        out[(size_t)h * width + p.rank + 2 * j + 1] = x1;
    }
}

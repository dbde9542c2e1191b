// RoPE and the KV cache append: the first half of `LlamaBackend::attention`, run for every new token before any
// query reads the cache (a prompt chunk's tokens attend to each other).
//
// Rotation as GGUF llama and the CPU backend do it: adjacent pairs (x[2i], x[2i+1]) of each head's first rope_dim
// elements turn by pos · base^(−2i / rope_dim); in the NEOX style (Gemma 3) the pairs are (x[i], x[i + rope_dim / 2]).
// Each layer turns by the table of its RoPE base (one table per distinct base and step). The angles are computed once per step (`rope_table`), in f64 as the
// CPU's `StepLayout` does, so that long positions keep their precision and both backends turn by the same angle.
// Each pair turns with the CPU's FMAs (`rope_pair`), so that the rotated queries and keys are the CPU's bit for bit.

#define ROPE_THREADS 128

struct RopeTable {
    const int* positions;    // [n_tokens], −1 for a padding row
    const double* inv_freq;  // [half]: base^(−2i / rope_dim)
    float* cos;              // [n_tokens][half]
    float* sin;              // [n_tokens][half]
    double scale;            // llama.cpp's attention factor: multiplies cos and sin (1 for most models)
    int n_tokens;
    int half;                // rope_dim / 2
};
static_assert(sizeof(RopeTable) == 48, "RopeTable must match RopeTableArgs in launch.rs");

extern "C" __global__ void __launch_bounds__(ROPE_THREADS) rope_table(const RopeTable p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_tokens * p.half) return;
    const int t = i / p.half, pair = i % p.half;
    const double angle = (double)max(p.positions[t], 0) * p.inv_freq[pair];
    p.cos[i] = (float)(cos(angle) * p.scale);
    p.sin[i] = (float)(sin(angle) * p.scale);
}

struct RopeStore {
    float* q;              // [n_tokens][n_head · head_dim], rotated in place
    float* k;              // [n_tokens][kv_dim], rotated in place
    const float* v;        // [n_tokens][kv_dim]
    const float* cos;      // [n_tokens][rope_dim / 2]
    const float* sin;      // [n_tokens][rope_dim / 2]
    const int* positions;  // [n_tokens], −1 for a padding row (left alone)
    const int* slots;      // [n_tokens], the cache row of each token, −1 for none
    u16* k_cache;          // this layer's keys, [slots][row of kv_dim of k_type] (kv_cache.cuh)
    u16* v_cache;          // this layer's values, [slots][row of kv_dim of v_type]
    int n_tokens;
    int n_head;
    int n_head_kv;
    int head_dim;          // even
    int rope_dim;          // even, ≤ head_dim
    int neox;              // 1: pairs (i, i + rope_dim / 2), 0: adjacent pairs
    int k_type;            // KV_* of kv_cache.cuh; a block type needs kv_dim a multiple of 32
    int v_type;
};
static_assert(sizeof(RopeStore) == 104, "RopeStore must match RopeStoreArgs in args.rs");

// Rotates the pairs of `n_heads` heads of `x` (one token's row) in place; pair j of the row is elements 2j, 2j+1,
// or in the NEOX style elements i and i + rope_dim / 2 of its head (i = j mod head_dim / 2).
__device__ __forceinline__ void rotate_row(float* x, int n_heads, const RopeStore& p, const float* cos,
                                           const float* sin) {
    const int pairs_per_head = p.head_dim / 2;
    for (int j = threadIdx.x; j < n_heads * pairs_per_head; j += blockDim.x) {
        const int pair = j % pairs_per_head;
        if (2 * pair >= p.rope_dim) continue;
        const int i0 = p.neox ? (j / pairs_per_head) * p.head_dim + pair : 2 * j;
        const int i1 = p.neox ? i0 + p.rope_dim / 2 : 2 * j + 1;
        float x0 = x[i0], x1 = x[i1];
        rope_pair(x0, x1, cos[pair], sin[pair]);
        x[i0] = x0;
        x[i1] = x1;
    }
}

// One block per token: rotate its query and key, then store its key and value at its cache slot, each in its
// plane's type (quantized there, as the CPU's `CpuKvCache::store` does).
extern "C" __global__ void __launch_bounds__(ROPE_THREADS) rope_store(const RopeStore p) {
    const int t = blockIdx.x;
    if (p.positions[t] < 0) return;
    const int half = p.rope_dim / 2, kv_dim = p.n_head_kv * p.head_dim;
    const float* cos = p.cos + (size_t)t * half;
    const float* sin = p.sin + (size_t)t * half;
    rotate_row(p.q + (size_t)t * p.n_head * p.head_dim, p.n_head, p, cos, sin);
    float* k = p.k + (size_t)t * kv_dim;
    rotate_row(k, p.n_head_kv, p, cos, sin);
    const int slot = p.slots[t];
    if (slot < 0) return;
    // The rotated key elements were written by other threads of this block.
    __syncthreads();
    const float* v = p.v + (size_t)t * kv_dim;
    kv_store_row(p.k_cache + (size_t)slot * kv_row_words(p.k_type, kv_dim), k, kv_dim, p.k_type);
    kv_store_row(p.v_cache + (size_t)slot * kv_row_words(p.v_type, kv_dim), v, kv_dim, p.v_type);
}

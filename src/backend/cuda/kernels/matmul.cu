// Projections of many tokens (prefill chunks, large decode batches): Y[t][r] (+)= Σ_k W[r][k]·X[t][k].
//
// A block computes a tile of 64 rows × BN tokens by common.cuh's `tile_products` (a shared-memory tiling that
// dequantizes each weight once per token tile); BN = 16·TN follows the number of tokens, so that a batch of 16
// decodes does not pay for 64. Its products are summed in the order of common.cuh, the order `project_small` sums
// them in, so that a token's result is the same bit for bit in either kernel.
//
// Plain f32 FMAs, no tensor cores: simple enough to trust before it has run on a GPU. A decode step of a 135M model
// is dominated by launches and weight reads; prefill is where tensor cores would pay (docs/performance.md).

struct Matmul {
    const u32* qs;   // packed quants, [rows][k / 32][QWORDS]
    const u32* sc;   // packed scales, [rows][k / 32][SWORDS]
    const float* x;  // input, [n_tokens][k]
    float* y;        // output, [n_tokens][rows]
    int rows;
    int k;           // a multiple of 32
    int n_tokens;
    int add;         // 1: y += W·x, 0: y = W·x
};
static_assert(sizeof(Matmul) == 48, "Matmul must match MatmulArgs in launch.rs");

// Token j of a tile whose first token is tok0: its row of the input, null past the step's last token.
struct TokenRows {
    const float* x;
    int k, tok0, n_tokens;
    __device__ __forceinline__ const float* operator()(int j) const {
        return tok0 + j < n_tokens ? x + (size_t)(tok0 + j) * k : nullptr;
    }
};

template <int TYPE, int TN>
__device__ void matmul_tiled(const Matmul& p) {
    const int tr = threadIdx.x % 16, tc = threadIdx.x / 16;
    const int row0 = blockIdx.x * MM_BM, tok0 = blockIdx.y * 16 * TN;
    float acc[4][TN];
    tile_products<TYPE, TN>(p.qs, p.sc, 0, p.rows, p.k, row0, TokenRows{p.x, p.k, tok0, p.n_tokens}, acc);
#pragma unroll
    for (int j = 0; j < TN; j++) {
        const int t = tok0 + tc + 16 * j;
        if (t >= p.n_tokens) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = row0 + tr + 16 * i;
            if (r < p.rows) {
                float* y = p.y + (size_t)t * p.rows + r;
                *y = p.add ? *y + acc[i][j] : acc[i][j];
            }
        }
    }
}

#define MATMUL_KERNEL(NAME, TYPE, TN) \
    extern "C" __global__ void __launch_bounds__(MM_THREADS) NAME(const Matmul p) { matmul_tiled<TYPE, TN>(p); }

#define MATMUL_KERNELS(SUFFIX, TYPE)                 \
    MATMUL_KERNEL(matmul_##SUFFIX##_n16, TYPE, 1) \
    MATMUL_KERNEL(matmul_##SUFFIX##_n32, TYPE, 2) \
    MATMUL_KERNEL(matmul_##SUFFIX##_n64, TYPE, 4)
FOR_EACH_WEIGHT_TYPE(MATMUL_KERNELS)

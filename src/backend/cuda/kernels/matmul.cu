// Projections of many tokens (prefill chunks, large decode batches): Y[t][r] (+)= Σ_k W[r][k]·X[t][k].
//
// A classic shared-memory tiling: a block computes a tile of 64 rows × BN tokens, walking the row length one
// quantized block (32 columns) at a time. Each step dequantizes the 64 rows' blocks into shared memory (each
// weight is dequantized once per token tile, not once per token) and stages the tokens' 32 columns beside them;
// every thread then accumulates 4 rows × TN tokens in registers. BN = 16·TN follows the number of tokens, so that
// a batch of 16 decodes does not pay for 64. Each block's products are summed in the order of common.cuh, the
// order `project_small` sums them in, so that a token's result is the same bit for bit in either kernel.
//
// Plain f32 FMAs, no tensor cores: simple enough to trust before it has run on a GPU. A decode step of a 135M model
// is dominated by launches and weight reads; prefill is where tensor cores would pay (docs/performance.md).

#define MM_BM 64
#define MM_THREADS 256

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

template <int TYPE, int TN>
__device__ void matmul_tiled(const Matmul& p) {
    const int BN = 16 * TN;
    // Column-major tiles ([k][row], [k][token]) so that the inner loop reads a row of each.
    __shared__ float ws[QK][MM_BM + 4];
    __shared__ float xs[QK][16 * TN + 4];

    const int tid = threadIdx.x, tr = tid % 16, tc = tid / 16;
    const int row0 = blockIdx.x * MM_BM, tok0 = blockIdx.y * BN, nb = p.k / QK;
    // The weight slice this thread dequantizes at each step: row wr of the tile, slice ws_s of its block.
    const int wr = tid / 4, ws_s = tid % 4;
    int first, second;
    slice_offsets<TYPE>(ws_s, first, second);

    float acc[4][TN];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int b = 0; b < nb; b++) {
        float wa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, wb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (row0 + wr < p.rows) {
            const size_t block = (size_t)(row0 + wr) * nb + b;
            slice_dequant<TYPE>(p.qs + block * Quant<TYPE>::QWORDS, p.sc + block * Quant<TYPE>::SWORDS, ws_s, wa, wb);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            ws[first + i][wr] = wa[i];
            ws[second + i][wr] = wb[i];
        }
        // BN tokens × 32 columns, as float4s: 8 per token.
        for (int idx = tid; idx < BN * 8; idx += MM_THREADS) {
            const int tok = idx / 8, c4 = idx % 8;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (tok0 + tok < p.n_tokens) v = load_float4(p.x + (size_t)(tok0 + tok) * p.k + b * QK + 4 * c4);
            xs[4 * c4 + 0][tok] = v.x;
            xs[4 * c4 + 1][tok] = v.y;
            xs[4 * c4 + 2][tok] = v.z;
            xs[4 * c4 + 3][tok] = v.w;
        }
        __syncthreads();
        // This block's dot products, in the order of common.cuh (the order `project_small` uses): each slice's
        // 8 products chained as `slice_dot` chains them, the slices combined by `block_dot`, then into the sum.
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

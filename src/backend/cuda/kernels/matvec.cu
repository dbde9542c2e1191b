// Projections of a few tokens (decode steps): y[t] = W·x[t] for up to MMV_MAX_TOKENS tokens, reading each weight
// once for all of them. One warp computes one output row; the step is bound by reading the weights, so every warp
// reads whole runs of 8 consecutive groups (128 bytes of a 4-bit type: one 4-byte slice per lane) per iteration.
//
// The dot products follow the order fixed in common.cuh: the 4 lanes of a block butterfly their slices into the
// block's share, and the shares are added in column order, as `matmul_tiled` adds them.
//
// Two fusions save launches, which dominate a decode step of a model this small:
// - an RMSNorm of the input (`norm_w` set): each block recomputes the T inverse norms (T·K reads, from L2) and
//   normalizes as it reads; block 0 also writes the normalized input to `xn` (the backend's `Xn` stays what the
//   forward pass says it is);
// - the gated unit (`project_gated_small_*`): the warp computes gate row r and up row r and writes act(g)·u.

#define MMV_WARPS 4
#define MMV_THREADS (32 * MMV_WARPS)
static_assert(MMV_THREADS == NORM_THREADS, "the fused norm must sum like rms_norm");

// Up to three matrices with the same input and row length, computed by one launch (q, k and v; gate and up).
struct Projection {
    const u32* qs[3];      // packed quants of each matrix, [rows[m]][k / 32][QWORDS]
    const u32* sc[3];      // packed scales, [rows[m]][k / 32][SWORDS]
    float* y[3];           // outputs, [n_tokens][rows[m]]
    const float* x;        // input, [n_tokens][k]
    const float* norm_w;   // RMSNorm weight [k], or null for no norm
    float* xn;             // where the normalized input goes, [n_tokens][k], or null (with norm_w only)
    int rows[3];
    int n_mats;            // 1..=3 (2 for the gated kernel: gate, up)
    int k;                 // row length, a multiple of 32
    int n_tokens;          // 1..=MMV_MAX_TOKENS
    int add;               // 1: y += W·x (the residual add), 0: y = W·x
    float eps;             // RMSNorm epsilon
    int act;               // the gated kernel's activation: ACT_SILU or ACT_GELU_TANH
    int pad_;
};
static_assert(sizeof(Projection) == 136, "Projection must match ProjectionArgs in launch.rs");

// Computes 1 / rms of each input row into inv_rms (unused without a norm) and, in block 0, writes the normalized
// input to xn.
__device__ void prepare_norm(const Projection& p, float* inv_rms, float* scratch) {
    if (!p.norm_w) return;
    for (int t = 0; t < p.n_tokens; t++) {
        const float inv = inverse_rms(p.x + (size_t)t * p.k, p.k, p.eps, scratch);
        if (threadIdx.x == 0) inv_rms[t] = inv;
    }
    __syncthreads();
    if (p.xn && blockIdx.x == 0) {
        for (int t = 0; t < p.n_tokens; t++) {
            for (int i = threadIdx.x; i < p.k; i += blockDim.x) {
                p.xn[(size_t)t * p.k + i] = p.x[(size_t)t * p.k + i] * inv_rms[t] * p.norm_w[i];
            }
        }
    }
}

template <int TYPE>
__device__ void project_small(const Projection& p) {
    __shared__ float inv_rms[MMV_MAX_TOKENS];
    __shared__ float scratch[32];
    prepare_norm(p, inv_rms, scratch);

    // This warp's row, counted over the matrices one after the other. No block-wide synchronization follows, so
    // warps past the last row may leave.
    int row = blockIdx.x * MMV_WARPS + threadIdx.x / 32, m = 0;
    while (m < p.n_mats && row >= p.rows[m]) {
        row -= p.rows[m];
        m++;
    }
    if (m >= p.n_mats) return;

    float acc[MMV_MAX_TOKENS];
    warp_row_dot<TYPE>(p.qs[m], p.sc[m], (size_t)row, p.x, p.k, p.n_tokens, p.norm_w, inv_rms, acc);
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int t = 0; t < MMV_MAX_TOKENS; t++) {
            if (t < p.n_tokens) {
                float* y = p.y[m] + (size_t)t * p.rows[m] + row;
                *y = p.add ? *y + acc[t] : acc[t];
            }
        }
    }
}

// Gate (matrix 0) and up (matrix 1) of the feed-forward, both `rows[0]` rows: y[0] = act(gate)·up, y[1] = up.
template <int TYPE>
__device__ void project_gated_small(const Projection& p) {
    __shared__ float inv_rms[MMV_MAX_TOKENS];
    __shared__ float scratch[32];
    prepare_norm(p, inv_rms, scratch);

    const int row = blockIdx.x * MMV_WARPS + threadIdx.x / 32;
    if (row >= p.rows[0]) return;
    float gate[MMV_MAX_TOKENS], up[MMV_MAX_TOKENS];
    warp_row_dot<TYPE>(p.qs[0], p.sc[0], (size_t)row, p.x, p.k, p.n_tokens, p.norm_w, inv_rms, gate);
    warp_row_dot<TYPE>(p.qs[1], p.sc[1], (size_t)row, p.x, p.k, p.n_tokens, p.norm_w, inv_rms, up);
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int t = 0; t < MMV_MAX_TOKENS; t++) {
            if (t < p.n_tokens) {
                const size_t at = (size_t)t * p.rows[0] + row;
                p.y[0][at] = gated_mul(gate[t], up[t], p.act);
                p.y[1][at] = up[t];
            }
        }
    }
}

#define PROJECT_KERNELS(SUFFIX, TYPE)                                                                    \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS) project_small_##SUFFIX(const Projection p) {     \
        project_small<TYPE>(p);                                                                             \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(MMV_THREADS) project_gated_small_##SUFFIX(const Projection p) {  \
        project_gated_small<TYPE>(p);                                                                      \
    }
FOR_EACH_WEIGHT_TYPE(PROJECT_KERNELS)

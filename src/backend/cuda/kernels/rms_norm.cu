// RMSNorm of whole rows, where it is not fused into a projection: out[i] (+)= x[r] / rms(x[r]) ⊙ w, with r = i, or
// r = rows[i] to gather the rows that want logits. One block of NORM_THREADS per output row. Also the normalized
// residual branch of Gemma 3 (`add`: out += …) and its per-head q/k norms (rows of head_dim, out = x in place: every
// thread reads its elements for the sum before block_sum synchronizes, and writes only those it read).

struct RmsNorm {
    const float* x;    // [any][width]
    const float* w;    // [width]
    float* out;        // [n_rows][width]
    const int* rows;   // [n_rows] rows of x to normalize, or null for rows 0 .. n_rows
    int n_rows;
    int width;
    float eps;
    int add;           // 1: out += normalized x, 0: out = normalized x
};
static_assert(sizeof(RmsNorm) == 48, "RmsNorm must match RmsNormArgs in launch.rs");

extern "C" __global__ void __launch_bounds__(NORM_THREADS) rms_norm(const RmsNorm p) {
    __shared__ float scratch[32];
    const int i = blockIdx.x;
    const size_t r = p.rows ? (size_t)p.rows[i] : (size_t)i;
    const float* x = p.x + r * p.width;
    const float inv = inverse_rms(x, p.width, p.eps, scratch);
    float* out = p.out + (size_t)i * p.width;
    for (int j = threadIdx.x; j < p.width; j += blockDim.x) {
        const float v = x[j] * inv * p.w[j];
        out[j] = p.add ? out[j] + v : v;
    }
}

// The k largest logits of each row, largest first, so that a step returns token ids (and their logits) instead of
// whole rows: 49,152 floats a row would make the copy to the host, not the model, the cost of a large batch.
//
// Order: larger logit first, the lower id first among equal logits (the sampler's greedy rule, so k = 1 is its
// argmax); NaN counts as −∞. One block per row finds the k entries one after the other, each round taking the
// best entry that comes after the previous round's in that order: k passes over a row that stays in L2, with no
// per-thread candidate lists. k is small: 1 for greedy decoding, a request's top_k for sampling (the backend
// refuses more than `TOP_K_MAX` of calls.rs).

#define TOP_K_THREADS 256

struct TopK {
    const float* logits;  // [n_rows][vocab]
    int* ids;             // [n_rows][k]
    float* values;        // [n_rows][k]
    int n_rows;
    int vocab;
    int k;                // 1 ..= vocab
    int pad_;
};
static_assert(sizeof(TopK) == 40, "TopK must match TopKArgs in launch.rs");

extern "C" __global__ void __launch_bounds__(TOP_K_THREADS) top_k(const TopK p) {
    __shared__ float best_v[TOP_K_THREADS / 32];
    __shared__ int best_i[TOP_K_THREADS / 32];
    __shared__ float prev_v_sh;
    __shared__ int prev_i_sh;
    const int row = blockIdx.x;
    const float* logits = p.logits + (size_t)row * p.vocab;
    // Before the first round, every entry comes after the "previous" one (+∞, −1).
    float prev_v = infinity();
    int prev_i = -1;
    for (int r = 0; r < p.k; r++) {
        // No entry yet: (−∞, INT_MAX) comes after every real entry.
        float v = neg_infinity();
        int i = 0x7fffffff;
        for (int j = threadIdx.x; j < p.vocab; j += blockDim.x) {
            float x = logits[j];
            if (x != x) x = neg_infinity();
            if (before(prev_v, prev_i, x, j) && before(x, j, v, i)) {
                v = x;
                i = j;
            }
        }
        block_first(v, i, best_v, best_i, TOP_K_THREADS / 32);
        if (threadIdx.x == 0) {
            p.ids[(size_t)row * p.k + r] = i;
            p.values[(size_t)row * p.k + r] = v;
            prev_v_sh = v;
            prev_i_sh = i;
        }
        __syncthreads();
        prev_v = prev_v_sh;
        prev_i = prev_i_sh;
    }
}

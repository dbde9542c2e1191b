// Mixture-of-experts FFNs (`experts.rs`, the CPU's `moe.rs`): the router's logits come from a dense projection
// (`project_small` or `matmul_tiled` of the f32 router matrix); these kernels do the rest on the device, so that a
// step needs no round trip to the host and a decode step replays from a CUDA graph like a dense one:
//
//   moe_route          one block per token: its logits (plus the router's bias), their softmax or sigmoid, its k
//                      experts (stable top-k), their weights renormalized and scaled, as `MoeConfig::route` computes
//                      them; or gpt-oss' softmax of the chosen: the top k of the raw logits, weighted by the softmax
//                      of those k only; DeepSeek's choice: the experts chosen by their probabilities plus a selection
//                      bias (`exp_probs_b`), among the best groups only (group-limited routing), weighted by their
//                      probabilities alone;
//   moe_gate_up_*      one warp per (expert row, (token, slot) pair): act(gate_e·x + gb_e)·(up_e·x + ub_e), e the
//                      pair's expert, its rows read from the stacked `ffn_{gate,up}_exps` (or fused
//                      `ffn_gate_up_exps`) tensor, the biases gpt-oss' (`ffn_{gate,up}_exps.bias`) or none;
//   moe_down_*         one warp per (output row, token): Σ_s w_s · (down_e_s · hidden_s + db_e_s), in slot order,
//                      into the block's output;
//   moe_shared_add     out += σ(g)·y (or out += y): the shared expert's output, added after the routed sum.
//
// A pair reads only its expert's rows, so a decode step reads the bytes of the experts its tokens chose and no
// others. Every dot product is `warp_row_dot`'s (the order common.cuh fixes), whatever the step's size, so a
// token's result does not depend on the other tokens of its step.

#define MOE_WARPS 4
#define MOE_THREADS (32 * MOE_WARPS)
#define ROUTE_THREADS 256
// Most experts a layer may have (`MAX_EXPERTS` of experts.rs, llama.cpp's LLAMA_MAX_EXPERTS).
#define ROUTE_MAX_EXPERTS 512
// Most expert groups (each group holds at least two experts: `read_groups` of experts.rs).
#define ROUTE_MAX_GROUPS (ROUTE_MAX_EXPERTS / 2)
// `Gating` of architecture.rs.
#define GATING_SOFTMAX 0
#define GATING_SIGMOID 1
#define GATING_SOFTMAX_OF_CHOSEN 2
// The experts' activation beyond `FfnActivation`'s: gpt-oss' clamped SwiGLU (`ExpertGlu::SwigluOai`).
#define ACT_SWIGLU_OAI 2
// llama.cpp's floor under the sum the weights are normalized by (the smallest normal f16).
#define MIN_WEIGHT_SUM 6.103515625e-5f

struct Route {
    const float* logits;  // [n_tokens][n_expert]: the router's logits
    const float* bias;    // [n_expert]: added to each token's logits first (`ffn_gate_inp.bias`); null: none
    int* selected;        // [n_tokens][k]: the chosen experts, the most probable first
    float* weights;       // [n_tokens][k]: their weights
    int n_tokens;
    int n_expert;         // 1 ..= ROUTE_MAX_EXPERTS
    int k;                // 1 ..= n_expert
    int gating;           // GATING_SOFTMAX, GATING_SIGMOID or GATING_SOFTMAX_OF_CHOSEN
    int normalize;        // 1: the weights are divided by their sum (at least MIN_WEIGHT_SUM)
    float scale;          // multiplies the weights; 0 for none
    const float* selection_bias;  // [n_expert]: added to the probabilities for the choice only (`exp_probs_b`);
                                  // null: none
    int n_group;          // group-limited routing: the experts are n_group groups of consecutive ones; 0: no groups
    int group_used;       // the best group_used groups (by the sum of their two best choice values) are chosen from
};
static_assert(sizeof(Route) == 72, "Route must match RouteArgs in args.rs");

// The order of the top k: the larger probability first, the lower expert first among equals, NaN after every
// number (as `top_k` of experts.rs sorts).
__device__ __forceinline__ float route_key(float v) { return v != v ? neg_infinity() : v; }

// ggml's softmax of a few values by one thread: exp(x − max) (fmaxf skips NaN as f32::max does), summed in f64 in
// order, times the f32 reciprocal of the sum (`softmax` of experts.rs, which the block-wide one above also follows).
__device__ void softmax_serial(float* x, int n) {
    float m = neg_infinity();
    for (int i = 0; i < n; i++) m = fmaxf(m, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// DeepSeek's group-limited routing (`keep_best_groups` of experts.rs): each group of n / n_group consecutive experts
// scored by the sum of its two best choice values (`top_k`'s order: the larger first, the lower expert among equals),
// the best `used` groups kept (the same order over the scores), every other group's experts set to −∞. One thread per
// group for the scores, thread 0 for the few groups' choice; every thread must call it (it synchronizes the block).
__device__ void keep_best_groups(float* choice, int n, int n_group, int used, float* score, int* kept) {
    const int per = n / n_group;
    for (int g = threadIdx.x; g < n_group; g += blockDim.x) {
        float v0 = neg_infinity(), v1 = neg_infinity();
        int i0 = 0x7fffffff, i1 = 0x7fffffff;
        for (int j = g * per; j < (g + 1) * per; j++) {
            const float key = route_key(choice[j]);
            if (before(key, j, v0, i0)) {
                v1 = v0;
                i1 = i0;
                v0 = key;
                i0 = j;
            } else if (before(key, j, v1, i1)) {
                v1 = key;
                i1 = j;
            }
        }
        score[g] = choice[i0] + choice[i1];
        kept[g] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float prev_v = infinity();
        int prev_i = -1;
        for (int r = 0; r < used; r++) {
            float v = neg_infinity();
            int best = 0x7fffffff;
            for (int g = 0; g < n_group; g++) {
                const float key = route_key(score[g]);
                if (before(prev_v, prev_i, key, g) && before(key, g, v, best)) {
                    v = key;
                    best = g;
                }
            }
            kept[best] = 1;
            prev_v = v;
            prev_i = best;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (!kept[i / per]) choice[i] = neg_infinity();
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS) moe_route(const Route p) {
    __shared__ float probs[ROUTE_MAX_EXPERTS];
    __shared__ float choice[ROUTE_MAX_EXPERTS];
    __shared__ float group_score[ROUTE_MAX_GROUPS];
    __shared__ int group_kept[ROUTE_MAX_GROUPS];
    __shared__ float best_v[ROUTE_THREADS / 32];
    __shared__ int best_i[ROUTE_THREADS / 32];
    __shared__ float shared_value;
    __shared__ int shared_index;
    const int t = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, n = p.n_expert;
    const float* logits = p.logits + (size_t)t * n;
    // The logits, biased (one f32 add, as the CPU's `add_assign`), into shared memory; the gating transforms them
    // there in place.
    for (int i = threadIdx.x; i < n; i += blockDim.x) probs[i] = p.bias ? logits[i] + p.bias[i] : logits[i];
    __syncthreads();
    const float* x = probs;
    if (p.gating == GATING_SIGMOID) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) probs[i] = 1.0f / (1.0f + expf(-x[i]));
    } else if (p.gating == GATING_SOFTMAX) {
        // ggml's softmax: exp(x − max), the sum in f64 in expert order (one thread: at most 512 adds), times the
        // f32 reciprocal of the sum. fmaxf skips NaN as f32::max does.
        float m = neg_infinity();
        for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
        m = warp_max(m);
        if (lane == 0) best_v[warp] = m;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < ROUTE_THREADS / 32; w++) m = fmaxf(m, best_v[w]);
            shared_value = m;
        }
        __syncthreads();
        m = shared_value;
        for (int i = threadIdx.x; i < n; i += blockDim.x) probs[i] = expf(x[i] - m);
        __syncthreads();
        if (threadIdx.x == 0) {
            double sum = 0.0;
            for (int i = 0; i < n; i++) sum += (double)probs[i];
            shared_value = (float)(1.0 / sum);
        }
        __syncthreads();
        const float inv = shared_value;
        for (int i = threadIdx.x; i < n; i += blockDim.x) probs[i] *= inv;
    }
    __syncthreads();

    // What the experts are chosen by: their probabilities, or (DeepSeek) the probabilities plus the selection bias
    // (one f32 add, as the CPU's), with every expert outside the best groups at −∞.
    const bool apart = p.selection_bias != nullptr || p.n_group > 1;
    if (apart) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            choice[i] = p.selection_bias ? probs[i] + p.selection_bias[i] : probs[i];
        }
        __syncthreads();
        if (p.n_group > 1) keep_best_groups(choice, n, p.n_group, p.group_used, group_score, group_kept);
    }
    const float* keys = apart ? choice : probs;

    // The k experts one after the other, each round taking the best entry after the previous round's (top_k.cu's
    // rounds over a row of at most 512 probabilities in shared memory).
    int* selected = p.selected + (size_t)t * p.k;
    float* weights = p.weights + (size_t)t * p.k;
    float prev_v = infinity();
    int prev_i = -1;
    for (int r = 0; r < p.k; r++) {
        float v = neg_infinity();
        int i = 0x7fffffff;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const float key = route_key(keys[j]);
            if (before(prev_v, prev_i, key, j) && before(key, j, v, i)) {
                v = key;
                i = j;
            }
        }
        block_first(v, i, best_v, best_i, ROUTE_THREADS / 32);
        if (threadIdx.x == 0) {
            selected[r] = i;
            weights[r] = probs[i];
            shared_value = v;
            shared_index = i;
        }
        __syncthreads();
        prev_v = shared_value;
        prev_i = shared_index;
    }

    if (threadIdx.x == 0) {
        if (p.gating == GATING_SOFTMAX_OF_CHOSEN) softmax_serial(weights, p.k);
        if (p.normalize) {
            // As ggml's sum_rows: accumulated in f64, in slot order.
            double sum = 0.0;
            for (int r = 0; r < p.k; r++) sum += (double)weights[r];
            const float s = fmaxf((float)sum, MIN_WEIGHT_SUM);
            for (int r = 0; r < p.k; r++) weights[r] = weights[r] / s;
        }
        if (p.scale != 0.0f) {
            for (int r = 0; r < p.k; r++) weights[r] = weights[r] * p.scale;
        }
    }
}

struct MoeGateUp {
    const u32* gate_qs;  // the stacked gate tensor's quants, [n_expert · expert_stride][cols / 32][QWORDS]
    const u32* gate_sc;  // its scales
    const u32* up_qs;    // the up tensor's (the gate's own for a fused tensor)
    const u32* up_sc;
    const float* x;      // [n_tokens][cols]: the block's normalized input
    const int* selected; // [n_tokens][k]: each pair's expert
    float* hidden;       // [n_tokens · k][rows]: act(gate·x + gb)·(up·x + ub) of each pair
    const float* gate_bias;  // [n_expert][rows]: added to each expert's gate rows; null: none
    const float* up_bias;    // [n_expert][rows]: the same for the up rows; null: none
    int rows;            // one expert's width (n_ff_exp)
    int cols;            // n_embd, a multiple of 32
    int expert_stride;   // rows from one expert's first gate row to the next's: rows, or 2·rows when fused
    int up_offset;       // rows from an expert's first gate row to its first up row: 0, or rows when fused
    int n_tokens;
    int k;
    int n_expert;
    int act;             // ACT_SILU, ACT_GELU_TANH or ACT_SWIGLU_OAI
    float alpha;         // ACT_SWIGLU_OAI's: a normal float
    float limit;
};
static_assert(sizeof(MoeGateUp) == 112, "MoeGateUp must match MoeGateUpArgs in args.rs");

__device__ __forceinline__ bool valid_expert(int e, int n_expert) { return e >= 0 && e < n_expert; }

// gpt-oss' x · σ(alpha·x) · (y + 1), x = min(g, limit), y = clamp(u, −limit, limit), in the CPU's order (`activate`
// of the CPU's experts.rs): silu(alpha·x) · ((y + 1) · (1 / alpha)), through `gated_mul`'s SiLU. fminf and fmaxf
// give the limit for a NaN input, as the CPU's min and max lanes do.
__device__ __forceinline__ float swiglu_oai(float g, float u, float alpha, float limit) {
    const float x = fminf(g, limit), y = fminf(fmaxf(u, -limit), limit);
    return gated_mul(alpha * x, (y + 1.0f) * (1.0f / alpha), ACT_SILU);
}

// act(g + gb, u + ub) of expert e's row `row`, from its gate and up dot products g and u: the one formula of the
// per-pair and the grouped kernels.
__device__ __forceinline__ float expert_hidden(const MoeGateUp& p, int e, int row, float g, float u) {
    const size_t b = (size_t)e * p.rows + row;
    const float gate = p.gate_bias ? g + p.gate_bias[b] : g;
    const float up = p.up_bias ? u + p.up_bias[b] : u;
    return p.act == ACT_SWIGLU_OAI ? swiglu_oai(gate, up, p.alpha, p.limit) : gated_mul(gate, up, p.act);
}

template <int TYPE>
__device__ void moe_gate_up(const MoeGateUp& p) {
    // No block-wide synchronization follows, so warps past the last row may leave.
    const int row = blockIdx.x * MOE_WARPS + threadIdx.x / 32;
    if (row >= p.rows) return;
    const int n_pairs = p.n_tokens * p.k;
    for (int pair = blockIdx.y; pair < n_pairs; pair += gridDim.y) {
        const int e = p.selected[pair];
        float g[MMV_MAX_TOKENS], u[MMV_MAX_TOKENS];
        float h = __int_as_float(0x7fc00000);  // NaN for an expert out of range: a bug shows, it reads nothing
        if (valid_expert(e, p.n_expert)) {
            const float* x = p.x + (size_t)(pair / p.k) * p.cols;
            const size_t first = (size_t)e * p.expert_stride;
            warp_row_dot<TYPE>(p.gate_qs, p.gate_sc, first + row, x, p.cols, 1, nullptr, nullptr, g);
            warp_row_dot<TYPE>(p.up_qs, p.up_sc, first + p.up_offset + row, x, p.cols, 1, nullptr, nullptr, u);
            h = expert_hidden(p, e, row, g[0], u[0]);
        }
        if (threadIdx.x % 32 == 0) p.hidden[(size_t)pair * p.rows + row] = h;
    }
}

struct MoeDown {
    const u32* qs;        // the stacked down tensor's quants, [n_expert · rows][cols / 32][QWORDS]
    const u32* sc;        // its scales
    const float* hidden;  // [n_tokens · k][cols]
    const int* selected;  // [n_tokens][k]
    const float* weights; // [n_tokens][k]
    float* out;           // [n_tokens][rows]: the routed experts' weighted sum
    const float* bias;    // [n_expert][rows]: added to each expert's output before its weight; null: none
    int rows;             // n_embd
    int cols;             // one expert's width (n_ff_exp), a multiple of 32
    int n_tokens;
    int k;
    int n_expert;
    int pad_;
};
static_assert(sizeof(MoeDown) == 80, "MoeDown must match MoeDownArgs in args.rs");

// Expert e's output row `row` from its down dot product d: d plus the expert's down bias, if any.
__device__ __forceinline__ float expert_output(const MoeDown& p, int e, int row, float d) {
    return p.bias ? d + p.bias[(size_t)e * p.rows + row] : d;
}

// The running weighted sum of a token's slots after slot s, whose expert's output is y and weight w: the product
// rounded, then added to the slots before it (slot 0's product is the sum's start).
__device__ __forceinline__ float add_slot(float acc, int s, float y, float w) {
    const float term = y * w;
    return s == 0 ? term : acc + term;
}

// out[t][row] = Σ_s w[t][s] · ((down_e · hidden[t·k + s])[row] + bias_e[row]), the products rounded and added in
// slot order from slot 0's, as `weighted_sum` of the CPU's experts.rs adds them.
template <int TYPE>
__device__ void moe_down(const MoeDown& p) {
    const int row = blockIdx.x * MOE_WARPS + threadIdx.x / 32;
    if (row >= p.rows) return;
    for (int t = blockIdx.y; t < p.n_tokens; t += gridDim.y) {
        float acc = 0.0f;
        for (int s = 0; s < p.k; s++) {
            const int pair = t * p.k + s, e = p.selected[pair];
            float y = __int_as_float(0x7fc00000);
            if (valid_expert(e, p.n_expert)) {
                float d[MMV_MAX_TOKENS];
                const float* h = p.hidden + (size_t)pair * p.cols;
                warp_row_dot<TYPE>(p.qs, p.sc, (size_t)e * p.rows + row, h, p.cols, 1, nullptr, nullptr, d);
                y = expert_output(p, e, row, d[0]);
            }
            acc = add_slot(acc, s, y, p.weights[pair]);
        }
        if (threadIdx.x % 32 == 0) p.out[(size_t)t * p.rows + row] = acc;
    }
}

#define MOE_KERNELS(SUFFIX, TYPE)                                                                       \
    extern "C" __global__ void __launch_bounds__(MOE_THREADS) moe_gate_up_##SUFFIX(const MoeGateUp p) {  \
        moe_gate_up<TYPE>(p);                                                                           \
    }                                                                                                   \
    extern "C" __global__ void __launch_bounds__(MOE_THREADS) moe_down_##SUFFIX(const MoeDown p) {      \
        moe_down<TYPE>(p);                                                                              \
    }
FOR_EACH_EXPERT_TYPE(MOE_KERNELS)

struct MoeSharedAdd {
    float* out;          // [n_tokens][width]: out += g·y
    const float* y;      // [n_tokens][width]: the shared expert's output
    const float* gate;   // [n_tokens]: ffn_gate_inp_shexp·x of each token, g = σ of it; null: g = 1
    int n_tokens;
    int width;
};
static_assert(sizeof(MoeSharedAdd) == 32, "MoeSharedAdd must match MoeSharedAddArgs in args.rs");

#define SHARED_ADD_THREADS 256

// σ(x) as llama.cpp computes the shared expert's gate, silu(x) / x, but 1/2 at 0 (where that is NaN), as the CPU's
// `shared_gate`; the product g·y is rounded before the add, as the CPU adds it.
extern "C" __global__ void __launch_bounds__(SHARED_ADD_THREADS) moe_shared_add(const MoeSharedAdd p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_tokens * p.width) return;
    float g = 1.0f;
    if (p.gate) {
        const float x = p.gate[i / p.width];
        g = x == 0.0f ? 0.5f : (x / (1.0f + expf(-x))) / x;
    }
    const float term = p.y[i] * g;
    p.out[i] += term;
}

// Prefill by expert. The per-pair kernels above read an expert's rows once per pair routed to it; a prefill step of
// T tokens has T·k pairs, so these group them by expert and read an expert's rows once per tile of up to 16·TN of
// its pairs, as `matmul_tiled` reads a dense matrix once per tile of tokens:
//
//   moe_group              one block: a counting sort of the step's pairs by expert (each expert's count, their
//                          offsets, the pairs in expert-major order, an expert's in pair order) and the tiles, one
//                          per run of up to BN of an expert's pairs: (expert, first position, count);
//   moe_gate_up_tiled_*    a block per (64 expert rows, tile): `tile_products` of the expert's gate rows and of its
//                          up rows over the inputs of the tile's pairs' tokens, `expert_hidden` of the two into each
//                          pair's hidden row;
//   moe_down_tiled_*       the same over the expert's down rows and the pairs' hidden rows: `expert_output` into
//                          each pair's output row (`pair_out`);
//   moe_weighted_sum       each token's slots weighted and added in slot order (`add_slot`, as `moe_down`).
//
// The tiles' grid dimension is an upper bound of their count (the host never learns the counts, so such a step
// could replay from a graph like any other); blocks past the step's tiles leave at once. `tile_products` sums in
// `warp_row_dot`'s order and the biases, activation and weighted sum are the per-pair kernels' functions, so each
// pair's hidden row and each token's output are the per-pair kernels' bits: a token's result does not depend on
// the other tokens of its step, nor on which path ran it.

#define GROUP_THREADS 256

struct MoeGroup {
    const int* selected;  // [n_pairs]: each pair's expert (pair t·k + s: token t's slot s)
    int* order;           // [n_pairs]: the pairs, expert by expert, each expert's in pair order
    int* tiles;           // [max_tiles][3]: each tile's expert, first position in `order`, and number of pairs
    int* n_tiles;         // [1]: how many tiles the step has
    int n_pairs;
    int n_expert;         // 1 ..= ROUTE_MAX_EXPERTS
    int tile;             // BN: the most pairs a tile takes
    int max_tiles;        // ⌊n_pairs / tile⌋ + min(n_expert, n_pairs): the most tiles a step can have
};
static_assert(sizeof(MoeGroup) == 48, "MoeGroup must match MoeGroupArgs in args.rs");

// One block. Each thread counts and places the pairs of its experts by reading every pair's expert id in order: no
// atomics, so the order within an expert is the pairs' by construction. That is ⌈n_expert / GROUP_THREADS⌉ passes
// over the step's T·k ids (which a warp reads at once), small beside the matmuls they serve. A pair whose expert is
// out of range joins no tile (`moe_weighted_sum` makes its token NaN, as the per-pair kernels do).
extern "C" __global__ void __launch_bounds__(GROUP_THREADS) moe_group(const MoeGroup p) {
    // start[e]: expert e's first position in `order`; start[e + 1] holds its count until thread 0 adds them up.
    __shared__ int start[ROUTE_MAX_EXPERTS + 1];
    for (int e = threadIdx.x; e < p.n_expert; e += blockDim.x) {
        int count = 0;
        for (int i = 0; i < p.n_pairs; i++) count += p.selected[i] == e;
        start[e + 1] = count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        start[0] = 0;
        int n = 0;
        for (int e = 0; e < p.n_expert; e++) {
            const int end = start[e] + start[e + 1];
            for (int first = start[e]; first < end && n < p.max_tiles; first += p.tile, n++) {
                p.tiles[3 * n] = e;
                p.tiles[3 * n + 1] = first;
                p.tiles[3 * n + 2] = min(p.tile, end - first);
            }
            start[e + 1] = end;
        }
        *p.n_tiles = n;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < p.n_expert; e += blockDim.x) {
        int at = start[e];
        for (int i = 0; i < p.n_pairs; i++) {
            if (p.selected[i] == e) p.order[at++] = i;
        }
    }
}

struct MoeTiles {
    const int* order;     // moe_group's
    const int* tiles;
    const int* n_tiles;
    float* pair_out;      // [n_pairs][n_embd]: each pair's expert output, by moe_down_tiled for moe_weighted_sum
};
static_assert(sizeof(MoeTiles) == 32, "MoeTiles must match MoeTilesArgs in args.rs");

// Pair j of a tile (of `count`, listed at `pairs`): the row of `x` its input is, row pair / per_row (the token's
// input for gate/up with per_row = k, the pair's own hidden row for down with 1); null past the tile's pairs.
struct PairRows {
    const float* x;
    const int* pairs;
    int count, per_row, width;
    __device__ __forceinline__ const float* operator()(int j) const {
        return j < count ? x + (size_t)(pairs[j] / per_row) * width : nullptr;
    }
};

template <int TYPE, int TN>
__device__ void moe_gate_up_tiled(const MoeGateUp& p, const MoeTiles& g) {
    const int tr = threadIdx.x % 16, tc = threadIdx.x / 16, row0 = blockIdx.x * MM_BM;
    // The bound is the same for every thread of the block, which tile_products synchronizes.
    for (int tile = blockIdx.y; tile < *g.n_tiles; tile += gridDim.y) {
        const int e = g.tiles[3 * tile], count = g.tiles[3 * tile + 2];
        const int* pairs = g.order + g.tiles[3 * tile + 1];
        const PairRows in{p.x, pairs, count, p.k, p.cols};
        const size_t first = (size_t)e * p.expert_stride;
        float gate[4][TN], up[4][TN];
        tile_products<TYPE, TN>(p.gate_qs, p.gate_sc, first, p.rows, p.cols, row0, in, gate);
        tile_products<TYPE, TN>(p.up_qs, p.up_sc, first + p.up_offset, p.rows, p.cols, row0, in, up);
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int c = tc + 16 * j;
            if (c >= count) continue;
            float* hidden = p.hidden + (size_t)pairs[c] * p.rows;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = row0 + tr + 16 * i;
                if (r < p.rows) hidden[r] = expert_hidden(p, e, r, gate[i][j], up[i][j]);
            }
        }
    }
}

template <int TYPE, int TN>
__device__ void moe_down_tiled(const MoeDown& p, const MoeTiles& g) {
    const int tr = threadIdx.x % 16, tc = threadIdx.x / 16, row0 = blockIdx.x * MM_BM;
    for (int tile = blockIdx.y; tile < *g.n_tiles; tile += gridDim.y) {
        const int e = g.tiles[3 * tile], count = g.tiles[3 * tile + 2];
        const int* pairs = g.order + g.tiles[3 * tile + 1];
        float acc[4][TN];
        tile_products<TYPE, TN>(p.qs, p.sc, (size_t)e * p.rows, p.rows, p.cols, row0,
                                PairRows{p.hidden, pairs, count, 1, p.cols}, acc);
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int c = tc + 16 * j;
            if (c >= count) continue;
            float* out = g.pair_out + (size_t)pairs[c] * p.rows;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int r = row0 + tr + 16 * i;
                if (r < p.rows) out[r] = expert_output(p, e, r, acc[i][j]);
            }
        }
    }
}

#define MOE_TILED_KERNEL(SUFFIX, TYPE, TN, N)                                                                  \
    extern "C" __global__ void __launch_bounds__(MM_THREADS)                                                  \
        moe_gate_up_tiled_##SUFFIX##_n##N(const MoeGateUp p, const MoeTiles g) {                              \
        moe_gate_up_tiled<TYPE, TN>(p, g);                                                                    \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(MM_THREADS) moe_down_tiled_##SUFFIX##_n##N(const MoeDown p,  \
                                                                                           const MoeTiles g) { \
        moe_down_tiled<TYPE, TN>(p, g);                                                                       \
    }
#define MOE_TILED_KERNELS(SUFFIX, TYPE)   \
    MOE_TILED_KERNEL(SUFFIX, TYPE, 1, 16) \
    MOE_TILED_KERNEL(SUFFIX, TYPE, 2, 32) \
    MOE_TILED_KERNEL(SUFFIX, TYPE, 4, 64)
FOR_EACH_EXPERT_TYPE(MOE_TILED_KERNELS)

// out[t][row] = Σ_s w[t][s] · pair_out[t·k + s][row] in slot order, `moe_down`'s sum of what moe_down_tiled wrote.
// Of `p`, it reads selected, weights, out, rows, n_tokens, k and n_expert.
extern "C" __global__ void __launch_bounds__(SHARED_ADD_THREADS) moe_weighted_sum(const MoeDown p, const MoeTiles g) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_tokens * p.rows) return;
    const int t = i / p.rows, row = i % p.rows;
    float acc = 0.0f;
    for (int s = 0; s < p.k; s++) {
        const int pair = t * p.k + s, e = p.selected[pair];
        const float nan = __int_as_float(0x7fc00000);
        const float y = valid_expert(e, p.n_expert) ? g.pair_out[(size_t)pair * p.rows + row] : nan;
        acc = add_slot(acc, s, y, p.weights[pair]);
    }
    p.out[i] = acc;
}

// Element-wise operations that are not fused into a projection.

#define ELEMENTWISE_THREADS 256

struct Gated {
    float* gate;      // [n]: act(gate) ⊙ up, in place
    const float* up;  // [n]
    int n;
    int act;          // ACT_SILU or ACT_GELU_TANH
};
static_assert(sizeof(Gated) == 24, "Gated must match GatedArgs in args.rs");

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS) gated_activation(const Gated p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.gate[i] = gated_mul(p.gate[i], p.up[i], p.act);
}

struct AddBias {
    float* x;            // [n / width][width]: each row gets the bias added, in place
    const float* bias;   // [width]
    int n;
    int width;
};
static_assert(sizeof(AddBias) == 24, "AddBias must match AddBiasArgs in args.rs");

// Qwen 2's projection biases, after the projections (their outputs are the step's rows of q, k or v).
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS) add_bias(const AddBias p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.x[i] += p.bias[i % p.width];
}

struct AddScaled {
    float* dst;        // [n]: dst += factor · src, in place
    const float* src;  // [n]
    int n;
    float factor;
};
static_assert(sizeof(AddScaled) == 24, "AddScaled must match AddScaledArgs in args.rs");

// Granite's scaled residual branches: the product is rounded before the add (no FMA contraction), as on the CPU
// and in llama.cpp.
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS) add_scaled(const AddScaled p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.dst[i] += p.factor * p.src[i];
}

struct FinishLogits {
    float* x;      // [n] logits, in place
    int n;
    float factor;  // 1 / logit_scale (Granite), else 1
    float cap;     // final soft cap (Gemma 2): x becomes cap · tanh(x / cap); 0 for none
    int pad_;
};
static_assert(sizeof(FinishLogits) == 24, "FinishLogits must match FinishLogitsArgs in args.rs");

// What the output projection's logits become before sampling (`LlamaConfig::logit_scale`, `final_softcap`).
extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS) finish_logits(const FinishLogits p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    float v = p.x[i] * p.factor;
    if (p.cap > 0.0f) v = p.cap * tanhf(v / p.cap);
    p.x[i] = v;
}

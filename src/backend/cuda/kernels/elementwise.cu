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

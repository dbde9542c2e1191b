// Element-wise operations that are not fused into a projection.

#define ELEMENTWISE_THREADS 256

struct Swiglu {
    float* gate;      // [n]: silu(gate) ⊙ up, in place
    const float* up;  // [n]
    int n;
    int pad_;
};
static_assert(sizeof(Swiglu) == 24, "Swiglu must match SwigluArgs in launch.rs");

extern "C" __global__ void __launch_bounds__(ELEMENTWISE_THREADS) swiglu(const Swiglu p) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) {
        const float g = p.gate[i];
        // The CPU's scalar formula: g / (1 + e^−g) · u.
        p.gate[i] = g / (1.0f + expf(-g)) * p.up[i];
    }
}

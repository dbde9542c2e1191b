// Token embeddings: out[t] = dequantize(table row tokens[t]) · scale (1 for llama, √n_embd for Gemma 3). One block
// per token, one thread per 8-element slice.

#define EMBED_THREADS 128

struct Embed {
    const u32* qs;      // packed quants of the table, [vocab][width / 32][QWORDS]
    const u32* sc;      // packed scales, [vocab][width / 32][SWORDS]
    const int* tokens;  // [n_tokens]
    float* out;         // [n_tokens][width]
    int n_tokens;
    int width;          // a multiple of 32
    int vocab;
    float scale;        // the embedding scale; 1 leaves the values as they are
};
static_assert(sizeof(Embed) == 48, "Embed must match EmbedArgs in launch.rs");

template <int TYPE>
__device__ void embed(const Embed& p) {
    const int t = blockIdx.x, nb = p.width / QK;
    const int token = p.tokens[t];
    float* out = p.out + (size_t)t * p.width;
    // Tokens were checked on the host; an id out of range (impossible) reads nothing and yields zeros.
    const bool valid = token >= 0 && token < p.vocab;
    for (int u = threadIdx.x; u < nb * 4; u += blockDim.x) {
        const int b = u / 4, s = u % 4;
        int first, second;
        slice_offsets<TYPE>(s, first, second);
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (valid) {
            const size_t block = (size_t)token * nb + b;
            slice_dequant<TYPE>(p.qs + block * Quant<TYPE>::QWORDS, p.sc + block * Quant<TYPE>::SWORDS, s, a, c);
        }
        for (int i = 0; i < 4; i++) {
            out[b * QK + first + i] = a[i] * p.scale;
            out[b * QK + second + i] = c[i] * p.scale;
        }
    }
}

#define EMBED_KERNEL(SUFFIX, TYPE) \
    extern "C" __global__ void __launch_bounds__(EMBED_THREADS) embed_##SUFFIX(const Embed p) { embed<TYPE>(p); }
FOR_EACH_WEIGHT_TYPE(EMBED_KERNEL)

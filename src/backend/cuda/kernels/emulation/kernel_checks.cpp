// Every kernel run under the CPU emulation of shim.h, against float64 references written here independently of the
// kernels, and against each other where the backend relies on two kernels agreeing bit for bit (the batch
// invariance of common.cuh: project_small and matmul_tiled, the fused and the unfused norm and SwiGLU).
//
//   scripts/gpu-check.sh emulate          (or: ./kernel_checks NAME to run one check)
//
// Random data comes from a fixed-seed splitmix64; shapes are small but odd (partial tiles, partial lane groups,
// attention over more than one chunk of positions, permuted block tables, padding rows, ties and NaN in top-k).
#include "kernels_host.h"

#include <map>
#include <string>

static uint64_t rng_state = 12345;
static uint64_t next_u64() { uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull); z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; return z ^ (z >> 31); }
static float uniform() { return (float)((next_u64() >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f; }
static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

// ---- Weight matrices packed by the backend (packing.rs), with the CPU's dequantization of the same blocks ----
// tests/cuda_packed_fixtures.rs writes one pool matrix of random valid blocks per weight type; a test matrix takes
// random rows of its type's pool and a run of whole 32-element groups of each (every packed group is
// self-contained, scales included), so K-quant groups are read at every position of their super-blocks.
struct Mat { int type, rows, cols; std::vector<u32> qs, sc; std::vector<float> ref; };
struct Pool { int rows = 0, cols = 0, qw = 0, sw = 0; std::vector<u32> qs, sc; std::vector<float> ref; };
#define COUNT_TYPE(SUFFIX, TYPE) +1
static const int N_TYPES = 0 FOR_EACH_WEIGHT_TYPE(COUNT_TYPE);
static Pool pools[N_TYPES];

static bool load_pools(const char* path) {
    FILE* f = path ? std::fopen(path, "rb") : nullptr;
    if (!f) { printf("error: set EMBER_PACKED_FIXTURES to the file tests/cuda_packed_fixtures.rs writes\n"); return false; }
    auto word = [&] { u32 w = 0; if (std::fread(&w, 4, 1, f) != 1) w = ~0u; return w; };
    auto words = [&](std::vector<u32>& v, size_t n) { v.resize(n); return std::fread(v.data(), 4, n, f) == n; };
    bool ok = true;
    for (u32 i = 0, n = word(); ok && i < n; i++) {
        u32 type = word(), rows = word(), cols = word(), nq = word(), ns = word();
        ok = type < (u32)N_TYPES && rows && cols % 32 == 0;
        if (!ok) break;
        Pool& p = pools[type];
        u32 groups = rows * cols / 32;
        p.rows = rows; p.cols = cols; p.qw = nq / groups; p.sw = ns / groups;
        std::vector<u32> ref_bits;
        ok = nq % groups == 0 && ns % groups == 0 && words(p.qs, nq) && words(p.sc, ns) && words(ref_bits, (size_t)rows * cols);
        p.ref.resize(ref_bits.size()); std::memcpy(p.ref.data(), ref_bits.data(), ref_bits.size() * 4);
    }
    std::fclose(f);
    for (int t = 0; ok && t < N_TYPES; t++) ok = pools[t].rows > 0;
    if (!ok) printf("error: %s is not a complete fixture file (one matrix of every type)\n", path);
    return ok;
}

static Mat random_matrix(int type, int rows, int cols) {
    const Pool& p = pools[type];
    Mat m{type, rows, cols};
    int groups = cols / 32, pool_groups = p.cols / 32, g0 = (int)(next_u64() % (pool_groups - groups + 1));
    for (int r = 0; r < rows; r++) {
        int src = (int)(next_u64() % p.rows);
        size_t first = (size_t)src * pool_groups + g0;
        m.qs.insert(m.qs.end(), p.qs.begin() + first * p.qw, p.qs.begin() + (first + groups) * p.qw);
        m.sc.insert(m.sc.end(), p.sc.begin() + first * p.sw, p.sc.begin() + (first + groups) * p.sw);
        m.ref.insert(m.ref.end(), p.ref.begin() + first * 32, p.ref.begin() + (first + groups) * 32);
    }
    if (m.sc.empty()) m.sc.push_back(0);  // the float types read none; weights.rs uploads one unused word too
    return m;
}
// Every shape of a check runs on the first three types; the others, which share every line of the kernels but
// `slice_dequant`, run a few shapes each (the emulation's threads make each launch costly).
static bool every_shape(int type) { return type <= TYPE_Q8_0; }

static std::vector<float> randv(size_t n, float scale = 1.0f) { std::vector<float> v(n); for (auto& x : v) x = scale * uniform(); return v; }
static bool bits_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }
static double rel(double got, double ref) { return std::fabs(got - ref) / (1.0 + std::fabs(ref)); }

#define TYPE_NAME(SUFFIX, TYPE) #SUFFIX,
static const char* TN[] = {FOR_EACH_WEIGHT_TYPE(TYPE_NAME)};
// A check's worst error of each type over its shapes, printed as one line (`worst` of each type's runs).
static void print_worst(const char* check, const double* worst) {
    printf("%s: worst error per type:", check);
    for (int t = 0; t < N_TYPES; t++) printf(" %s %.1e", TN[t], worst[t]);
    printf("\n");
}
using ProjFn = void (*)(const Projection);
#define PROJECT_SMALL_FN(SUFFIX, TYPE) project_small_##SUFFIX,
#define PROJECT_GATED_FN(SUFFIX, TYPE) project_gated_small_##SUFFIX,
static ProjFn project_small_fn[] = {FOR_EACH_WEIGHT_TYPE(PROJECT_SMALL_FN)};
static ProjFn project_gated_fn[] = {FOR_EACH_WEIGHT_TYPE(PROJECT_GATED_FN)};
using MmFn = void (*)(const Matmul);
#define MATMUL_FNS(SUFFIX, TYPE) {matmul_##SUFFIX##_n16, matmul_##SUFFIX##_n32, matmul_##SUFFIX##_n64},
static MmFn matmul_fn[][3] = {FOR_EACH_WEIGHT_TYPE(MATMUL_FNS)};
using EmbFn = void (*)(const Embed);
#define EMBED_FN(SUFFIX, TYPE) embed_##SUFFIX,
static EmbFn embed_fn[] = {FOR_EACH_WEIGHT_TYPE(EMBED_FN)};
using GateUpFn = void (*)(const MoeGateUp);
#define MOE_GATE_UP_FN(SUFFIX, TYPE) moe_gate_up_##SUFFIX,
static GateUpFn moe_gate_up_fn[] = {FOR_EACH_WEIGHT_TYPE(MOE_GATE_UP_FN)};
using DownFn = void (*)(const MoeDown);
#define MOE_DOWN_FN(SUFFIX, TYPE) moe_down_##SUFFIX,
static DownFn moe_down_fn[] = {FOR_EACH_WEIGHT_TYPE(MOE_DOWN_FN)};

static void run_rms_norm(const float* x, const float* w, float* out, const int* rows, int n_rows, int width, float eps, int add = 0) {
    RmsNorm a{x, w, out, rows, n_rows, width, eps, add};
    launch({(unsigned)n_rows, 1, 1}, {128, 1, 1}, [&] { rms_norm(a); });
}
static void run_matmul(const Mat& m, const float* x, float* y, int T, int add) {
    Matmul a{m.qs.data(), m.sc.data(), x, y, m.rows, m.cols, T, add};
    int tile = T <= 16 ? 0 : T <= 32 ? 1 : 2, bn = 16 << tile;
    launch({(unsigned)((m.rows + 63) / 64), (unsigned)((T + bn - 1) / bn), 1}, {256, 1, 1}, [&] { matmul_fn[m.type][tile](a); });
}
// gated: -1 for a plain projection, else the activation (ACT_*) of the gated kernel.
static void run_project_small(const std::vector<const Mat*>& mats, std::vector<float*> ys, const float* x, int T, const float* nw, float* xn, float eps, int add, int gated) {
    Projection p{};
    int total = 0;
    for (size_t i = 0; i < mats.size(); i++) { p.qs[i] = mats[i]->qs.data(); p.sc[i] = mats[i]->sc.data(); p.y[i] = ys[i]; p.rows[i] = mats[i]->rows; total += mats[i]->rows; }
    p.x = x; p.norm_w = nw; p.xn = xn; p.n_mats = (int)mats.size(); p.k = mats[0]->cols; p.n_tokens = T; p.add = add; p.eps = eps;
    p.act = gated < 0 ? 0 : gated;
    int rows = gated >= 0 ? mats[0]->rows : total;
    auto fn = gated >= 0 ? project_gated_fn[mats[0]->type] : project_small_fn[mats[0]->type];
    launch({(unsigned)((rows + 3) / 4), 1, 1}, {128, 1, 1}, [&] { fn(p); });
}

static std::vector<double> ref_norm(const float* x, const float* w, int K, float eps) {
    double ss = 0; for (int i = 0; i < K; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / std::sqrt(ss / K + eps);
    std::vector<double> o(K); for (int i = 0; i < K; i++) o[i] = x[i] * inv * w[i]; return o;
}
static double ref_dot(const Mat& m, int r, const double* x) { double s = 0; for (int k = 0; k < m.cols; k++) s += (double)m.ref[(size_t)r * m.cols + k] * x[k]; return s; }

static void test_embed() {
    for (int type = 0; type < N_TYPES; type++) {
        Mat m = random_matrix(type, 10, 96);
        int tokens[3] = {3, 0, 9};
        std::vector<float> out(3 * 96, -1);
        Embed a{m.qs.data(), m.sc.data(), tokens, out.data(), 3, 96, 10, 1.0f};
        launch({3, 1, 1}, {128, 1, 1}, [&] { embed_fn[type](a); });
        for (int t = 0; t < 3; t++) CHECK(bits_equal(&out[t * 96], &m.ref[tokens[t] * 96], 96), "embed %s token %d", TN[type], t);
        // Gemma's embedding scale multiplies each dequantized value once.
        a.scale = 25.298221f;
        launch({3, 1, 1}, {128, 1, 1}, [&] { embed_fn[type](a); });
        bool scaled = true;
        for (int t = 0; t < 3; t++) for (int i = 0; i < 96; i++) scaled &= out[t * 96 + i] == m.ref[tokens[t] * 96 + i] * 25.298221f;
        CHECK(scaled, "embed %s with a scale", TN[type]);
    }
}

static void test_rms_norm() {
    int K = 576; auto x = randv(5 * K, 3.0f), w = randv(K);
    int rows[2] = {4, 1}; std::vector<float> out(2 * K);
    run_rms_norm(x.data(), w.data(), out.data(), rows, 2, K, 1e-5f);
    double worst = 0;
    for (int i = 0; i < 2; i++) { auto r = ref_norm(&x[rows[i] * K], w.data(), K, 1e-5f); for (int k = 0; k < K; k++) worst = std::max(worst, rel(out[i * K + k], r[k])); }
    CHECK(worst < 1e-5, "rms_norm error %g", worst);
    // The add mode (Gemma's normalized residual branch) adds exactly the plain norm's output.
    std::vector<float> plain(3 * K), acc(3 * K);
    for (auto& v : acc) v = uniform();
    auto acc0 = acc;
    run_rms_norm(x.data(), w.data(), plain.data(), nullptr, 3, K, 1e-6f);
    run_rms_norm(x.data(), w.data(), acc.data(), nullptr, 3, K, 1e-6f, 1);
    bool added = true; for (int i = 0; i < 3 * K; i++) added &= acc[i] == acc0[i] + plain[i];
    CHECK(added, "rms_norm add mode");
    // Per-head norms in place (q/k norms): rows of head_dim, x as its own output, as from separate buffers.
    int D = 256, heads = 12; auto hx = randv(heads * D, 2.0f), hw = randv(D); std::vector<float> sep(heads * D);
    run_rms_norm(hx.data(), hw.data(), sep.data(), nullptr, heads, D, 1e-6f);
    run_rms_norm(hx.data(), hw.data(), hx.data(), nullptr, heads, D, 1e-6f);
    CHECK(bits_equal(hx.data(), sep.data(), heads * D), "rms_norm in place differs from out of place");
}

// project_small against a float64 reference, with and without the fused norm, and xn against rms_norm.
static void test_project_small() {
    double by_type[N_TYPES] = {};
    for (int type = 0; type < N_TYPES; type++) for (int K : {96, 320}) for (int T : {1, 3, 8}) for (int norm = 0; norm < 2; norm++) {
        if (!every_shape(type) && (K != 320 || T != 3)) continue;
        Mat a = random_matrix(type, 21, K), b = random_matrix(type, 7, K), c = random_matrix(type, 5, K);
        auto x = randv(T * K, 2.0f), w = randv(K);
        std::vector<float> ya(T * 21, 0.5f), yb(T * 7), yc(T * 5), xn(T * K, -7);
        int add = norm;  // the add mode on the norm runs
        auto ya0 = ya;
        run_project_small({&a, &b, &c}, {ya.data(), yb.data(), yc.data()}, x.data(), T, norm ? w.data() : nullptr, norm ? xn.data() : nullptr, 1e-5f, add, -1);
        double worst = 0;
        for (int t = 0; t < T; t++) {
            std::vector<double> xin(K);
            if (norm) xin = ref_norm(&x[t * K], w.data(), K, 1e-5f); else for (int k = 0; k < K; k++) xin[k] = x[t * K + k];
            for (int r = 0; r < 21; r++) worst = std::max(worst, rel(ya[t * 21 + r], (add ? ya0[t * 21 + r] : 0) + ref_dot(a, r, xin.data())));
            for (int r = 0; r < 7; r++) worst = std::max(worst, rel(yb[t * 7 + r], ref_dot(b, r, xin.data())));
            for (int r = 0; r < 5; r++) worst = std::max(worst, rel(yc[t * 5 + r], ref_dot(c, r, xin.data())));
        }
        CHECK(worst < 2e-5, "project_small %s K=%d T=%d norm=%d: error %g", TN[type], K, T, norm, worst);
        by_type[type] = std::max(by_type[type], worst);
        if (norm) {
            std::vector<float> xn_ref(T * K);
            run_rms_norm(x.data(), w.data(), xn_ref.data(), nullptr, T, K, 1e-5f);
            CHECK(bits_equal(xn.data(), xn_ref.data(), T * K), "fused norm output differs from rms_norm (%s K=%d T=%d)", TN[type], K, T);
        }
    }
    print_worst("project_small", by_type);
}

// The tiled matmul against the reference, and bit for bit against project_small one token at a time.
static void test_matmul_and_invariance() {
    double by_type[N_TYPES] = {};
    for (int type = 0; type < N_TYPES; type++) for (int K : {96, 320}) for (int T : {9, 17, 40, 70}) {
        if (!every_shape(type) && (K != 320 || (T != 17 && T != 70))) continue;
        Mat m = random_matrix(type, 100, K);
        auto x = randv(T * K, 2.0f), w = randv(K);
        std::vector<float> xn(T * K), y(T * 100), y_small(100);
        run_rms_norm(x.data(), w.data(), xn.data(), nullptr, T, K, 1e-5f);
        run_matmul(m, xn.data(), y.data(), T, 0);
        double worst = 0;
        for (int t = 0; t < T; t++) {
            std::vector<double> xin(xn.begin() + t * K, xn.begin() + (t + 1) * K);
            for (int r = 0; r < 100; r++) worst = std::max(worst, rel(y[t * 100 + r], ref_dot(m, r, xin.data())));
        }
        CHECK(worst < 2e-5, "matmul %s K=%d T=%d: error %g", TN[type], K, T, worst);
        by_type[type] = std::max(by_type[type], worst);
        for (int t : {0, T / 2, T - 1}) {
            // Alone, through the fused norm: must equal the tiled result bit for bit.
            run_project_small({&m}, {y_small.data()}, &x[t * K], 1, w.data(), nullptr, 1e-5f, 0, -1);
            CHECK(bits_equal(y_small.data(), &y[t * 100], 100), "batch invariance: %s K=%d T=%d token %d differs between project_small and matmul", TN[type], K, T, t);
        }
    }
    // The add mode.
    Mat m = random_matrix(TYPE_Q4_1, 70, 64);
    auto x = randv(20 * 64); std::vector<float> y(20 * 70, 1.0f), y0(20 * 70, 0.0f);
    run_matmul(m, x.data(), y.data(), 20, 1); run_matmul(m, x.data(), y0.data(), 20, 0);
    bool ok = true; for (int i = 0; i < 20 * 70; i++) ok &= y[i] == y0[i] + 1.0f;
    CHECK(ok, "matmul add mode");
    print_worst("matmul", by_type);
}

static double ref_act(double g, int act) {
    if (act == ACT_GELU_TANH) return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
    return g / (1 + std::exp(-g));
}

static void test_gated() {
    double by_type[N_TYPES] = {};
    for (int act : {ACT_SILU, ACT_GELU_TANH}) for (int type = 0; type < N_TYPES; type++) {
        if (!every_shape(type) && act != ACT_GELU_TANH) continue;
        int K = 192, R = 48;
        Mat g = random_matrix(type, R, K), u = random_matrix(type, R, K);
        auto x = randv(12 * K), w = randv(K);
        // Tiled path: norm, gate, up, the activation.
        std::vector<float> xn(12 * K), gate(12 * R), up(12 * R);
        run_rms_norm(x.data(), w.data(), xn.data(), nullptr, 12, K, 1e-5f);
        run_matmul(g, xn.data(), gate.data(), 12, 0); run_matmul(u, xn.data(), up.data(), 12, 0);
        Gated s{gate.data(), up.data(), 12 * R, act};
        launch({(unsigned)((12 * R + 255) / 256), 1, 1}, {256, 1, 1}, [&] { gated_activation(s); });
        // Small path, tokens 0..2 then 3..7 in two launches.
        std::vector<float> gs(8 * R), us(8 * R), xs(8 * K);
        run_project_small({&g, &u}, {gs.data(), us.data()}, x.data(), 3, w.data(), xs.data(), 1e-5f, 0, act);
        run_project_small({&g, &u}, {&gs[3 * R], &us[3 * R]}, &x[3 * K], 5, w.data(), &xs[3 * K], 1e-5f, 0, act);
        CHECK(bits_equal(gs.data(), gate.data(), 8 * R), "gated (act %d) fused vs unfused (%s)", act, TN[type]);
        CHECK(bits_equal(us.data(), up.data(), 8 * R), "up fused vs unfused (%s)", TN[type]);
        double worst = 0;
        for (int t = 0; t < 8; t++) { auto xin = ref_norm(&x[t * K], w.data(), K, 1e-5f); for (int r = 0; r < R; r++) {
            double a = ref_dot(g, r, xin.data()), b = ref_dot(u, r, xin.data()); worst = std::max(worst, rel(gs[t * R + r], ref_act(a, act) * b)); } }
        CHECK(worst < 2e-4, "gated (act %d) error %g", act, worst);  // act(g)·u compounds the two dot products' errors
        by_type[type] = std::max(by_type[type], worst);
    }
    print_worst("gated", by_type);
}

// Rows of Q's width and of K's, the bias added to every row exactly (one float add per element).
static void test_add_bias() {
    for (int W : {896, 128}) {
        int R = 7, n = R * W;
        auto x = randv(n), bias = randv(W);
        auto want = x;
        for (int i = 0; i < n; i++) want[i] = x[i] + bias[i % W];
        AddBias p{x.data(), bias.data(), n, W};
        launch({(unsigned)((n + 255) / 256), 1, 1}, {256, 1, 1}, [&] { add_bias(p); });
        CHECK(bits_equal(x.data(), want.data(), n), "add_bias width %d", W);
    }
}

// Granite's scaled residual: the product rounded, then the add (no contraction), exactly as the CPU computes it.
static void test_add_scaled() {
    int n = 3 * 896 + 5;
    auto dst = randv(n), src = randv(n, 4.0f);
    float factor = 0.22f;
    std::vector<float> want(n);
    for (int i = 0; i < n; i++) { float p = factor * src[i]; want[i] = dst[i] + p; }
    AddScaled p{dst.data(), src.data(), n, factor};
    launch({(unsigned)((n + 255) / 256), 1, 1}, {256, 1, 1}, [&] { add_scaled(p); });
    CHECK(bits_equal(dst.data(), want.data(), n), "add_scaled");
}

// The logits' divisor (Granite) and soft cap (Gemma 2), alone and together, against float64.
static void test_finish_logits() {
    struct Case { float factor, cap; };
    for (Case c : {Case{1.0f / 8.0f, 0.0f}, Case{1.0f, 30.0f}, Case{1.0f / 8.0f, 10.0f}}) {
        int n = 2 * 1000 + 3;
        auto x = randv(n, 60.0f), orig = x;
        FinishLogits p{x.data(), n, c.factor, c.cap, 0};
        launch({(unsigned)((n + 255) / 256), 1, 1}, {256, 1, 1}, [&] { finish_logits(p); });
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double v = (double)orig[i] * c.factor;
            if (c.cap > 0) v = c.cap * std::tanh(v / c.cap);
            worst = std::max(worst, rel(x[i], v));
        }
        CHECK(worst < 1e-6, "finish_logits (factor %g, cap %g) error %g", c.factor, c.cap, worst);
    }
}

static void test_rope_store() {
    for (int neox : {0, 1}) for (int rope_dim : {64, 32}) {
        int T = 5, H = 9, HKV = 3, D = 64, KV = HKV * D, half = rope_dim / 2, SLOTS = 12;
        int positions[5] = {0, 5, 17, 3000, -1}, slots[5] = {3, 0, 7, 9, -1};
        std::vector<double> inv_freq(half); for (int i = 0; i < half; i++) inv_freq[i] = std::pow(100000.0, -2.0 * i / rope_dim);
        std::vector<float> cosv(T * half), sinv(T * half);
        double scale = neox ? 1.1902 : 1.0;  // Phi-3's LongRoPE attention factor on the NEOX runs
        RopeTable rt{positions, inv_freq.data(), cosv.data(), sinv.data(), scale, T, half};
        launch({(unsigned)((T * half + 127) / 128), 1, 1}, {128, 1, 1}, [&] { rope_table(rt); });
        auto q = randv(T * H * D), k = randv(T * KV), v = randv(T * KV);
        auto q0 = q, k0 = k;
        std::vector<u16> kc(SLOTS * KV, 0x7777), vc(SLOTS * KV, 0x7777);
        RopeStore rs{q.data(), k.data(), v.data(), cosv.data(), sinv.data(), positions, slots, kc.data(), vc.data(), T, H, HKV, D, rope_dim, neox};
        launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { rope_store(rs); });
        bool ok = true;
        auto rot = [&](std::vector<float>& orig, std::vector<float>& got, int t, int heads) {
            int pos = positions[t];
            for (int h = 0; h < heads; h++) for (int i = 0; i < D / 2; i++) {
                // Pair i: elements 2i, 2i + 1, or (NEOX, when i < rope_dim / 2) i, i + rope_dim / 2.
                size_t base = (size_t)t * heads * D + h * D;
                bool rotated = 2 * i < rope_dim;
                size_t a0 = base + (neox && rotated ? i : 2 * i), a1 = neox && rotated ? a0 + rope_dim / 2 : a0 + 1;
                if (neox && !rotated) { a0 = base + 2 * i; a1 = a0 + 1; }  // left alone either way
                float x0 = orig[a0], x1 = orig[a1], e0 = x0, e1 = x1;
                if (pos >= 0 && rotated) {
                    double ang = (double)pos * inv_freq[i]; float c = (float)(std::cos(ang) * scale), s = (float)(std::sin(ang) * scale);
                    e0 = std::fma(x0, c, -(x1 * s)); e1 = std::fma(x1, c, x0 * s);  // the CPU's rope_pair
                }
                if (got[a0] != e0 || got[a1] != e1) ok = false;
            }
        };
        for (int t = 0; t < T; t++) { rot(q0, q, t, H); rot(k0, k, t, HKV); }
        CHECK(ok, "rope rotation (rope_dim %d, neox %d)", rope_dim, neox);
        bool stored = true;
        for (int s = 0; s < SLOTS; s++) {
            int t = -1; for (int i = 0; i < T; i++) if (slots[i] == s) t = i;
            for (int i = 0; i < KV; i++) {
                u16 ek = t < 0 ? 0x7777 : host_f32_to_f16(k[t * KV + i]), ev = t < 0 ? 0x7777 : host_f32_to_f16(v[t * KV + i]);
                if (kc[s * KV + i] != ek || vc[s * KV + i] != ev) stored = false;
            }
        }
        CHECK(stored, "cache store (rope_dim %d)", rope_dim);
    }
}

// The attention kernels of every pair of cache types (kv_cache.cuh), by type: `attention_{keys}_{values}`.
using AttFn = void (*)(const Attention);
struct AttKernels { int kt, vt; AttFn narrow, wide; };
#define ATT_KERNELS(K, V, KT, VT) {KT, VT, attention_##K##_##V, attention_wide_##K##_##V},
static const AttKernels att_kernels[] = {FOR_EACH_KV_PAIR(ATT_KERNELS)};
static AttFn attention_fn(int kt, int vt, bool wide) {
    for (const AttKernels& k : att_kernels) if (k.kt == kt && k.vt == vt) return wide ? k.wide : k.narrow;
    return nullptr;
}
static const char* KV_NAME[] = {"f16", "q8_0", "q4_0"};

// Words of a cache row of `width` elements of `type`, and element j of such a row as the cache means it (f16, or
// d · v of its block), written here from the layout kv_cache.cuh documents, not from its reading functions.
static int row_words(int type, int width) { return type == KV_F16 ? width : width / 32 * (type == KV_Q8_0 ? 17 : 9); }
static double cache_element(const u16* row, int type, int j) {
    if (type == KV_F16) return host_f16_to_f32(row[j]);
    const int words = type == KV_Q8_0 ? 17 : 9, i = j % 32;
    const u16* block = row + j / 32 * words;
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(block + 1);  // little-endian words
    const double d = host_f16_to_f32(block[0]);
    if (type == KV_Q8_0) return d * (signed char)bytes[i];
    return d * ((i < 16 ? bytes[i] & 15 : bytes[i - 16] >> 4) - 8);
}
// `rows` random rows of `width` elements of `type`, elements of magnitude below about 1: f16 values, or blocks of a
// random scale (either sign for q4_0, whose scales are m / −8) and random integers.
static std::vector<u16> random_rows(int type, int rows, int width) {
    std::vector<u16> plane((size_t)rows * row_words(type, width));
    if (type == KV_F16) { for (auto& x : plane) x = host_f32_to_f16(uniform()); return plane; }
    const int words = type == KV_Q8_0 ? 17 : 9;
    for (size_t b = 0; b < plane.size() / words; b++) {
        u16* block = &plane[b * words];
        const float magnitude = 0.5f + 0.5f * std::fabs(uniform());
        block[0] = host_f32_to_f16(type == KV_Q8_0 ? magnitude / 127 : (uniform() < 0 ? -magnitude : magnitude) / 8);
        for (int w = 1; w < words; w++) {
            int lo = (int)(next_u64() % 255) - 127, hi = (int)(next_u64() % 255) - 127;  // q8_0: −127..=127
            if (type == KV_Q4_0) { lo = (int)(next_u64() % 256); hi = (int)(next_u64() % 256); }  // two nibbles each
            block[w] = (u16)((lo & 0xff) | ((hi & 0xff) << 8));
        }
    }
    return plane;
}
// A query head's 32 elements x quantized as the CPU's `quantize_row_q8a` does (d = max |x| / 127, codes x · (1 / d)
// rounded to nearest, ties to even), in doubles: what a key block's score share is computed from.
static void quantize_query_block(const float* x, double* out) {
    float amax = 0; for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) out[j] = (double)d * std::nearbyint(x[j] * id);
}

// Windows, Gemma 2's soft cap on the scores, an attention scale other than 1/√head_dim (Gemma 2 27B's), and
// gpt-oss' sinks (one case, windowed for its first token only: a sink logit per query head, from one the scores
// outweigh to one that outweighs them).
// Attention against a double-precision reference. `latent`: DeepSeek's keys-only cache, the values the first `VD`
// elements of each key row (v_cache = k_cache, of the keys' type); `wide`: the instantiation for heads up to 576.
// `kt`, `vt`: the cache's types; keys of a block type are scored against the queries quantized as the CPU
// quantizes them, which the reference does too (so the bound stays the f16 cases').
static void test_attention() {
  struct Case { int window; float cap, scale; bool sinks; int H, HKV, D, VD; bool latent, wide; int kt = KV_F16, vt = KV_F16; };
  const Case cases[] = {
      {0, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false}, {200, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false},
      {1, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false}, {0, 2.0f, 1.0f / 12.0f, false, 9, 3, 64, 64, false, false},
      {200, 3.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false}, {200, 0.0f, 1.0f / 8.0f, true, 9, 3, 64, 64, false, false},
      // 10 query heads per KV head: chunks of 8 and 2 on the grid's z, with sinks per head.
      {0, 0.0f, 1.0f / 8.0f, true, 20, 2, 32, 32, false, false},
      // DeepSeek's latent attention: one KV head, 16 query heads (two chunks), keys 128 + 32, values their first 128
      // (deepseek2-lite-small's shapes); and V2-Lite's real 512 + 64 keys with 512 values through attention_wide.
      {0, 0.0f, 1.0f / 10.0f, false, 16, 1, 160, 128, true, false},
      {200, 0.0f, 1.0f / 14.0f, false, 10, 1, 576, 512, true, true},
      // q8_0 and q4_0 caches, alone and mixed with f16 and with each other; with a window, a soft cap and sinks; the
      // latent attention's keys-only cache of either type, its values read from the key rows' blocks, narrow and wide.
      {0, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false, KV_Q8_0, KV_Q8_0},
      {0, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false, KV_Q4_0, KV_Q4_0},
      {200, 0.0f, 1.0f / 8.0f, false, 9, 3, 64, 64, false, false, KV_Q8_0, KV_F16},
      {0, 2.0f, 1.0f / 12.0f, false, 9, 3, 64, 64, false, false, KV_F16, KV_Q4_0},
      {200, 0.0f, 1.0f / 8.0f, true, 20, 2, 32, 32, false, false, KV_Q4_0, KV_Q8_0},
      {0, 0.0f, 1.0f / 10.0f, false, 16, 1, 160, 128, true, false, KV_Q8_0, KV_Q8_0},
      {200, 0.0f, 1.0f / 14.0f, false, 10, 1, 576, 512, true, true, KV_Q4_0, KV_Q4_0}};
  for (const Case& c : cases) {
    const int window = c.window, H = c.H, HKV = c.HKV, D = c.D, VD = c.VD, KV = HKV * D, BS = 16, NB = 40, SLOTS = NB * BS;
    const int group = H / HKV, kt = c.kt, vt = c.latent ? c.kt : c.vt;
    const int k_row = row_words(kt, KV), v_row = row_words(vt, KV);  // values in rows as wide as the key rows
    std::vector<u16> kc = random_rows(kt, SLOTS, KV), vc = c.latent ? std::vector<u16>() : random_rows(vt, SLOTS, KV);
    const u16* values = c.latent ? kc.data() : vc.data();
    // Sequence A: 19 blocks, permuted; sequence B: 1 block.
    std::vector<int> tables; for (int i = 0; i < 19; i++) tables.push_back((i * 7 + 3) % 40); tables.push_back(39);
    int T = 5;
    int positions[5] = {299, 130, 127, 3, -1}, offsets[5] = {0, 0, 0, 19, 0};
    // Queries of |x| < 3 / √(D / 64), so that the scores spread as the 64-wide heads' do.
    auto q = randv(T * H * D, 3.0f * std::sqrt(64.0f / D)); std::vector<float> out(T * H * VD, 42.0f);
    std::vector<float> sinks(H); for (int h = 0; h < H; h++) sinks[h] = -2.0f + 1.0f * (h % 9);
    Attention a{q.data(), out.data(), kc.data(), values, positions, offsets, tables.data(), c.sinks ? sinks.data() : nullptr, T, H, HKV, D, VD, 0, BS, c.scale, window, c.cap};
    const unsigned chunks = (unsigned)((group + 7) / 8);
    const AttFn kernel = attention_fn(kt, vt, c.wide);
    launch({(unsigned)T, (unsigned)HKV, chunks}, {128, 1, 1}, [&] { kernel(a); });
    double worst = 0; bool zero = true;
    for (int t = 0; t < T; t++) for (int h = 0; h < H; h++) {
        int pos = positions[t], g = h / group;
        if (pos < 0) { for (int d = 0; d < VD; d++) zero &= out[t * H * VD + h * VD + d] == 0.0f; continue; }
        // The query as the keys see it: scaled in floats (as the kernel scales it), quantized for keys in blocks.
        std::vector<float> scaled(D); for (int d = 0; d < D; d++) scaled[d] = q[t * H * D + h * D + d] * c.scale;
        std::vector<double> query(scaled.begin(), scaled.end());
        if (kt != KV_F16) for (int b = 0; b < D / 32; b++) quantize_query_block(&scaled[32 * b], &query[32 * b]);
        // A sliding window of w positions sees first..=pos only.
        int first = window > 0 ? std::max(0, pos + 1 - window) : 0;
        std::vector<double> s(pos + 1, 0.0); double mx = -1e300;
        for (int j = first; j <= pos; j++) {
            int slot = tables[offsets[t] + j / BS] * BS + j % BS; double acc = 0;
            const u16* key = &kc[(size_t)slot * k_row];
            for (int d = 0; d < D; d++) acc += query[d] * cache_element(key, kt, g * D + d);
            if (c.cap > 0) acc = c.cap * std::tanh(acc / c.cap);
            s[j] = acc; mx = std::max(mx, acc);
        }
        // A sink joins the maximum and the sum, and weighs no value.
        if (c.sinks) mx = std::max(mx, (double)sinks[h]);
        double sum = c.sinks ? std::exp(sinks[h] - mx) : 0; for (int j = first; j <= pos; j++) { s[j] = std::exp(s[j] - mx); sum += s[j]; }
        for (int d = 0; d < VD; d++) {
            double o = 0;
            for (int j = first; j <= pos; j++) {
                int slot = tables[offsets[t] + j / BS] * BS + j % BS;
                o += s[j] / sum * cache_element(&values[(size_t)slot * v_row], vt, g * VD + d);
            }
            worst = std::max(worst, rel(out[t * H * VD + h * VD + d], o));
        }
    }
    CHECK(worst < 1e-5, "attention (%s / %s cache, %d heads over %d, %d wide, values %d%s; window %d, cap %g, scale %g, sinks %d) error %g", KV_NAME[kt], KV_NAME[vt], H, HKV, D, VD, c.latent ? " of the key rows" : "", window, c.cap, c.scale, c.sinks, worst);
    CHECK(zero, "padding row not zero");
    printf("attention: %4s / %4s cache, %2d heads over %d, %3d wide, values %3d%s%s, window %3d, cap %g, sinks %d: worst relative error %.2e\n", KV_NAME[kt], KV_NAME[vt], H, HKV, D, VD,
           c.latent ? " of the key rows" : "", c.wide ? " (attention_wide)" : "", window, c.cap, c.sinks, worst);
  }
}

static void test_top_k() {
    int V = 1000, R = 3;
    std::vector<float> logits(R * V);
    for (auto& x : logits) x = std::round(uniform() * 50) / 10;  // many ties
    logits[5] = NAN; logits[V + 7] = INFINITY; logits[V + 9] = INFINITY; logits[2 * V + 1] = -INFINITY;
    for (int k : {1, 5, 37}) {
        std::vector<int> ids(R * k, -5); std::vector<float> vals(R * k);
        TopK p{logits.data(), ids.data(), vals.data(), R, V, k, 0};
        launch({(unsigned)R, 1, 1}, {256, 1, 1}, [&] { top_k(p); });
        for (int r = 0; r < R; r++) {
            std::vector<int> order(V); for (int i = 0; i < V; i++) order[i] = i;
            auto val = [&](int i) { float x = logits[r * V + i]; return std::isnan(x) ? -INFINITY : x; };
            std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return val(a) > val(b); });
            bool ok = true; for (int i = 0; i < k; i++) ok &= ids[r * k + i] == order[i] && vals[r * k + i] == val(order[i]);
            CHECK(ok, "top_k row %d k=%d", r, k);
        }
    }
}

#include "moe_checks.h"
#include "latent_checks.h"
#include "kv_checks.h"

int main(int argc, char** argv) {
    if (!load_pools(std::getenv("EMBER_PACKED_FIXTURES"))) return 2;
    std::map<std::string, void (*)()> tests = {{"embed", test_embed}, {"rms_norm", test_rms_norm}, {"project_small", test_project_small},
        {"matmul", test_matmul_and_invariance}, {"gated", test_gated}, {"add_bias", test_add_bias}, {"add_scaled", test_add_scaled}, {"finish_logits", test_finish_logits}, {"rope_store", test_rope_store}, {"attention", test_attention}, {"top_k", test_top_k},
        {"moe_route", test_moe_route}, {"moe_grouped", test_moe_grouped}, {"moe_families", test_moe_families},
        {"latent_layers", test_latent_layers}, {"kv_layers", test_kv_layers}, {"latent_keys", test_latent_keys}};
    for (auto& [name, f] : tests) {
        if (argc > 1 && name != argv[1]) continue;
        rng_state = 12345;  // each check draws the same data whichever others run
        int before = failures; f(); printf("%s: %s\n", name.c_str(), failures == before ? "ok" : "FAILED");
    }
    return failures ? 1 : 0;
}

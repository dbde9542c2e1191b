// The mixture-of-experts kernels (moe.cu) under the emulation, against what the Rust side computed
// (tests/cuda_moe_fixtures.rs writes EMBER_MOE_FIXTURES):
//
//   moe_route     each routing case's rows through `moe_route`: the chosen experts exactly those of
//                 `MoeConfig::route` (exact ties in index order, NaN last), their weights within 1e-6 (softmax,
//                 sigmoid, and gpt-oss' softmax of the chosen; DeepSeek's selection bias and expert groups);
//   moe_grouped   the grouped kernels (moe_group, moe_*_tiled_*, moe_weighted_sum) against the per-pair ones on
//                 random experts, bit for bit, at every tile width, fused and split, with and without gpt-oss' biases;
//   moe_families  one layer of each mixture-of-experts family (gpt-oss' with its router and expert biases and
//                 clamped SwiGLU; DeepSeek's with its selection bias, groups and counted shared experts; and
//                 quantized experts): embed, the FFN norm, the
//                 block as execute_moe.rs enqueues it, the residual add, the final norm and output projection, the
//                 logits within relative error 1e-3 of the CPU backend's (the bound tests/cuda_backend.rs holds the
//                 GPU to for the dense families); the steps of 16 tokens through the grouped path (moe_group's
//                 order and tiles against a counting sort here), a token's logits bit for bit alone (the per-pair
//                 kernels, project_small) and in its step (the grouped kernels, the tiled matmul), and the same with
//                 the gate and up fused into one tensor.
//
// Included by kernel_checks.cpp after its helpers (Mat, launch wrappers, CHECK).

struct MoeFixtures {
    std::vector<u32> words;
    size_t at = 0;
    bool ok = true;
    u32 word() {
        if (at >= words.size()) { ok = false; return 0; }
        return words[at++];
    }
    float real() { u32 w = word(); float f; std::memcpy(&f, &w, 4); return f; }
    std::vector<float> reals(size_t n) { std::vector<float> v(n); for (auto& x : v) x = real(); return v; }
    std::vector<int> ints(size_t n) { std::vector<int> v(n); for (auto& x : v) x = (int)word(); return v; }
    Mat matrix() {
        Mat m{};
        m.type = (int)word(); m.rows = (int)word(); m.cols = (int)word();
        u32 nq = word(), ns = word();
        if (!ok || m.type >= N_TYPES || nq > words.size() || ns > words.size()) { ok = false; return m; }
        for (u32 i = 0; i < nq; i++) m.qs.push_back(word());
        for (u32 i = 0; i < ns; i++) m.sc.push_back(word());
        if (m.sc.empty()) m.sc.push_back(0);
        return m;
    }
};

static bool load_moe_fixtures(MoeFixtures& f) {
    const char* path = std::getenv("EMBER_MOE_FIXTURES");
    FILE* file = path ? std::fopen(path, "rb") : nullptr;
    if (!file) { printf("error: set EMBER_MOE_FIXTURES to the file tests/cuda_moe_fixtures.rs writes\n"); return false; }
    u32 w;
    while (std::fread(&w, 4, 1, file) == 1) f.words.push_back(w);
    std::fclose(file);
    return true;
}

static void run_route(const float* logits, const float* bias, int* selected, float* weights, int T, int n_expert, int k, int gating, int normalize, float scale,
                      const float* selection_bias = nullptr, int n_group = 0, int group_used = 0) {
    Route p{logits, bias, selected, weights, T, n_expert, k, gating, normalize, scale, selection_bias, n_group, group_used};
    launch({(unsigned)T, 1, 1}, {256, 1, 1}, [&] { moe_route(p); });
}

static void test_moe_route() {
    MoeFixtures f;
    if (!load_moe_fixtures(f)) { failures++; return; }
    int n_cases = (int)f.word(), exact = 0, total = 0;
    for (int c = 0; c < n_cases && f.ok; c++) {
        int gating = (int)f.word(), normalize = (int)f.word();
        float scale = f.real();
        int n = (int)f.word(), k = (int)f.word(), rows = (int)f.word();
        int n_group = (int)f.word(), group_used = (int)f.word(), has_bias = (int)f.word();
        auto logits = f.reals((size_t)rows * n);
        auto selection_bias = f.reals(has_bias ? (size_t)n : 0);
        auto want_sel = f.ints((size_t)rows * k);
        auto want_w = f.reals((size_t)rows * k);
        std::vector<int> sel(rows * k, -1);
        std::vector<float> w(rows * k, -1.0f);
        run_route(logits.data(), nullptr, sel.data(), w.data(), rows, n, k, gating, normalize, scale,
                  has_bias ? selection_bias.data() : nullptr, n_group, group_used);
        CHECK(sel == want_sel, "moe_route case %d (%d of %d experts, gating %d, %d of %d groups, bias %d): chosen experts differ", c, k, n, gating, group_used, n_group, has_bias);
        double worst = 0;
        for (int i = 0; i < rows * k; i++) {
            total++;
            if (std::isnan(want_w[i]) || std::isnan(w[i])) { CHECK(std::isnan(want_w[i]) && std::isnan(w[i]), "moe_route case %d weight %d: NaN on one side", c, i); exact++; continue; }
            exact += w[i] == want_w[i];
            worst = std::max(worst, std::fabs((double)w[i] - want_w[i]) / std::max(1e-30, std::fabs((double)want_w[i])));
        }
        CHECK(worst < 1e-6, "moe_route case %d: weights' relative error %g", c, worst);
    }
    CHECK(f.ok, "moe fixtures truncated in the routing cases");
    printf("moe_route: %d cases, %d of %d weights bit for bit MoeConfig::route's\n", n_cases, exact, total);
}

// A mixture-of-experts layer as the fixture describes it.
struct MoeLayer {
    std::string name;
    int d, vocab, n_expert, k, ff, gating, normalize, act, sff, sgated, biases, n_group, group_used, has_selection_bias, T;
    float scale, eps, embed_scale, logit_scale, residual, alpha, limit;
    std::vector<int> tokens;
    std::vector<float> ffn_norm, out_norm, cpu_logits;
    // gpt-oss' biases (`biases`): the router's [n_expert], the experts' gate and up [n_expert][ff], down [n_expert][d].
    std::vector<float> router_b, gate_b, up_b, down_b;
    // DeepSeek's selection bias (`has_selection_bias`): [n_expert].
    std::vector<float> selection_b;
    Mat embd, output, router, gate, up, down, sgate, sup, sdown, sgate_inp;
};

static bool read_layer(MoeFixtures& f, MoeLayer& L) {
    u32 len = f.word();
    std::string name;
    for (u32 i = 0; i < (len + 3) / 4 && f.ok; i++) { u32 w = f.word(); for (int b = 0; b < 4; b++) name.push_back((char)(w >> (8 * b))); }
    L.name = name.substr(0, len);
    L.d = (int)f.word(); L.vocab = (int)f.word(); L.n_expert = (int)f.word(); L.k = (int)f.word(); L.ff = (int)f.word();
    L.gating = (int)f.word(); L.normalize = (int)f.word(); L.scale = f.real(); L.act = (int)f.word();
    L.sff = (int)f.word(); L.sgated = (int)f.word(); L.eps = f.real(); L.embed_scale = f.real(); L.logit_scale = f.real();
    L.residual = f.real(); L.biases = (int)f.word(); L.alpha = f.real(); L.limit = f.real();
    L.n_group = (int)f.word(); L.group_used = (int)f.word(); L.has_selection_bias = (int)f.word(); L.T = (int)f.word();
    L.tokens = f.ints(L.T);
    L.ffn_norm = f.reals(L.d); L.out_norm = f.reals(L.d);
    L.embd = f.matrix(); L.output = f.matrix(); L.router = f.matrix(); L.gate = f.matrix(); L.up = f.matrix(); L.down = f.matrix();
    if (L.sff) { L.sgate = f.matrix(); L.sup = f.matrix(); L.sdown = f.matrix(); }
    if (L.sgated) L.sgate_inp = f.matrix();
    if (L.biases) {
        L.router_b = f.reals(L.n_expert); L.gate_b = f.reals((size_t)L.n_expert * L.ff);
        L.up_b = f.reals((size_t)L.n_expert * L.ff); L.down_b = f.reals((size_t)L.n_expert * L.d);
    }
    if (L.has_selection_bias) L.selection_b = f.reals(L.n_expert);
    L.cpu_logits = f.reals((size_t)L.T * L.vocab);
    return f.ok;
}

// The grouped path's kernels of each type, [type][tile of 16, 32, 64 pairs].
using GateUpTiledFn = void (*)(const MoeGateUp, const MoeTiles);
using DownTiledFn = void (*)(const MoeDown, const MoeTiles);
#define MOE_GATE_UP_TILED_FNS(SUFFIX, TYPE) {moe_gate_up_tiled_##SUFFIX##_n16, moe_gate_up_tiled_##SUFFIX##_n32, moe_gate_up_tiled_##SUFFIX##_n64},
#define MOE_DOWN_TILED_FNS(SUFFIX, TYPE) {moe_down_tiled_##SUFFIX##_n16, moe_down_tiled_##SUFFIX##_n32, moe_down_tiled_##SUFFIX##_n64},
static GateUpTiledFn moe_gate_up_tiled_fn[][3] = {FOR_EACH_WEIGHT_TYPE(MOE_GATE_UP_TILED_FNS)};
static DownTiledFn moe_down_tiled_fn[][3] = {FOR_EACH_WEIGHT_TYPE(MOE_DOWN_TILED_FNS)};

// calls_moe.rs's `grouped_experts`, `expert_tile` and `max_expert_tiles`.
static bool grouped_experts(int T, int k, int n_expert) { return T > 8 && T * k >= n_expert; }
static int expert_tile(int pairs, int n_expert) {
    const int mean = (pairs + n_expert - 1) / n_expert;
    return mean <= 16 ? 16 : mean <= 32 ? 32 : 64;
}
static int max_expert_tiles(int pairs, int n_expert, int tile) { return pairs / tile + std::min(n_expert, pairs); }

// A step's pairs grouped by expert: moe_group's output and the down's per-pair rows (MoeBuffers::grouped).
struct Grouping {
    int tile = 0, max_tiles = 0;
    std::vector<int> order, tiles, n_tiles;
    std::vector<float> pair_out;
    MoeTiles args() { return MoeTiles{order.data(), tiles.data(), n_tiles.data(), pair_out.data()}; }
};

// moe_group over `selected`, checked against a counting sort written here: the pairs of expert 0, then 1, ..., each
// expert's in pair order, and one tile per run of up to `tile` of an expert's pairs (0: execute_moe.rs's tile).
static Grouping run_group(const std::vector<int>& selected, int n_expert, int width, int tile = 0) {
    const int pairs = (int)selected.size();
    Grouping g;
    g.tile = tile ? tile : expert_tile(pairs, n_expert);
    g.max_tiles = max_expert_tiles(pairs, n_expert, g.tile);
    g.order.assign(pairs, -1); g.tiles.assign(3 * g.max_tiles, -1); g.n_tiles.assign(1, -1);
    g.pair_out.assign((size_t)pairs * width, NAN);
    MoeGroup p{selected.data(), g.order.data(), g.tiles.data(), g.n_tiles.data(), pairs, n_expert, g.tile, g.max_tiles};
    launch({1, 1, 1}, {256, 1, 1}, [&] { moe_group(p); });
    std::vector<int> want_order, want_tiles;
    for (int e = 0; e < n_expert; e++) {
        const int first = (int)want_order.size();
        for (int i = 0; i < pairs; i++) if (selected[i] == e) want_order.push_back(i);
        for (int at = first; at < (int)want_order.size(); at += g.tile) want_tiles.insert(want_tiles.end(), {e, at, std::min(g.tile, (int)want_order.size() - at)});
    }
    const int n = (int)want_tiles.size() / 3;
    CHECK(g.n_tiles[0] == n && n <= g.max_tiles, "moe_group: %d tiles, want %d (at most %d)", g.n_tiles[0], n, g.max_tiles);
    CHECK(std::equal(want_order.begin(), want_order.end(), g.order.begin()), "moe_group: the pairs' order differs from a counting sort's");
    CHECK(std::equal(want_tiles.begin(), want_tiles.end(), g.tiles.begin()), "moe_group: the tiles differ");
    return g;
}

// y = m · x over T rows, as execute_moe.rs's `dense`: project_small for up to 8 rows, the tiled matmul for more.
static void run_dense(const Mat& m, const float* x, float* y, int T) {
    if (T <= 8) run_project_small({&m}, {y}, x, T, nullptr, nullptr, 0.0f, 0, -1);
    else run_matmul(m, x, y, T, 0);
}

struct LayerRun {
    std::vector<float> logits;  // [T][vocab]
    bool grouped;               // whether the routed experts took the grouped path
};

// The whole layer for `tokens`, the routed gate and up read from `gate`/`up` at `stride`/`up_offset` (split or
// fused), the routed experts per pair or grouped as execute_moe.rs chooses.
static LayerRun run_layer(const MoeLayer& L, const std::vector<int>& tokens, const Mat& gate, const Mat& up, int stride, int up_offset) {
    const int T = (int)tokens.size(), d = L.d, k = L.k;
    std::vector<float> x(T * d), xn(T * d), logits_in(T * d), logits(T * L.vocab), router(T * L.n_expert), weights(T * k);
    std::vector<float> hidden((size_t)T * k * L.ff), sg(T * std::max(L.sff, 1)), su(T * std::max(L.sff, 1)), sgl(T), sout(T * d);
    std::vector<int> selected(T * k, -1), rows(T);
    for (int t = 0; t < T; t++) rows[t] = t;
    Embed e{L.embd.qs.data(), L.embd.sc.data(), tokens.data(), x.data(), T, d, L.embd.rows, L.embed_scale};
    launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { embed_fn[L.embd.type](e); });
    run_rms_norm(x.data(), L.ffn_norm.data(), xn.data(), nullptr, T, d, L.eps);
    // execute_moe.rs's order: router, routing, the routed gate/up, the shared expert's gate/up and gate, then the
    // down (which overwrites xn), the shared expert's down and its add.
    run_dense(L.router, xn.data(), router.data(), T);
    // Null for a family without biases (the vectors are empty).
    auto bias = [&](const std::vector<float>& b) { return L.biases ? b.data() : nullptr; };
    run_route(router.data(), bias(L.router_b), selected.data(), weights.data(), T, L.n_expert, k, L.gating, L.normalize, L.scale,
              L.has_selection_bias ? L.selection_b.data() : nullptr, L.n_group, L.group_used);
    MoeGateUp gu{gate.qs.data(), gate.sc.data(), up.qs.data(), up.sc.data(), xn.data(), selected.data(), hidden.data(),
                 bias(L.gate_b), bias(L.up_b), L.ff, d, stride, up_offset, T, k, L.n_expert, L.act, L.alpha, L.limit};
    const bool grouped = grouped_experts(T, k, L.n_expert);
    Grouping g;
    int tile = 0;
    if (grouped) {
        g = run_group(selected, L.n_expert, d);
        tile = g.tile == 16 ? 0 : g.tile == 32 ? 1 : 2;
        const MoeTiles tiles = g.args();
        launch({(unsigned)((L.ff + 63) / 64), (unsigned)g.max_tiles, 1}, {256, 1, 1}, [&] { moe_gate_up_tiled_fn[gate.type][tile](gu, tiles); });
    } else {
        launch({(unsigned)((L.ff + 3) / 4), (unsigned)(T * k), 1}, {128, 1, 1}, [&] { moe_gate_up_fn[gate.type](gu); });
    }
    if (L.sff) {
        if (T <= 8 && L.sgate.type == L.sup.type) {
            run_project_small({&L.sgate, &L.sup}, {sg.data(), su.data()}, xn.data(), T, nullptr, nullptr, 0.0f, 0, L.act);
        } else {
            run_dense(L.sgate, xn.data(), sg.data(), T);
            run_dense(L.sup, xn.data(), su.data(), T);
            Gated g{sg.data(), su.data(), T * L.sff, L.act};
            launch({(unsigned)((T * L.sff + 255) / 256), 1, 1}, {256, 1, 1}, [&] { gated_activation(g); });
        }
        if (L.sgated) run_dense(L.sgate_inp, xn.data(), sgl.data(), T);
    }
    MoeDown dn{L.down.qs.data(), L.down.sc.data(), hidden.data(), selected.data(), weights.data(), xn.data(), bias(L.down_b), d, L.ff, T, k, L.n_expert, 0};
    if (grouped) {
        const MoeTiles tiles = g.args();
        launch({(unsigned)((d + 63) / 64), (unsigned)g.max_tiles, 1}, {256, 1, 1}, [&] { moe_down_tiled_fn[L.down.type][tile](dn, tiles); });
        launch({(unsigned)((T * d + 255) / 256), 1, 1}, {256, 1, 1}, [&] { moe_weighted_sum(dn, tiles); });
    } else {
        launch({(unsigned)((d + 3) / 4), (unsigned)T, 1}, {128, 1, 1}, [&] { moe_down_fn[L.down.type](dn); });
    }
    if (L.sff) {
        run_dense(L.sdown, sg.data(), sout.data(), T);
        MoeSharedAdd sa{xn.data(), sout.data(), L.sgated ? sgl.data() : nullptr, T, d};
        launch({(unsigned)((T * d + 255) / 256), 1, 1}, {256, 1, 1}, [&] { moe_shared_add(sa); });
    }
    AddScaled as{x.data(), xn.data(), T * d, L.residual};
    launch({(unsigned)((T * d + 255) / 256), 1, 1}, {256, 1, 1}, [&] { add_scaled(as); });
    run_rms_norm(x.data(), L.out_norm.data(), logits_in.data(), rows.data(), T, d, L.eps);
    run_dense(L.output, logits_in.data(), logits.data(), T);
    if (L.logit_scale != 0.0f) {
        FinishLogits fl{logits.data(), T * L.vocab, 1.0f / L.logit_scale, 0.0f, 0};
        launch({(unsigned)((T * L.vocab + 255) / 256), 1, 1}, {256, 1, 1}, [&] { finish_logits(fl); });
    }
    return {logits, grouped};
}

// The fused tensor `ffn_gate_up_exps` of a split gate and up: each expert's gate rows, then its up rows (packed
// groups are self-contained, so packed rows concatenate as the file's rows do).
static Mat fuse_gate_up(const Mat& gate, const Mat& up, int n_expert, int ff) {
    Mat m{gate.type, 2 * gate.rows, gate.cols};
    const size_t qrow = gate.qs.size() / gate.rows, srow = gate.type >= TYPE_F16 && gate.type <= TYPE_F32 ? 0 : gate.sc.size() / gate.rows;
    for (int e = 0; e < n_expert; e++) for (const Mat* part : {&gate, &up}) {
        m.qs.insert(m.qs.end(), part->qs.begin() + (size_t)e * ff * qrow, part->qs.begin() + (size_t)(e + 1) * ff * qrow);
        if (srow) m.sc.insert(m.sc.end(), part->sc.begin() + (size_t)e * ff * srow, part->sc.begin() + (size_t)(e + 1) * ff * srow);
    }
    if (m.sc.empty()) m.sc.push_back(0);
    return m;
}

// gpt-oss' clamped SwiGLU (`swiglu_oai` of moe.cu) where the synthetic layer's values may not reach: at and past
// both limits, and NaN (which either clamp turns into a limit, as the CPU's min and max lanes do), against
// x · σ(alpha·x) · (y + 1) in double.
static void check_swiglu_oai() {
    const float alpha = 1.702f, limit = 7.0f, nan = std::nanf("");
    const float gs[] = {-30.0f, -7.5f, -1.0f, 0.0f, 0.3f, 6.99f, 7.0f, 12.0f, nan};
    const float us[] = {-9.0f, -7.0f, -0.5f, 0.0f, 2.0f, 7.0f, 40.0f, nan};
    double worst = 0;
    for (float g : gs) for (float u : us) {
        const double x = std::isnan(g) ? limit : std::min((double)g, (double)limit);
        const double y = std::isnan(u) ? -limit : std::clamp((double)u, -(double)limit, (double)limit);
        const double want = x / (1.0 + std::exp(-alpha * x)) * (y + 1.0);
        const double got = swiglu_oai(g, u, alpha, limit);
        worst = std::max(worst, std::fabs(got - want) / std::max(1e-6, std::fabs(want)));
    }
    CHECK(worst < 2e-6, "swiglu_oai: relative error %g against the double formula", worst);
    printf("moe_families: swiglu_oai at and past its limits, worst relative error %.2e\n", worst);
}

// The grouped kernels against the per-pair ones, bit for bit, at each tile width, on random experts whose pair
// counts range from none to several tiles (expert 0 takes about half the pairs: full tiles, and every token column
// of the 32- and 64-pair tiles), expert rows that fill part of a 64-row tile, a pair whose expert is out of range
// (NaN for its token on both paths), in four layouts: fused gate/up with gpt-oss' biases and clamped SwiGLU, and
// split with SiLU and no biases, of Q4_1 (down Q8_0), of IQ2_XS (a scale per 16 elements; down IQ4_XS) and of IQ1_M
// (down TQ2_0). The split layouts' per-pair kernels are also checked against float64 references of the packed
// weights' CPU dequantization: each pair's hidden row, and each token's output from those hidden rows.
static void test_moe_grouped() {
    const int n_expert = 5, ff = 32, d = 96, T = 24, k = 3, pairs = T * k;
    std::vector<int> selected(pairs);
    for (auto& e : selected) e = next_u64() % 2 ? 0 : (int)(next_u64() % n_expert);
    selected[7] = -1;
    selected[40] = n_expert;
    const int busiest = (int)std::count(selected.begin(), selected.end(), 0);
    CHECK(busiest > 32, "moe_grouped: expert 0 has %d pairs, fewer than the 64-pair tile's third column needs", busiest);
    std::vector<float> x = randv((size_t)T * d), weights = randv(pairs);
    std::vector<float> gate_b = randv((size_t)n_expert * ff), up_b = randv((size_t)n_expert * ff), down_b = randv((size_t)n_expert * d);
    Mat fused = random_matrix(TYPE_Q4_1, n_expert * 2 * ff, d), gate = random_matrix(TYPE_Q4_1, n_expert * ff, d);
    Mat up = random_matrix(TYPE_Q4_1, n_expert * ff, d), down_q8 = random_matrix(TYPE_Q8_0, n_expert * d, ff);
    // The codebook types' layouts: [layout - 2] = {gate, up, down}.
    const Mat coded[2][3] = {
        {random_matrix(TYPE_IQ2_XS, n_expert * ff, d), random_matrix(TYPE_IQ2_XS, n_expert * ff, d), random_matrix(TYPE_IQ4_XS, n_expert * d, ff)},
        {random_matrix(TYPE_IQ1_M, n_expert * ff, d), random_matrix(TYPE_IQ1_M, n_expert * ff, d), random_matrix(TYPE_TQ2_0, n_expert * d, ff)}};
    int compared = 0;
    for (int layout = 0; layout < 4; layout++) {
        const bool oai = layout == 0;
        const Mat &g_m = oai ? fused : layout == 1 ? gate : coded[layout - 2][0], &u_m = oai ? fused : layout == 1 ? up : coded[layout - 2][1];
        const Mat& down = layout < 2 ? down_q8 : coded[layout - 2][2];
        const char* name = oai ? "fused, gpt-oss" : layout == 1 ? "split" : layout == 2 ? "split, iq2_xs/iq4_xs" : "split, iq1_m/tq2_0";
        std::vector<float> hidden_ref((size_t)pairs * ff), out_ref((size_t)T * d), out((size_t)T * d);
        MoeGateUp gu{g_m.qs.data(), g_m.sc.data(), u_m.qs.data(), u_m.sc.data(), x.data(), selected.data(), hidden_ref.data(),
                     oai ? gate_b.data() : nullptr, oai ? up_b.data() : nullptr, ff, d, oai ? 2 * ff : ff, oai ? ff : 0, T, k, n_expert,
                     oai ? ACT_SWIGLU_OAI : ACT_SILU, 1.702f, 7.0f};
        launch({(unsigned)((ff + 3) / 4), (unsigned)pairs, 1}, {128, 1, 1}, [&] { moe_gate_up_fn[g_m.type](gu); });
        MoeDown dn{down.qs.data(), down.sc.data(), hidden_ref.data(), selected.data(), weights.data(), out_ref.data(), oai ? down_b.data() : nullptr, d, ff, T, k, n_expert, 0};
        launch({(unsigned)((d + 3) / 4), (unsigned)T, 1}, {128, 1, 1}, [&] { moe_down_fn[down.type](dn); });
        // The tokens of the two pairs out of range are NaN, the others numbers (token 0's pairs are in range).
        CHECK(std::isnan(out_ref[(size_t)(7 / k) * d]) && std::isnan(out_ref[(size_t)(40 / k) * d]) && !std::isnan(out_ref[0]), "moe_down: NaN where no expert");
        if (!oai) {
            double worst_hidden = 0, worst_out = 0;
            for (int i = 0; i < pairs; i++) {
                const int e = selected[i];
                if (e < 0 || e >= n_expert) continue;
                std::vector<double> xt(x.begin() + (size_t)(i / k) * d, x.begin() + (size_t)(i / k + 1) * d);
                for (int r = 0; r < ff; r++) {
                    const double g = ref_dot(g_m, e * ff + r, xt.data()), u = ref_dot(u_m, e * ff + r, xt.data());
                    worst_hidden = std::max(worst_hidden, rel(hidden_ref[(size_t)i * ff + r], ref_act(g, ACT_SILU) * u));
                }
            }
            for (int t = 0; t < T; t++) {
                bool routed = true;
                for (int s = 0; s < k; s++) routed &= selected[t * k + s] >= 0 && selected[t * k + s] < n_expert;
                if (!routed) continue;
                for (int j = 0; j < d; j++) {
                    double want = 0;
                    for (int s = 0; s < k; s++) {
                        const int pair = t * k + s;
                        std::vector<double> h(hidden_ref.begin() + (size_t)pair * ff, hidden_ref.begin() + (size_t)(pair + 1) * ff);
                        want += (double)weights[pair] * ref_dot(down, selected[pair] * d + j, h.data());
                    }
                    worst_out = std::max(worst_out, rel(out_ref[(size_t)t * d + j], want));
                }
            }
            CHECK(worst_hidden < 2e-4 && worst_out < 2e-5, "moe_gate_up / moe_down (%s): error %g, %g against the reference", name, worst_hidden, worst_out);
            printf("moe_grouped: %-22s per-pair kernels against float64: hidden %.1e, output %.1e\n", name, worst_hidden, worst_out);
        }
        for (int tile = 0; tile < 3; tile++) {
            Grouping g = run_group(selected, n_expert, d, 16 << tile);
            const MoeTiles tiles = g.args();
            std::vector<float> hidden((size_t)pairs * ff, NAN);
            MoeGateUp gu_g = gu;
            gu_g.hidden = hidden.data();
            launch({(unsigned)((ff + 63) / 64), (unsigned)g.max_tiles, 1}, {256, 1, 1}, [&] { moe_gate_up_tiled_fn[g_m.type][tile](gu_g, tiles); });
            bool same = true;
            for (int i = 0; i < pairs; i++) {
                if (selected[i] >= 0 && selected[i] < n_expert) same &= bits_equal(&hidden[(size_t)i * ff], &hidden_ref[(size_t)i * ff], ff);
            }
            CHECK(same, "moe_gate_up_tiled (%s, tiles of %d) differs from moe_gate_up", name, 16 << tile);
            MoeDown dn_g = dn;
            dn_g.hidden = hidden.data();
            dn_g.out = out.data();
            launch({(unsigned)((d + 63) / 64), (unsigned)g.max_tiles, 1}, {256, 1, 1}, [&] { moe_down_tiled_fn[down.type][tile](dn_g, tiles); });
            launch({(unsigned)((T * d + 255) / 256), 1, 1}, {256, 1, 1}, [&] { moe_weighted_sum(dn_g, tiles); });
            CHECK(bits_equal(out.data(), out_ref.data(), (size_t)T * d), "moe_down_tiled + moe_weighted_sum (%s, tiles of %d) differ from moe_down", name, 16 << tile);
            compared++;
        }
    }
    printf("moe_grouped: %d runs (4 layouts x tiles of 16, 32, 64) of %d pairs over %d experts (%d on expert 0) against the per-pair kernels' bits\n", compared, pairs, n_expert, busiest);
}

static void test_moe_families() {
    check_swiglu_oai();
    MoeFixtures f;
    if (!load_moe_fixtures(f)) { failures++; return; }
    // Past the routing cases.
    for (int c = 0, n = (int)f.word(); c < n && f.ok; c++) {
        f.word(); f.word(); f.word();
        size_t experts = f.word(), k = f.word(), rows = f.word();
        f.word(); f.word();
        const size_t has_bias = f.word();
        f.at += rows * experts + has_bias * experts + 2 * rows * k;
    }
    int n_layers = (int)f.word();
    for (int c = 0; c < n_layers && f.ok; c++) {
        MoeLayer L;
        if (!read_layer(f, L)) break;
        const LayerRun step = run_layer(L, L.tokens, L.gate, L.up, L.ff, 0);
        const std::vector<float>& logits = step.logits;
        // Steps of more than 8 rows take the grouped path here (each has at least one pair per expert).
        CHECK(step.grouped == (L.T > 8), "moe layer %s: %d tokens took the %s path", L.name.c_str(), L.T, step.grouped ? "grouped" : "per-pair");
        double worst = 0;
        for (int t = 0; t < L.T; t++) {
            double diff = 0, norm = 0;
            for (int v = 0; v < L.vocab; v++) {
                double a = logits[(size_t)t * L.vocab + v], b = L.cpu_logits[(size_t)t * L.vocab + v];
                diff += (a - b) * (a - b); norm += b * b;
            }
            worst = std::max(worst, std::sqrt(diff / norm));
        }
        CHECK(worst <= 1e-3, "moe layer %s: relative error %.2e against the CPU backend", L.name.c_str(), worst);
        printf("moe_families: %-36s %2d tokens (%s), %d of %d experts, worst relative error against the CPU %.2e\n", L.name.c_str(), L.T, step.grouped ? "grouped" : "per pair", L.k, L.n_expert, worst);
        if (c == 0 || L.T > 8) {
            // A token alone (project_small and the per-pair expert kernels) against its row in the step (the tiled
            // matmul and the grouped expert kernels past 8 rows).
            const int t = L.T - 1;
            auto alone = run_layer(L, {L.tokens[t]}, L.gate, L.up, L.ff, 0).logits;
            CHECK(bits_equal(alone.data(), &logits[(size_t)t * L.vocab], L.vocab), "moe layer %s: token %d alone differs from its row in the step", L.name.c_str(), t);
            if (c == 0) {
                // The gate and up fused into one tensor (`ffn_gate_up_exps`): the same rows, the same bits.
                Mat fused = fuse_gate_up(L.gate, L.up, L.n_expert, L.ff);
                auto fused_logits = run_layer(L, {L.tokens[t]}, fused, fused, 2 * L.ff, L.ff).logits;
                CHECK(bits_equal(fused_logits.data(), alone.data(), L.vocab), "moe layer %s: fused gate/up differ", L.name.c_str());
            }
        }
    }
    CHECK(f.ok, "moe fixtures truncated in the layers");
}

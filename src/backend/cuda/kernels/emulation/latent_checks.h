// DeepSeek's latent attention (latent.cu, attention.cu with values from the key rows) under the emulation, against
// the CPU backend (tests/cuda_latent_fixtures.rs writes EMBER_LATENT_FIXTURES):
//
//   latent_layers  one layer of deepseek2-lite-small (attn_q) and of deepseek3-small (attn_q_a, its norm, attn_q_b):
//                  embed, the attention norm, the latent attention as execute_latent.rs enqueues it, the output
//                  projection into the residual, the final norm and output projection, for a 9-token prompt (the
//                  tiled matmul past 8 rows) in cache blocks that are not the positions; the logits within relative
//                  error 1e-3 of the CPU backend's; then the last token again alone (a decode step: project_small,
//                  the cache holding the prompt) gives its row of the prompt's logits bit for bit.
//
// Included by kernel_checks.cpp after moe_checks.h (its fixture reader).

struct LatentLayer {
    std::string name;
    int d, vocab, H, r, nope, rope, vd, rank, T;
    float eps, scale;
    double magnitude;
    std::vector<double> inv_freq;
    std::vector<int> tokens;
    std::vector<float> attn_norm, out_norm, kv_norm, q_norm, cpu_logits;
    Mat embd, output, q, q_a, q_b, kv_a, k_b, v_b, attn_out;
};

static bool read_latent_layer(MoeFixtures& f, LatentLayer& L) {
    u32 len = f.word();
    std::string name;
    for (u32 i = 0; i < (len + 3) / 4 && f.ok; i++) { u32 w = f.word(); for (int b = 0; b < 4; b++) name.push_back((char)(w >> (8 * b))); }
    L.name = name.substr(0, len);
    L.d = (int)f.word(); L.vocab = (int)f.word(); L.H = (int)f.word(); L.r = (int)f.word(); L.nope = (int)f.word();
    L.rope = (int)f.word(); L.vd = (int)f.word(); L.rank = (int)f.word(); L.eps = f.real(); L.scale = f.real(); L.T = (int)f.word();
    auto dbl = [&] { uint64_t lo = f.word(), hi = f.word(); uint64_t bits = lo | (hi << 32); double v; std::memcpy(&v, &bits, 8); return v; };
    L.magnitude = dbl();
    for (int i = 0; i < L.rope / 2 && f.ok; i++) L.inv_freq.push_back(dbl());
    L.tokens = f.ints(L.T);
    L.attn_norm = f.reals(L.d); L.out_norm = f.reals(L.d); L.kv_norm = f.reals(L.r);
    if (L.rank) L.q_norm = f.reals(L.rank);
    L.embd = f.matrix(); L.output = f.matrix();
    if (L.rank) { L.q_a = f.matrix(); L.q_b = f.matrix(); } else { L.q = f.matrix(); }
    L.kv_a = f.matrix(); L.k_b = f.matrix(); L.v_b = f.matrix(); L.attn_out = f.matrix();
    L.cpu_logits = f.reals((size_t)L.T * L.vocab);
    return f.ok;
}

// Rows start..start + n of m as a matrix of their own (packed rows are self-contained; the float types' one unused
// scale word stays).
static Mat rows_of(const Mat& m, int start, int n) {
    Mat s{m.type, n, m.cols};
    const size_t qrow = m.qs.size() / m.rows, srow = m.type >= TYPE_F16 && m.type <= TYPE_F32 ? 0 : m.sc.size() / m.rows;
    s.qs.assign(m.qs.begin() + (size_t)start * qrow, m.qs.begin() + (size_t)(start + n) * qrow);
    if (srow) s.sc.assign(m.sc.begin() + (size_t)start * srow, m.sc.begin() + (size_t)(start + n) * srow);
    if (s.sc.empty()) s.sc.push_back(0);
    return s;
}

static void run_heads_copy(const float* src, float* dst, int H, int T, int width, int src_head, int src_token, int dst_head, int dst_token) {
    HeadsCopy c{src, dst, H, T, width, src_head, src_token, dst_head, dst_token, 0};
    launch({(unsigned)((H * T * width + 255) / 256), 1, 1}, {256, 1, 1}, [&] { heads_copy(c); });
}

// The layer for `tokens` at `positions` (cache blocks `table`), the keys-only cache `kcache` kept between calls;
// logits [T][vocab].
static std::vector<float> run_latent_layer(const LatentLayer& L, const std::vector<int>& tokens, const std::vector<int>& positions, const std::vector<int>& table, std::vector<u16>& kcache) {
    const int T = (int)tokens.size(), d = L.d, H = L.H, r = L.r, rope = L.rope, nope = L.nope, vd = L.vd, kw = r + rope, BS = 16;
    std::vector<float> x(T * d), xn(T * d), qlat(T * std::max(L.rank, 1)), q(T * H * (nope + rope)), kv(T * kw), cos_t(T * rope / 2), sin_t(T * rope / 2);
    std::vector<float> queries(T * H * kw), latent(T * H * r), heads_in(H * T * std::max(nope, r)), heads_out(H * T * std::max(r, vd)), att(T * H * vd);
    std::vector<float> logits_in(T * d), logits(T * L.vocab);
    std::vector<int> slots(T), offsets(T, 0), rows(T);
    for (int t = 0; t < T; t++) { slots[t] = table[positions[t] / BS] * BS + positions[t] % BS; rows[t] = t; }
    Embed e{L.embd.qs.data(), L.embd.sc.data(), tokens.data(), x.data(), T, d, L.embd.rows, 1.0f};
    launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { embed_fn[L.embd.type](e); });
    run_rms_norm(x.data(), L.attn_norm.data(), xn.data(), nullptr, T, d, L.eps);
    // 1. The projections.
    if (L.rank) {
        run_dense(L.q_a, xn.data(), qlat.data(), T);
        run_rms_norm(qlat.data(), L.q_norm.data(), qlat.data(), nullptr, T, L.rank, L.eps);
        run_dense(L.q_b, qlat.data(), q.data(), T);
    } else {
        run_dense(L.q, xn.data(), q.data(), T);
    }
    run_dense(L.kv_a, xn.data(), kv.data(), T);
    // The step's rotation angles (execute.rs: rope_table first).
    RopeTable rt{positions.data(), L.inv_freq.data(), cos_t.data(), sin_t.data(), L.magnitude, T, rope / 2};
    launch({(unsigned)((T * rope / 2 + 127) / 128), 1, 1}, {128, 1, 1}, [&] { rope_table(rt); });
    // 2. The key rows into the cache.
    LatentKeys lk{kv.data(), L.kv_norm.data(), cos_t.data(), sin_t.data(), positions.data(), slots.data(), kcache.data(), T, r, rope, L.eps};
    launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { latent_keys(lk); });
    // 3. The absorption, head by head, and the queries' RoPE parts.
    run_heads_copy(q.data(), heads_in.data(), H, T, nope, nope + rope, H * (nope + rope), T * nope, nope);
    for (int h = 0; h < H; h++) run_dense(rows_of(L.k_b, h * r, r), heads_in.data() + (size_t)h * T * nope, heads_out.data() + (size_t)h * T * r, T);
    LatentQueries lq{heads_out.data(), q.data(), cos_t.data(), sin_t.data(), queries.data(), T, H, r, nope, rope, 0};
    launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { latent_queries(lq); });
    // 4. Attention: one KV head, its values each key row's first r elements.
    Attention a{queries.data(), latent.data(), kcache.data(), kcache.data(), positions.data(), offsets.data(), table.data(), nullptr, T, H, 1, kw, r, 0, BS, L.scale, 0, 0.0f};
    const bool wide = kw > 256;
    launch({(unsigned)T, 1, (unsigned)((H + 7) / 8)}, {128, 1, 1}, [&] { if (wide) attention_wide_f16_f16(a); else attention_f16_f16(a); });
    // 5. The decompression, head by head, into the output projection's input; then the residual add.
    run_heads_copy(latent.data(), heads_in.data(), H, T, r, r, H * r, T * r, r);
    for (int h = 0; h < H; h++) run_dense(rows_of(L.v_b, h * vd, vd), heads_in.data() + (size_t)h * T * r, heads_out.data() + (size_t)h * T * vd, T);
    run_heads_copy(heads_out.data(), att.data(), H, T, vd, T * vd, vd, vd, H * vd);
    if (T <= 8) run_project_small({&L.attn_out}, {x.data()}, att.data(), T, nullptr, nullptr, 0.0f, 1, -1);
    else run_matmul(L.attn_out, att.data(), x.data(), T, 1);
    run_rms_norm(x.data(), L.out_norm.data(), logits_in.data(), rows.data(), T, d, L.eps);
    run_dense(L.output, logits_in.data(), logits.data(), T);
    return logits;
}

static void test_latent_layers() {
    MoeFixtures f;
    const char* path = std::getenv("EMBER_LATENT_FIXTURES");
    FILE* file = path ? std::fopen(path, "rb") : nullptr;
    if (!file) { printf("error: set EMBER_LATENT_FIXTURES to the file tests/cuda_latent_fixtures.rs writes\n"); failures++; return; }
    u32 w;
    while (std::fread(&w, 4, 1, file) == 1) f.words.push_back(w);
    std::fclose(file);
    const int n_layers = (int)f.word();
    for (int c = 0; c < n_layers && f.ok; c++) {
        LatentLayer L;
        if (!read_latent_layer(f, L)) break;
        const std::vector<int> table = {2, 0, 1, 3};
        std::vector<int> positions(L.T);
        for (int t = 0; t < L.T; t++) positions[t] = t;
        std::vector<u16> kcache((size_t)4 * 16 * (L.r + L.rope), 0);
        auto logits = run_latent_layer(L, L.tokens, positions, table, kcache);
        double worst = 0;
        for (int t = 0; t < L.T; t++) {
            double diff = 0, norm = 0;
            for (int v = 0; v < L.vocab; v++) {
                double a = logits[(size_t)t * L.vocab + v], b = L.cpu_logits[(size_t)t * L.vocab + v];
                diff += (a - b) * (a - b); norm += b * b;
            }
            worst = std::max(worst, std::sqrt(diff / norm));
        }
        CHECK(worst <= 1e-3, "latent layer %s: relative error %.2e against the CPU backend", L.name.c_str(), worst);
        printf("latent_layers: %-22s %d tokens, %d heads, rank %d + %d, worst relative error against the CPU %.2e\n", L.name.c_str(), L.T, L.H, L.r, L.rope, worst);
        // The last token as a decode step over the cache the prompt filled.
        const int t = L.T - 1;
        auto alone = run_latent_layer(L, {L.tokens[t]}, {t}, table, kcache);
        CHECK(bits_equal(alone.data(), &logits[(size_t)t * L.vocab], L.vocab), "latent layer %s: token %d alone differs from its row in the prompt", L.name.c_str(), t);
    }
    CHECK(f.ok, "latent fixtures truncated");
}

// The KV cache's types (kv_cache.cuh: f16, q8_0, q4_0) under the emulation:
//
//   kv_layers    against the CPU backend (tests/cuda_kv_fixtures.rs writes EMBER_KV_FIXTURES): for each pair of key
//                and value types, two steps of a small llama's layer 0 (two sequences in permuted cache blocks,
//                prompts of 130 and 20 tokens, then a decode step each) on the CPU's own queries, keys and values:
//                rope_table and rope_store, whose planes must be the CPU's byte for byte after each step (the
//                blocks quantized as kv_quant.rs quantizes them, from keys turned as the CPU turns them), then the
//                attention kernel of the pair, whose output must be within relative error 1e-5 of the CPU's; then
//                rows made to reach the quantizations' corners (q8_0's ties, q4_0's clamped code, zero blocks, both
//                signs of a largest magnitude, scales below f16's range, large values), stored by rope_store turning
//                them by angle 0 into a plane of each type: the CPU cache's bytes for them;
//   latent_keys  latent_keys into a q8_0 and a q4_0 keys-only cache against the same rows in f16: each element within
//                half a step of its block (a whole step for q4_0's other sign, ggml's rounding) and every scale
//                the one of the row's f16 values, so that rows, blocks and nibbles sit where attention reads them.
//
// Included by kernel_checks.cpp after latent_checks.h (its fixture reader, MoeFixtures).

struct KvStep {
    int T;
    std::vector<int> positions, slots, offsets, tables;
    std::vector<float> q, k, v, att;
    std::vector<u16> keys, values;  // the CPU's planes after the step
};

struct KvCase {
    std::string name;
    int kt, vt, H, HKV, D, rope, neox, block_size, num_blocks;
    float scale;
    double magnitude;
    std::vector<double> inv_freq;
    std::vector<KvStep> steps;
};

static std::string read_string(MoeFixtures& f) {
    u32 len = f.word();
    std::string s;
    for (u32 i = 0; i < (len + 3) / 4 && f.ok; i++) { u32 w = f.word(); for (int b = 0; b < 4; b++) s.push_back((char)(w >> (8 * b))); }
    return s.substr(0, std::min<size_t>(len, s.size()));
}

static std::vector<u16> read_plane(MoeFixtures& f) {
    const std::string bytes = read_string(f);
    std::vector<u16> plane(bytes.size() / 2);
    std::memcpy(plane.data(), bytes.data(), plane.size() * 2);
    return plane;
}

static bool read_kv_case(MoeFixtures& f, KvCase& c) {
    c.name = read_string(f);
    c.kt = (int)f.word(); c.vt = (int)f.word(); c.H = (int)f.word(); c.HKV = (int)f.word(); c.D = (int)f.word();
    c.rope = (int)f.word(); c.neox = (int)f.word(); c.scale = f.real(); c.block_size = (int)f.word(); c.num_blocks = (int)f.word();
    auto dbl = [&] { uint64_t lo = f.word(), hi = f.word(); uint64_t bits = lo | (hi << 32); double v; std::memcpy(&v, &bits, 8); return v; };
    c.magnitude = dbl();
    for (int i = 0; i < c.rope / 2 && f.ok; i++) c.inv_freq.push_back(dbl());
    const int n_steps = (int)f.word();
    for (int i = 0; i < n_steps && f.ok; i++) {
        KvStep s;
        s.T = (int)f.word();
        s.positions = f.ints(s.T); s.slots = f.ints(s.T); s.offsets = f.ints(s.T);
        s.tables = f.ints(f.word());
        const size_t q_dim = (size_t)c.H * c.D, kv_dim = (size_t)c.HKV * c.D;
        s.q = f.reals(s.T * q_dim); s.k = f.reals(s.T * kv_dim); s.v = f.reals(s.T * kv_dim); s.att = f.reals(s.T * q_dim);
        s.keys = read_plane(f); s.values = read_plane(f);
        c.steps.push_back(std::move(s));
    }
    return f.ok;
}

static void test_kv_layers() {
    MoeFixtures f;
    const char* path = std::getenv("EMBER_KV_FIXTURES");
    FILE* file = path ? std::fopen(path, "rb") : nullptr;
    if (!file) { printf("error: set EMBER_KV_FIXTURES to the file tests/cuda_kv_fixtures.rs writes\n"); failures++; return; }
    u32 w;
    while (std::fread(&w, 4, 1, file) == 1) f.words.push_back(w);
    std::fclose(file);
    const int n_cases = (int)f.word();
    for (int ci = 0; ci < n_cases && f.ok; ci++) {
        KvCase c;
        if (!read_kv_case(f, c)) break;
        const int KV = c.HKV * c.D, q_dim = c.H * c.D, slots = c.block_size * c.num_blocks, half = c.rope / 2;
        // The device's planes, zeroed as the backend allocates them.
        std::vector<u16> keys((size_t)slots * row_words(c.kt, KV), 0), values((size_t)slots * row_words(c.vt, KV), 0);
        double worst = 0;
        bool planes_equal = true;
        for (size_t si = 0; si < c.steps.size(); si++) {
            const KvStep& s = c.steps[si];
            const int T = s.T;
            std::vector<float> q = s.q, k = s.k, cosv((size_t)T * half), sinv((size_t)T * half), out((size_t)T * q_dim, 42.0f);
            RopeTable rt{s.positions.data(), c.inv_freq.data(), cosv.data(), sinv.data(), c.magnitude, T, half};
            launch({(unsigned)((T * half + 127) / 128), 1, 1}, {128, 1, 1}, [&] { rope_table(rt); });
            RopeStore rs{q.data(), k.data(), s.v.data(), cosv.data(), sinv.data(), s.positions.data(), s.slots.data(), keys.data(), values.data(), T, c.H, c.HKV, c.D, c.rope, c.neox, c.kt, c.vt};
            launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { rope_store(rs); });
            CHECK(keys == s.keys, "kv_layers %s step %zu: the key plane differs from the CPU's", c.name.c_str(), si);
            CHECK(values == s.values, "kv_layers %s step %zu: the value plane differs from the CPU's", c.name.c_str(), si);
            planes_equal &= keys == s.keys && values == s.values;
            Attention a{q.data(), out.data(), keys.data(), values.data(), s.positions.data(), s.offsets.data(), s.tables.data(), nullptr, T, c.H, c.HKV, c.D, c.D, 0, c.block_size, c.scale, 0, 0.0f};
            const AttFn kernel = attention_fn(c.kt, c.vt, false);
            launch({(unsigned)T, (unsigned)c.HKV, (unsigned)((c.H / c.HKV + 7) / 8)}, {128, 1, 1}, [&] { kernel(a); });
            for (size_t i = 0; i < out.size(); i++) worst = std::max(worst, rel(out[i], s.att[i]));
        }
        CHECK(worst < 1e-5, "kv_layers %s: attention output error %g against the CPU's", c.name.c_str(), worst);
        printf("kv_layers: %-12s %zu steps, %d heads over %d of %d: planes %s, attention output worst relative error against the CPU %.2e\n",
               c.name.c_str(), c.steps.size(), c.H, c.HKV, c.D, planes_equal ? "byte for byte the CPU's" : "NOT the CPU's", worst);
    }
    // The corner rows: rope_store by angle 0 (cos 1, sin 0: each element its own bits, none is −0) at permuted slots.
    const int n_rows = (int)f.word(), width = (int)f.word(), HD = 64;
    const std::vector<float> rows = f.reals((size_t)n_rows * width);
    for (int type : {KV_F16, KV_Q8_0, KV_Q4_0}) {
        const std::vector<u16> want = read_plane(f);
        if (!f.ok) break;
        std::vector<u16> plane((size_t)n_rows * row_words(type, width), 0x5555), values = plane;
        std::vector<float> q(n_rows * width), k = rows, cosv(n_rows * HD / 2, 1.0f), sinv(n_rows * HD / 2, 0.0f);
        std::vector<int> positions(n_rows, 0), slots(n_rows);
        for (int i = 0; i < n_rows; i++) slots[i] = (5 * i + 3) % n_rows;
        RopeStore rs{q.data(), k.data(), rows.data(), cosv.data(), sinv.data(), positions.data(), slots.data(), plane.data(), values.data(), n_rows, width / HD, width / HD, HD, HD, 0, type, type};
        launch({(unsigned)n_rows, 1, 1}, {128, 1, 1}, [&] { rope_store(rs); });
        CHECK(plane == want && values == want, "kv_layers: the corner rows stored as %s are not the CPU cache's bytes", KV_NAME[type]);
        printf("kv_layers: corner rows (%d of %d) stored as %-4s: %s\n", n_rows, width, KV_NAME[type], plane == want ? "the CPU cache's bytes" : "NOT the CPU cache's bytes");
    }
    CHECK(f.ok, "KV fixtures truncated");
}

static void test_latent_keys() {
    const int T = 3, rank = 128, rope = 32, width = rank + rope, slots = 8, half = rope / 2;
    int positions[T] = {0, 7, 300}, slot_of[T] = {5, 0, 2};
    auto kv = randv(T * width, 3.0f), norm = randv(rank), cosv = randv(T * half), sinv = randv(T * half);
    for (auto& w : norm) w += 1.5f;  // norm weights away from 0, as trained ones are
    std::vector<u16> f16((size_t)slots * width, 0);
    LatentKeys base{kv.data(), norm.data(), cosv.data(), sinv.data(), positions, slot_of, f16.data(), T, rank, rope, 1e-6f, KV_F16, 0};
    launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { latent_keys(base); });
    for (int type : {KV_Q8_0, KV_Q4_0}) {
        std::vector<u16> plane((size_t)slots * row_words(type, width), 0x5555);
        LatentKeys lk = base;
        lk.k_cache = plane.data();
        lk.k_type = type;
        launch({(unsigned)T, 1, 1}, {128, 1, 1}, [&] { latent_keys(lk); });
        bool ok = true, untouched = true;
        for (int s = 0; s < slots; s++) {
            const bool stored = s == 5 || s == 0 || s == 2;
            const u16* row = &plane[(size_t)s * row_words(type, width)];
            const u16* ref = &f16[(size_t)s * width];
            if (!stored) { for (int i = 0; i < row_words(type, width); i++) untouched &= row[i] == 0x5555; continue; }
            for (int b = 0; b < width / 32; b++) {
                // The scale from the f16 row's values: max |x| / 127, or the signed extreme / −8, within the f16 rounding.
                double amax = 0, extreme = 0;
                for (int j = 0; j < 32; j++) { double x = host_f16_to_f32(ref[32 * b + j]); if (std::fabs(x) > amax) { amax = std::fabs(x); extreme = x; } }
                const double want = type == KV_Q8_0 ? amax / 127 : extreme / -8;
                const double d = host_f16_to_f32(row[b * (type == KV_Q8_0 ? 17 : 9)]);
                ok &= std::fabs(d - want) <= 2e-3 * std::fabs(want);
                const double step = std::fabs(d) * (type == KV_Q8_0 ? 0.5 : 1.0) * 1.01;
                for (int j = 0; j < 32; j++) {
                    const double x = host_f16_to_f32(ref[32 * b + j]);
                    ok &= std::fabs(cache_element(row, type, 32 * b + j) - x) <= step + 2e-3 * std::fabs(x);
                }
            }
        }
        CHECK(ok, "latent_keys %s: a stored row is not its f16 row quantized", KV_NAME[type]);
        CHECK(untouched, "latent_keys %s: a row of no token was written", KV_NAME[type]);
        printf("latent_keys: %s rows of %d + %d within their blocks' step of the f16 rows\n", KV_NAME[type], rank, rope);
    }
}

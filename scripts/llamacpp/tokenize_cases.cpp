// llama.cpp's tokenizer and detokenizer on a list of texts, for tokenizer fixtures: loads a GGUF file's vocabulary
// only (`vocab_only`), reads texts separated by "\n__ggml_vocab_test__\n" (the format of llama.cpp's
// `ggml-vocab-*.gguf.inp` files) and prints one JSON object per line for each text:
//   ids          llama_tokenize(add_special=false, parse_special=false): what llama.cpp's test-tokenizer-0 compares
//   ids_special  llama_tokenize(add_special=true, parse_special=false): an embedding input as the file frames it
//   pieces       the llama_token_to_piece(special=false) of ids_special, concatenated, hex: what llama-server's
//                /detokenize and a stream of generated tokens give
//   pieces_special  the same with special=true (BOS and EOS written as their text), hex
//   detokenized  llama_detokenize(ids, remove_special=false, unparse_special=false), hex: its leading-space rule
// Hex keeps invalid UTF-8 and NUL bytes intact on their way to Python. With `--time FILE` it instead tokenizes the
// whole of FILE (add_special=false) five times and prints the fastest run's seconds, and the ids.
// Built by scripts/llamacpp/unigram_fixtures.py against the libllama of scripts/llamacpp/build.sh.
#include "llama.h"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool add_special) {
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), add_special,
                           false);
    if (n < 0) {
        ids.resize(-n);
        n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), add_special,
                           false);
    }
    ids.resize(n < 0 ? 0 : n);
    return ids;
}

static std::string pieces(const llama_vocab * vocab, const std::vector<llama_token> & ids, bool special) {
    std::string out;
    char buf[1024];
    for (llama_token id : ids) {
        int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, special);
        if (n > 0) out.append(buf, n);
    }
    return out;
}

static std::string detokenize(const llama_vocab * vocab, const std::vector<llama_token> & ids) {
    std::string out(ids.size() * 64 + 64, '\0');
    int n = llama_detokenize(vocab, ids.data(), (int32_t) ids.size(), out.data(), (int32_t) out.size(), false, false);
    out.resize(n < 0 ? 0 : n);
    return out;
}

static std::string hex(const std::string & s) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

static void print_ids(const char * key, const std::vector<llama_token> & ids) {
    printf("\"%s\": [", key);
    for (size_t i = 0; i < ids.size(); i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]");
}

int main(int argc, char ** argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[2], "--time") == 0)) {
        fprintf(stderr, "usage: %s VOCAB.gguf TEXTS.inp | %s VOCAB.gguf --time FILE\n", argv[0], argv[0]);
        return 2;
    }
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(m);
    std::ifstream in(argv[argc - 1], std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    const std::string input = all.str();
    if (argc == 4) {
        double best = 1e9;
        std::vector<llama_token> ids;
        for (int run = 0; run < 5; run++) {
            auto t0 = std::chrono::steady_clock::now();
            ids = tokenize(vocab, input, false);
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s < best) best = s;
        }
        printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, ", input.size(), ids.size(), best);
        print_ids("ids", ids);
        printf("}\n");
        return 0;
    }
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t start = 0;
    while (start <= input.size()) {
        size_t at = input.find(sep, start);
        std::string text = input.substr(start, at == std::string::npos ? std::string::npos : at - start);
        std::vector<llama_token> ids = tokenize(vocab, text, false);
        std::vector<llama_token> ids_special = tokenize(vocab, text, true);
        printf("{");
        print_ids("ids", ids);
        printf(", ");
        print_ids("ids_special", ids_special);
        printf(", \"pieces\": \"%s\"", hex(pieces(vocab, ids_special, false)).c_str());
        printf(", \"pieces_special\": \"%s\"", hex(pieces(vocab, ids_special, true)).c_str());
        printf(", \"detokenized\": \"%s\"}\n", hex(detokenize(vocab, ids)).c_str());
        if (at == std::string::npos) break;
        start = at + sep.size();
    }
    llama_model_free(m);
    return 0;
}

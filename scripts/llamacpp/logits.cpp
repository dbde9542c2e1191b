// Teacher-forced logits from llama.cpp: loads a GGUF, decodes the given token ids at positions 0.. in one batch
// and prints every position's logits as a JSON array of arrays. Built by scripts/llamacpp/family_fixtures.py
// against the libllama of scripts/llamacpp/build.sh.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char ** argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    std::vector<llama_token> ids;
    for (int i = 2; i < argc; i++) ids.push_back(atoi(argv[i]));
    auto cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_threads = 2; cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(m, cp);
    llama_batch b = llama_batch_init(ids.size(), 0, 1);
    for (size_t i = 0; i < ids.size(); i++) { b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    b.n_tokens = ids.size();
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    printf("[");
    for (size_t i = 0; i < ids.size(); i++) {
        float * l = llama_get_logits_ith(ctx, i);
        printf(i ? ",[" : "[");
        for (int v = 0; v < nv; v++) printf(v ? ",%.6g" : "%.6g", l[v]);
        printf("]");
    }
    printf("]\n");
    return 0;
}

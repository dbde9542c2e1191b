// Sentence embeddings from llama.cpp, as llama-embedding computes them: loads a GGUF embedding model, tokenizes each
// text argument with the model's vocabulary (special tokens added: BERT's [CLS] ... [SEP]), encodes all of them in
// one batch (one sequence each), and prints one JSON object per text: its token ids and its pooled embedding (the
// file's pooling type, not normalized). `--ids` takes comma-separated token ids instead of texts; `--prompt` tokenizes
// each text as llama-server tokenizes a reranker's filled-in pair prompt (special tokens parsed, none added). A
// decoder embedder (Qwen3-Embedding; `--decoder` first) runs through llama_decode with its cache cleared per text, as
// llama-embedding runs it. Built by scripts/llamacpp/embedding_fixtures.py against the libllama of
// scripts/llamacpp/build.sh.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
int main(int argc, char ** argv) {
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(m);
    std::vector<std::vector<llama_token>> inputs;
    int longest = 0;
    int first = 2;
    bool decoder = argc > first && strcmp(argv[first], "--decoder") == 0;
    first += decoder;
    bool ids_given = argc > first && strcmp(argv[first], "--ids") == 0;
    bool prompts = argc > first && strcmp(argv[first], "--prompt") == 0;
    for (int i = ids_given || prompts ? first + 1 : first; i < argc; i++) {
        if (ids_given) {
            std::vector<llama_token> ids;
            for (const char * p = argv[i]; *p; ) {
                char * end;
                ids.push_back((llama_token) strtol(p, &end, 10));
                p = *end == ',' ? end + 1 : end;
                if (end == p && *p) { fprintf(stderr, "bad id list\n"); return 1; }
            }
            if ((int) ids.size() > longest) longest = ids.size();
            inputs.push_back(ids);
            continue;
        }
        std::vector<llama_token> ids(strlen(argv[i]) + 8);
        int n = llama_tokenize(vocab, argv[i], strlen(argv[i]), ids.data(), ids.size(), !prompts, prompts);
        if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
        ids.resize(n);
        inputs.push_back(ids);
        if (n > longest) longest = n;
    }
    auto cp = llama_context_default_params();
    cp.n_ctx = longest; cp.n_batch = longest; cp.n_ubatch = longest; cp.n_seq_max = 1;
    cp.n_threads = 2; cp.n_threads_batch = 2; cp.embeddings = true;
    llama_context * ctx = llama_init_from_model(m, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    llama_batch b = llama_batch_init(longest, 0, 1);
    int n_embd = llama_pooling_type(ctx) == LLAMA_POOLING_TYPE_RANK ? (int) llama_model_n_cls_out(m)
                                                                      : llama_model_n_embd(m);
    printf("[");
    for (size_t s = 0; s < inputs.size(); s++) {
        b.n_tokens = 0;
        for (size_t i = 0; i < inputs[s].size(); i++) {
            int k = b.n_tokens++;
            b.token[k] = inputs[s][i]; b.pos[k] = i; b.n_seq_id[k] = 1; b.seq_id[k][0] = 0; b.logits[k] = 1;
        }
        if (decoder) llama_memory_clear(llama_get_memory(ctx), true);
        if (decoder ? llama_decode(ctx, b) : llama_encode(ctx, b)) { fprintf(stderr, "encode failed\n"); return 1; }
        printf(s ? ",{\"ids\":[" : "{\"ids\":[");
        for (size_t i = 0; i < inputs[s].size(); i++) printf(i ? ",%d" : "%d", inputs[s][i]);
        printf("],\"embedding\":[");
        const float * e = llama_get_embeddings_seq(ctx, 0);
        if (!e) { fprintf(stderr, "no pooled embedding\n"); return 1; }
        for (int v = 0; v < n_embd; v++) printf(v ? ",%.7g" : "%.7g", e[v]);
        printf("]}");
    }
    printf("]\n");
    return 0;
}

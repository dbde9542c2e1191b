#!/usr/bin/env python3
"""llama.cpp's sentence embeddings on synthetic encoders of each family ember runs: tests/fixtures/encoders/*.json.

  python3 scripts/llamacpp/embedding_fixtures.py [FIXTURE...]   (all of them by default)

For each fixture: `ember-cli synthetic --family F --layers N --seed S --vocab ggml-vocab-bert-bge.gguf` writes the
model (the family's real shapes, seeded random weights, llama.cpp's real BERT vocabulary), scripts/llamacpp/
embeddings.cpp (built against the libllama of scripts/llamacpp/build.sh) tokenizes TEXTS with it and encodes them in
one batch, and the fixture keeps the family, layers, seed, texts, each text's token ids and its pooled vector (the
file's pooling, not normalized). tests/encoder_families.rs rebuilds the same file and compares. Not part of
`make test`; the fixtures are committed.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "llamacpp")
OUT = os.path.join(ROOT, "tests", "fixtures", "encoders")
VOCAB = os.path.join(CACHE, "vocab", "ggml-vocab-bert-bge.gguf")
# XLM-RoBERTa's 250k-token Unigram vocabulary (bge-m3, multilingual-e5, bge-reranker-v2-m3), llama.cpp's copy.
XLMR_VOCAB = os.path.join(CACHE, "vocab", "ggml-vocab-nomic-bert-moe.gguf")
# Short and long, cased and accented, punctuation, CJK and an emoji (the unknown token), a word split into pieces.
TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Äpfel und Birnen: Cửa Việt, naïve café, 我想在apple工作 🦙",
    "unaffable antidisestablishmentarianism",
    " ".join(["Retrieval augmented generation finds passages, ranks them, and answers from them."] * 6),
]
# (fixture, family, seed, layers)
FIXTURES = [("bge-small", "bge-small", 1, 2), ("bge-small-mean", "bge-small-mean", 2, 2),
            ("nomic-embed", "nomic-embed", 3, 2), ("bge-small-rerank", "bge-small-rerank", 4, 2),
            ("qwen3-embedding", "qwen3-embedding", 5, 2), ("qwen3-reranker", "qwen3-reranker", 6, 2),
            ("xlm-roberta-tiny", "xlm-roberta-tiny", 7, 2), ("xlm-roberta-tiny-rerank", "xlm-roberta-tiny-rerank", 8, 2)]
# Decoder embedders (src/model/encoder/synthetic_decoder.rs): Qwen 3's layers, a byte vocabulary, causal attention.
DECODERS = {"qwen3-embedding", "qwen3-reranker"}
# Qwen3-Reranker's pair prompt, as the synthetic file stores it (llama.cpp's converter's template).
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a "
    "web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: "
    "{document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
# A reranker's query and candidates: each pair is `[CLS] query [SEP] document [SEP]` (Hugging Face's input for a
# BERT cross-encoder; llama-server leaves out the last [SEP] for WordPiece vocabularies), passed to llama.cpp as ids.
QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital and largest city of France.", "The quick brown fox jumps over the lazy dog.",
             "France's capital hosts the Louvre.", "Berlin is the capital of Germany.", "capital"]


def main():
    variant = os.environ.get("LLAMACPP_VARIANT", "native")
    bin_dir = subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "build.sh"), variant], check=True,
                             capture_output=True, text=True).stdout.strip()
    src = os.path.dirname(os.path.dirname(bin_dir))
    tool = os.path.join(CACHE, f"ember-embeddings-{variant}")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(src, "include"),
                    "-I", os.path.join(src, "ggml", "include"),
                    os.path.join(ROOT, "scripts", "llamacpp", "embeddings.cpp"),
                    "-L", bin_dir, "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bin_dir}", "-o", tool], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ember-cli"], cwd=ROOT, check=True)
    subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "fetch-vocabs.sh")], check=True,
                   stdout=subprocess.DEVNULL)
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    for name, family, seed, layers in FIXTURES:
        if only and name not in only:
            continue
        model = os.path.join(CACHE, f"encoder-{name}.gguf")
        vocab = XLMR_VOCAB if family.startswith("xlm-roberta") else VOCAB
        subprocess.run([os.path.join(ROOT, "target", "release", "ember-cli"), "synthetic", model, "--family", family,
                        "--layers", str(layers), "--seed", str(seed), "--vocab", vocab],
                       check=True, stdout=subprocess.DEVNULL)
        if family.endswith("-rerank"):
            write_rerank_fixture(tool, model, name, family, seed, layers)
            continue
        if family == "qwen3-reranker":
            write_decoder_rerank_fixture(tool, model, name, family, seed, layers)
            continue
        mode = ["--decoder"] if family in DECODERS else []
        out = subprocess.run([tool, model] + mode + TEXTS, check=True, capture_output=True, text=True).stdout
        results = json.loads(out)
        fixture = {"family": family, "layers": layers, "seed": seed,
                   "source": "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), CPU, 2 threads, "
                             "scripts/llamacpp/embeddings.cpp",
                   "inputs": [{"text": t, "ids": r["ids"], "embedding": [round(v, 6) for v in r["embedding"]]}
                              for t, r in zip(TEXTS, results)]}
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(fixture, f, ensure_ascii=False)
            f.write("\n")
        print(name, [len(r["ids"]) for r in results])


def write_rerank_fixture(tool, model, name, family, seed, layers):
    texts = [QUERY] + DOCUMENTS
    tokenized = json.loads(subprocess.run([tool, model] + texts, check=True, capture_output=True, text=True).stdout)
    query = tokenized[0]["ids"]
    # XLM-RoBERTa's files set add_sep_token: llama-server's pair is `<s> q </s></s> d </s>` (its separator, id 2,
    # after the query's EOS); BERT's is `[CLS] q [SEP] d [SEP]` as above.
    between = [2] if family.startswith("xlm-roberta") else []
    pairs = [query + between + doc["ids"][1:] for doc in tokenized[1:]]
    out = subprocess.run([tool, model, "--ids"] + [",".join(map(str, p)) for p in pairs], check=True,
                         capture_output=True, text=True).stdout
    scores = [r["embedding"] for r in json.loads(out)]
    fixture = {"family": family, "layers": layers, "seed": seed,
               "source": "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), CPU, 2 threads, "
                         "scripts/llamacpp/embeddings.cpp --ids",
               "query": QUERY,
               "pairs": [{"document": d, "ids": p, "scores": [round(v, 6) for v in s]}
                         for d, p, s in zip(DOCUMENTS, pairs, scores)]}
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(fixture, f, ensure_ascii=False)
        f.write("\n")
    print(name, scores)


def write_decoder_rerank_fixture(tool, model, name, family, seed, layers):
    """Qwen3-Reranker's way: each pair is the template filled in (as llama-server's format_prompt_rerank), tokenized
    with special tokens parsed; the scores are the softmax of the "yes" and "no" rows at the last token."""
    prompts = [QWEN3_RERANK_TEMPLATE.replace("{query}", QUERY).replace("{document}", d) for d in DOCUMENTS]
    out = subprocess.run([tool, model, "--decoder", "--prompt"] + prompts, check=True, capture_output=True,
                         text=True).stdout
    results = json.loads(out)
    fixture = {"family": family, "layers": layers, "seed": seed,
               "source": "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), CPU, 2 threads, "
                         "scripts/llamacpp/embeddings.cpp --decoder --prompt",
               "query": QUERY,
               "pairs": [{"document": d, "ids": r["ids"], "scores": [round(v, 6) for v in r["embedding"]]}
                         for d, r in zip(DOCUMENTS, results)]}
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(fixture, f, ensure_ascii=False)
        f.write("\n")
    print(name, [r["embedding"] for r in results])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""llama.cpp's ids and text for XLM-RoBERTa's Unigram vocabulary (`tokenizer.ggml.model = "t5"`):
tests/fixtures/tokenizers/ggml-vocab-nomic-bert-moe.gguf.{inp,out} and nomic-bert-moe.json.

  python3 scripts/llamacpp/unigram_fixtures.py            (LLAMACPP_VARIANT=avx512 on machines whose native build dies)
  python3 scripts/llamacpp/unigram_fixtures.py --time     llama.cpp's tokenizing speed on the texts of the Unigram
                                                          section of benches/tokenize.rs (best of 5)

llama.cpp ships `ggml-vocab-nomic-bert-moe.gguf` (nomic-embed-text-v2-moe's vocabulary: XLM-RoBERTa's 250,002
SentencePiece Unigram pieces and its precompiled normalizer) without the `.inp`/`.out` test texts its other
vocabularies have. This makes them: the test texts of every other vocabulary llama.cpp ships (the union of their
`.inp` files, in their order), EXTRA_TEXTS below (the normalizer's rules, whitespace, scripts, unknown characters) and
all of them joined, three times (a long text), tokenized by scripts/llamacpp/tokenize_cases.cpp against the libllama of scripts/llamacpp/build.sh.

  .inp   the texts, separated by "\\n__ggml_vocab_test__\\n" (llama.cpp's format)
  .out   each text's ids, one line each: llama_tokenize(add_special=false, parse_special=false), what llama.cpp's
         test-tokenizer-0 compares and tests/tokenizer_llamacpp_vocabs.rs reads for every claimed vocabulary
  .json  for each text, in order: its ids with the file's special tokens added (llama_tokenize(add_special=true):
         `<s> text </s>`), the text those ids decode to piece by piece without and with special tokens
         (llama_token_to_piece), and llama_detokenize of the plain ids (which drops the leading space)

Not part of `make test`; the fixtures are committed.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "llamacpp")
VOCABS = os.path.join(CACHE, "vocab")
STEM = "nomic-bert-moe"
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
SEPARATOR = "\n__ggml_vocab_test__\n"
SOURCE = ("llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), its ggml-vocab-nomic-bert-moe.gguf, "
          "scripts/llamacpp/tokenize_cases.cpp via scripts/llamacpp/unigram_fixtures.py")

# What llama.cpp's own test texts leave out: the precompiled normalizer's rules (NFKC compatibility forms, full-width
# and half-width forms, ligatures, whitespace and control characters), text that looks like special tokens, the
# escaped-space character itself, many scripts, and characters no piece covers (the unknown token).
EXTRA_TEXTS = [
    "ＡＢＣ　ｄｅｆ１２３！",
    "ﬁnancial ﬂow ﬀ",
    "① ② ⑩ ㍻ ﷺ ㌀ № ™ ℃",
    "e\u0301 é Å A\u030a ñ n\u0303",
    "non\u00a0breaking\u2009thin\u200bzero\u200cwidth\u2028line\u2029para\u3000ideographic",
    "\x00nul, \x01\x07\x1f controls\x7f and \u0085 next line",
    "a\tb\r\nc\u000bd\u000ce\rf",
    "<s> </s> <unk> <mask> <pad>",
    "Hello<s>world</s><mask>",
    "\u2581\u2581\u2581 x \u2581y",
    "a" * 300,
    " ".join(["word"] * 50),
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "東京は日本の首都です。",
    "안녕하세요 세계",
    "สวัสดีชาวโลก",
    "Καλημέρα κόσμε",
    "שלום עולם",
    "👨\u200d👩\u200d👧\u200d👦 🇫🇷🇩🇪 👍🏽",
    "𠀀𠀁 🦩 \ue000 \U0010ffff ꙮ",
    "3.14159 1,000,000 $12.50 50% #hashtag @user user@example.com https://example.com/path?q=1&r=2",
    "fn main() {\n    println!(\"hi\");\n}",
    "STRASSE Straße ß ẞ İstanbul ıi",
    " \u3000 ",
    "\u00a0",
    "ｶﾀｶﾅ ｶﾞｷﾞ ﾊﾟ",
    "Ⅻ ⅻ x² H₂O ½ ¾",
    "𝐇𝐞𝐥𝐥𝐨 𝕎𝕠𝕣𝕝𝕕",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Wie heißt die Hauptstadt von Deutschland? Berlin.",
    "   leading and trailing   ",
    "multiple     inner     spaces",
]


def texts():
    """llama.cpp's test texts (every .inp file's, first occurrence first), then EXTRA_TEXTS."""
    seen = []
    for path in sorted(glob.glob(os.path.join(VOCABS, "ggml-vocab-*.gguf.inp"))):
        with open(path, encoding="utf-8", newline="") as f:
            for text in f.read().split(SEPARATOR):
                if text not in seen:
                    seen.append(text)
    for text in EXTRA_TEXTS:
        if text not in seen:
            seen.append(text)
    # All of them, three times over, as one text of about 16 KB: long enough that ember's lattice is cut (it cuts
    # every 4 KB or so, at a position no piece spans) several times.
    seen.append("\n".join(seen) * 3)
    return seen


def bench_texts(size=100_000):
    """The texts of benches/tokenize.rs's Unigram section: this repository's docs/*.md in name order, and the
    fixture's texts repeated, each cut to `size` bytes at a character boundary."""
    english = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8", newline="") as f:
            english += f.read()
        if len(english.encode()) > size:
            break
    with open(os.path.join(OUT, f"ggml-vocab-{STEM}.gguf.inp"), encoding="utf-8", newline="") as f:
        mixed = f.read().replace(SEPARATOR, "\n") * 10
    cut = lambda text: text.encode()[:size].decode("utf-8", "ignore")
    return [("English (docs/*.md)", cut(english)), ("mixed scripts (the fixture's texts)", cut(mixed))]


def build_tool():
    variant = os.environ.get("LLAMACPP_VARIANT", "native")
    bin_dir = subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "build.sh"), variant], check=True,
                             capture_output=True, text=True).stdout.strip()
    src = os.path.dirname(os.path.dirname(bin_dir))
    # Into this checkout's target/: .cache/llamacpp may be shared with other checkouts.
    os.makedirs(os.path.join(ROOT, "target", "llamacpp"), exist_ok=True)
    tool = os.path.join(ROOT, "target", "llamacpp", f"tokenize-cases-{variant}")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(src, "include"),
                    "-I", os.path.join(src, "ggml", "include"),
                    os.path.join(ROOT, "scripts", "llamacpp", "tokenize_cases.cpp"),
                    "-L", bin_dir, "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bin_dir}", "-o", tool], check=True)
    return tool


def text_of(hex_bytes):
    raw = bytes.fromhex(hex_bytes)
    # ember's decode replaces invalid UTF-8 as Rust's from_utf8_lossy does; none is expected here.
    return raw.decode("utf-8")


def main():
    subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "fetch-vocabs.sh")], check=True,
                   stdout=subprocess.DEVNULL)
    tool = build_tool()
    vocab = os.path.join(VOCABS, f"ggml-vocab-{STEM}.gguf")
    if sys.argv[1:] == ["--time"]:
        for name, text in bench_texts():
            path = os.path.join(ROOT, "target", "llamacpp", "bench-text.txt")
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            r = json.loads(subprocess.run([tool, vocab, "--time", path], check=True, capture_output=True,
                                          text=True).stdout)
            print(f"{name}: {r['bytes']} bytes, {r['tokens']} tokens, {r['seconds'] * 1e3:.2f} ms, "
                  f"{r['tokens'] / r['seconds']:.0f} tokens/s")
        return
    cases = texts()
    os.makedirs(OUT, exist_ok=True)
    inp = os.path.join(OUT, f"ggml-vocab-{STEM}.gguf.inp")
    with open(inp, "w", encoding="utf-8", newline="") as f:
        f.write(SEPARATOR.join(cases))
    lines = subprocess.run([tool, vocab, inp], check=True, capture_output=True).stdout.decode().splitlines()
    results = [json.loads(line) for line in lines]
    assert len(results) == len(cases), (len(results), len(cases))
    with open(os.path.join(OUT, f"ggml-vocab-{STEM}.gguf.out"), "w", encoding="utf-8") as f:
        for r in results:
            f.write(" ".join(map(str, r["ids"])) + "\n")
    head = {"source": SOURCE,
            "texts": f"ggml-vocab-{STEM}.gguf.inp, in order; their plain ids are ggml-vocab-{STEM}.gguf.out"}
    cases = [{"ids_special": r["ids_special"], "pieces": text_of(r["pieces"]),
              "pieces_special": text_of(r["pieces_special"]), "detokenized": text_of(r["detokenized"])}
             for r in results]
    # One case a line, so that a regenerated fixture's diff shows which texts changed.
    with open(os.path.join(OUT, f"{STEM}.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} texts, {sum(len(r['ids']) for r in results)} tokens")


if __name__ == "__main__":
    main()

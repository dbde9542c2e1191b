#!/usr/bin/env python3
"""llama.cpp's teacher-forced logits on synthetic models of each family ember runs: tests/fixtures/families/*.json.

  python3 scripts/llamacpp/family_fixtures.py [FIXTURE...]   (all of them by default)

For each family: `ember-cli synthetic --family F --layers N --seed S` writes the model (the family's real layer
shapes, seeded random weights, a 512-token byte vocabulary), scripts/llamacpp/logits.cpp (built against the
libllama of scripts/llamacpp/build.sh) decodes IDS on it, and the fixture keeps the family, layers, seed, ids and
every position's logits. tests/forward_families.rs rebuilds the same file and compares. Not part of `make test`;
the fixtures are committed.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "llamacpp")
OUT = os.path.join(ROOT, "tests", "fixtures", "families")
IDS = [1, 17, 300, 42, 5, 99, 123, 7, 256, 8, 64, 3, 400, 12, 77, 200]
# (fixture, family, seed, layers): Mistral Nemo's layers are 5120 wide, so one; the tiny Gemma needs its seventh
# layer, the global one that linear scaling changes; SmolLM3 its fourth, the first without RoPE; Gemma 2 27B and
# Gemma 3 27B all of theirs (46 and 62), the counts by which llama.cpp picks their attention scale; DeepSeek's a
# dense first block and two with experts.
FAMILIES = [("qwen2", "qwen2.5-0.5b", 1, 2), ("qwen3", "qwen3-0.6b", 2, 2), ("llama3", "llama3.2-1b", 3, 2),
            ("mistral", "mistral-nemo", 4, 1), ("gemma3-linear", "gemma3-tiny-linear8", 5, 7),
            ("phi3", "phi3.5-mini", 6, 2), ("phi3-long", "phi3.5-mini-long", 7, 1),
            ("qwen3-yarn", "qwen3-0.6b-yarn4", 8, 2), ("smollm3", "smollm3-3b", 9, 4),
            ("gemma2", "gemma2-2b", 10, 2), ("granite", "granite3.1-2b", 11, 2),
            ("gemma2-27b", "gemma2-27b-scale", 12, 46), ("gemma3-27b", "gemma3-27b-scale", 13, 62),
            ("olmo2", "olmo2-1b", 14, 2), ("qwen3moe", "qwen3moe-small", 15, 2), ("mixtral", "mixtral-small", 16, 2),
            ("qwen2moe", "qwen2moe-small", 17, 2), ("olmoe", "olmoe-small", 18, 2),
            ("granitemoe", "granitemoe-small", 19, 2), ("gpt-oss", "gpt-oss-small", 20, 2),
            ("gpt-oss-mxfp4", "gpt-oss-small-mxfp4", 21, 2), ("deepseek2-lite", "deepseek2-lite-small", 22, 3),
            ("deepseek3", "deepseek3-small", 27, 3), ("iq4_nl", "llama3.2-1b-iq4_nl", 28, 2),
            ("iq4_xs", "llama3.2-1b-iq4_xs", 29, 2),
            ("iq3_xxs", "llama3.2-1b-iq3_xxs", 31, 2), ("iq3_s", "llama3.2-1b-iq3_s", 32, 2),
            ("iq2_xxs", "llama3.2-1b-iq2_xxs", 33, 2), ("iq2_xs", "llama3.2-1b-iq2_xs", 34, 2),
            ("iq2_s", "llama3.2-1b-iq2_s", 35, 2), ("iq1_s", "llama3.2-1b-iq1_s", 36, 2),
            ("iq1_m", "llama3.2-1b-iq1_m", 37, 2), ("tq1_0", "llama3.2-1b-tq1_0", 38, 2),
            ("tq2_0", "llama3.2-1b-tq2_0", 39, 2), ("dynamic", "llama3.2-1b-dynamic", 40, 2)]


# Argmax agreement (tests/forward_agreement.rs): every IQ and ternary type on a peaked Llama 3.2 1B (its final norm
# 4 times as large, `-peaked`), 240 positions; only llama.cpp's top token and its lead over the second are kept.
AGREEMENT_IDS = [(i * 197 + 11) % 509 for i in range(240)]
AGREEMENT = [(t, f"llama3.2-1b-{t}-peaked", 100 + k, 2) for k, t in enumerate(
    ["iq4_nl", "iq4_xs", "iq3_xxs", "iq3_s", "iq2_xxs", "iq2_xs", "iq2_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0",
     "dynamic"])]
AGREEMENT_OUT = os.path.join(ROOT, "tests", "fixtures", "agreement")


def main():
    # LLAMACPP_VARIANT=avx512 where the native build dies (scripts/llamacpp/build.sh). `--agreement [NAME...]`
    # writes the argmax agreement fixtures instead.
    variant = os.environ.get("LLAMACPP_VARIANT", "native")
    bin_dir = subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "build.sh"), variant], check=True,
                             capture_output=True, text=True).stdout.strip()
    src = os.path.dirname(os.path.dirname(bin_dir))
    tool = os.path.join(CACHE, f"ember-logits-{variant}")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(src, "include"),
                    "-I", os.path.join(src, "ggml", "include"), os.path.join(ROOT, "scripts", "llamacpp", "logits.cpp"),
                    "-L", bin_dir, "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{bin_dir}", "-o", tool], check=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ember-cli"], cwd=ROOT, check=True)
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    if "--agreement" in only:
        return agreement(tool, only - {"--agreement"})
    for name, family, seed, layers in FAMILIES:
        if only and name not in only:
            continue
        model = os.path.join(CACHE, f"family-{name}.gguf")
        subprocess.run([os.path.join(ROOT, "target", "release", "ember-cli"), "synthetic", model, "--family", family,
                        "--layers", str(layers), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([tool, model] + [str(i) for i in IDS], check=True, capture_output=True, text=True).stdout
        logits = json.loads(out)
        fixture = {"family": family, "layers": layers, "seed": seed, "ids": IDS,
                   "source": "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), CPU, 2 threads, f16 KV cache",
                   "logits": [[round(v, 5) for v in row] for row in logits]}
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(fixture, f, separators=(",", ":"))
        print(f"{name}: {len(logits)} positions x {len(logits[0])} logits", file=sys.stderr)


def agreement(tool, only):
    os.makedirs(AGREEMENT_OUT, exist_ok=True)
    for name, family, seed, layers in AGREEMENT:
        if only and name not in only:
            continue
        model = os.path.join(CACHE, f"agreement-{name}.gguf")
        subprocess.run([os.path.join(ROOT, "target", "release", "ember-cli"), "synthetic", model, "--family", family,
                        "--layers", str(layers), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([tool, model] + [str(i) for i in AGREEMENT_IDS], check=True, capture_output=True,
                             text=True).stdout
        top, lead = [], []
        for row in json.loads(out):
            order = sorted(range(len(row)), key=lambda i: -row[i])
            top.append(order[0])
            lead.append(round(row[order[0]] - row[order[1]], 5))
        fixture = {"family": family, "layers": layers, "seed": seed, "ids": AGREEMENT_IDS,
                   "source": "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36 sdist), CPU, 2 threads, f16 KV cache",
                   "top": top, "lead": lead}
        with open(os.path.join(AGREEMENT_OUT, f"{name}.json"), "w") as f:
            json.dump(fixture, f, separators=(",", ":"))
        confident = sum(1 for x in lead if x >= 0.8)
        print(f"{name}: {len(top)} positions, {confident} lead by 0.8 or more", file=sys.stderr)


if __name__ == "__main__":
    main()

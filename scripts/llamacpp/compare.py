#!/usr/bin/env python3
"""ember against llama.cpp on the same GGUF files, on this machine, in one run: `make bench-llamacpp`.

  python3 scripts/llamacpp/compare.py [--shapes llama-1b,llama-3b,qwen-7b-4l] [--types Q4_K_M,Q5_K_M,Q6_K,Q8_0,Q4_0]
                                      [--threads N] [--runs N] [--decode N] [--depth N] [--rounds N] [--streams N]
                                      [--llama-build native|avx2|avx512] [--json PATH]

What it does:
1. builds llama.cpp from the pinned llama-cpp-python sdist once (scripts/llamacpp/build.sh), and ember-bench;
2. writes the F16 models of each shape once (scripts/llamacpp/synthetic_model.py: real layer shapes, random
   weights, SmolLM2's vocabulary) and quantizes each to every type with `llama-quantize`, into .cache/llamacpp/;
3. for each file, alternates `llama-bench` and `ember-bench` (`--rounds` times each, same threads), reading both
   engines' JSON: prefill 128 and 512 (tokens/s), decode (tokens/s from an empty context, `--decode` tokens), and
   decode after a `--depth`-token prompt (0 skips it; it costs a long prefill per engine and file);
   with `--streams N`, also the aggregate decode of N sequences in one batch (`llama-batched-bench -npp 128 -ntg
   --decode -npl N` against `ember-bench --streams N`: random prompt and decode tokens, tokens/s over all);
4. prints one table of the medians with ember ÷ llama.cpp, and the roofline share of each engine's decode: the
   file's weight bytes read per token × decode tokens/s ÷ the memory read bandwidth that ember-bench measured with
   the same threads (1.0 = decode streams the weights at the speed memory delivers them); with `--depth`, also
   ember's share of the bound at depth (weights and cache bytes per token against the read probe run right after
   each decode, ember-bench's `bound_share`).

EMBER_CPU_KERNELS is passed through to ember-bench (e.g. `avx2`, compared with `--llama-build avx2`).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "llamacpp")
MODELS = os.path.join(CACHE, "models")
VOCAB = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SHAPES = ["llama-1b", "llama-3b", "qwen-7b-4l"]
# Mixture-of-experts shapes (not in the default run: name them with --shapes).
MOE_SHAPES = ["qwen3moe-30b-a3b-4l", "mixtral-8x7b-2l", "gpt-oss-20b-4l", "deepseek2-lite-4l"]
TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("+", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def ensure_tools(build: str) -> str:
    bin_dir = subprocess.run([os.path.join(ROOT, "scripts", "llamacpp", "build.sh"), build], check=True,
                             capture_output=True, text=True).stdout.strip()
    run(["cargo", "build", "--release", "--quiet", "--bin", "ember-bench"], cwd=ROOT)
    if not os.path.exists(VOCAB):
        run([os.path.join(ROOT, "scripts", "fetch-model.sh")], stdout=subprocess.DEVNULL)
    return bin_dir


def ensure_model(bin_dir: str, shape: str, qtype: str) -> str:
    os.makedirs(MODELS, exist_ok=True)
    f16 = os.path.join(MODELS, f"{shape}-F16.gguf")
    out = os.path.join(MODELS, f"{shape}-{qtype}.gguf")
    if os.path.exists(out):
        return out
    if not os.path.exists(f16):
        run([sys.executable, os.path.join(ROOT, "scripts", "llamacpp", "synthetic_model.py"), shape, VOCAB,
             f16 + ".tmp"])
        os.replace(f16 + ".tmp", f16)
    cmd = [os.path.join(bin_dir, "llama-quantize")]
    if qtype in IMATRIX_TYPES:
        cmd += ["--imatrix", ensure_imatrix(bin_dir, shape, f16)]
    run(cmd + [f16, out + ".tmp", qtype, str(os.cpu_count() or 1)], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    os.replace(out + ".tmp", out)
    return out


# The types llama-quantize needs (IQ2_XXS, IQ2_XS, IQ1_S) or wants an importance matrix for.
IMATRIX_TYPES = {"IQ3_XXS", "IQ3_S", "IQ3_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"}


def ensure_imatrix(bin_dir: str, shape: str, f16: str) -> str:
    """An importance matrix of `shape`'s F16 model from llama-imatrix over ember's own docs (any text will do for
    random weights: it weighs each column by the activations it meets), once."""
    out = os.path.join(MODELS, f"{shape}-imatrix.gguf")
    if os.path.exists(out):
        return out
    text = os.path.join(CACHE, "imatrix-text.txt")
    with open(text, "w") as f:
        for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
            if name.endswith(".md"):
                with open(os.path.join(ROOT, "docs", name)) as doc:
                    f.write(doc.read())
    run([os.path.join(bin_dir, "llama-imatrix"), "-m", f16, "-f", text, "-o", out + ".tmp.gguf", "-c", "128",
         "--chunks", "16", "-t", str(os.cpu_count() or 1)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.replace(out + ".tmp.gguf", out)
    return out


def llama_bench(bin_dir, model, args, depth=0):
    """llama-bench's tokens/s: {'pp128': x, 'pp512': y, 'tg': z} (or {'tg@depth': z} with a depth)."""
    cmd = [os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(args.threads), "-o", "json"]
    if depth:
        cmd += ["-p", "0", "-n", str(args.decode), "-d", str(depth), "-r", "1"]
    else:
        cmd += ["-p", "128,512", "-n", str(args.decode), "-r", str(args.runs)]
    log("+", " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = {}
    for test in json.loads(out):
        key = f"pp{test['n_prompt']}" if test["n_gen"] == 0 else ("tg@depth" if depth else "tg")
        result[key] = test["avg_ts"]
    return result


def llama_batched_bench(bin_dir, model, args):
    """llama-batched-bench's aggregate decode tokens/s of `--streams` sequences: {'tgN': z}."""
    n = args.streams
    cmd = [os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-t", str(args.threads), "-tb",
           str(args.threads), "-c", str(n * (128 + args.decode) + 64), "-b", "2048", "-ub", "512", "-npp", "128",
           "-ntg", str(args.decode), "-npl", str(n), "--output-format", "jsonl"]
    log("+", " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    speeds = [json.loads(line)["speed_tg"] for line in out.splitlines() if line.startswith("{")]
    return {f"tg{n}": statistics.median(speeds)}


def ember_bench(model, args):
    path = os.path.join(CACHE, "ember-bench.json")
    cmd = [os.path.join(ROOT, "target", "release", "ember-bench"), "--model", model, "--threads", str(args.threads),
           "--no-rss", "--prefill", "128,512", "--decode", str(args.decode), "--runs", str(args.runs),
           "--json", path]
    if args.depth:
        cmd += ["--depth", str(args.depth)]
    if args.streams:
        cmd += ["--streams", str(args.streams)]
    run(cmd, stdout=subprocess.DEVNULL)
    with open(path) as f:
        report = json.load(f)
    result = {f"pp{n}": m["median"] for n, m in report["prefill_tokens_per_s"].items()}
    result["tg"] = report["decode_tokens_per_s"]["result"]["median"]
    if report.get("decode_at_depth_tokens_per_s"):
        at_depth = report["decode_at_depth_tokens_per_s"]
        result["tg@depth"] = at_depth["result"]["median"]
        if at_depth.get("bound_share"):
            result["bound@depth"] = at_depth["bound_share"]["median"]
    if report.get("streams_decode_tokens_per_s"):
        result[f"tg{args.streams}"] = report["streams_decode_tokens_per_s"]["result"]["median"]
    result["read_gb_s"] = report["read_gb_per_s"]["result"]["median"]
    result["bytes_per_token"] = report["weight_bytes_per_token"]
    result["kernels"] = report["kernels"]
    result["cpu"] = report["cpu"]
    return result


def median_of(runs, key):
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--types", default=",".join(TYPES))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--depth", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--streams", type=int, default=0)
    p.add_argument("--llama-build", default="native", choices=["native", "avx2", "avx512"])
    p.add_argument("--json", default=os.path.join(CACHE, "compare.json"))
    args = p.parse_args()
    shapes, types = args.shapes.split(","), args.types.split(",")
    for s in shapes:
        if s not in SHAPES + MOE_SHAPES:
            sys.exit(f"unknown shape {s!r} (known: {', '.join(SHAPES + MOE_SHAPES)})")

    bin_dir = ensure_tools(args.llama_build)
    rows = []
    for shape in shapes:
        for qtype in types:
            model = ensure_model(bin_dir, shape, qtype)
            ours, theirs = [], []
            for _ in range(args.rounds):
                theirs.append(llama_bench(bin_dir, model, args))
                if args.depth:
                    theirs[-1].update(llama_bench(bin_dir, model, args, depth=args.depth))
                if args.streams:
                    theirs[-1].update(llama_batched_bench(bin_dir, model, args))
                ours.append(ember_bench(model, args))
            rows.append({"shape": shape, "type": qtype, "ember": ours, "llama.cpp": theirs})
            print_table(rows, args)

    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
              "llama_build": args.llama_build, "kernels": rows[0]["ember"][0]["kernels"] if rows else None,
              "cpu": rows[0]["ember"][0]["cpu"] if rows else None, "depth": args.depth, "decode": args.decode,
              "rows": rows}
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    log(f"wrote {args.json}")


def print_table(rows, args):
    keys = ["pp128", "pp512", "tg"] + (["tg@depth"] if args.depth else []) + ([f"tg{args.streams}"] if args.streams
                                                                              else [])
    names = {"pp128": "prefill 128", "pp512": "prefill 512", "tg": f"decode {args.decode}",
             "tg@depth": f"decode @{args.depth}", f"tg{args.streams}": f"{args.streams} streams' decode"}
    first = rows[0]["ember"][0]
    print(f"\n{first['cpu']}, {args.threads} threads, ember kernels {first['kernels']}, llama.cpp build "
          f"{args.llama_build}; tokens/s, ember / llama.cpp (ratio); roofline = weight bytes per token x decode "
          f"tokens/s / read bandwidth")
    bound = ["ember @depth, of the bound"] if args.depth else []
    head = "| model | type | " + " | ".join([names[k] for k in keys] + bound) + " | roofline ember / llama.cpp |"
    print(head)
    print("|" + " --- |" * 2 + " ---: |" * (len(keys) + len(bound) + 1))
    for row in rows:
        cells = []
        for k in keys:
            e, l = median_of(row["ember"], k), median_of(row["llama.cpp"], k)
            cells.append(f"{e:.1f} / {l:.1f} ({e / l:.2f}x)" if e and l else "-")
        if args.depth:
            # Each run's share against the read probe run right after it (ember-bench's `bound_share`).
            share = median_of(row["ember"], "bound@depth")
            cells.append(f"{share:.2f}" if share else "-")
        bw = median_of(row["ember"], "read_gb_s") * 1e9
        bpt = row["ember"][0]["bytes_per_token"]
        e, l = median_of(row["ember"], "tg"), median_of(row["llama.cpp"], "tg")
        cells.append(f"{bpt * e / bw:.2f} / {bpt * l / bw:.2f} ({bpt / 1e6:.1f} MB/token)")
        print(f"| {row['shape']} | {row['type']} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

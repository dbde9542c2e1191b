#!/bin/bash
# Embedding or reranking throughput of ember's gateway against llama-server on one model file, alternated in one
# run (docs/performance.md, "Embeddings against llama-server"):
#
#   scripts/bench-embedding-servers.sh MODEL.gguf embed|rerank [scripts/bench-embeddings.py's options...]
#
# Starts target/go/ember-gateway (`make gateway`) on 127.0.0.1:8091 and llama.cpp's AVX-512 llama-server
# (scripts/llamacpp/build.sh avx512, or $LLAMACPP_BUILD) twice, `--parallel 1` on 8092 and `--parallel 8` on 8093, all on 2 threads, then
# runs scripts/bench-embeddings.py on the three and stops them.
set -euo pipefail
model=$1 mode=$2
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
# LLAMACPP_BUILD picks llama.cpp's build (scripts/llamacpp/build.sh's variants): avx512 by default, which runs on
# an AMX machine; native where the CPU has no AMX (a Zen 5 EPYC), the same kernels without a second build.
bin="$("$root/scripts/llamacpp/build.sh" "${LLAMACPP_BUILD:-avx512}")"
flag=--embeddings
[ "$mode" = rerank ] && flag=--reranking
logs="$(mktemp -d)"
"$root/target/go/ember-gateway" --model "$model" --threads 2 --listen 127.0.0.1:8091 >"$logs/ember.log" 2>&1 &
pids=($!)
"$bin/llama-server" -m "$model" $flag -t 2 -tb 2 -c 8192 -b 8192 -ub 8192 --parallel 1 --host 127.0.0.1 \
    --port 8092 >"$logs/llama-p1.log" 2>&1 &
pids+=($!)
"$bin/llama-server" -m "$model" $flag -t 2 -tb 2 -c 16384 -b 8192 -ub 8192 --parallel 8 --host 127.0.0.1 \
    --port 8093 >"$logs/llama-p8.log" 2>&1 &
pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for port in 8091 8092 8093; do
    for _ in $(seq 120); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
    curl -sf "127.0.0.1:$port/health" >/dev/null || { echo "port $port did not start (logs in $logs)" >&2; exit 1; }
done
python3 "$root/scripts/bench-embeddings.py" http://127.0.0.1:8091 http://127.0.0.1:8092 http://127.0.0.1:8093 "$@"

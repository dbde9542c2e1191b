#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine, and its preparation here.
#
#   scripts/gpu-check.sh prepare           here (Rust, no GPU): build the binaries into target/gpu-check/bundle.tar.gz
#                                          and split the model into models/part.aa and models/part.ab
#   scripts/gpu-check.sh run [--skip-synthetic]
#                                          on the GPU machine (x86_64, CUDA 13 + driver 580, no Rust, no network):
#                                          every check that the files present allow; results under $OUT
#   scripts/gpu-check.sh emulate           here: the kernels run under a CPU emulation of CUDA (g++), on weights of
#                                          every type packed by the backend, against float64 references and each
#                                          other, the mixture-of-experts and latent-attention layers against the
#                                          CPU backend's logits, and the q8_0 / q4_0 KV cache stores and attention
#                                          against the CPU backend's
#                                          (see src/backend/cuda/kernels/emulation)
#
# `run`, in order (under 5 minutes; each step has its own time limit):
#   1. device facts (nvidia-smi), and the kernels compiled by NVRTC for the device (ember-gpu-check info);
#   2. unless --skip-synthetic: a synthetic model of SmolLM2-135M's exact shapes with seeded random weights, written
#      on the machine (the 98 MB model cannot travel with the binaries in one run): the GPU against the CPU backend
#      on the machine's cores (ember-gpu-check consistency), then throughput and latency (ember-gpu-check bench);
#      then the same consistency check on a synthetic Gemma 3 270M (its shapes and weight types, a 48-token window);
#   3. when the real model is there, whole or as models/part.aa + models/part.ab (two runs carry one part each, the
#      first part waiting on the machine): the reference check (GPU logits against the float64 fixtures, argmax
#      against llama.cpp's greedy runs), then the engine tests and tests/cuda_backend.rs on the GPU path;
#   4. the summary table, last. JSON and logs go to $OUT and to target/gpu-check/results (which stays on the machine
#      between runs, so that the second run's table shows the first run's results too).
# The exit status is non-zero when any check failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
MODEL="models/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WORK="target/gpu-check"
# Engine-level tests that run on the GPU path there (their engines use backend "auto").
# engine_speculative: a draft verified as a k + 1-token chunk, each row's argmax taken on the device, must give
# the tokens plain decoding gives.
ENGINE_TESTS=(engine_batching engine_metrics protocol_errors protocol_metrics_gate protocol_stream engine_speculative)

prepare() {
  set -e
  local target="${CARGO_TARGET_DIR:-target}"
  cargo build --release --bin ember-gpu-check
  local tests=()
  for t in cuda_backend "${ENGINE_TESTS[@]}"; do tests+=(--test "$t"); done
  # The test executables, by name (their file names carry a hash).
  local listing
  listing="$(cargo test --release --no-run "${tests[@]}" --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')"
  rm -rf "$WORK/stage" && mkdir -p "$WORK/stage/bin" "$WORK/stage/tests"
  cp "$target/release/ember-gpu-check" "$WORK/stage/bin/"
  while read -r name path; do cp "$path" "$WORK/stage/tests/$name"; done <<<"$listing"
  strip "$WORK"/stage/bin/* "$WORK"/stage/tests/*
  tar -C "$WORK/stage" -czf "$WORK/bundle.tar.gz" bin tests
  rm -rf "$WORK/stage"
  # Two halves (49 MB each): the first travels with the bundle, the second alone.
  scripts/fetch-model.sh >/dev/null
  rm -f models/part.a?
  split -n 2 "$MODEL" models/part.
  ls -l "$WORK/bundle.tar.gz" models/part.a?
  cat <<'USAGE'
On the GPU machine (the run tool), two consecutive runs while it stays warm:
  run 1: command "scripts/gpu-check.sh run", carry ["target/gpu-check/bundle.tar.gz", "models/part.aa"]
  run 2: command "scripts/gpu-check.sh run --skip-synthetic", carry ["models/part.ab"]
USAGE
}

emulate() {
  set -e
  local dir="src/backend/cuda/kernels/emulation" build="$WORK/emulation"
  mkdir -p "$build"
  python3 "$dir/host_source.py" src/backend/cuda/kernels "$build/kernels_host.h"
  # Weights of every type as the backend packs them, with the CPU's dequantization (tests/cuda_packed_fixtures.rs).
  EMBER_PACKED_FIXTURES="$root/$build/packed_weights.bin" cargo test --release --quiet --test cuda_packed_fixtures
  # Routing cases and one mixture-of-experts layer per family, with the CPU backend's logits (tests/cuda_moe_fixtures.rs).
  EMBER_MOE_FIXTURES="$root/$build/moe.bin" cargo test --release --quiet --test cuda_moe_fixtures
  # One latent-attention layer of each DeepSeek layout, with the CPU backend's logits (tests/cuda_latent_fixtures.rs).
  EMBER_LATENT_FIXTURES="$root/$build/latent.bin" cargo test --release --quiet --test cuda_latent_fixtures
  # A layer's stores and attention with each pair of KV cache types, on the CPU backend (tests/cuda_kv_fixtures.rs).
  EMBER_KV_FIXTURES="$root/$build/kv.bin" cargo test --release --quiet --test cuda_kv_fixtures
  export EMBER_PACKED_FIXTURES="$root/$build/packed_weights.bin" EMBER_MOE_FIXTURES="$root/$build/moe.bin"
  export EMBER_LATENT_FIXTURES="$root/$build/latent.bin" EMBER_KV_FIXTURES="$root/$build/kv.bin"
  g++ -std=c++20 -O2 -ffp-contract=off -Wno-unknown-pragmas -pthread -I "$dir" -I "$build" \
    "$dir/kernel_checks.cpp" -o "$build/kernel_checks"
  "$build/kernel_checks"
}

failed=0
# Runs a step under a time limit, its output to the terminal and to results/NAME.log; notes a failure.
step() {
  local name="$1" limit="$2"
  shift 2
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$WORK/results/$name.log"
  local status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ]; then
    echo "== $name failed (status $status)"
    failed=1
  fi
}

run() {
  local skip_synthetic=0
  [ "${1:-}" = "--skip-synthetic" ] && skip_synthetic=1
  local out="${OUT:-$WORK/out}"
  mkdir -p "$out" "$WORK/results"
  if [ ! -x "$WORK/bin/ember-gpu-check" ]; then
    [ -f "$WORK/bundle.tar.gz" ] || { echo "error: no $WORK/bundle.tar.gz: run 'scripts/gpu-check.sh prepare' here first" >&2; exit 1; }
    tar -C "$WORK" -xzf "$WORK/bundle.tar.gz"
  fi
  local bin="$WORK/bin/ember-gpu-check" results="$WORK/results"
  # NVRTC comes with the CUDA toolkit, whose lib folder may not be on the loader's path (the driver's libcuda is).
  if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    local nvrtc
    nvrtc="$(ls /usr/local/cuda/lib64/libnvrtc.so.1[23]* /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.1[23]* \
      2>/dev/null | head -n 1)"
    [ -n "$nvrtc" ] || nvrtc="$(find /usr /opt -name 'libnvrtc.so.1[23]*' 2>/dev/null | head -n 1)"
    [ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC: ${nvrtc:-not found}"
  fi

  echo "== device"
  timeout 30 nvidia-smi 2>&1 | tee "$results/nvidia-smi.log"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 |
    tee -a "$results/nvidia-smi.log"
  step info 60 "$bin" info --json "$results/info.json"

  if [ "$skip_synthetic" -eq 0 ]; then
    local synthetic="$WORK/synthetic-135m.gguf"
    step synthetic 60 "$bin" synthetic "$synthetic" --seed 1
    step consistency 120 "$bin" consistency --model "$synthetic" --json "$results/consistency.json"
    step bench 180 "$bin" bench --model "$synthetic" --json "$results/bench.json"
    # Gemma 3's architecture and weight types (Q4_K, Q6_K, Q5_0, Q8_0), a window the 100-token prompts cross.
    local gemma="$WORK/synthetic-gemma3.gguf"
    step synthetic-gemma3 60 "$bin" synthetic "$gemma" --seed 1 --arch gemma3 --window 48
    step consistency-gemma3 120 "$bin" consistency --model "$gemma" --json "$results/consistency-gemma3.json"
  fi

  if [ ! -f "$MODEL" ] && [ -f models/part.aa ] && [ -f models/part.ab ]; then
    cat models/part.aa models/part.ab >"$MODEL.partial" && mv "$MODEL.partial" "$MODEL" && rm -f models/part.a?
  fi
  if [ -f "$MODEL" ] && echo "$MODEL_SHA256  $MODEL" | sha256sum --check --status; then
    step reference 120 "$bin" reference --model "$MODEL" --json "$results/reference.json"
    step test-cuda_backend 120 env EMBER_REQUIRE_CUDA=1 "$WORK/tests/cuda_backend" --test-threads=1
    for t in "${ENGINE_TESTS[@]}"; do
      step "test-$t" 90 "$WORK/tests/$t" --test-threads=2
    done
  else
    echo "== the real model is not here (whole, or both parts): reference check and engine tests not run"
  fi

  "$bin" table "$results" | tee "$results/table.txt"
  cp -r "$results"/. "$out"/
  return "$failed"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@"; exit $? ;;
  emulate) emulate ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac

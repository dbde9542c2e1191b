#!/usr/bin/env bash
# Builds llama.cpp, the engine ember is compared with, from the pinned llama-cpp-python 0.3.36 sdist (its
# vendor/llama.cpp is llama.cpp commit 0c1e57098), once, into the git-ignored .cache/llamacpp/. Prints the folder
# holding the binaries. Needs cmake (apt) and ninja (pip); about 6 minutes on 2 cores the first time.
#
#   scripts/llamacpp/build.sh          -DGGML_NATIVE=ON: the machine's own ISA (build/bin)
#   scripts/llamacpp/build.sh avx2     AVX2 + FMA + F16C only, to compare with EMBER_CPU_KERNELS=avx2 (build-avx2/bin)
#   scripts/llamacpp/build.sh avx512   AVX-512 (VBMI, VNNI, BF16) without AMX (build-avx512/bin): for AMX machines,
#                                      whose native build dies (on a 2-vCPU Intel Xeon KVM guest with AMX, 2026-12-05:
#                                      SIGILL in ggml-cpu on the first forward step)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
variant="${1:-native}"
version=0.3.36
cache=.cache/llamacpp
src="$cache/llama_cpp_python-$version/vendor/llama.cpp"
case "$variant" in
  native) build=build; flags=(-DGGML_NATIVE=ON) ;;
  avx2) build=build-avx2
    flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF) ;;
  avx512) build=build-avx512
    flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
      -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF) ;;
  *) echo "usage: $0 [native|avx2|avx512]" >&2; exit 2 ;;
esac
targets=(llama-bench llama-batched-bench llama-quantize llama-tokenize llama-cli llama-imatrix)
bin="$PWD/$src/$build/bin"
if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ] && [ -x "$bin/llama-quantize" ] \
  && [ -x "$bin/llama-imatrix" ]; then
  echo "$bin"; exit 0
fi
mkdir -p "$cache"
if [ ! -d "$src" ]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$cache" >&2
  tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
fi
command -v cmake >/dev/null || { echo "error: cmake is missing (apt-get install cmake)" >&2; exit 1; }
command -v ninja >/dev/null || python3 -m pip install --quiet ninja >&2
cmake -S "$src" -B "$src/$build" -G Ninja -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "${flags[@]}" >&2
cmake --build "$src/$build" -j"$(nproc)" --target "${targets[@]}" >&2
echo "$bin"

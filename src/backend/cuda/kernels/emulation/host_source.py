#!/usr/bin/env python3
"""Writes the kernels as one C++ header that g++ compiles against shim.h (the CPU emulation of CUDA).

The sources are used as they are, in the order module.rs compiles them, with one change: the two f16 conversions of
common.cuh are PTX instructions, which a CPU cannot run, so their bodies are replaced by the shim's IEEE conversions.

    python3 host_source.py src/backend/cuda/kernels OUT.h
"""
import re
import sys

# module.rs's HEADERS, then its KERNEL_FILES.
FILES = ["common.cuh", "kv_cache.cuh", "embed.cu", "rms_norm.cu", "matvec.cu", "matmul.cu", "rope_kv.cu", "attention.cu",
         "latent.cu", "elementwise.cu", "top_k.cu", "moe.cu"]
CONVERSIONS = {
    r"__device__ __forceinline__ float f16_to_f32\(u16 h\) \{.*?\n\}\n":
        "__device__ __forceinline__ float f16_to_f32(u16 h) { return host_f16_to_f32(h); }\n",
    r"__device__ __forceinline__ u16 f32_to_f16\(float f\) \{.*?\n\}\n":
        "__device__ __forceinline__ u16 f32_to_f16(float f) { return host_f32_to_f16(f); }\n",
}


def main():
    src_dir, out_path = sys.argv[1], sys.argv[2]
    parts = ['#include "shim.h"\n']
    for name in FILES:
        with open(f"{src_dir}/{name}") as f:
            text = f.read()
        if name == "common.cuh":
            for pattern, replacement in CONVERSIONS.items():
                text, n = re.subn(pattern, replacement, text, flags=re.S)
                if n != 1:
                    sys.exit(f"common.cuh: expected one definition matching {pattern!r}, found {n}")
        parts.append(f'#line 1 "{name}"\n{text}\n')
    with open(out_path, "w") as f:
        f.write("".join(parts))


if __name__ == "__main__":
    main()

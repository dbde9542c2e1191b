#!/usr/bin/env python3
"""Dequantizes raw GGUF tensor data with the `gguf` Python package: the reference of tests/dequantize_reference.rs.

Usage: dequantize.py TYPE IN OUT — reads IN (whole blocks of ggml type TYPE, e.g. Q4_K), writes OUT as
little-endian f32 values, one per element. gguf-py's numpy code is independent of ember's: a layout or formula
misread in ember's Rust shows up as a difference here.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize


def main() -> None:
    type_name, src, dst = sys.argv[1:]
    qtype = GGMLQuantizationType[type_name]
    data = np.fromfile(src, dtype=np.uint8)
    values = dequantize(data, qtype).astype(np.float32)
    values.astype("<f4").tofile(dst)


if __name__ == "__main__":
    main()

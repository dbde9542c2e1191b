#!/usr/bin/env python3
# Copied from the team's shared tools (shared/tools/reference_forward.py): an independent float64 llama forward
# pass, checked against llama.cpp. make_reference_logits.py imports it to write test fixtures. Extended by ember
# (the only change): Llama 3's RoPE frequency factors, the `rope_freqs.weight` tensor, divide each pair's rotation
# speed as llama.cpp's ggml_rope_ext does with its freq_factors argument; tests/llama3_rope_factors.rs checks ember
# against this on a synthetic model.
"""Independent float64 reference of the llama forward pass for a GGUF model (numpy + the `gguf` package).

For checking ember's forward pass, not for speed: weights are dequantized to float64, activations stay float64
(so it differs slightly from implementations that quantize activations to 8 bits, as llama.cpp does).

  pip install gguf numpy
  python3 reference_forward.py MODEL.gguf --ids 1 9690 198 ... [--top 5] [--all-positions] [--dump DIR]

Prints, for the last position (or every position), the top-k next tokens with logits and probabilities.
--dump DIR writes per-layer hidden states (after each block, shape [n_tokens, n_embd]) as .npy files, so a
mismatch can be located layer by layer.
"""
import argparse, json, os, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key):
    f = reader.fields[key]
    return f.contents()


def load(path):
    r = GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"unsupported architecture {arch!r}")
    hp = {
        "n_layer": int(field(r, "llama.block_count")),
        "n_embd": int(field(r, "llama.embedding_length")),
        "n_head": int(field(r, "llama.attention.head_count")),
        "n_head_kv": int(field(r, "llama.attention.head_count_kv")),
        "eps": float(field(r, "llama.attention.layer_norm_rms_epsilon")),
        "rope_base": float(field(r, "llama.rope.freq_base")),
    }
    hp["rope_dim"] = int(field(r, "llama.rope.dimension_count")) if "llama.rope.dimension_count" in r.fields \
        else hp["n_embd"] // hp["n_head"]
    w = {}
    for t in r.tensors:
        # GGUF lists dims fastest-first; numpy wants the reverse: a weight of GGUF shape [n_in, n_out] is [n_out, n_in].
        shape = tuple(int(d) for d in reversed(t.shape))
        w[t.name] = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
    return hp, w


def rms_norm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, positions, base, rot_dim, factors=None):
    """GGUF llama layout: rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/rot_dim) [/ factors[i]]."""
    out = x.copy()
    half = rot_dim // 2
    inv = base ** (-np.arange(half) * 2.0 / rot_dim)
    if factors is not None:
        inv = inv / factors
    ang = positions[:, None] * inv[None, :]                     # [T, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]  # broadcast over heads
    x0, x1 = x[..., 0:rot_dim:2], x[..., 1:rot_dim:2]
    out[..., 0:rot_dim:2] = x0 * cos - x1 * sin
    out[..., 1:rot_dim:2] = x0 * sin + x1 * cos
    return out


def forward(hp, w, ids, dump=None):
    T, D, H, Hkv = len(ids), hp["n_embd"], hp["n_head"], hp["n_head_kv"]
    hd = D // H
    pos = np.arange(T, dtype=np.float64)
    x = w["token_embd.weight"][ids]                              # [T, D]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(hp["n_layer"]):
        p = f"blk.{l}."
        h = rms_norm(x, w[p + "attn_norm.weight"], hp["eps"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, H, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, Hkv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, Hkv, hd)
        factors = w.get("rope_freqs.weight")
        q = rope(q, pos, hp["rope_base"], hp["rope_dim"], factors)
        k = rope(k, pos, hp["rope_base"], hp["rope_dim"], factors)
        rep = H // Hkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # query head i uses kv head i // rep
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, D)
        x = x + o @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"], hp["eps"])
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "ffn_down.weight"].T
        if dump:
            np.save(os.path.join(dump, f"block{l:02d}.npy"), x)
    x = rms_norm(x, w["output_norm.weight"], hp["eps"])
    out_w = w.get("output.weight", w["token_embd.weight"])       # tied embeddings when output.weight is absent
    return x @ out_w.T                                           # [T, vocab]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", type=int, nargs="+", required=True)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--all-positions", action="store_true")
    ap.add_argument("--dump")
    a = ap.parse_args()
    if a.dump:
        os.makedirs(a.dump, exist_ok=True)
    hp, w = load(a.model)
    logits = forward(hp, w, np.array(a.ids), a.dump)
    rows = range(len(a.ids)) if a.all_positions else [len(a.ids) - 1]
    out = []
    for i in rows:
        z = logits[i]
        p = np.exp(z - z.max()); p /= p.sum()
        top = np.argsort(-z)[: a.top]
        out.append({"position": i, "top": [{"id": int(t), "logit": float(z[t]), "prob": float(p[t])} for t in top]})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

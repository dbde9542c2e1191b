#!/usr/bin/env python3
"""Writes an F16 GGUF with a real model family's layer shapes and random weights, for speed comparisons: both
engines then read the very same file (after `llama-quantize` turns it into the type under test).

  python3 scripts/llamacpp/synthetic_model.py SHAPE VOCAB_GGUF OUT.gguf

SHAPE is one of the names in SHAPES below. The tokenizer (vocabulary, merges, special tokens, chat template) is
copied from VOCAB_GGUF (the SmolLM2 file: 49,152 tokens), so the model loads and tokenizes like a real one; the
embedding and output matrices have that vocabulary's size. Weights are N(0, 0.02) (norms 1), seeded: the logits
are meaningless but finite, and every matmul costs what the real model's does.

Needs the `gguf` Python package (0.19.0) and numpy.
"""
import sys

import numpy as np
import gguf

# name: (n_embd, n_layer, n_head, n_head_kv, n_ff, rope_base, tied output)
SHAPES = {
    # Llama 3.2 1B: 2048 wide, 16 layers, 32/8 heads of 64, FFN 8192, tied output.
    "llama-1b": (2048, 16, 32, 8, 8192, 500000.0, True),
    # Llama 3.2 3B: 3072 wide, 28 layers, 24/8 heads of 128, FFN 8192, tied output.
    "llama-3b": (3072, 28, 24, 8, 8192, 500000.0, True),
    # Llama 3.2 1B's layers, 2 of its 16: for long prompts' memory (a step's buffers and the attention's scratch do
    # not grow with the layers, the cache does by a known amount), at an eighth of the prefill's time.
    "llama-1b-2l": (2048, 2, 32, 8, 8192, 500000.0, True),
    # Qwen2.5 7B's layer shapes (3584 wide, 28/4 heads of 128, FFN 18944, untied output) with 4 of its 28 layers,
    # as a llama model (its q/k/v biases are left out: they are vectors, not matmuls).
    "qwen-7b-4l": (3584, 4, 28, 4, 18944, 1000000.0, False),
}

# Mixture-of-experts shapes: real layers, fewer of them. name: (arch, n_embd, n_layer, n_head, n_head_kv, head_dim,
# n_expert, n_expert_used, expert FFN width, rope_base)
MOE_SHAPES = {
    # Qwen3-30B-A3B (and Qwen3-Coder-30B-A3B): 2048 wide, 32/4 heads of 128 with per-head q/k norms, 128 experts
    # of 768, 8 per token, untied output; 4 of its 48 layers.
    "qwen3moe-30b-a3b-4l": ("qwen3moe", 2048, 4, 32, 4, 128, 128, 8, 768, 1000000.0),
    # Mixtral 8x7B: 4096 wide, 32/8 heads of 128, 8 experts of 14336, 2 per token, untied output; 2 of its 32
    # layers.
    "mixtral-8x7b-2l": ("llama", 4096, 2, 32, 8, 128, 8, 2, 14336, 1000000.0),
    # gpt-oss-20b: 2880 wide, 64/8 heads of 64 with biases and sinks, 32 experts of 2880 (biased), 4 per token, every
    # other layer windowed at 128, YaRN by 32 over 4096, untied output; 4 of its 24 layers.
    "gpt-oss-20b-4l": ("gpt-oss", 2880, 4, 64, 8, 64, 32, 4, 2880, 150000.0),
}

# DeepSeek's latent-attention shapes (`deepseek2`): name: (n_embd, n_layer, n_head, kv_lora_rank, nope, rope, v_head,
# n_expert, n_expert_used, expert FFN width, shared experts, leading dense blocks, dense FFN width)
DEEPSEEK_SHAPES = {
    # DeepSeek-V2-Lite (16B, 2.4B active; Moonlight's layout but for its query rank): 2048 wide, 16 heads, a
    # compressed key row of 512 + 64 RoPE dimensions, 128 + 64 and 128 per head, queries from attn_q; one dense
    # block (FFN 10944), then 64 experts of 1408, 6 per token, 2 shared; YaRN by 40 with its log multiplier; 4 of
    # its 27 layers.
    "deepseek2-lite-4l": (2048, 4, 16, 512, 128, 64, 128, 64, 6, 1408, 2, 1, 10944),
}

# Tokenizer and chat keys copied from the vocabulary file as they are.
COPIED_PREFIXES = ("tokenizer.",)


def copy_tokenizer(reader: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    """Copies the tokenizer fields; returns the vocabulary size."""
    vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith(COPIED_PREFIXES):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                values = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(name, values)
            if name == "tokenizer.ggml.tokens":
                vocab = len(values)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            value = field.parts[field.data[0]].tolist()[0]
            {
                gguf.GGUFValueType.UINT32: writer.add_uint32,
                gguf.GGUFValueType.INT32: writer.add_int32,
                gguf.GGUFValueType.BOOL: writer.add_bool,
                gguf.GGUFValueType.FLOAT32: writer.add_float32,
            }[kind](name, value)
    return vocab


def main() -> None:
    names = list(SHAPES) + list(MOE_SHAPES) + list(DEEPSEEK_SHAPES)
    if len(sys.argv) != 4 or sys.argv[1] not in names:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(names)}}} VOCAB_GGUF OUT.gguf")
    shape, vocab_file, out = sys.argv[1:]
    if shape in MOE_SHAPES:
        return write_moe(shape, vocab_file, out)
    if shape in DEEPSEEK_SHAPES:
        return write_deepseek2(shape, vocab_file, out)
    # (gpt-oss' keys and tensors are written by write_moe too.)
    n_embd, n_layer, n_head, n_head_kv, n_ff, rope_base, tied = SHAPES[shape]
    head_dim = n_embd // n_head
    reader = gguf.GGUFReader(vocab_file)
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_name(f"synthetic {shape}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(131072)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_freq_base(rope_base)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(vocab)

    matrix, norm = tensor_writers(writer)

    matrix("token_embd.weight", vocab, n_embd)
    norm("output_norm.weight", n_embd)
    if not tied:
        matrix("output.weight", vocab, n_embd)
    kv = n_head_kv * head_dim
    for layer in range(n_layer):
        p = f"blk.{layer}."
        norm(p + "attn_norm.weight", n_embd)
        matrix(p + "attn_q.weight", n_embd, n_embd)
        matrix(p + "attn_k.weight", kv, n_embd)
        matrix(p + "attn_v.weight", kv, n_embd)
        matrix(p + "attn_output.weight", n_embd, n_embd)
        norm(p + "ffn_norm.weight", n_embd)
        matrix(p + "ffn_gate.weight", n_ff, n_embd)
        matrix(p + "ffn_up.weight", n_ff, n_embd)
        matrix(p + "ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tensor_writers(writer):
    """`matrix(name, *shape)`: F16 random values (numpy order, the last dimension fastest); `norm(name, n)`: F32 ones."""
    rng = np.random.default_rng(20261203)
    # One pool of random f16 values; each matrix takes a window of it at a random offset (generating billions of
    # normals one by one would take minutes, and the values need not be independent across matrices).
    pool = (rng.standard_normal(64 << 20, dtype=np.float32) * 0.02).astype(np.float16)

    def matrix(name: str, *shape: int, dtype=np.float16) -> None:
        n = int(np.prod(shape))
        out = np.empty(n, dtype=np.float16)
        at = 0
        while at < n:
            start = int(rng.integers(0, pool.size // 2))
            take = min(n - at, pool.size - start)
            out[at : at + take] = pool[start : start + take]
            at += take
        writer.add_tensor(name, out.reshape(shape).astype(dtype))

    def norm(name: str, n: int) -> None:
        writer.add_tensor(name, np.ones(n, dtype=np.float32))

    return matrix, norm


def write_moe(shape: str, vocab_file: str, out: str) -> None:
    arch, n_embd, n_layer, n_head, n_head_kv, head_dim, n_expert, n_used, n_ff_exp, rope_base = MOE_SHAPES[shape]
    reader = gguf.GGUFReader(vocab_file)
    writer = gguf.GGUFWriter(out, arch)
    writer.add_name(f"synthetic {shape}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(131072)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff_exp if arch in ("llama", "gpt-oss") else 6144)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(rope_base)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(n_used)
    if arch != "llama":
        writer.add_expert_feed_forward_length(n_ff_exp)
    gpt_oss = arch == "gpt-oss"
    if gpt_oss:
        writer.add_uint32(f"{arch}.attention.sliding_window", 128)
        writer.add_string(f"{arch}.rope.scaling.type", "yarn")
        writer.add_float32(f"{arch}.rope.scaling.factor", 32.0)
        writer.add_uint32(f"{arch}.rope.scaling.original_context_length", 4096)
    vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(vocab)
    matrix, norm = tensor_writers(writer)
    matrix("token_embd.weight", vocab, n_embd)
    norm("output_norm.weight", n_embd)
    matrix("output.weight", vocab, n_embd)
    q, kv = n_head * head_dim, n_head_kv * head_dim
    for layer in range(n_layer):
        p = f"blk.{layer}."
        norm(p + "attn_norm.weight", n_embd)
        matrix(p + "attn_q.weight", q, n_embd)
        matrix(p + "attn_k.weight", kv, n_embd)
        matrix(p + "attn_v.weight", kv, n_embd)
        matrix(p + "attn_output.weight", n_embd, q)
        if arch == "qwen3moe":
            norm(p + "attn_q_norm.weight", head_dim)
            norm(p + "attn_k_norm.weight", head_dim)
        norm(p + ("post_attention_norm.weight" if gpt_oss else "ffn_norm.weight"), n_embd)
        # The router stays F32, as llama-quantize leaves it.
        matrix(p + "ffn_gate_inp.weight", n_expert, n_embd, dtype=np.float32)
        matrix(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd)
        matrix(p + "ffn_up_exps.weight", n_expert, n_ff_exp, n_embd)
        matrix(p + "ffn_down_exps.weight", n_expert, n_embd, n_ff_exp)
        if gpt_oss:
            # Biases (F32, small) and sinks: vectors, no cost next to the matmuls.
            for name, *shape in [("attn_q.bias", q), ("attn_k.bias", kv), ("attn_v.bias", kv),
                                 ("attn_output.bias", n_embd), ("attn_sinks.weight", n_head),
                                 ("ffn_gate_inp.bias", n_expert), ("ffn_gate_exps.bias", n_expert, n_ff_exp),
                                 ("ffn_up_exps.bias", n_expert, n_ff_exp), ("ffn_down_exps.bias", n_expert, n_embd)]:
                matrix(p + name, *shape, dtype=np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_deepseek2(shape: str, vocab_file: str, out: str) -> None:
    (n_embd, n_layer, n_head, rank, nope, rope, v_head, n_expert, n_used, n_ff_exp, n_shared, n_dense,
     n_ff) = DEEPSEEK_SHAPES[shape]
    arch = "deepseek2"
    reader = gguf.GGUFReader(vocab_file)
    writer = gguf.GGUFWriter(out, arch)
    writer.add_name(f"synthetic {shape}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(163840)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    # As llama.cpp's converter writes MLA: one key/value head as wide as the cache row, the rank as values.
    writer.add_head_count_kv(1)
    writer.add_key_length(rank + rope)
    writer.add_value_length(rank)
    writer.add_uint32(f"{arch}.attention.key_length_mla", nope + rope)
    writer.add_uint32(f"{arch}.attention.value_length_mla", v_head)
    writer.add_uint32(f"{arch}.attention.kv_lora_rank", rank)
    writer.add_uint32(f"{arch}.attention.q_lora_rank", 0)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(rope)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{arch}.leading_dense_block_count", n_dense)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(n_used)
    writer.add_expert_feed_forward_length(n_ff_exp)
    writer.add_uint32(f"{arch}.expert_shared_count", n_shared)
    writer.add_float32(f"{arch}.expert_weights_scale", 1.0)
    writer.add_string(f"{arch}.rope.scaling.type", "yarn")
    writer.add_float32(f"{arch}.rope.scaling.factor", 40.0)
    writer.add_uint32(f"{arch}.rope.scaling.original_context_length", 4096)
    writer.add_float32(f"{arch}.rope.scaling.yarn_log_multiplier", 0.0707)
    vocab = copy_tokenizer(reader, writer)
    writer.add_vocab_size(vocab)
    matrix, norm = tensor_writers(writer)
    matrix("token_embd.weight", vocab, n_embd)
    norm("output_norm.weight", n_embd)
    matrix("output.weight", vocab, n_embd)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        norm(p + "attn_norm.weight", n_embd)
        matrix(p + "attn_q.weight", n_head * (nope + rope), n_embd)
        matrix(p + "attn_kv_a_mqa.weight", rank + rope, n_embd)
        norm(p + "attn_kv_a_norm.weight", rank)
        matrix(p + "attn_k_b.weight", n_head, rank, nope)
        matrix(p + "attn_v_b.weight", n_head, v_head, rank)
        matrix(p + "attn_output.weight", n_embd, n_head * v_head)
        norm(p + "ffn_norm.weight", n_embd)
        if layer < n_dense:
            matrix(p + "ffn_gate.weight", n_ff, n_embd)
            matrix(p + "ffn_up.weight", n_ff, n_embd)
            matrix(p + "ffn_down.weight", n_embd, n_ff)
            continue
        matrix(p + "ffn_gate_inp.weight", n_expert, n_embd, dtype=np.float32)
        matrix(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd)
        matrix(p + "ffn_up_exps.weight", n_expert, n_ff_exp, n_embd)
        matrix(p + "ffn_down_exps.weight", n_expert, n_embd, n_ff_exp)
        matrix(p + "ffn_gate_shexp.weight", n_shared * n_ff_exp, n_embd)
        matrix(p + "ffn_up_shexp.weight", n_shared * n_ff_exp, n_embd)
        matrix(p + "ffn_down_shexp.weight", n_embd, n_shared * n_ff_exp)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()

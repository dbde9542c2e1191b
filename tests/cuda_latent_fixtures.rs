//! What the CPU emulation of the CUDA latent-attention kernels is checked against (`scripts/gpu-check.sh emulate`,
//! the `latent_layers` check of kernel_checks.cpp): one layer of `deepseek2-lite-small` (queries through `attn_q`)
//! and of `deepseek3-small` (through `attn_q_a`, its norm and `attn_q_b`), their tensors packed by the CUDA backend's
//! own `packing::pack`, a 9-token prompt (past `SMALL_BATCH_MAX_TOKENS`: the tiled matmul) and the CPU backend's
//! logits for it through that layer's attention alone: its `LlamaBackend` operations `embed`, `rms_norm` (the
//! attention norm), `latent_attention`, `matmul_add` (the output projection into the residual) and `logits`, the
//! sequence the forward pass runs for a latent-attention block, without the FFN. The emulation runs the CUDA kernels
//! in the order `execute_latent.rs` enqueues them and compares the logits within the bound of
//! `tests/cuda_moe_fixtures.rs` (relative error 1e-3).
//!
//! With `EMBER_LATENT_FIXTURES=FILE` the test writes them there. File format, little-endian u32 words (floats as
//! their bits, f64 as two words, low first): the count of layers, each its name (length, then bytes padded to words),
//! `n_embd vocab n_head kv_lora_rank nope rope_dim v_head_dim q_lora_rank (0: none) eps attention_scale n_tokens`,
//! the rotation's magnitude (f64) and `rope_dim / 2` inverse frequencies (f64), the tokens, the norms
//! (attention, output, `attn_kv_a_norm`, then `attn_q_a_norm` with a query rank), the matrices (token_embd, output,
//! `attn_q` or `attn_q_a` and `attn_q_b`, `attn_kv_a_mqa`, `attn_k_b`, `attn_v_b`, `attn_output`), each as `type rows
//! cols n_quants n_scales quants scales`, and the CPU's logits `[n_tokens][vocab]`.

use ember::backend::cpu::kernels::WeightMatrix;
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::cuda::packing::pack;
use ember::backend::KvCacheTypes;
use ember::model::gguf::GgufFile;
use ember::model::llama::forward::{Buf, Norm, Weight};
use ember::model::llama::latent::{KV_A, KV_A_NORM, K_B, Q_A, Q_A_NORM, Q_B, V_B};
use ember::model::llama::{LlamaBackend, LlamaConfig, SeqChunk, SyntheticSpec};
use ember::model::TokenId;

struct Words(Vec<u32>);

impl Words {
    fn put(&mut self, v: usize) {
        self.0.push(u32::try_from(v).unwrap());
    }
    fn float(&mut self, v: f32) {
        self.0.push(v.to_bits());
    }
    fn floats(&mut self, v: &[f32]) {
        self.0.extend(v.iter().map(|x| x.to_bits()));
    }
    fn double(&mut self, v: f64) {
        let bits = v.to_bits();
        self.0.extend([bits as u32, (bits >> 32) as u32]);
    }
    fn name(&mut self, s: &str) {
        self.put(s.len());
        let mut bytes = s.as_bytes().to_vec();
        bytes.resize(s.len().next_multiple_of(4), 0);
        self.0.extend(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())));
    }
    fn matrix(&mut self, file: &GgufFile, name: &str) {
        let packed = pack(&WeightMatrix::from_tensor(&file.tensor(name).unwrap()).unwrap());
        for v in [packed.dtype as usize, packed.rows, packed.cols, packed.quants.len(), packed.scales.len()] {
            self.put(v);
        }
        self.0.extend(&packed.quants);
        self.0.extend(&packed.scales);
    }
}

/// Layer 0 of `family`: its tensors, a prompt, and the CPU backend's logits through that layer's attention alone.
fn layer_case(out: &mut Words, family: &str, n_tokens: usize) {
    let spec = SyntheticSpec::family(family, 9, 2).unwrap();
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let latent = config.latent.expect("a latent-attention family");
    assert!(config.pre_norms && !config.post_norms && config.residual_scale.is_none(), "{family}: the emulated layer");
    assert!(config.logit_scale.is_none() && config.final_softcap.is_none() && config.embed_scale.is_none());
    let cpu_options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 64,
        kv_block_size: 16,
        kv_num_blocks: 4,
        kv_window_blocks: None,
        precision: Precision::Float32,
        kv_cache: KvCacheTypes::default(),
    };
    let mut cpu = CpuBackend::new(&file, config.clone(), cpu_options).unwrap();
    let tokens: Vec<TokenId> = (0..n_tokens).map(|j| ((j * 37 + 11) % config.vocab_size) as TokenId).collect();
    // Block 2 first: the cache rows are not the positions.
    let table = [2u32, 0, 1, 3];
    let batch =
        [SeqChunk { tokens: &tokens, start_pos: 0, block_table: &table, window_table: &[], logit_rows: n_tokens }];
    let mut logits = vec![0f32; n_tokens * config.vocab_size];
    cpu.begin(&batch).unwrap();
    cpu.embed(Buf::X);
    cpu.rms_norm(Buf::X, Norm::Attn(0), Buf::Xn);
    cpu.latent_attention(0, Buf::Xn);
    cpu.matmul_add(Buf::Att, Weight::AttnOutput(0), Buf::X);
    cpu.logits(&mut logits).unwrap();
    assert!(logits.iter().all(|v| v.is_finite()), "{family}");

    out.name(family);
    let rank = latent.q_lora_rank.unwrap_or(0);
    for v in [config.n_embd, config.vocab_size, config.n_head, latent.kv_lora_rank, latent.nope_dim, config.rope_dim] {
        out.put(v);
    }
    out.put(latent.v_head_dim);
    out.put(rank);
    out.float(config.rms_eps);
    out.float(config.attention_scale);
    out.put(n_tokens);
    let base = config.layers[0].rope;
    out.double(config.rope_magnitude(base));
    for f in config.inv_frequencies(base) {
        out.double(f);
    }
    out.0.extend(&tokens);
    let norm = |name: &str| file.tensor(name).unwrap().as_f32().unwrap().to_vec();
    let layer = |suffix: &str| LlamaConfig::layer_tensor(0, suffix);
    out.floats(&norm(&Norm::Attn(0).tensor_name()));
    out.floats(&norm(&Norm::Output.tensor_name()));
    out.floats(&norm(&layer(KV_A_NORM)));
    if rank > 0 {
        out.floats(&norm(&layer(Q_A_NORM)));
    }
    out.matrix(&file, "token_embd.weight");
    out.matrix(&file, if config.tied_output { "token_embd.weight" } else { "output.weight" });
    let queries: &[&str] = if rank > 0 { &[Q_A, Q_B] } else { &["attn_q.weight"] };
    for suffix in queries.iter().chain(&[KV_A, K_B, V_B, "attn_output.weight"]) {
        out.matrix(&file, &layer(suffix));
    }
    out.floats(&logits);
}

#[test]
fn latent_fixtures_for_the_cuda_emulation() {
    let mut out = Words(Vec::new());
    let families = ["deepseek2-lite-small", "deepseek3-small"];
    out.put(families.len());
    for family in families {
        layer_case(&mut out, family, 9);
    }
    if let Some(path) = std::env::var_os("EMBER_LATENT_FIXTURES") {
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&out.0)).unwrap();
        eprintln!("wrote {} latent-attention layers to {}", families.len(), path.to_string_lossy());
    }
}

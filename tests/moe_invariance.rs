//! Mixture-of-experts models keep the backend's promises: a sequence's logits are the same bits alone, one token a
//! step, as inside batches whose other rows share its experts or not (prefill chunks and decodes mixed), on 1 and 2
//! threads, and on every kernel path this CPU runs (scalar on one thread, the SIMD paths on two), on the fast and
//! the precise path.
//!
//! The models are the synthetic families of `tests/forward_families.rs`: Qwen3 MoE's layout (32 experts, 8 per
//! token: many rows share experts in a batch), Qwen2 MoE's (16 experts, 4 per token, and the gated shared expert
//! beside them), gpt-oss' (16 experts, 4 per token, in MXFP4) and DeepSeek's (latent attention, whose one key/value
//! row serves every query head and whose heads the attention splits across tasks; a dense first block, shared
//! experts; V3's query rank, sigmoid router, selection bias and expert groups).

use ember::backend::cpu::kernels::{kernels_named, supported_kernels, Kernels};
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::KvCacheTypes;
use ember::model::gguf::GgmlType;
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaConfig, SeqChunk, SyntheticExperts, SyntheticSpec};

const BLOCK: usize = 16;
/// Positions per sequence.
const SEQ_LEN: usize = 32;
const SEQS: usize = 5;

/// The family's layers in the quantized types of a Q4_K_M file (its fixture's are F16): the packed kernels run.
fn file(family: &str) -> Vec<u8> {
    let spec = SyntheticSpec { matrix_type: None, ..SyntheticSpec::family(family, 23, 2).unwrap() };
    spec.writer_with_byte_vocabulary().to_bytes()
}

/// Token `i` of sequence `s`: deterministic, different per sequence.
fn token(s: usize, i: usize) -> u32 {
    ((s * 97 + i * 31 + 7) % 500) as u32
}

fn backend<'f>(
    file: &'f GgufFile,
    kernels: &'static Kernels,
    threads: usize,
    precision: Precision,
) -> (LlamaConfig, CpuBackend<'f>) {
    let config = LlamaConfig::from_gguf(file).unwrap();
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: 256,
        kv_block_size: BLOCK,
        kv_num_blocks: SEQS * SEQ_LEN / BLOCK,
        kv_window_blocks: None,
        precision,
        kv_cache: KvCacheTypes::default(),
    };
    let b = CpuBackend::with_kernels(file, config.clone(), options, kernels).unwrap();
    (config, b)
}

fn table(s: usize) -> Vec<u32> {
    (0..SEQ_LEN / BLOCK).map(|b| (s * SEQ_LEN / BLOCK + b) as u32).collect()
}

/// Sequence `s` alone, one token a step: its logits at every position, as bits.
fn alone(file: &GgufFile, kernels: &'static Kernels, precision: Precision, s: usize) -> Vec<Vec<u32>> {
    let (config, mut b) = backend(file, kernels, 1, precision);
    let t = table(s);
    (0..SEQ_LEN)
        .map(|i| {
            let tokens = [token(s, i)];
            let chunk = SeqChunk { tokens: &tokens, start_pos: i, block_table: &t, window_table: &[], logit_rows: 1 };
            let mut logits = vec![0f32; config.vocab_size];
            forward(&config, &mut b, &[chunk], &mut logits).unwrap();
            logits.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

/// All sequences together: each prefills its first `5 + 3s` tokens in chunks of `2 + s`, then decodes one token a
/// step, all chunks of a step in one batch. Returns each sequence's logits at every position, as bits.
fn batched(file: &GgufFile, kernels: &'static Kernels, threads: usize, precision: Precision) -> Vec<Vec<Vec<u32>>> {
    let (config, mut b) = backend(file, kernels, threads, precision);
    let tables: Vec<Vec<u32>> = (0..SEQS).map(table).collect();
    let mut pos = [0usize; SEQS];
    let mut out = vec![Vec::new(); SEQS];
    while pos.iter().any(|&p| p < SEQ_LEN) {
        let mut ids: Vec<(usize, Vec<u32>)> = Vec::new();
        for (s, &p) in pos.iter().enumerate() {
            let prompt = 5 + 3 * s;
            let n = if p < prompt { (2 + s).min(prompt - p) } else { 1 };
            let n = n.min(SEQ_LEN - p);
            if n > 0 {
                ids.push((s, (p..p + n).map(|i| token(s, i)).collect()));
            }
        }
        let chunks: Vec<SeqChunk> = ids
            .iter()
            .map(|(s, tokens)| SeqChunk {
                tokens,
                start_pos: pos[*s],
                block_table: &tables[*s],
                window_table: &[],
                logit_rows: tokens.len(),
            })
            .collect();
        let rows: usize = ids.iter().map(|(_, t)| t.len()).sum();
        let mut logits = vec![0f32; rows * config.vocab_size];
        forward(&config, &mut b, &chunks, &mut logits).unwrap();
        let mut at = 0;
        for (s, tokens) in &ids {
            for _ in tokens {
                let row = &logits[at * config.vocab_size..(at + 1) * config.vocab_size];
                out[*s].push(row.iter().map(|x| x.to_bits()).collect());
                at += 1;
            }
            pos[*s] += tokens.len();
        }
    }
    out
}

fn check(family: &str) {
    let bytes = file(family);
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let scalar = kernels_named("scalar").unwrap();
    for precision in [Precision::Quantized8, Precision::Float32] {
        let reference: Vec<_> = (0..SEQS).map(|s| alone(&file, scalar, precision, s)).collect();
        for kernels in supported_kernels() {
            let name = kernels.name;
            let threads: &[usize] = if name == "scalar" { &[1] } else { &[1, 2] };
            for &threads in threads {
                let got = batched(&file, kernels, threads, precision);
                for s in 0..SEQS {
                    for (i, (a, b)) in got[s].iter().zip(&reference[s]).enumerate() {
                        assert!(
                            a == b,
                            "{family}: sequence {s} position {i} differs batched on {name} ({threads} threads, \
                             {precision:?}) from alone on scalar"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn qwen3moe_rows_do_not_depend_on_their_batch_threads_or_kernel_path() {
    check("qwen3moe-small");
}

#[test]
fn qwen2moe_with_its_shared_expert_does_not_depend_on_batch_threads_or_kernel_path() {
    check("qwen2moe-small");
}

/// gpt-oss' layout in its files' types (MXFP4 experts, Q8_0 elsewhere): attention sinks, windows of 8 on every
/// other layer (the sequences are 32 long), biased router and experts, the clamped SwiGLU.
#[test]
fn gpt_oss_with_mxfp4_experts_sinks_and_windows_does_not_depend_on_batch_threads_or_kernel_path() {
    check("gpt-oss-small-mxfp4");
}

/// A file whose experts are not whole 32-element blocks wide (F16 allows any row length) is refused by the
/// backend with an error, not a panic in its buffers.
#[test]
fn deepseek2_latent_attention_does_not_depend_on_batch_threads_or_kernel_path() {
    check("deepseek2-lite-small");
}

#[test]
fn deepseek3_routing_does_not_depend_on_batch_threads_or_kernel_path() {
    check("deepseek3-small");
}

#[test]
fn expert_widths_that_are_not_whole_blocks_are_refused() {
    let base = SyntheticSpec::family("qwen3moe-small", 1, 1).unwrap();
    let experts = SyntheticExperts { n_ff_exp: 48, ..base.experts.unwrap() };
    let spec = SyntheticSpec { matrix_type: Some(GgmlType::F16), experts: Some(experts), ..base };
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let e = CpuBackend::new(&file, config, CpuBackendOptions::single_sequence(64)).err().expect("refused");
    assert!(e.to_string().contains("expert widths 48 and 32 must be multiples of 32"), "{e}");
}

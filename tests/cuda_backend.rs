//! The CUDA backend where there is no GPU (every CI machine), and against the CPU backend where there is one.
//!
//! Without a GPU: probing answers a clean "no CUDA" error (no panic), `backend: "cuda"` is a clear engine error,
//! and `backend: "auto"` runs on the CPU and logs why. With a GPU (`scripts/gpu-check.sh` carries this binary to
//! the GPU machine), on a small synthetic model: the GPU's logits match the CPU's; a sequence's logits are the
//! same bit for bit alone or in batches small (one kernel) and large (another), with CUDA graphs or without; and
//! the device's top-k is the top of the logits. `EMBER_REQUIRE_CUDA=1` turns a missing GPU from a skip into a
//! failure, so that a run on the GPU machine cannot pass by skipping.

#[path = "common/quant_blocks.rs"]
mod quant_blocks;
#[path = "common/rng.rs"]
mod rng;
use ember::backend::{KvCacheType, KvCacheTypes};
use std::sync::{Arc, Mutex};

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::cuda::{driver_library_present, probe, CudaBackend, CudaBackendError, CudaBackendOptions};
use ember::engine::{BackendKind, Engine, EngineConfig, EngineError, LogLevel, Logger};
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaConfig, SeqChunk, SyntheticSpec};
use ember::model::{Model, TokenId};
use quant_blocks::CODEBOOK_TYPES;

fn gpu_present() -> bool {
    probe(0).is_ok()
}

/// Whether the GPU tests run here; panics when they must but cannot.
fn gpu_available() -> bool {
    match probe(0) {
        Ok(info) => {
            eprintln!(
                "GPU: {} (compute capability {}.{})",
                info.name, info.compute_capability.0, info.compute_capability.1
            );
            true
        }
        Err(e) => {
            assert!(std::env::var("EMBER_REQUIRE_CUDA").map_or(true, |v| v != "1"), "EMBER_REQUIRE_CUDA=1 but: {e}");
            eprintln!("skipped: no usable GPU ({e})");
            false
        }
    }
}

#[test]
fn probing_without_a_gpu_is_a_clean_error() {
    if driver_library_present() {
        eprintln!("a CUDA driver is present: {:?}", probe(0));
        return;
    }
    let e = probe(0).expect_err("no driver, yet a device");
    assert!(matches!(e, CudaBackendError::NoDriver) && e.is_unavailable(), "{e:?}");
    assert!(e.to_string().contains("libcuda"), "{e}");
    // Building a backend says the same, before looking at the model.
    let bytes = SyntheticSpec::tiny(1).writer().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let e = CudaBackend::new(&file, config, CudaBackendOptions::single_sequence(64)).expect_err("no GPU");
    assert!(e.is_unavailable(), "{e:?}");
}

fn real_model() -> Arc<Model> {
    Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn asking_for_cuda_without_a_gpu_is_a_clear_engine_error() {
    let config = EngineConfig { backend: BackendKind::Cuda, threads: 1, ..Default::default() };
    let started = Engine::with_model(config, real_model(), Logger::silent());
    if gpu_present() {
        let engine = started.unwrap_or_else(|e| panic!("{e}"));
        assert!(engine.backend_description().starts_with("cuda"), "{}", engine.backend_description());
        return;
    }
    match started {
        Err(EngineError::Backend(message)) => assert!(message.contains("CUDA"), "unclear: {message}"),
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[test]
fn auto_runs_on_the_cpu_without_a_gpu_and_says_why() {
    let lines: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = Arc::clone(&lines);
    let logger = Logger::new(move |level, line| sink.lock().unwrap().push((level, line.to_owned())));
    let config = EngineConfig { backend: BackendKind::Auto, threads: 1, ..Default::default() };
    let engine = Engine::with_model(config, real_model(), logger).unwrap_or_else(|e| panic!("{e}"));
    let lines = lines.lock().unwrap();
    if gpu_present() {
        assert!(engine.backend_description().starts_with("cuda"), "{}", engine.backend_description());
        return;
    }
    assert!(engine.backend_description().starts_with("cpu"), "{}", engine.backend_description());
    let why = lines.iter().find(|(_, line)| line.contains("running on the CPU")).expect("no log line says why");
    assert_eq!(why.0, LogLevel::Info, "no GPU here is not a warning");
    assert!(why.1.contains("CUDA"), "{}", why.1);
}

// ---- With a GPU ----

/// A small model: 2 layers, width 64, 4 query heads over 2 KV heads, vocabulary 512, context 256.
fn tiny_model() -> (Vec<u8>, LlamaConfig) {
    let bytes = SyntheticSpec::tiny(7).writer().to_bytes();
    let config = LlamaConfig::from_gguf(&GgufFile::from_bytes(&bytes).unwrap()).unwrap();
    (bytes, config)
}

const BLOCK: usize = 16;
const BLOCKS_PER_SEQ: usize = 256 / BLOCK;
const MAX_SEQS: usize = 12;

fn gpu_backend(file: &GgufFile, config: &LlamaConfig, graphs: bool, kv_cache: KvCacheTypes) -> CudaBackend {
    let options = CudaBackendOptions {
        device: 0,
        max_batch_tokens: 512,
        kv_block_size: BLOCK,
        kv_num_blocks: MAX_SEQS * BLOCKS_PER_SEQ,
        kv_cache,
        graphs,
    };
    CudaBackend::new(file, config.clone(), options).unwrap_or_else(|e| panic!("{e}"))
}

/// Sequence `i`'s block table: its own blocks, in reverse order so that positions do not map to slots in order.
fn table(i: usize) -> Vec<u32> {
    (i * BLOCKS_PER_SEQ..(i + 1) * BLOCKS_PER_SEQ).rev().map(|b| b as u32).collect()
}

/// Token `j` of sequence `i`: deterministic, spread over the vocabulary.
fn token(i: usize, j: usize) -> TokenId {
    ((i * 131 + j * 37 + 11) % 512) as TokenId
}

/// Runs sequences `seqs` side by side: a prompt of `prompt` tokens in chunks of `chunk`, then `decodes` decode
/// steps; returns every logits row each sequence got, in order.
fn run<B: ember::model::llama::LlamaBackend>(
    config: &LlamaConfig,
    backend: &mut B,
    seqs: &[usize],
    prompt: usize,
    chunk: usize,
    decodes: usize,
) -> Vec<Vec<Vec<f32>>>
where
    B::Error: std::fmt::Display,
{
    let vocab = config.vocab_size;
    let tables: Vec<Vec<u32>> = seqs.iter().map(|&i| table(i)).collect();
    let tokens: Vec<Vec<TokenId>> =
        seqs.iter().map(|&i| (0..prompt + decodes).map(|j| token(i, j)).collect()).collect();
    let mut rows = vec![Vec::new(); seqs.len()];
    let mut pos = 0;
    while pos < prompt + decodes {
        let n = if pos < prompt { chunk.min(prompt - pos) } else { 1 };
        let batch: Vec<SeqChunk<'_>> = (0..seqs.len())
            .map(|s| SeqChunk {
                tokens: &tokens[s][pos..pos + n],
                start_pos: pos,
                block_table: &tables[s],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        let mut logits = vec![0f32; seqs.len() * vocab];
        forward(config, backend, &batch, &mut logits).unwrap_or_else(|e| panic!("at {pos}: {e}"));
        for (s, row) in logits.chunks_exact(vocab).enumerate() {
            rows[s].push(row.to_vec());
        }
        pos += n;
    }
    rows
}

fn relative_error(ours: &[f32], reference: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(reference) {
        diff += (f64::from(a) - f64::from(b)).powi(2);
        norm += f64::from(b).powi(2);
    }
    (diff / norm).sqrt()
}

/// The GPU's logits against the CPU's f32 path on the model in `bytes`, three sequences side by side.
fn gpu_matches_cpu(what: &str, bytes: &[u8]) {
    gpu_matches_cpu_with(what, bytes, KvCacheTypes::default(), Precision::Float32, 1e-3);
}

/// The GPU's logits with a cache of `kv_cache` against the CPU's with the same cache on its `precision` path, three
/// sequences side by side: a relative error of `bound` at most per logits row.
fn gpu_matches_cpu_with(what: &str, bytes: &[u8], kv_cache: KvCacheTypes, precision: Precision, bound: f64) {
    let file = GgufFile::from_bytes(bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let cpu_options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 512,
        kv_block_size: BLOCK,
        kv_num_blocks: MAX_SEQS * BLOCKS_PER_SEQ,
        kv_window_blocks: None,
        precision,
        kv_cache,
    };
    let mut cpu = CpuBackend::new(&file, config.clone(), cpu_options).unwrap();
    let mut gpu = gpu_backend(&file, &config, true, kv_cache);
    // 150-token prompts: attention walks two chunks of positions; chunks of 40 tokens take the tiled matmul.
    let seqs = [0, 1, 2];
    let want = run(&config, &mut cpu, &seqs, 150, 40, 6);
    let got = run(&config, &mut gpu, &seqs, 150, 40, 6);
    let mut worst = 0f64;
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        for (step, (a, b)) in w.iter().zip(g).enumerate() {
            let e = relative_error(b, a);
            assert!(e <= bound, "{what}: sequence {s}, step {step}: relative error {e:.2e} (bound {bound:e})");
            worst = worst.max(e);
        }
    }
    let (keys, values) = (kv_cache.keys, kv_cache.values);
    println!(
        "{what}: GPU against the CPU's {precision:?} path, {keys} / {values} cache: worst relative error {worst:.2e}"
    );
}

#[test]
fn gpu_logits_match_the_cpu_on_a_synthetic_model() {
    if !gpu_available() {
        return;
    }
    gpu_matches_cpu("tiny llama", &tiny_model().0);
}

/// Qwen 2's q/k/v biases (`add_bias`), Qwen 3's head norms and wide heads, Phi-3's fused projections (taken
/// apart at upload) and LongRoPE attention factor: one layer of each family's shapes; SmolLM3's four, the fourth
/// without RoPE; Gemma 2's two (soft-capped scores and logits, a windowed layer), Granite's multipliers (scaled
/// residual branches, `finish_logits`), Gemma 2 27B's 46 layers (its attention scale), OLMo 2's layer (no input
/// norms, whole-row query and key norms), one layer of each mixture-of-experts family, gpt-oss' two (a windowed
/// layer and a full one, both with YaRN, attention sinks, the output projection's bias, and biased experts), and
/// DeepSeek's two of each layout (a dense block with latent attention, then one with experts).
#[test]
fn gpu_logits_match_the_cpu_on_the_model_families() {
    if !gpu_available() {
        return;
    }
    let families = [
        ("qwen2.5-0.5b", 1),
        ("qwen3-0.6b", 1),
        ("phi3.5-mini", 1),
        ("smollm3-3b", 4),
        ("gemma2-2b", 2),
        ("granite3.1-2b", 1),
        ("gemma2-27b-scale", 46),
        ("olmo2-1b", 1),
        // Mixtures of experts: the router, the routing and the experts on the device (`execute_moe.rs`), Qwen 2
        // MoE's gated shared expert, GraniteMoE's multipliers. Under the CPU emulation of the kernels,
        // `scripts/gpu-check.sh emulate` checks one layer of each against the CPU backend (cuda_moe_fixtures.rs).
        ("qwen3moe-small", 1),
        ("mixtral-small", 1),
        ("qwen2moe-small", 1),
        ("olmoe-small", 1),
        ("granitemoe-small", 1),
        // gpt-oss: sinks (the attention emulation check has them), the output bias, the router's and the experts'
        // biases, the softmax of the chosen and the clamped SwiGLU (cuda_moe_fixtures.rs' gpt-oss layer).
        ("gpt-oss-small-mxfp4", 2),
        // DeepSeek: the latent attention with its keys-only cache (execute_latent.rs; cuda_latent_fixtures.rs' layers
        // under the emulation), a leading dense block, then experts: V2-Lite's softmax router and two shared experts,
        // V3's query rank, sigmoid router with a selection bias and groups (cuda_moe_fixtures.rs' layers).
        ("deepseek2-lite-small", 2),
        ("deepseek3-small", 2),
    ];
    for (family, layers) in families {
        let spec = SyntheticSpec::family(family, 3, layers).unwrap();
        gpu_matches_cpu(family, &spec.writer_with_byte_vocabulary().to_bytes());
    }
}

/// The codebook types (codes into 16 levels under an f32 scale on the device, `packing.rs`): qwen3moe-small with every
/// matrix but the F32 router of one type (embedding, attention, experts, output), and Llama 3.2 1B's layer of the
/// dynamic mix of IQ and K-quant types by tensor (`TypeMix::Dynamic`). Under the CPU emulation (`scripts/gpu-check.sh
/// emulate`), kernel_checks' `embed`, `project_small`, `matmul`, `gated` and `moe_grouped` check all eleven types,
/// and `moe_families` the same qwen3moe-small layer of each against the CPU's logits.
#[test]
fn gpu_logits_match_the_cpu_with_codebook_weights() {
    if !gpu_available() {
        return;
    }
    for dtype in CODEBOOK_TYPES {
        let spec = SyntheticSpec { matrix_type: Some(dtype), ..SyntheticSpec::family("qwen3moe-small", 3, 1).unwrap() };
        gpu_matches_cpu(&format!("qwen3moe-small, {dtype:?}"), &spec.writer_with_byte_vocabulary().to_bytes());
    }
    let dynamic = SyntheticSpec::family("llama3.2-1b-dynamic", 3, 1).unwrap();
    gpu_matches_cpu("llama3.2-1b-dynamic", &dynamic.writer_with_byte_vocabulary().to_bytes());
}

/// q8_0 and q4_0 caches (`kernels/kv_cache.cuh`) on the tiny model with heads of 32 (such a cache stores whole
/// blocks of 32 per head) and on deepseek2-lite-small (the latent attention's keys-only cache, its values read from
/// the quantized key rows): the GPU against the CPU backend with the same cache types, then the batch invariance
/// with each cache.
///
/// The bounds are not the 1e-3 of the comparisons with the CPU's f32 path: only the CPU's fast path has these caches
/// (its precise path keeps an f32 cache), and its 8-bit activations part its logits from the GPU's f32 ones by
/// more, the more so as a 4-bit cache rounds the slightly different keys and values to different codes. Each bound
/// is 1.5 times what the CPU measured between its two paths on this scenario with the same cache (its precise path
/// made, for the measurement only, to keep the quantized cache: worst relative error per row 4.2e-2 and 1.3e-1 on
/// the tiny model, 9.9e-2 and 1.9e-1 on deepseek2-lite-small, for q8_0 and q4_0; 3.1e-2 and 7.6e-2 with f16
/// caches), which the GPU, computing as that precise path does, should repeat. They catch a cache read or written
/// wrong, not the last bits: under the CPU emulation of the kernels, `scripts/gpu-check.sh emulate` requires the
/// stored blocks to be the CPU backend's byte for byte and the attention over them within 1e-5 of the CPU's on the
/// same queries, keys and values (tests/cuda_kv_fixtures.rs, the `kv_layers` check).
#[test]
fn gpu_logits_match_the_cpu_with_quantized_kv_caches() {
    if !gpu_available() {
        return;
    }
    let heads_32 = SyntheticSpec { head_dim: Some(32), ..SyntheticSpec::tiny(7) }.writer().to_bytes();
    let lite = SyntheticSpec::family("deepseek2-lite-small", 3, 2).unwrap().writer_with_byte_vocabulary().to_bytes();
    let cases = [
        ("tiny llama, heads of 32", &heads_32, KvCacheType::Q8_0, 0.065),
        ("tiny llama, heads of 32", &heads_32, KvCacheType::Q4_0, 0.21),
        ("deepseek2-lite-small", &lite, KvCacheType::Q8_0, 0.15),
        ("deepseek2-lite-small", &lite, KvCacheType::Q4_0, 0.3),
    ];
    for (model, bytes, t, bound) in cases {
        let kv = KvCacheTypes { keys: t, values: t };
        let what = format!("{model}, {t} cache");
        gpu_matches_cpu_with(&what, bytes, kv, Precision::Quantized8, bound);
        results_do_not_depend_on_the_batch_or_on_graphs(&what, bytes, kv);
    }
}

#[test]
fn gpu_results_do_not_depend_on_the_batch_or_on_graphs() {
    if !gpu_available() {
        return;
    }
    let f16 = KvCacheTypes::default();
    results_do_not_depend_on_the_batch_or_on_graphs("tiny llama", &tiny_model().0, f16);
    // Mixtures of experts: a token alone runs the per-pair expert kernels, a step of 12 sequences or of chunks the
    // grouped ones (`calls_moe::grouped_experts`), which promise the same bits.
    for family in ["qwen3moe-small", "gpt-oss-small-mxfp4"] {
        let spec = SyntheticSpec::family(family, 3, 1).unwrap();
        results_do_not_depend_on_the_batch_or_on_graphs(family, &spec.writer_with_byte_vocabulary().to_bytes(), f16);
    }
}

/// Sequence 0's logits bit for bit the same alone and beside others, in chunks of every kernel path, with and
/// without graphs, on the model in `bytes` with a cache of `kv_cache`.
fn results_do_not_depend_on_the_batch_or_on_graphs(what: &str, bytes: &[u8], kv_cache: KvCacheTypes) {
    let file = GgufFile::from_bytes(bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let bits = |rows: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
        rows.into_iter().map(|r| r.into_iter().map(f32::to_bits).collect()).collect()
    };
    let mut with_graphs = gpu_backend(&file, &config, true, kv_cache);
    let mut without = gpu_backend(&file, &config, false, kv_cache);
    // Sequence 0 alone, one token per step (project_small everywhere), is the reference.
    let alone = run(&config, &mut without, &[0], 20, 1, 4).remove(0);
    let alone = bits(alone);
    // With 2 and 11 others (small and tiled kernels), prompts in chunks, with and without graphs.
    for (backend, name) in [(&mut with_graphs, "graphs"), (&mut without, "no graphs")] {
        for seqs in [vec![0, 1], (0..12).collect::<Vec<_>>()] {
            for chunk in [1, 7, 20] {
                let rows = bits(run(&config, backend, &seqs, 20, chunk, 4).remove(0));
                // The chunked runs have logits only at each chunk's end: compare the last steps (decodes).
                let (a, b) = (&alone[alone.len() - 4..], &rows[rows.len() - 4..]);
                let n = seqs.len();
                assert!(a == b, "{what}, {name}, {n} sequences, chunks of {chunk}: sequence 0's logits differ");
            }
        }
    }
    let (graphs, disabled) = with_graphs.graphs();
    assert!(graphs > 0 && disabled.is_none(), "{what}: no graph recorded: {disabled:?}");
}

#[test]
fn device_top_k_is_the_top_of_the_logits() {
    if !gpu_available() {
        return;
    }
    let (bytes, config) = tiny_model();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let mut gpu = gpu_backend(&file, &config, true, KvCacheTypes::default());
    let vocab = config.vocab_size;
    let tables: Vec<Vec<u32>> = (0..3).map(table).collect();
    let tokens: Vec<Vec<TokenId>> = (0..3).map(|i| (0..10).map(|j| token(i, j)).collect()).collect();
    let batch: Vec<SeqChunk<'_>> = (0..3)
        .map(|s| SeqChunk {
            tokens: &tokens[s],
            start_pos: 0,
            block_table: &tables[s],
            window_table: &[],
            logit_rows: 1,
        })
        .collect();
    let mut logits = vec![0f32; 3 * vocab];
    forward(&config, &mut gpu, &batch, &mut logits).unwrap();
    // The same step again, from the same cache state: the prompt is rewritten with the same keys and values.
    let k = 40;
    let (mut ids, mut values) = (vec![0; 3 * k], vec![0f32; 3 * k]);
    gpu.forward_top_k(&batch, k, &mut ids, &mut values).unwrap();
    for (s, row) in logits.chunks_exact(vocab).enumerate() {
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let expected: Vec<TokenId> = order[..k].iter().map(|&i| i as TokenId).collect();
        assert_eq!(ids[s * k..(s + 1) * k], expected[..], "sequence {s}");
        for (&id, &v) in ids[s * k..(s + 1) * k].iter().zip(&values[s * k..(s + 1) * k]) {
            assert_eq!(v.to_bits(), row[id as usize].to_bits());
        }
    }
}

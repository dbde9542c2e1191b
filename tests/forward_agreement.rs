//! Teacher-forced argmax agreement with llama.cpp for the IQ and ternary types: on a "peaked" synthetic model (Llama
//! 3.2 1B's layers, two of them, every matrix of the type, its final norm 4 times as large so that most positions
//! have a clear top token: `SyntheticSpec::family("…-peaked")`), 240 token ids are fed, and at every position where
//! llama.cpp's top token leads its second by 0.8 or more (`tests/forward_families.rs`' margin of 0.2 times the
//! gain, which scales the engines' differences too), ember's fast path must pick the same token at 99 % of them or
//! more (issue 45's target). The fixtures (`tests/fixtures/agreement/*.json`, written by
//! `scripts/llamacpp/family_fixtures.py --agreement`) keep llama.cpp's top token and lead per position; the file is
//! rebuilt here byte for byte.
//!
//! Measured 2026-12-06 (avx512, fast path; the same on the AVX2 and scalar paths): every type agrees at every
//! confident position (115–133 of 240 per type) but the `dynamic` mix at one (188 of 189, 99.5 %). With a lead of
//! 0.2 counted as confident, 1–3 positions per type disagreed (97.2–99.1 %): leads within the two engines' 8-bit
//! rounding, which the gain scales 4 times.

use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::KvCacheTypes;
use ember::model::gguf::GgufFile;
use ember::model::llama::{forward, LlamaConfig, SeqChunk, SyntheticSpec};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    family: String,
    layers: usize,
    seed: u64,
    ids: Vec<u32>,
    /// llama.cpp's top token at each position, and its lead over the second.
    top: Vec<usize>,
    lead: Vec<f32>,
}

/// The lead from which a position counts as confident.
const CONFIDENT_LEAD: f32 = 0.8;
/// The share of confident positions whose argmax must agree (issue 45's target).
const MIN_AGREEMENT: f64 = 0.99;
/// Fewest confident positions a fixture must have for the share to mean something.
const MIN_CONFIDENT: usize = 100;

/// ember's top token at each of the fixture's positions, on the fast path.
fn ours(f: &Fixture) -> Vec<usize> {
    let spec = SyntheticSpec::family(&f.family, f.seed, f.layers).unwrap_or_else(|| panic!("family {}", f.family));
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"));
    let config = config.for_context(config.context_length);
    let n = f.ids.len();
    let blocks = n.div_ceil(16);
    let options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: n,
        kv_block_size: 16,
        kv_num_blocks: blocks,
        kv_window_blocks: None,
        precision: Precision::Quantized8,
        kv_cache: KvCacheTypes::default(),
    };
    let mut backend = CpuBackend::new(&file, config.clone(), options).unwrap_or_else(|e| panic!("{e}"));
    let table: Vec<u32> = (0..blocks as u32).collect();
    let chunk = SeqChunk { tokens: &f.ids, start_pos: 0, block_table: &table, window_table: &[], logit_rows: n };
    let mut logits = vec![0f32; n * config.vocab_size];
    forward(&config, &mut backend, &[chunk], &mut logits).unwrap_or_else(|e| panic!("{e}"));
    logits
        .chunks_exact(config.vocab_size)
        .map(|row| (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }))
        .collect()
}

fn check(name: &str) {
    let path = format!("{}/tests/fixtures/agreement/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let f: Fixture =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"));
    let ours = ours(&f);
    assert_eq!(ours.len(), f.top.len());
    let confident: Vec<usize> = (0..f.top.len()).filter(|&p| f.lead[p] >= CONFIDENT_LEAD).collect();
    let agree = confident.iter().filter(|&&p| ours[p] == f.top[p]).count();
    let share = agree as f64 / confident.len() as f64;
    let disagree: Vec<usize> = confident.iter().copied().filter(|&p| ours[p] != f.top[p]).collect();
    eprintln!(
        "{name}: {agree} of {} confident positions agree ({:.1} %), disagreeing at {disagree:?}",
        confident.len(),
        100.0 * share
    );
    assert!(confident.len() >= MIN_CONFIDENT, "{name}: only {} confident positions", confident.len());
    assert!(share >= MIN_AGREEMENT, "{name}: {agree} of {} agree; positions {disagree:?}", confident.len());
}

macro_rules! agreement_tests {
    ($($test:ident => $name:literal),+ $(,)?) => { $(#[test] fn $test() { check($name); })+ };
}

agreement_tests! {
    iq4_nl_argmax_agrees_with_llama_cpp => "iq4_nl",
    iq4_xs_argmax_agrees_with_llama_cpp => "iq4_xs",
    iq3_xxs_argmax_agrees_with_llama_cpp => "iq3_xxs",
    iq3_s_argmax_agrees_with_llama_cpp => "iq3_s",
    iq2_xxs_argmax_agrees_with_llama_cpp => "iq2_xxs",
    iq2_xs_argmax_agrees_with_llama_cpp => "iq2_xs",
    iq2_s_argmax_agrees_with_llama_cpp => "iq2_s",
    iq1_s_argmax_agrees_with_llama_cpp => "iq1_s",
    iq1_m_argmax_agrees_with_llama_cpp => "iq1_m",
    tq1_0_argmax_agrees_with_llama_cpp => "tq1_0",
    tq2_0_argmax_agrees_with_llama_cpp => "tq2_0",
    dynamic_argmax_agrees_with_llama_cpp => "dynamic",
}

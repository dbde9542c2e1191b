//! `activation_precision: "auto"` (the default) pairs activations with the weights as llama.cpp does: a model whose
//! matmul weights are all float (F32, F16, BF16) runs f32 activations, any other 8-bit ones; `"q8"` and `"f32"`
//! choose either for any model. Which one ran is in the engine's backend description.

use std::sync::Arc;

use ember::engine::config::ActivationPrecision;
use ember::engine::{Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::gguf::{GgmlType, GgufFile};
use ember::model::llama::{LlamaConfig, SyntheticSpec};
use ember::model::{Model, TokenId};

fn model(matrix_type: Option<GgmlType>) -> Arc<Model> {
    let spec = SyntheticSpec { matrix_type, ..SyntheticSpec::tiny(41) };
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    Arc::new(Model::from_file("tiny.gguf".into(), file).unwrap_or_else(|e| panic!("{e}")))
}

/// The backend description and the greedy tokens of one prompt.
fn run(model: &Arc<Model>, precision: ActivationPrecision) -> (String, Vec<TokenId>) {
    let config =
        EngineConfig { threads: 1, kv_cache_tokens: 256, activation_precision: precision, ..Default::default() };
    let engine = Engine::with_model(config, model.clone(), Logger::silent()).unwrap_or_else(|e| panic!("{e}"));
    let options = RequestOptions { max_tokens: Some(12), min_tokens: 12, ..Default::default() };
    let h = engine.submit(SubmitRequest::with_options(b"float weights".iter().map(|&b| b.into()).collect(), options));
    let h = h.unwrap();
    h.wait();
    assert_eq!(h.error(), None);
    (engine.backend_description().to_owned(), h.choices()[0].token_ids.clone())
}

#[test]
fn auto_runs_float_weights_with_f32_activations_and_quantized_ones_with_8_bit() {
    for dtype in [GgmlType::F16, GgmlType::Bf16, GgmlType::F32] {
        let m = model(Some(dtype));
        assert!(m.config.matmul_weights_are_float(&m.file), "{dtype}");
        let (auto, auto_tokens) = run(&m, ActivationPrecision::Auto);
        let (f32s, f32_tokens) = run(&m, ActivationPrecision::F32);
        let (q8, _) = run(&m, ActivationPrecision::Q8);
        assert!(auto.contains("f32 activations") && f32s.contains("f32 activations"), "{dtype}: {auto}");
        assert!(q8.contains("8-bit activations"), "{dtype}: {q8}");
        assert_eq!(auto_tokens, f32_tokens, "{dtype}: auto is f32 for float weights");
    }
    // The synthetic default types: Q4_1 matrices, a Q8_0 embedding.
    let quantized = model(None);
    assert!(!quantized.config.matmul_weights_are_float(&quantized.file));
    let (auto, _) = run(&quantized, ActivationPrecision::Auto);
    assert!(auto.contains("8-bit activations"), "{auto}");
}

#[test]
fn one_quantized_matrix_makes_a_model_quantized() {
    let spec = SyntheticSpec { matrix_type: Some(GgmlType::F16), ..SyntheticSpec::tiny(42) };
    let config_of = |bytes: Vec<u8>| {
        let file = GgufFile::from_bytes(&bytes).unwrap();
        let config = LlamaConfig::from_gguf(&file).unwrap();
        config.matmul_weights_are_float(&file)
    };
    assert!(config_of(spec.writer().to_bytes()));
    // One FFN matrix in Q8_0 (64 × 96: rows of 64, whole blocks).
    let q8_0 = |n: usize| vec![0u8; n / 32 * 34];
    let mixed = spec.writer().without_tensor("blk.1.ffn_up.weight").tensor(
        "blk.1.ffn_up.weight",
        GgmlType::Q8_0,
        &[64, 96],
        q8_0(64 * 96),
    );
    assert!(!config_of(mixed.to_bytes()));
}

//! Mixture-of-experts models through the engine (Qwen3 MoE's, gpt-oss' and DeepSeek V3's layouts at small widths,
//! `SyntheticSpec` families `qwen3moe-small`, `gpt-oss-small-mxfp4` and `deepseek3-small`, with a byte vocabulary): greedy completions are the same token ids run one at a time, all at
//! once under continuous batching, with prompts found in the prefix cache, and with n-gram speculation verifying a
//! draft at every step, because a row's experts and their sums do not depend on its batch (`tests/moe_invariance.rs`).

use std::sync::Arc;

use ember::engine::speculative::{DraftPolicy, SpeculativeConfig, SpeculativeMethod};
use ember::engine::{Engine, EngineConfig, Logger, RequestHandle, RequestOptions, SubmitRequest};
use ember::model::gguf::GgufFile;
use ember::model::llama::SyntheticSpec;
use ember::model::{Model, TokenId};

fn model(family: &str) -> Arc<Model> {
    // Quantized as the family's published files are (the fixtures are F16).
    let spec = SyntheticSpec { matrix_type: None, ..SyntheticSpec::family(family, 31, 2).unwrap() };
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    Arc::new(Model::from_file(format!("{family}.gguf").into(), file).unwrap_or_else(|e| panic!("{e}")))
}

fn engine(model: &Arc<Model>, config: EngineConfig) -> Engine {
    let config = EngineConfig { threads: 2, kv_cache_tokens: 4096, ..config };
    Engine::with_model(config, model.clone(), Logger::silent()).unwrap_or_else(|e| panic!("{e}"))
}

/// Prompts of bytes; the last two share their first 40 tokens with the first (a cached prefix).
fn prompts() -> Vec<Vec<TokenId>> {
    let text = |s: &str| s.bytes().map(TokenId::from).collect::<Vec<_>>();
    let shared = "The experts of a mixture are chosen per token by a router; ";
    vec![
        text(&format!("{shared}the rest of the block is as before.")),
        text("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,"),
        text("abcabcabcabcabcabcabcabc"),
        text("Mixture-of-experts models decode like small ones."),
        text(&format!("{shared}then each expert runs once over its rows.")),
        text(&format!("{shared}and the weights are renormalized.")),
    ]
}

fn request(ids: &[TokenId]) -> SubmitRequest {
    // Exactly 24 tokens: where the model would end a choice does not matter to the comparison.
    let options = RequestOptions { max_tokens: Some(24), min_tokens: 24, include_metrics: true, ..Default::default() };
    SubmitRequest::with_options(ids.to_vec(), options)
}

fn finish(h: &RequestHandle) -> Vec<TokenId> {
    h.wait();
    assert_eq!(h.error(), None);
    h.choices()[0].token_ids.clone()
}

#[test]
fn greedy_tokens_are_the_same_alone_batched_cached_and_speculated() {
    same_tokens_every_way("qwen3moe-small");
}

/// gpt-oss (MXFP4 experts, sinks, windows of 8 on every other layer, whose blocks the window pool releases as they
/// leave the window).
#[test]
fn gpt_oss_greedy_tokens_are_the_same_alone_batched_cached_and_speculated() {
    same_tokens_every_way("gpt-oss-small-mxfp4");
}

/// DeepSeek V3's layout (latent attention with a query rank and its keys-only cache, a dense first block, a sigmoid
/// router with a selection bias and expert groups, a shared expert).
#[test]
fn deepseek_greedy_tokens_are_the_same_alone_batched_cached_and_speculated() {
    same_tokens_every_way("deepseek3-small");
}

fn same_tokens_every_way(family: &str) {
    let model = model(family);
    let prompts = prompts();
    let alone: Vec<Vec<TokenId>> = {
        let e = engine(&model, EngineConfig { enable_prefix_caching: false, ..Default::default() });
        prompts.iter().map(|p| finish(&e.submit(request(p)).unwrap())).collect()
    };
    assert!(alone.iter().all(|t| t.len() == 24));

    let batched = engine(&model, EngineConfig { enable_prefix_caching: false, max_num_seqs: 8, ..Default::default() });
    let handles: Vec<_> = prompts.iter().map(|p| batched.submit(request(p)).unwrap()).collect();
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(finish(h), alone[i], "{family}: prompt {i} batched");
    }

    // Every position of every layer in the one pool (`kv_window_pool: false`; no effect without windows): the
    // prefix cache serves the shared start.
    let cached = engine(&model, EngineConfig { kv_window_pool: false, ..Default::default() });
    for (i, p) in prompts.iter().enumerate() {
        let h = cached.submit(request(p)).unwrap();
        assert_eq!(finish(&h), alone[i], "{family}: prompt {i} with the prefix cache");
        let hit = h.extended_metrics(0).num_cached_prompt_tokens.expect("stats are on");
        if i >= 4 {
            assert!(hit >= 32, "{family}: prompt {i} shares 40 tokens with prompt 0: {hit} cached");
        }
    }
    if model.config.max_window().is_some() {
        // With the window pool (the default), the windowed layers keep only their windows' blocks and nothing is
        // cached (docs/architecture.md, "The KV cache"): the same outputs, computed again.
        let pooled = engine(&model, EngineConfig::default());
        for (i, p) in prompts.iter().enumerate() {
            let h = pooled.submit(request(p)).unwrap();
            assert_eq!(finish(&h), alone[i], "{family}: prompt {i} with the window pool");
            assert_eq!(h.extended_metrics(0).num_cached_prompt_tokens, Some(0), "{family}: prompt {i}");
        }
    }

    let speculative = engine(
        &model,
        EngineConfig {
            speculative: Some(SpeculativeConfig {
                method: SpeculativeMethod::Ngram,
                num_speculative_tokens: 4,
                prompt_lookup_min: 1,
                prompt_lookup_max: 4,
                draft_policy: DraftPolicy::Always,
            }),
            kv_window_pool: false,
            ..Default::default()
        },
    );
    let handles: Vec<_> = prompts.iter().map(|p| speculative.submit(request(p)).unwrap()).collect();
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(finish(h), alone[i], "{family}: prompt {i} with speculation");
    }
}

//! The 8-bit and 4-bit KV caches through the engine (`kv_cache_type_k`, `kv_cache_type_v`): the prefix cache and
//! speculative decoding work on each as on f16 (the same tokens with them as without, because the cache's contents
//! still do not depend on batching or chunking), `engine_model_info_json` reports the types and their bytes per
//! token, and the options refuse what cannot run.

mod common;

use common::{engine, greedy, ids_of, MESSAGES};
use ember::backend::KvCacheType;
use ember::engine::config::ActivationPrecision;
use ember::engine::speculative::{DraftPolicy, SpeculativeConfig, SpeculativeMethod};
use ember::engine::{Engine, EngineConfig};
use ember::model::TokenId;
use ember::protocol::model_info::model_info_json;

const MAX_TOKENS: usize = 24;
const TYPES: [(KvCacheType, KvCacheType); 3] = [
    (KvCacheType::Q8_0, KvCacheType::Q8_0),
    (KvCacheType::Q4_0, KvCacheType::Q4_0),
    (KvCacheType::Q8_0, KvCacheType::Q4_0),
];

fn config((keys, values): (KvCacheType, KvCacheType), caching: bool) -> EngineConfig {
    EngineConfig {
        kv_cache_type_k: keys,
        kv_cache_type_v: values,
        enable_prefix_caching: caching,
        ..Default::default()
    }
}

fn outputs(e: &Engine, messages: &[&str]) -> Vec<Vec<TokenId>> {
    messages.iter().map(|m| ids_of(&e.submit(greedy(m, MAX_TOKENS)).unwrap())).collect()
}

#[test]
fn prefix_caching_gives_the_uncached_tokens_on_each_cache_type() {
    for types in TYPES {
        let expected = outputs(&engine(config(types, false)), &MESSAGES[..3]);
        let e = engine(config(types, true));
        for round in 0..2 {
            assert_eq!(outputs(&e, &MESSAGES[..3]), expected, "{types:?}, round {round}");
        }
        let hits = e.prefix_cache().expect("caching is on").hits;
        assert!(hits > 0, "{types:?}: the second round reads cached blocks");
    }
}

#[test]
fn speculative_decoding_gives_the_plain_tokens_on_each_cache_type() {
    for types in TYPES {
        let plain = outputs(&engine(config(types, true)), &MESSAGES[..2]);
        let speculative = EngineConfig {
            speculative: Some(SpeculativeConfig {
                method: SpeculativeMethod::Ngram,
                num_speculative_tokens: 4,
                prompt_lookup_min: 1,
                prompt_lookup_max: 4,
                draft_policy: DraftPolicy::Always,
            }),
            ..config(types, true)
        };
        let e = engine(speculative);
        assert_eq!(outputs(&e, &MESSAGES[..2]), plain, "{types:?}");
        assert!(e.speculation().expect("speculation is on").draft_tokens > 0, "{types:?}: drafts were verified");
    }
}

#[test]
fn model_info_reports_the_cache_types_and_their_bytes_per_token() {
    let info = |types| {
        let e = engine(config(types, true));
        let json: serde_json::Value = serde_json::from_str(&model_info_json(&e)).unwrap();
        json["kv_cache"].clone()
    };
    // SmolLM2: 30 layers, 3 KV heads of 64: a row of 192 elements per layer and plane.
    let f16 = info((KvCacheType::F16, KvCacheType::F16));
    assert_eq!((f16["type_k"].as_str(), f16["bytes_per_token"].as_u64()), (Some("f16"), Some(30 * 2 * 192 * 2)));
    let mixed = info((KvCacheType::Q8_0, KvCacheType::Q4_0));
    assert_eq!(
        (mixed["type_k"].as_str(), mixed["type_v"].as_str(), mixed["bytes_per_token"].as_u64()),
        (Some("q8_0"), Some("q4_0"), Some(30 * (6 * 34 + 6 * 18)))
    );
}

#[test]
fn the_options_refuse_unknown_types_and_the_precise_path() {
    let err = EngineConfig::from_json(r#"{"kv_cache_type_k": "q5_0"}"#).unwrap_err().to_string();
    assert!(err.starts_with("kv_cache_type_k: unknown KV cache type \"q5_0\""), "{err}");
    let c = EngineConfig::from_json(r#"{"kv_cache_type_k": "q8_0", "kv_cache_type_v": "q4_0"}"#).unwrap();
    assert_eq!((c.kv_cache_type_k, c.kv_cache_type_v), (KvCacheType::Q8_0, KvCacheType::Q4_0));
    let precise = EngineConfig { activation_precision: ActivationPrecision::F32, ..config(TYPES[0], true) };
    let err = Engine::new(precise).expect_err("the precise path keeps an f32 cache").to_string();
    assert!(err.contains("f32 KV cache"), "{err}");
}

//! Llama hyperparameter validation: every inconsistency is an error naming the key or tensor at fault.

use ember::model::gguf::{GgmlType, GgufError, GgufFile, Value};
use ember::model::llama::{LlamaConfig, ModelConfigError, SyntheticSpec};

fn config_of(w: ember::model::gguf::writer::GgufWriter) -> Result<LlamaConfig, ModelConfigError> {
    LlamaConfig::from_gguf(&GgufFile::from_bytes(&w.to_bytes()).unwrap())
}

fn tiny() -> ember::model::gguf::writer::GgufWriter {
    SyntheticSpec::tiny(1).writer()
}

fn invalid_key(r: Result<LlamaConfig, ModelConfigError>) -> &'static str {
    match r {
        Err(ModelConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an invalid-key error, got {other:?}"),
    }
}

#[test]
fn a_valid_tiny_model_reads_back_its_shapes() {
    let c = config_of(tiny()).unwrap();
    assert_eq!((c.n_head, c.n_head_kv, c.head_dim, c.n_ff), (4, 2, 16, 96));
    assert!(c.tied_output);
}

#[test]
fn heads_must_divide_the_width_and_kv_heads_the_heads() {
    assert_eq!(
        invalid_key(config_of(tiny().set_metadata("llama.attention.head_count", Value::U32(5)))),
        "llama.attention.head_count"
    );
    assert_eq!(
        invalid_key(config_of(tiny().set_metadata("llama.attention.head_count_kv", Value::U32(3)))),
        "llama.attention.head_count_kv"
    );
    assert_eq!(invalid_key(config_of(tiny().set_metadata("llama.block_count", Value::U32(0)))), "llama.block_count");
    assert_eq!(
        invalid_key(config_of(tiny().set_metadata("llama.rope.dimension_count", Value::U32(17)))),
        "llama.rope.dimension_count"
    );
    assert_eq!(
        invalid_key(config_of(tiny().set_metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(-1.0)))),
        "llama.attention.layer_norm_rms_epsilon"
    );
}

#[test]
fn missing_and_mistyped_keys_are_named() {
    match config_of(tiny().without_metadata("llama.embedding_length")) {
        Err(ModelConfigError::Gguf(GgufError::MissingKey { key })) => assert_eq!(key, "llama.embedding_length"),
        other => panic!("{other:?}"),
    }
    match config_of(tiny().set_metadata("llama.feed_forward_length", Value::String("96".into()))) {
        Err(ModelConfigError::Gguf(GgufError::WrongType { key, .. })) => assert_eq!(key, "llama.feed_forward_length"),
        other => panic!("{other:?}"),
    }
    match config_of(tiny().set_metadata("general.architecture", Value::String("gpt2".into()))) {
        Err(ModelConfigError::UnsupportedArchitecture(a)) => assert_eq!(a, "gpt2"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn optional_keys_have_llama_cpp_defaults() {
    let c = config_of(tiny().without_metadata("llama.rope.freq_base").without_metadata("llama.rope.dimension_count"))
        .unwrap();
    assert_eq!((c.rope_base, c.rope_dim), (10_000.0, c.head_dim));
    let c = config_of(tiny().without_metadata("llama.vocab_size")).unwrap();
    assert_eq!(c.vocab_size, 512, "taken from the embedding table");
}

#[test]
fn every_tensor_must_be_present_with_its_shape() {
    match config_of(tiny().without_tensor("blk.1.ffn_up.weight")) {
        Err(ModelConfigError::Gguf(GgufError::MissingTensor { name })) => assert_eq!(name, "blk.1.ffn_up.weight"),
        other => panic!("{other:?}"),
    }
    let wrong = tiny().without_tensor("blk.0.attn_k.weight").tensor(
        "blk.0.attn_k.weight",
        GgmlType::Q4_1,
        &[64, 64],
        vec![0; 2 * 20 * 64],
    );
    match config_of(wrong) {
        Err(ModelConfigError::TensorShape { tensor, expected, found }) => {
            assert_eq!((tensor.as_str(), expected, found), ("blk.0.attn_k.weight", vec![64, 32], vec![64, 64]))
        }
        other => panic!("{other:?}"),
    }
    let f16_norm =
        tiny().without_tensor("output_norm.weight").tensor("output_norm.weight", GgmlType::F16, &[64], vec![0; 128]);
    assert!(matches!(config_of(f16_norm), Err(ModelConfigError::NormNotF32 { .. })));
}

#[test]
fn an_unsupported_weight_type_is_named_when_the_model_needs_it() {
    let spec = SyntheticSpec { n_ff: 256, ..SyntheticSpec::tiny(3) };
    let w = spec.writer().without_tensor("blk.1.ffn_down.weight").tensor(
        "blk.1.ffn_down.weight",
        GgmlType::Q8K,
        &[256, 64],
        vec![0; 292 * 64],
    );
    match config_of(w) {
        Err(ModelConfigError::Gguf(GgufError::UnsupportedTensorType { tensor, dtype })) => {
            assert_eq!((tensor.as_str(), dtype), ("blk.1.ffn_down.weight", GgmlType::Q8K))
        }
        other => panic!("{other:?}"),
    }
}

/// RoPE scaling as llama.cpp reads it: linear by default, its factor from `rope.scaling.factor` or the older
/// `rope.scale_linear`, applied to the full-attention layers' speeds (YaRN's through its ramp); the types ember does not implement and any
/// other name are refused by key, as are impossible factors; the attention factor is read (1 when absent).
#[test]
fn rope_scaling_is_read_as_llama_cpp_reads_it_or_refused_by_key() {
    let scale = |w: ember::model::gguf::writer::GgufWriter| config_of(w).unwrap().rope_freq_scale;
    assert_eq!(scale(tiny()), 1.0);
    assert_eq!(scale(tiny().set_metadata("llama.rope.scaling.factor", Value::F32(4.0))), 0.25, "linear by default");
    assert_eq!(scale(tiny().set_metadata("llama.rope.scale_linear", Value::F32(2.0))), 0.5, "the older key");
    assert_eq!(scale(tiny().set_metadata("llama.rope.scaling.factor", Value::F32(0.0))), 1.0, "0 means none");
    let typed = |t: &str| tiny().set_metadata("llama.rope.scaling.type", Value::String(t.into()));
    assert_eq!(scale(typed("none").set_metadata("llama.rope.scaling.factor", Value::F32(4.0))), 1.0);
    let c = config_of(typed("linear").set_metadata("llama.rope.scaling.factor", Value::F32(4.0))).unwrap();
    let plain = config_of(tiny()).unwrap();
    for (scaled, unscaled) in c.inv_frequencies(0).iter().zip(plain.inv_frequencies(0)) {
        assert_eq!(*scaled, unscaled * 0.25);
    }
    let yarn = config_of(typed("yarn").set_metadata("llama.rope.scaling.factor", Value::F32(4.0))).unwrap();
    assert_eq!((yarn.rope_freq_scale, yarn.rope_yarn.map(|y| y.original_context)), (0.25, Some(plain.context_length)));
    assert!(yarn.rope_magnitude(0) > 1.0, "YaRN's magnitude correction");
    let fast = yarn.inv_frequencies(0)[0] / plain.inv_frequencies(0)[0];
    let slowest = yarn.inv_frequencies(0).last().unwrap() / plain.inv_frequencies(0).last().unwrap();
    assert!(
        fast > 0.25 && (slowest - 0.25).abs() < 1e-12,
        "the ramp keeps fast pairs, scales slow ones: {fast}, {slowest}"
    );
    for refused in ["longrope", "dynamic"] {
        let r = config_of(typed(refused).set_metadata("llama.rope.scaling.factor", Value::F32(4.0)));
        assert_eq!(invalid_key(r), "llama.rope.scaling.type", "{refused}");
    }
    let r = config_of(tiny().set_metadata("llama.rope.scaling.factor", Value::F32(-2.0)));
    assert_eq!(invalid_key(r), "llama.rope.scaling.factor");
    let attn = |a: f32| config_of(tiny().set_metadata("llama.rope.scaling.attn_factor", Value::F32(a)));
    assert_eq!(attn(1.19).unwrap().rope_attn_factor, 1.19);
    assert_eq!(config_of(tiny()).unwrap().rope_attn_factor, 1.0);
    for bad in [0.0, -1.0, f32::NAN] {
        assert_eq!(invalid_key(attn(bad)), "llama.rope.scaling.attn_factor");
    }
}

/// Phi-3's files: the q/k/v projections fused in `attn_qkv`, the gate and up projections in `ffn_up`, LongRoPE's
/// two factor sets (the short ones unless the engine's context passes the original one), each checked by name.
#[test]
fn phi3_files_fuse_projections_and_carry_long_rope_factors() {
    let spec = SyntheticSpec::family("phi3.5-mini-long", 1, 1).unwrap();
    let c = config_of(spec.writer_with_byte_vocabulary()).unwrap();
    assert!(c.fused_qkv && c.fused_gate_up);
    let long_rope = c.long_rope.clone().unwrap();
    assert_eq!(long_rope.original_context, 128);
    assert_eq!(c.rope_freq_factors.as_ref(), Some(&long_rope.short));
    assert_eq!(c.for_context(128).rope_freq_factors.as_ref(), Some(&long_rope.short));
    assert_eq!(c.for_context(129).rope_freq_factors.as_ref(), Some(&long_rope.long));
    let (q, kv) = (c.q_dim(), c.kv_dim());
    use ember::model::llama::forward::Weight;
    assert_eq!(c.weight_source(Weight::AttnK(0)), ("blk.0.attn_qkv.weight".into(), Some(q..q + kv)));
    assert_eq!(c.weight_source(Weight::FfnUp(0)), ("blk.0.ffn_up.weight".into(), Some(c.n_ff..2 * c.n_ff)));
    assert_eq!(c.weight_source(Weight::AttnOutput(0)), ("blk.0.attn_output.weight".into(), None));
    let without = |name: &str| config_of(spec.writer_with_byte_vocabulary().without_tensor(name));
    assert!(matches!(
        without("rope_factors_long.weight"),
        Err(ModelConfigError::Gguf(GgufError::MissingTensor { .. }))
    ));
    let r = config_of(
        spec.writer_with_byte_vocabulary().set_metadata("phi3.rope.scaling.original_context_length", Value::U32(0)),
    );
    assert_eq!(invalid_key(r), "phi3.rope.scaling.original_context_length");
}

/// Gemma 2: every other layer windowed (llama.cpp's defaults: a window of 4096, a period of 2), soft caps read
/// with llama.cpp's defaults (50 and 30) and refused when not positive.
#[test]
fn gemma2_windows_and_soft_caps_are_read_as_llama_cpp_reads_them() {
    let spec = SyntheticSpec::family("gemma2-2b", 1, 4).unwrap();
    let c = config_of(spec.writer_with_byte_vocabulary()).unwrap();
    let windows: Vec<Option<usize>> = c.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    assert_eq!((c.attn_softcap, c.final_softcap), (Some(2.0), Some(10.0)));
    let defaults = config_of(
        spec.writer_with_byte_vocabulary()
            .without_metadata("gemma2.attn_logit_softcapping")
            .without_metadata("gemma2.final_logit_softcapping")
            .without_metadata("gemma2.attention.sliding_window"),
    )
    .unwrap();
    assert_eq!(
        (defaults.attn_softcap, defaults.final_softcap, defaults.layers[0].window),
        (Some(50.0), Some(30.0), Some(4096))
    );
    let r =
        config_of(spec.writer_with_byte_vocabulary().set_metadata("gemma2.final_logit_softcapping", Value::F32(0.0)));
    assert_eq!(invalid_key(r), "gemma2.final_logit_softcapping");
    assert_eq!(config_of(tiny()).unwrap().attn_softcap, None, "only gemma2 caps");
}

/// Gemma 3 caps its logits only when its file says so (llama.cpp reads the key, with no default), never its scores.
#[test]
fn gemma3_caps_its_logits_only_when_the_file_has_the_key() {
    let w = || SyntheticSpec::tiny_gemma3(1).writer_with_byte_vocabulary();
    assert_eq!(config_of(w()).unwrap().final_softcap, None);
    let c = config_of(w().metadata("gemma3.final_logit_softcapping", Value::F32(30.0))).unwrap();
    assert_eq!((c.attn_softcap, c.final_softcap), (None, Some(30.0)));
    let zero = config_of(w().metadata("gemma3.final_logit_softcapping", Value::F32(0.0))).unwrap();
    assert_eq!(zero.final_softcap, None, "0 is no cap");
}

/// The attention scale: 1/√head_dim, but 1/√(n_embd / n_head) for Gemma 2 27B and Gemma 3 27B, which llama.cpp
/// knows by their layer counts (46 and 62) alone.
#[test]
fn gemma_27b_layer_counts_take_their_attention_scale() {
    for (family, layers_27b) in [("gemma2-27b-scale", 46), ("gemma3-27b-scale", 62)] {
        let of = |layers| config_of(SyntheticSpec::family(family, 1, layers).unwrap().writer()).unwrap();
        // 512 wide with 4 heads of 64.
        assert_eq!(of(layers_27b).attention_scale, 1.0 / 128f32.sqrt(), "{family}");
        assert_eq!(of(2).attention_scale, 1.0 / 8.0, "{family} with 2 layers");
    }
    assert_eq!(config_of(tiny()).unwrap().attention_scale, 0.25, "llama: heads of 16");
}

/// Granite's four multipliers, read as llama.cpp reads them: the logit scale required and positive, the others
/// optional, 0 meaning none; any negative or non-finite one refused by name. No other architecture reads them.
#[test]
fn granite_multipliers_are_read_as_llama_cpp_reads_them() {
    let spec = SyntheticSpec::family("granite3.1-2b", 1, 1).unwrap();
    let w = || spec.writer_with_byte_vocabulary();
    let c = config_of(w()).unwrap();
    assert_eq!(
        (c.embed_scale, c.residual_scale, c.attention_scale, c.logit_scale),
        (Some(12.0), Some(0.22), 0.015_625, Some(8.0))
    );
    let c = config_of(
        w().set_metadata("granite.embedding_scale", Value::F32(0.0))
            .without_metadata("granite.residual_scale")
            .set_metadata("granite.attention.scale", Value::F32(0.0)),
    )
    .unwrap();
    assert_eq!((c.embed_scale, c.residual_scale, c.attention_scale), (None, None, 0.125));
    assert!(matches!(
        config_of(w().without_metadata("granite.logit_scale")),
        Err(ModelConfigError::Gguf(GgufError::MissingKey { key })) if key == "granite.logit_scale"
    ));
    assert_eq!(invalid_key(config_of(w().set_metadata("granite.logit_scale", Value::F32(0.0)))), "granite.logit_scale");
    assert_eq!(
        invalid_key(config_of(w().set_metadata("granite.residual_scale", Value::F32(-0.5)))),
        "granite.residual_scale"
    );
    assert_eq!(
        invalid_key(config_of(w().set_metadata("granite.attention.scale", Value::F32(f32::NAN)))),
        "granite.attention.scale"
    );
    let llama = config_of(tiny().metadata("llama.logit_scale", Value::F32(8.0))).unwrap();
    assert_eq!((llama.logit_scale, llama.residual_scale, llama.embed_scale), (None, None, None));
}

/// OLMo 2 reads without input norms and with whole-row q/k norms; its OLMo 3 files' sliding windows are refused.
#[test]
fn olmo2_has_row_norms_and_refuses_olmo3_windows() {
    let spec = SyntheticSpec::family("olmo2-1b", 1, 1).unwrap();
    let c = config_of(spec.writer()).unwrap();
    assert_eq!((c.pre_norms, c.post_norms, c.qk_norm), (false, true, Some(ember::model::llama::QkNorm::Rows)));
    assert!(!c.tied_output);
    let w = spec.writer().metadata("olmo2.attention.sliding_window", Value::U32(4096));
    assert_eq!(invalid_key(config_of(w)), "olmo2.attention.sliding_window");
}

/// A bias the forward pass would not add is refused by name rather than silently left out.
#[test]
fn biases_the_blocks_do_not_have_are_refused() {
    for bias in ["attn_output.bias", "ffn_down.bias", "ffn_up.bias", "attn_q.bias"] {
        let name = format!("blk.0.{bias}");
        let r = config_of(tiny().tensor_f32(&name, &[64], &[0.0; 64]));
        match r {
            Err(ModelConfigError::Invalid { detail, .. }) => assert!(detail.contains(&name), "{detail}"),
            other => panic!("{bias}: expected a refusal, got {other:?}"),
        }
    }
}

/// gpt-oss' layers as llama.cpp reads them: every other layer windowed (the even ones), the windowed layers' RoPE
/// scaled as the full ones' (YaRN), sinks and output biases; a file without its window key is refused as llama.cpp
/// refuses it, and the router's and experts' biases are refused on a family without them.
#[test]
fn gpt_oss_windows_sinks_and_biases_are_read_as_llama_cpp_reads_them() {
    let spec = SyntheticSpec::family("gpt-oss-small-mxfp4", 1, 4).unwrap();
    let c = config_of(spec.writer()).unwrap();
    let windows: Vec<_> = c.layers.iter().map(|l| l.window).collect();
    assert_eq!(windows, [Some(8), None, Some(8), None]);
    assert!(c.attn_sinks && c.attn_output_bias && c.qkv_bias && c.rope_scale_windows && c.rope_yarn.is_some());
    // The windowed layers share the full layers' base, and both are scaled alike.
    assert_eq!(c.rope_bases, [Some(150_000.0), Some(150_000.0)]);
    assert_eq!(c.inv_frequencies(0), c.inv_frequencies(1));
    assert_eq!(c.rope_magnitude(0), c.rope_magnitude(1));
    assert!(c.rope_magnitude(0) > 1.0, "YaRN's magnitude correction");
    let moe = c.moe.as_ref().unwrap();
    assert!(moe.biases && moe.n_expert == 16 && moe.n_expert_used == 4 && moe.n_ff_exp == 576);

    let w = spec.writer().without_metadata("gpt-oss.attention.sliding_window");
    assert_eq!(invalid_key(config_of(w)), "gpt-oss.attention.sliding_window");
    match config_of(spec.writer().without_tensor("blk.1.attn_sinks.weight")) {
        Err(e) => assert!(e.to_string().contains("blk.1.attn_sinks.weight"), "{e}"),
        Ok(_) => panic!("a gpt-oss file without its sinks loaded"),
    }
    let qwen3moe = SyntheticSpec::family("qwen3moe-small", 1, 1).unwrap();
    for bias in ["ffn_gate_inp.bias", "ffn_down_exps.bias"] {
        let name = format!("blk.0.{bias}");
        match config_of(qwen3moe.writer().tensor_f32(&name, &[32], &[0.0; 32])) {
            Err(ModelConfigError::Invalid { detail, .. }) => assert!(detail.contains(&name), "{detail}"),
            other => panic!("{bias}: expected a refusal, got {other:?}"),
        }
    }
}

//! RoPE scaling read from GGUF metadata, as llama.cpp reads it (`llama_model::load_hparams`): the type
//! (`rope.scaling.type`, `"linear"` when absent), the factor (`rope.scaling.factor`, or the older
//! `rope.scale_linear`) and the attention factor (`rope.scaling.attn_factor`); and Phi-3's LongRoPE, whose
//! per-pair factors are tensors (`rope_factors_short`, `rope_factors_long`).
//!
//! Linear scaling divides every rotation speed of the full-attention layers by the factor (llama.cpp's
//! `freq_scale = 1 / factor`), and LongRoPE divides pair `i`'s speed by its factor, both in
//! `LlamaConfig::inv_frequencies`, so every backend gets them from the table it already builds; the attention
//! factor multiplies the tabulated cosines and sines. YaRN blends speeds per pair with a ramp and ember does not
//! implement it yet: it is refused by name rather than run as if unscaled.

use crate::model::gguf::GgufFile;

use super::config::ModelConfigError;

/// The scaling keys of one architecture (`&'static` so that errors can name them).
pub(super) struct RopeScalingKeys {
    pub kind: &'static str,
    pub factor: &'static str,
    pub scale_linear: &'static str,
    pub attn_factor: &'static str,
    pub original_context: &'static str,
}

/// LongRoPE's factor tensors (llama.cpp's `LLM_TENSOR_ROPE_FACTORS_LONG` / `_SHORT`), `rope_dim / 2` each.
pub(super) const LONG_FACTORS: &str = "rope_factors_long.weight";
pub(super) const SHORT_FACTORS: &str = "rope_factors_short.weight";

/// Implemented scaling types, for the error that names the others.
const IMPLEMENTED: &str = "none, linear and Phi-3's LongRoPE";

/// What the metadata says about RoPE scaling.
pub(super) struct RopeScaling {
    /// llama.cpp's `freq_scale` of the full-attention layers: `1 / factor` for linear scaling with a factor, 1
    /// otherwise (no factor, a factor of 0 as llama.cpp reads it, or type `"none"`).
    pub freq_scale: f32,
    /// llama.cpp's `attn_factor` outside YaRN: the metadata's, 1 when absent.
    pub attn_factor: f32,
}

/// Phi-3's LongRoPE: per-pair divisors of the rotation speeds, one set for contexts up to the original one and
/// one for longer contexts.
#[derive(Clone, Debug, PartialEq)]
pub struct LongRope {
    pub short: Vec<f32>,
    pub long: Vec<f32>,
    /// `rope.scaling.original_context_length` (the model's context length when absent, as in llama.cpp).
    pub original_context: usize,
}

pub(super) fn read(file: &GgufFile, keys: &RopeScalingKeys) -> Result<RopeScaling, ModelConfigError> {
    let kind = file.optional(keys.kind, GgufFile::str)?.unwrap_or("linear");
    let (factor_key, factor) = match file.optional(keys.factor, GgufFile::f32)? {
        Some(f) => (keys.factor, f),
        None => (keys.scale_linear, file.optional(keys.scale_linear, GgufFile::f32)?.unwrap_or(0.0)),
    };
    let attn_factor = file.optional(keys.attn_factor, GgufFile::f32)?.unwrap_or(1.0);
    if !(attn_factor.is_finite() && attn_factor > 0.0) {
        return Err(invalid(keys.attn_factor, format!("{attn_factor} is not a positive number")));
    }
    let freq_scale = match kind {
        "none" => 1.0,
        "linear" if factor == 0.0 => 1.0,
        "linear" if factor.is_finite() && factor > 0.0 => 1.0 / factor,
        "linear" => return Err(invalid(factor_key, format!("{factor} is not a positive scaling factor"))),
        "yarn" | "longrope" => {
            // llama.cpp's "longrope" type is read from the factor tensors, not from this key; no file sets it.
            let detail = format!("{kind:?} RoPE scaling is not implemented (ember implements {IMPLEMENTED})");
            return Err(invalid(keys.kind, detail));
        }
        other => {
            let detail = format!("unknown RoPE scaling type {other:?} (ember implements {IMPLEMENTED})");
            return Err(invalid(keys.kind, detail));
        }
    };
    Ok(RopeScaling { freq_scale, attn_factor })
}

/// LongRoPE's factors when the file has them (both sets, `rope_dim / 2` positive values each).
pub(super) fn long_rope(
    file: &GgufFile,
    keys: &RopeScalingKeys,
    rope_dim: usize,
    context_length: usize,
) -> Result<Option<LongRope>, ModelConfigError> {
    let (long, short) = (file.tensor_info(LONG_FACTORS).is_some(), file.tensor_info(SHORT_FACTORS).is_some());
    if !long && !short {
        return Ok(None);
    }
    let factors = |name: &'static str| -> Result<Vec<f32>, ModelConfigError> {
        let values = file.tensor(name)?.as_f32()?.to_vec();
        if values.len() != rope_dim / 2 || !values.iter().all(|f| f.is_finite() && *f > 0.0) {
            let detail = format!("needs {} positive factors (found {})", rope_dim / 2, values.len());
            return Err(invalid(name, detail));
        }
        Ok(values)
    };
    let original_context = match file.optional(keys.original_context, GgufFile::u32)? {
        Some(0) => return Err(invalid(keys.original_context, "0 is not a context length".into())),
        Some(n) => n as usize,
        None => context_length,
    };
    Ok(Some(LongRope { short: factors(SHORT_FACTORS)?, long: factors(LONG_FACTORS)?, original_context }))
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

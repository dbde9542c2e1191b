//! RoPE scaling read from GGUF metadata, as llama.cpp reads it (`llama_model::load_hparams`): the type
//! (`rope.scaling.type`, `"linear"` when absent), the factor (`rope.scaling.factor`, or the older
//! `rope.scale_linear`) and the attention factor (`rope.scaling.attn_factor`).
//!
//! Linear scaling divides every rotation speed of the full-attention layers by the factor (llama.cpp's
//! `freq_scale = 1 / factor`), which `LlamaConfig::inv_frequencies` applies, so every backend gets it with no
//! code of its own. YaRN and LongRoPE blend speeds per pair and scale the rotated values; ember does not
//! implement them yet and refuses them by name rather than run such a model as if unscaled.

use crate::model::gguf::GgufFile;

use super::config::ModelConfigError;

/// The scaling keys of one architecture (`&'static` so that errors can name them).
pub(super) struct RopeScalingKeys {
    pub kind: &'static str,
    pub factor: &'static str,
    pub scale_linear: &'static str,
    pub attn_factor: &'static str,
}

/// Implemented scaling types, for the error that names the others.
const IMPLEMENTED: &str = "none and linear";

/// llama.cpp's `freq_scale` of the full-attention layers: `1 / factor` for linear scaling with a factor, 1
/// otherwise (no factor, a factor of 0 as llama.cpp reads it, or type `"none"`).
pub(super) fn freq_scale(file: &GgufFile, keys: &RopeScalingKeys) -> Result<f32, ModelConfigError> {
    let kind = file.optional(keys.kind, GgufFile::str)?.unwrap_or("linear");
    let (factor_key, factor) = match file.optional(keys.factor, GgufFile::f32)? {
        Some(f) => (keys.factor, f),
        None => (keys.scale_linear, file.optional(keys.scale_linear, GgufFile::f32)?.unwrap_or(0.0)),
    };
    if let Some(a) = file.optional(keys.attn_factor, GgufFile::f32)? {
        // It scales the rotated values (llama.cpp's `attn_factor`); 1 changes nothing.
        if a != 1.0 {
            return Err(invalid(
                keys.attn_factor,
                format!("{a} (a RoPE attention factor other than 1) is not implemented"),
            ));
        }
    }
    match kind {
        "none" => Ok(1.0),
        "linear" if factor == 0.0 => Ok(1.0),
        "linear" if factor.is_finite() && factor > 0.0 => Ok(1.0 / factor),
        "linear" => Err(invalid(factor_key, format!("{factor} is not a positive scaling factor"))),
        "yarn" | "longrope" => Err(invalid(
            keys.kind,
            format!("{kind:?} RoPE scaling is not implemented (ember implements {IMPLEMENTED})"),
        )),
        other => {
            Err(invalid(keys.kind, format!("unknown RoPE scaling type {other:?} (ember implements {IMPLEMENTED})")))
        }
    }
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

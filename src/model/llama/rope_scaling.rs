//! RoPE scaling read from GGUF metadata, as llama.cpp reads it (`llama_model::load_hparams`): the type
//! (`rope.scaling.type`, `"linear"` when absent), the factor (`rope.scaling.factor`, or the older
//! `rope.scale_linear`) and the attention factor (`rope.scaling.attn_factor`); and Phi-3's LongRoPE, whose
//! per-pair factors are tensors (`rope_factors_short`, `rope_factors_long`).
//!
//! Linear scaling divides every rotation speed of the full-attention layers by the factor (llama.cpp's
//! `freq_scale = 1 / factor`), LongRoPE divides pair `i`'s speed by its factor, and YaRN blends each pair's
//! scaled and unscaled speeds by a ramp over the pairs ([`Yarn::speed_factors`]), all in
//! `LlamaConfig::inv_frequencies`, so every backend gets them from the table it already builds; the attention
//! factor, and YaRN's magnitude correction, multiply the tabulated cosines and sines
//! (`LlamaConfig::rope_magnitude`).

use crate::model::gguf::GgufFile;

use super::config::ModelConfigError;

/// The scaling keys of one architecture (`&'static` so that errors can name them).
#[derive(Debug)]
pub struct RopeScalingKeys {
    pub kind: &'static str,
    pub factor: &'static str,
    pub scale_linear: &'static str,
    pub attn_factor: &'static str,
    pub original_context: &'static str,
    /// DeepSeek's YaRN attention-scale multiplier (read by `latent.rs` only, as llama.cpp reads it for `deepseek2`).
    pub yarn_log_multiplier: &'static str,
}

/// LongRoPE's factor tensors (llama.cpp's `LLM_TENSOR_ROPE_FACTORS_LONG` / `_SHORT`), `rope_dim / 2` each.
pub(super) const LONG_FACTORS: &str = "rope_factors_long.weight";
pub(super) const SHORT_FACTORS: &str = "rope_factors_short.weight";

/// Implemented scaling types, for the error that names the others.
const IMPLEMENTED: &str = "none, linear, yarn and Phi-3's LongRoPE";

/// What the metadata says about RoPE scaling.
pub(super) struct RopeScaling {
    /// llama.cpp's `freq_scale` of the full-attention layers: `1 / factor` for linear scaling with a factor, 1
    /// otherwise (no factor, a factor of 0 as llama.cpp reads it, or type `"none"`).
    pub freq_scale: f32,
    /// llama.cpp's `attn_factor` outside YaRN's own correction: the metadata's, 1 when absent.
    pub attn_factor: f32,
    /// YaRN's parameters when the type is `"yarn"` with a factor above 1.
    pub yarn: Option<Yarn>,
}

/// YaRN as llama.cpp runs it for the architectures ember loads (`ggml_rope_yarn_corr_dims`, `rope_yarn`): its
/// extrapolation factor 1 and its betas 32 and 1 (only other architectures read them from the file).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// `rope.scaling.original_context_length` (the model's context length when absent).
    pub original_context: usize,
    /// YaRN's magnitude correction multiplies the rotations (`LlamaConfig::rope_magnitude`); false where llama.cpp
    /// cancels it there and scales the attention instead (DeepSeek's files with a `yarn_log_multiplier`, `latent.rs`).
    pub corrects_rotations: bool,
}

const YARN_BETA_FAST: f64 = 32.0;
const YARN_BETA_SLOW: f64 = 1.0;

impl Yarn {
    /// The multiplier of pair `i`'s unscaled speed: the pairs below the ramp (fast ones, many turns within the
    /// original context) keep their speed, those above it take `freq_scale`, and the ramp between blends the two.
    pub fn speed_factors(&self, rope_dim: usize, base: f64, freq_scale: f64) -> Vec<f64> {
        // The pair whose speed turns `turns` times over the original context, as llama.cpp computes it.
        let pair_of = |turns: f64| {
            let two_pi = 2.0 * std::f64::consts::PI;
            rope_dim as f64 * super::rope::ln(self.original_context as f64 / (turns * two_pi))
                / (2.0 * super::rope::ln(base))
        };
        let low = pair_of(YARN_BETA_FAST).floor().max(0.0);
        let high = pair_of(YARN_BETA_SLOW).ceil().min(rope_dim as f64 - 1.0);
        (0..rope_dim / 2)
            .map(|i| {
                let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                freq_scale * (1.0 - ramp) + ramp
            })
            .collect()
    }

    /// YaRN's magnitude correction of the scaled layers' rotations: `1 + 0.1 ln(1 / freq_scale)`.
    pub fn magnitude(freq_scale: f64) -> f64 {
        1.0 + 0.1 * super::rope::ln(1.0 / freq_scale)
    }
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

pub(super) fn read(
    file: &GgufFile,
    keys: &RopeScalingKeys,
    context_length: usize,
) -> Result<RopeScaling, ModelConfigError> {
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
        "linear" | "yarn" if factor == 0.0 => 1.0,
        "linear" | "yarn" if factor.is_finite() && factor > 0.0 => 1.0 / factor,
        "linear" | "yarn" => return Err(invalid(factor_key, format!("{factor} is not a positive scaling factor"))),
        "longrope" => {
            // llama.cpp's "longrope" type is read from the factor tensors, not from this key; no file sets it.
            let detail = format!("{kind:?} RoPE scaling is not implemented (ember implements {IMPLEMENTED})");
            return Err(invalid(keys.kind, detail));
        }
        other => {
            let detail = format!("unknown RoPE scaling type {other:?} (ember implements {IMPLEMENTED})");
            return Err(invalid(keys.kind, detail));
        }
    };
    // llama.cpp corrects nothing for a factor of at most 1 (its `get_mscale`), and a ramp towards a scale of 1
    // changes no speed: YaRN without a factor above 1 is no scaling.
    let yarn = match kind {
        "yarn" if freq_scale < 1.0 => {
            Some(Yarn { original_context: original_context(file, keys, context_length)?, corrects_rotations: true })
        }
        _ => None,
    };
    Ok(RopeScaling { freq_scale, attn_factor, yarn })
}

/// `rope.scaling.original_context_length`, the model's context length when absent.
fn original_context(file: &GgufFile, keys: &RopeScalingKeys, context_length: usize) -> Result<usize, ModelConfigError> {
    match file.optional(keys.original_context, GgufFile::u32)? {
        Some(0) => Err(invalid(keys.original_context, "0 is not a context length".into())),
        Some(n) => Ok(n as usize),
        None => Ok(context_length),
    }
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
    let original_context = original_context(file, keys, context_length)?;
    Ok(Some(LongRope { short: factors(SHORT_FACTORS)?, long: factors(LONG_FACTORS)?, original_context }))
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

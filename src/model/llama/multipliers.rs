//! The constant factors of the forward pass that metadata decides, rather than the shapes alone:
//! - the attention scale, what multiplies every query·key product before the softmax (and before Gemma 2's soft
//!   cap): 1/√head_dim, except
//!   - Gemma 2 27B and Gemma 3 27B, which llama.cpp recognizes by their layer counts (46 and 62) and scales by
//!     1/√(n_embd / n_head) (their `query_pre_attn_scalar`; 4608 / 32 = 144 and 5376 / 32 = 168, where their
//!     heads are 128 wide);
//!   - Granite's `attention.scale` when its file has one;
//! - the embedding scale: Gemma's √n_embd, Granite's `embedding_scale`;
//! - Granite's residual scale (`residual_scale`): multiplies each attention and FFN output before its residual add;
//! - Granite's logit scale (`logit_scale`, required as llama.cpp requires it): divides the logits.
//!
//! As in llama.cpp, Granite's optional multipliers are absent when they are 0.

use crate::model::gguf::GgufFile;

use super::architecture::{Architecture, MultiplierRule};
use super::config::ModelConfigError;

/// The multipliers of one model (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Multipliers {
    pub attention_scale: f32,
    pub embed_scale: Option<f32>,
    pub residual_scale: Option<f32>,
    pub logit_scale: Option<f32>,
}

/// The widths the default scales derive from.
#[derive(Clone, Copy, Debug)]
pub struct Widths {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
}

/// Reads architecture `arch`'s multipliers from `file`, as its `MultiplierRule` says.
pub(super) fn read(file: &GgufFile, arch: Architecture, w: Widths) -> Result<Multipliers, ModelConfigError> {
    let keys = arch.keys();
    let inverse_sqrt = |n: usize| 1.0 / (n as f32).sqrt();
    let mut m = Multipliers {
        attention_scale: inverse_sqrt(w.head_dim),
        embed_scale: arch.traits().embed_scale.then(|| (w.n_embd as f32).sqrt()),
        residual_scale: None,
        logit_scale: None,
    };
    match arch.spec().multipliers {
        MultiplierRule::Standard => {}
        MultiplierRule::AttentionByWidthAtLayers(layers) => {
            if w.n_layer == layers {
                if !w.n_embd.is_multiple_of(w.n_head) {
                    return Err(ModelConfigError::Invalid {
                        key: keys.head_count,
                        detail: format!("{} heads do not divide the embedding width {}", w.n_head, w.n_embd),
                    });
                }
                m.attention_scale = inverse_sqrt(w.n_embd / w.n_head);
            }
        }
        MultiplierRule::Granite => {
            m.attention_scale = optional(file, keys.attention_scale)?.unwrap_or(m.attention_scale);
            m.embed_scale = optional(file, keys.embedding_scale)?;
            m.residual_scale = optional(file, keys.residual_scale)?;
            let logit_scale = file.f32(keys.logit_scale)?;
            if !(logit_scale.is_finite() && logit_scale > 0.0) {
                let detail = format!("{logit_scale} is not a positive divisor");
                return Err(ModelConfigError::Invalid { key: keys.logit_scale, detail });
            }
            m.logit_scale = Some(logit_scale);
        }
    }
    Ok(m)
}

/// A positive multiplier at `key`; `None` when absent or 0.
fn optional(file: &GgufFile, key: &'static str) -> Result<Option<f32>, ModelConfigError> {
    match file.optional(key, GgufFile::f32)? {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        Some(v) => Err(ModelConfigError::Invalid { key, detail: format!("{v} is not a positive multiplier") }),
    }
}

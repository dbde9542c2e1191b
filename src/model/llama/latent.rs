//! Multi-head latent attention (DeepSeek V2 and V3; llama.cpp's `src/models/deepseek2.cpp` on files with
//! `key_length_mla`, its `is_mla()`), run as llama.cpp runs it: with the key decompression absorbed into the queries,
//! so that the cache holds one compressed row per position (one key/value "head", `kv_lora_rank + rope_dim` wide)
//! and the values are that row's first `kv_lora_rank` elements, never stored apart.
//!
//! ```text
//! per token of layer l; n_head heads, nope = key_length_mla − rope_dim, r = kv_lora_rank
//! q        = x·Wqᵀ, or rms_norm(x·Wq_aᵀ, attn_q_a_norm)·Wq_bᵀ     [n_head][nope + rope_dim]
//! c | k_pe = x·Wkv_aᵀ                                             [r] | [rope_dim]     (attn_kv_a_mqa)
//! key      = rms_norm(c, attn_kv_a_norm) | rope(k_pe)             [r + rope_dim]       the cache's row
//! query_h  = Wk_b[h]·q_h[..nope] | rope(q_h[nope..])              [r + rope_dim]       (attn_k_b: r rows × nope)
//! att_h    = Σ_p softmax_p(scale · query_h·key_p) · key_p[..r]    [r]                  causal, over the cache
//! out_h    = Wv_b[h]·att_h                                        [v_head_dim]         (attn_v_b: v rows × r)
//! x       += (out_0 | … | out_{n_head−1})·Woᵀ
//! scale    = mscale² / √(nope + rope_dim)
//! ```
//!
//! RoPE turns the last `rope_dim` dimensions of each query head and of the key, on adjacent pairs. Under YaRN with a
//! `yarn_log_multiplier` (every DeepSeek file written since llama.cpp's fix, which stores `0.1 · mscale_all_dim`
//! and divides it back by 0.1), llama.cpp cancels YaRN's magnitude correction of the rotations and puts
//! `mscale = 1 + 0.1 · log_mul · ln(factor)` squared into the scale instead; without the key the rotations keep
//! their correction and the scale gains its square too, as llama.cpp computes both.

use crate::model::gguf::GgufFile;

use super::architecture::Architecture;
use super::config::ModelConfigError;
use super::rope_scaling::RopeScaling;

/// The queries' compression (`attn_q_a`), normalized by this before `attn_q_b`.
pub const Q_A: &str = "attn_q_a.weight";
pub const Q_A_NORM: &str = "attn_q_a_norm.weight";
pub const Q_B: &str = "attn_q_b.weight";
/// The compressed key row and the RoPE part of the key, in one projection.
pub const KV_A: &str = "attn_kv_a_mqa.weight";
pub const KV_A_NORM: &str = "attn_kv_a_norm.weight";
/// Per head: the key decompression (absorbed into the query) and the value decompression.
pub const K_B: &str = "attn_k_b.weight";
pub const V_B: &str = "attn_v_b.weight";
/// Older files' single decompression tensor (llama.cpp's non-MLA path), not run by ember.
const KV_B: &str = "attn_kv_b.weight";

/// The shapes of a model's latent attention (every layer alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatentAttention {
    /// `attention.q_lora_rank`: queries through a compressed rank; `None` (absent or 0, DeepSeek-V2-Lite): `attn_q`.
    pub q_lora_rank: Option<usize>,
    /// `attention.kv_lora_rank`: the compressed key row and the values' width.
    pub kv_lora_rank: usize,
    /// Per head, the query·key dimensions RoPE does not turn: `key_length_mla − rope_dim`.
    pub nope_dim: usize,
    /// Per head, the decompressed value's width (`value_length_mla`).
    pub v_head_dim: usize,
}

impl LatentAttention {
    /// Width of one query head as projected: `nope_dim + rope_dim`.
    pub fn query_head_width(&self, rope_dim: usize) -> usize {
        self.nope_dim + rope_dim
    }
}

/// What `read` found: the shapes, the attention scale, and whether YaRN's rotation correction stays.
pub(super) struct Latent {
    pub shapes: LatentAttention,
    pub attention_scale: f32,
    pub corrects_rotations: bool,
}

/// The largest rank or width accepted (as `config.rs`'s `MAX_DIM`).
const MAX_DIM: u32 = 1 << 20;

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

/// Reads the latent attention of a family whose traits say it has one (`None` otherwise). `head_dim` is the file's
/// `key_length` (the cache row), `value_length` its `value_length`.
pub(super) fn read(
    file: &GgufFile,
    arch: Architecture,
    heads: (usize, usize),
    head_dim: usize,
    rope_dim: usize,
    scaling: &RopeScaling,
) -> Result<Option<Latent>, ModelConfigError> {
    if !arch.traits().latent_attention {
        return Ok(None);
    }
    let k = arch.keys();
    let (_, n_head_kv) = heads;
    let dim = |key: &'static str| -> Result<Option<usize>, ModelConfigError> {
        match file.optional(key, GgufFile::u32)? {
            Some(v) if v > MAX_DIM => Err(invalid(key, format!("{v} is not in 0..={MAX_DIM}"))),
            v => Ok(v.map(|v| v as usize)),
        }
    };
    let (key_mla, value_mla) = (dim(k.key_length_mla)?, dim(k.value_length_mla)?);
    let (Some(key_mla), Some(v_head_dim)) = (key_mla.filter(|&n| n > 0), value_mla.filter(|&n| n > 0)) else {
        let detail = if file.tensor_info(&format!("blk.0.{KV_B}")).is_some() {
            "missing: a file with one attn_kv_b per layer (converted before llama.cpp split it into attn_k_b and \
             attn_v_b) is not supported; convert the model again"
        } else {
            "missing or 0: ember runs the latent attention of files that set key_length_mla and value_length_mla"
        };
        let key = if key_mla.is_some_and(|n| n > 0) { k.value_length_mla } else { k.key_length_mla };
        return Err(invalid(key, detail.into()));
    };
    if n_head_kv != 1 {
        return Err(invalid(k.head_count_kv, format!("{n_head_kv}: latent attention has one key/value row (1)")));
    }
    let kv_lora_rank = match dim(k.kv_lora_rank)? {
        Some(r) if r > 0 => r,
        _ => return Err(invalid(k.kv_lora_rank, "missing or 0".into())),
    };
    if head_dim != kv_lora_rank + rope_dim {
        let detail = format!("{head_dim} is not kv_lora_rank + rope dimensions ({kv_lora_rank} + {rope_dim})");
        return Err(invalid(k.key_length, detail));
    }
    if let Some(v) = file.optional(k.value_length, GgufFile::u32)? {
        if v as usize != kv_lora_rank {
            return Err(invalid(k.value_length, format!("{v} is not kv_lora_rank ({kv_lora_rank})")));
        }
    }
    if key_mla <= rope_dim {
        let detail = format!("{key_mla} leaves no dimensions outside the {rope_dim} RoPE turns");
        return Err(invalid(k.key_length_mla, detail));
    }
    let q_lora_rank = dim(k.q_lora_rank)?.filter(|&r| r > 0);
    if let Some(n) = file.optional(k.nextn_predict_layers, GgufFile::u32)?.filter(|&n| n > 0) {
        let detail = format!("{n} multi-token-prediction layers are not implemented");
        return Err(invalid(k.nextn_predict_layers, detail));
    }
    if let Some(t) = file.optional(k.attention_temperature_scale, GgufFile::f32)?.filter(|&t| t != 0.0) {
        let detail = format!("{t}: attention temperature tuning is not implemented");
        return Err(invalid(k.attention_temperature_scale, detail));
    }
    let log_key = k.rope_scaling.yarn_log_multiplier;
    // [llama.cpp's TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: the converter stores 0.1 · mscale_all_dim.
    let log_mul = match file.optional(log_key, GgufFile::f32)? {
        None => 0.0,
        Some(m) if m.is_finite() => f64::from(m) / 0.1,
        Some(m) => return Err(invalid(log_key, format!("{m} is not a finite number"))),
    };
    let (scale, corrects_rotations) = scales(scaling, log_mul, key_mla);
    Ok(Some(Latent {
        shapes: LatentAttention { q_lora_rank, kv_lora_rank, nope_dim: key_mla - rope_dim, v_head_dim },
        attention_scale: scale,
        corrects_rotations,
    }))
}

/// The attention scale and whether YaRN's correction stays on the rotations, as llama.cpp computes them for
/// `deepseek2` (`llama_context`'s `yarn_attn_factor`, then the graph's `kq_scale`).
fn scales(scaling: &RopeScaling, log_mul: f64, key_mla: usize) -> (f32, bool) {
    let ln_factor = super::rope::ln(1.0 / f64::from(scaling.freq_scale));
    let attn_factor = f64::from(scaling.attn_factor);
    let yarn = scaling.yarn.is_some();
    // What the graph receives as `attn_factor`: under YaRN, 1 / (1 + 0.1 ln factor) times the attention factor where
    // the log multiplier cancels the correction (get_mscale(f, m) / get_mscale(f, m) = 1), else times 1.
    let graph_attn_factor = match (yarn, log_mul != 0.0) {
        (true, true) => attn_factor / (1.0 + 0.1 * ln_factor),
        _ => attn_factor,
    };
    let original = graph_attn_factor * (1.0 + 0.1 * ln_factor);
    let mscale = original * (1.0 + 0.1 * log_mul * ln_factor);
    let scale = (mscale * mscale / (key_mla as f64).sqrt()) as f32;
    (scale, !(yarn && log_mul != 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::Value;
    use crate::model::llama::rope_scaling::Yarn;
    use crate::model::llama::{LlamaConfig, SyntheticSpec};

    type Writer = crate::model::gguf::writer::GgufWriter;

    /// deepseek3-small's file edited by `edit`, loaded: "loaded", or the error.
    fn load(edit: impl Fn(Writer) -> Writer) -> String {
        let spec = SyntheticSpec::family("deepseek3-small", 1, 2).unwrap();
        let bytes = edit(spec.writer_with_byte_vocabulary()).to_bytes();
        match LlamaConfig::from_gguf(&GgufFile::from_bytes(&bytes).unwrap()) {
            Ok(_) => "loaded".into(),
            Err(e) => e.to_string(),
        }
    }

    fn set(key: &'static str, v: Value) -> impl Fn(Writer) -> Writer {
        move |w| w.set_metadata(key, v.clone())
    }

    #[test]
    fn hostile_latent_and_routing_keys_are_refused_by_name() {
        assert_eq!(load(|w| w), "loaded");
        let cases: [(&str, Value, &str); 12] = [
            ("deepseek2.attention.kv_lora_rank", Value::U32(0), "missing or 0"),
            ("deepseek2.attention.kv_lora_rank", Value::U32(u32::MAX), "0..="),
            ("deepseek2.attention.head_count_kv", Value::U32(2), "one key/value row"),
            ("deepseek2.attention.key_length", Value::U32(161), "kv_lora_rank + rope"),
            ("deepseek2.attention.key_length_mla", Value::U32(32), "no dimensions outside"),
            ("deepseek2.attention.value_length_mla", Value::U32(0), "missing or 0"),
            ("deepseek2.nextn_predict_layers", Value::U32(1), "multi-token-prediction"),
            ("deepseek2.expert_gating_func", Value::U32(4), "ember implements 1 (softmax) and 2 (sigmoid)"),
            ("deepseek2.expert_group_count", Value::U32(3), "groups of 2 or more"),
            ("deepseek2.expert_group_used_count", Value::U32(4), "not in 1..4"),
            ("deepseek2.leading_dense_block_count", Value::U32(2), "leave none of the 2"),
            ("deepseek2.expert_shared_count", Value::U32(u32::MAX), "shared experts"),
        ];
        for (key, value, expected) in cases {
            let e = load(set(key, value.clone()));
            assert!(e.contains(key) && e.contains(expected), "{key} = {value:?}: {e}");
        }
        // 8 groups of 2 experts with 1 kept cannot hold the 4 chosen.
        let e = load(|w| {
            w.set_metadata("deepseek2.expert_group_count", Value::U32(8))
                .set_metadata("deepseek2.expert_group_used_count", Value::U32(1))
        });
        assert!(e.contains("expert_group_used_count") && e.contains("fewer than the 4 chosen"), "{e}");
        // A file converted before the split decompression names its problem.
        let e = load(|w| {
            w.without_metadata("deepseek2.attention.key_length_mla").tensor_f32("blk.0.attn_kv_b.weight", &[1], &[0.0])
        });
        assert!(e.contains("key_length_mla") && e.contains("attn_kv_b"), "{e}");
    }

    fn scaling(freq_scale: f32, yarn: bool) -> RopeScaling {
        let yarn = yarn.then_some(Yarn { original_context: 4096, corrects_rotations: true });
        RopeScaling { freq_scale, attn_factor: 1.0, yarn }
    }

    #[test]
    fn the_scale_is_llama_cpps_for_each_yarn_case() {
        // No scaling: 1/√192.
        let (s, keeps) = scales(&scaling(1.0, false), 0.0, 192);
        assert!((s - 1.0 / 192f32.sqrt()).abs() < 1e-9 && keeps);
        // DeepSeek-V2-Lite's: YaRN by 40, mscale_all_dim 0.707 (stored 0.0707): the rotations lose the
        // correction, the scale gains (1 + 0.0707 ln 40)².
        let (s, keeps) = scales(&scaling(1.0 / 40.0, true), 0.707, 192);
        let m = 1.0 + 0.1 * 0.707 * 40f64.ln();
        assert!(((s as f64) - m * m / 192f64.sqrt()).abs() < 1e-7 && !keeps, "{s}");
        // YaRN without the key: both keep (1 + 0.1 ln 40).
        let (s, keeps) = scales(&scaling(1.0 / 40.0, true), 0.0, 192);
        let m = 1.0 + 0.1 * 40f64.ln();
        assert!(((s as f64) - m * m / 192f64.sqrt()).abs() < 1e-7 && keeps, "{s}");
    }
}

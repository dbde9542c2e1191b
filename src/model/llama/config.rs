//! Llama hyperparameters read from GGUF metadata, and the check that every tensor the forward pass needs is
//! present with the shape those hyperparameters imply.
//!
//! Keys follow llama.cpp's `LLM_KV_*` names with the `llama.` architecture prefix. Tensor names follow its
//! `LLM_TENSOR_*` names (`token_embd.weight`, `blk.N.attn_q.weight`, ...).

use std::fmt;

use crate::model::gguf::{GgmlType, GgufError, GgufFile};

/// The hyperparameters of a llama model.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks (`llama.block_count`).
    pub n_layer: usize,
    /// Width of the residual stream (`llama.embedding_length`).
    pub n_embd: usize,
    /// Hidden width of the SwiGLU feed-forward (`llama.feed_forward_length`).
    pub n_ff: usize,
    /// Query heads (`llama.attention.head_count`).
    pub n_head: usize,
    /// Key/value heads (`llama.attention.head_count_kv`); each serves `n_head / n_head_kv` query heads.
    pub n_head_kv: usize,
    /// Width of one head: `n_embd / n_head`.
    pub head_dim: usize,
    /// RoPE base frequency (`llama.rope.freq_base`, 10000 when absent as in llama.cpp).
    pub rope_base: f32,
    /// Leading dimensions of each head that RoPE rotates (`llama.rope.dimension_count`, default `head_dim`).
    pub rope_dim: usize,
    /// RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Context length the model was trained for (`llama.context_length`).
    pub context_length: usize,
    /// Rows of the embedding table (`llama.vocab_size`, or the table's shape when the key is absent).
    pub vocab_size: usize,
    /// True when the output projection reuses `token_embd.weight` (no `output.weight` tensor).
    pub tied_output: bool,
}

/// Why a file is not a usable llama model.
#[derive(Debug)]
pub enum ModelConfigError {
    /// Reading a key or tensor failed (missing, wrong type, unsupported tensor type).
    Gguf(GgufError),
    /// `general.architecture` is not `llama`.
    UnsupportedArchitecture(String),
    /// A hyperparameter is out of range or inconsistent with another.
    Invalid { key: &'static str, detail: String },
    /// A tensor has another shape than the hyperparameters imply.
    TensorShape { tensor: String, expected: Vec<u64>, found: Vec<u64> },
    /// A norm weight is not f32 (the forward pass reads norms as f32 directly).
    NormNotF32 { tensor: String, dtype: GgmlType },
}

impl fmt::Display for ModelConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelConfigError::Gguf(e) => e.fmt(f),
            ModelConfigError::UnsupportedArchitecture(a) => {
                write!(f, "unsupported model architecture {a:?} (ember runs llama models)")
            }
            ModelConfigError::Invalid { key, detail } => write!(f, "invalid {key}: {detail}"),
            ModelConfigError::TensorShape { tensor, expected, found } => {
                write!(f, "tensor {tensor:?} has shape {found:?}, expected {expected:?}")
            }
            ModelConfigError::NormNotF32 { tensor, dtype } => {
                write!(f, "norm tensor {tensor:?} has type {dtype}, expected F32")
            }
        }
    }
}

impl std::error::Error for ModelConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelConfigError::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GgufError> for ModelConfigError {
    fn from(e: GgufError) -> Self {
        ModelConfigError::Gguf(e)
    }
}

/// Largest sizes accepted for any hyperparameter: far above any llama model, small enough that buffer sizes
/// computed from them cannot overflow.
const MAX_DIM: u32 = 1 << 20;
const MAX_LAYERS: u32 = 4096;

fn positive(file: &GgufFile, key: &'static str, max: u32) -> Result<usize, ModelConfigError> {
    let v = file.u32(key)?;
    if v == 0 || v > max {
        return Err(ModelConfigError::Invalid { key, detail: format!("{v} is not in 1..={max}") });
    }
    Ok(v as usize)
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

impl LlamaConfig {
    /// Reads and validates the hyperparameters, then checks every tensor's presence, type and shape.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelConfigError> {
        let arch = file.str("general.architecture")?;
        if arch != "llama" {
            return Err(ModelConfigError::UnsupportedArchitecture(arch.to_owned()));
        }
        let n_layer = positive(file, "llama.block_count", MAX_LAYERS)?;
        let n_embd = positive(file, "llama.embedding_length", MAX_DIM)?;
        let n_ff = positive(file, "llama.feed_forward_length", MAX_DIM)?;
        let n_head = positive(file, "llama.attention.head_count", MAX_DIM)?;
        let n_head_kv = positive(file, "llama.attention.head_count_kv", MAX_DIM)?;
        let context_length = positive(file, "llama.context_length", MAX_DIM)?;
        if n_embd % n_head != 0 {
            return Err(invalid(
                "llama.attention.head_count",
                format!("{n_head} heads do not divide the embedding width {n_embd}"),
            ));
        }
        if n_head % n_head_kv != 0 {
            return Err(invalid(
                "llama.attention.head_count_kv",
                format!("{n_head_kv} key/value heads do not divide the {n_head} query heads"),
            ));
        }
        let head_dim = n_embd / n_head;
        let rope_base = file.optional("llama.rope.freq_base", GgufFile::f32)?.unwrap_or(10_000.0);
        if !(rope_base.is_finite() && rope_base > 0.0) {
            return Err(invalid("llama.rope.freq_base", format!("{rope_base} is not a positive number")));
        }
        let rope_dim = file.optional("llama.rope.dimension_count", GgufFile::u32)?.map_or(head_dim, |d| d as usize);
        if rope_dim == 0 || rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(invalid(
                "llama.rope.dimension_count",
                format!("{rope_dim} must be even and in 2..={head_dim} (the head width)"),
            ));
        }
        let rms_eps = file.f32("llama.attention.layer_norm_rms_epsilon")?;
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(invalid("llama.attention.layer_norm_rms_epsilon", format!("{rms_eps} is not positive")));
        }
        let embd_shape = file.tensor("token_embd.weight")?.shape().to_vec();
        let vocab_from_table = embd_shape.get(1).copied().unwrap_or(0);
        let vocab_size = match file.optional("llama.vocab_size", GgufFile::u32)? {
            Some(v) => v as usize,
            None => usize::try_from(vocab_from_table).unwrap_or(0),
        };
        if vocab_size == 0 || vocab_size > (1 << 24) {
            return Err(invalid("llama.vocab_size", format!("{vocab_size} is not in 1..=16777216")));
        }
        let config = LlamaConfig {
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            rope_base,
            rope_dim,
            rms_eps,
            context_length,
            vocab_size,
            tied_output: file.tensor_info("output.weight").is_none(),
        };
        config.check_tensors(file)?;
        Ok(config)
    }

    /// Width of the key (and value) projection: `n_head_kv * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// The name of tensor `suffix` (e.g. `"attn_q.weight"`) in block `layer`.
    pub fn layer_tensor(layer: usize, suffix: &str) -> String {
        format!("blk.{layer}.{suffix}")
    }

    /// Every tensor the forward pass reads, with its expected shape (fastest-varying first) and whether it is a
    /// norm weight (must be F32).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>, bool)> {
        let (d, ff, kv, v) = (self.n_embd as u64, self.n_ff as u64, self.kv_dim() as u64, self.vocab_size as u64);
        let mut out = vec![("token_embd.weight".to_owned(), vec![d, v], false)];
        for l in 0..self.n_layer {
            for (suffix, shape, norm) in [
                ("attn_norm.weight", vec![d], true),
                ("attn_q.weight", vec![d, d], false),
                ("attn_k.weight", vec![d, kv], false),
                ("attn_v.weight", vec![d, kv], false),
                ("attn_output.weight", vec![d, d], false),
                ("ffn_norm.weight", vec![d], true),
                ("ffn_gate.weight", vec![d, ff], false),
                ("ffn_up.weight", vec![d, ff], false),
                ("ffn_down.weight", vec![ff, d], false),
            ] {
                out.push((Self::layer_tensor(l, suffix), shape, norm));
            }
        }
        out.push(("output_norm.weight".to_owned(), vec![d], true));
        if !self.tied_output {
            out.push(("output.weight".to_owned(), vec![d, v], false));
        }
        out
    }

    fn check_tensors(&self, file: &GgufFile) -> Result<(), ModelConfigError> {
        for (name, expected, is_norm) in self.expected_tensors() {
            let t = file.tensor(&name)?;
            // Trailing dimensions of 1 are the same tensor (some converters write [n, 1]).
            let mut found = t.shape().to_vec();
            while found.len() > expected.len() && found.last() == Some(&1) {
                found.pop();
            }
            if found != expected {
                return Err(ModelConfigError::TensorShape { tensor: name, expected, found: t.shape().to_vec() });
            }
            if is_norm && t.dtype() != GgmlType::F32 {
                return Err(ModelConfigError::NormNotF32 { tensor: name, dtype: t.dtype() });
            }
            t.require_supported()?;
        }
        Ok(())
    }
}

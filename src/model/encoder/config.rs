//! An encoder's hyperparameters and tensors, read from the GGUF file and checked as llama.cpp's loader checks them
//! (`src/models/bert.cpp`): every tensor the forward pass reads is present with the shape the hyperparameters imply,
//! before anything is allocated for it.

use crate::model::gguf::{GgmlType, GgufFile};
use crate::model::llama::ModelConfigError;

use super::pooling::Pooling;

/// The encoder architectures ember runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderArch {
    /// `bert`: BGE, E5, all-MiniLM, GTE. Learned absolute positions, q/k/v with biases, GELU FFN with biases,
    /// LayerNorm after each residual add.
    Bert,
    /// `nomic-bert`: nomic-embed-text v1 and v1.5. BERT's blocks with RoPE (NEOX pairs) for positions, q/k/v in one
    /// tensor, and a SwiGLU FFN; no biases but the LayerNorms'.
    NomicBert,
}

impl EncoderArch {
    pub fn name(self) -> &'static str {
        match self {
            EncoderArch::Bert => "bert",
            EncoderArch::NomicBert => "nomic-bert",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [EncoderArch::Bert, EncoderArch::NomicBert].into_iter().find(|a| a.name() == name)
    }
}

/// How an encoder knows where a token is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Positions {
    /// A learned vector per position (`position_embd.weight`), added to the token's.
    Learned,
    /// RoPE on every query and key head, NEOX pairs (`i` with `i + head_dim / 2`), `θ = p · base^(−2i/head_dim)`.
    Rope { base: f32 },
}

/// The feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderFfn {
    /// `GELU(x·Wupᵀ + bup)·Wdownᵀ + bdown` (the tanh form).
    Gelu,
    /// `(SiLU(x·Wgateᵀ) ⊙ x·Wupᵀ)·Wdownᵀ`.
    SwiGlu,
}

/// A sequence-classification head (rerankers, cross-encoders: `pooling_type` rank): the first token's vector, then
/// `tanh(cls·x + cls_b)` when the file has the pooler (`cls.weight`), then `cls.output·x + cls.output_b`, one score
/// per label (llama.cpp's `build_pooling` for `LLAMA_POOLING_TYPE_RANK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classifier {
    /// Whether the pooler's dense layer and tanh come first (`cls.weight`, `cls.bias`).
    pub pooler: bool,
    /// Scores per input (`cls.output.weight`'s rows): 1 for a reranker.
    pub n_out: usize,
}

/// Which of a layer's projections the file gives biases (read from layer 0; every layer must have the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncoderBiases {
    pub qkv: bool,
    pub output: bool,
    pub ffn: bool,
}

/// The hyperparameters of a bidirectional encoder.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub arch: EncoderArch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_ff: usize,
    /// Positions the model was trained for: the learned position table's rows, the longest input.
    pub context_length: usize,
    pub vocab_size: usize,
    /// LayerNorm epsilon (`{arch}.attention.layer_norm_epsilon`).
    pub norm_eps: f32,
    /// How token vectors become the input's vector, as the file says (`{arch}.pooling_type`).
    pub pooling: Pooling,
    /// Whether `token_types.weight` is present: its row 0 ("sentence A") is added to every token, as llama.cpp does.
    pub token_types: bool,
    pub positions: Positions,
    /// Queries, keys and values in one tensor (`attn_qkv`), taken apart at load, rather than three.
    pub fused_qkv: bool,
    pub ffn: EncoderFfn,
    pub biases: EncoderBiases,
    /// The classification head, when the file has one (`cls.output.weight`).
    pub classifier: Option<Classifier>,
}

/// Largest width, layer count or context accepted: beyond any encoder, small enough that buffer sizes computed from
/// them cannot overflow.
const MAX_DIM: usize = 1 << 20;

impl EncoderConfig {
    /// Whether `general.architecture` names an encoder ember runs.
    pub fn is_encoder(file: &GgufFile) -> bool {
        file.str("general.architecture").is_ok_and(|a| EncoderArch::from_name(a).is_some())
    }

    /// Reads and validates the hyperparameters, then checks every tensor's presence, type and shape.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelConfigError> {
        let name = file.str("general.architecture")?;
        let arch =
            EncoderArch::from_name(name).ok_or_else(|| ModelConfigError::UnsupportedArchitecture(name.into()))?;
        let key = |k: &str| format!("{name}.{k}");
        let dim = |k: &'static str| -> Result<usize, ModelConfigError> {
            let v = file.u32(&key(k))? as usize;
            if v == 0 || v > MAX_DIM {
                return Err(ModelConfigError::Invalid { key: k, detail: format!("{v} is not in 1..={MAX_DIM}") });
            }
            Ok(v)
        };
        let n_embd = dim("embedding_length")?;
        let n_head = dim("attention.head_count")?;
        if !n_embd.is_multiple_of(n_head) {
            return Err(ModelConfigError::Invalid {
                key: "attention.head_count",
                detail: format!("{n_head} heads do not divide the width {n_embd}"),
            });
        }
        if let Some(kv) = file.optional(&key("attention.head_count_kv"), GgufFile::u32)? {
            if kv as usize != n_head {
                return Err(ModelConfigError::Invalid {
                    key: "attention.head_count_kv",
                    detail: format!("{kv}: an encoder's keys have as many heads as its queries ({n_head})"),
                });
            }
        }
        if file.optional(&key("attention.causal"), GgufFile::bool)? == Some(true) {
            return Err(ModelConfigError::Invalid {
                key: "attention.causal",
                detail: "true: ember runs this architecture as a bidirectional encoder only".into(),
            });
        }
        let norm_eps = file.f32(&key("attention.layer_norm_epsilon"))?;
        if !(norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(ModelConfigError::Invalid {
                key: "attention.layer_norm_epsilon",
                detail: format!("{norm_eps} is not a finite non-negative number"),
            });
        }
        let pooling = match file.optional(&key("pooling_type"), GgufFile::u32)? {
            None => Pooling::None,
            Some(v) => Pooling::from_gguf(v).ok_or_else(|| ModelConfigError::Invalid {
                key: "pooling_type",
                detail: format!("{v} is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)"),
            })?,
        };
        let vocab_size = match file.optional("tokenizer.ggml.tokens", GgufFile::string_array)? {
            Some(tokens) => tokens.len(),
            None => file.tensor("token_embd.weight")?.shape().get(1).copied().unwrap_or(0) as usize,
        };
        let has = |suffix: &str| file.tensor_info(&Self::layer_tensor(0, suffix)).is_some();
        let fused_qkv = has("attn_qkv.weight");
        let positions = match arch {
            EncoderArch::Bert => Positions::Learned,
            EncoderArch::NomicBert => {
                let base = file.optional(&key("rope.freq_base"), GgufFile::f32)?.unwrap_or(10_000.0);
                if !(base.is_finite() && base > 1.0) {
                    return Err(ModelConfigError::Invalid {
                        key: "rope.freq_base",
                        detail: format!("{base} is not a finite number above 1"),
                    });
                }
                let head_dim = n_embd / n_head;
                if let Some(dims) = file.optional(&key("rope.dimension_count"), GgufFile::u32)? {
                    if dims as usize != head_dim {
                        return Err(ModelConfigError::Invalid {
                            key: "rope.dimension_count",
                            detail: format!("{dims}: ember rotates whole heads ({head_dim})"),
                        });
                    }
                }
                if !head_dim.is_multiple_of(2) {
                    return Err(ModelConfigError::Invalid {
                        key: "attention.head_count",
                        detail: format!("heads of {head_dim}: RoPE needs an even width"),
                    });
                }
                Positions::Rope { base }
            }
        };
        let config = EncoderConfig {
            arch,
            n_layer: dim("block_count")?,
            n_embd,
            n_head,
            n_ff: dim("feed_forward_length")?,
            context_length: dim("context_length")?,
            vocab_size,
            norm_eps,
            pooling,
            token_types: file.tensor_info("token_types.weight").is_some(),
            positions,
            fused_qkv,
            ffn: if has("ffn_gate.weight") { EncoderFfn::SwiGlu } else { EncoderFfn::Gelu },
            biases: EncoderBiases {
                qkv: has(if fused_qkv { "attn_qkv.bias" } else { "attn_q.bias" }),
                output: has("attn_output.bias"),
                ffn: has("ffn_up.bias"),
            },
            classifier: Self::classifier(file, n_embd)?,
        };
        config.check_tensors(file)?;
        Ok(config)
    }

    /// The classification head of `file` (`cls.output.weight` `[n_embd, n_out]`, the optional pooler `cls.weight`).
    fn classifier(file: &GgufFile, n_embd: usize) -> Result<Option<Classifier>, ModelConfigError> {
        let Some(out) = file.tensor_info("cls.output.weight") else { return Ok(None) };
        let n_out = match out.shape.as_slice() {
            [d, n] if *d as usize == n_embd && (1..=1024).contains(n) => *n as usize,
            [d] if *d as usize == n_embd => 1,
            shape => {
                return Err(ModelConfigError::TensorShape {
                    tensor: "cls.output.weight".into(),
                    expected: vec![n_embd as u64, 1],
                    found: shape.to_vec(),
                })
            }
        };
        Ok(Some(Classifier { pooler: file.tensor_info("cls.weight").is_some(), n_out }))
    }

    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// The name of tensor `suffix` of layer `l`.
    pub fn layer_tensor(l: usize, suffix: &str) -> String {
        format!("blk.{l}.{suffix}")
    }

    /// Every tensor the forward pass reads, with its shape (fastest-varying first) and whether it is a vector read
    /// as f32 (norms and biases).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<u64>, bool)> {
        let (d, ff) = (self.n_embd as u64, self.n_ff as u64);
        // In this order: synthetic files draw their weights in it (`synthetic.rs`), and the committed fixtures were
        // made from those files.
        let mut out = vec![("token_embd.weight".to_owned(), vec![d, self.vocab_size as u64], false)];
        if self.positions == Positions::Learned {
            out.push(("position_embd.weight".to_owned(), vec![d, self.context_length as u64], false));
        }
        out.push(("token_embd_norm.weight".to_owned(), vec![d], true));
        out.push(("token_embd_norm.bias".to_owned(), vec![d], true));
        if self.token_types {
            // Any number of types: only the first row is read.
            out.push(("token_types.weight".to_owned(), vec![d], false));
        }
        let b = self.biases;
        for l in 0..self.n_layer {
            let mut push =
                |suffix: &str, shape: Vec<u64>, vector: bool| out.push((Self::layer_tensor(l, suffix), shape, vector));
            if self.fused_qkv {
                push("attn_qkv.weight", vec![d, 3 * d], false);
                if b.qkv {
                    push("attn_qkv.bias", vec![3 * d], true);
                }
            } else {
                for name in ["attn_q", "attn_k", "attn_v"] {
                    push(&format!("{name}.weight"), vec![d, d], false);
                    if b.qkv {
                        push(&format!("{name}.bias"), vec![d], true);
                    }
                }
            }
            push("attn_output.weight", vec![d, d], false);
            if b.output {
                push("attn_output.bias", vec![d], true);
            }
            push("attn_output_norm.weight", vec![d], true);
            push("attn_output_norm.bias", vec![d], true);
            if self.ffn == EncoderFfn::SwiGlu {
                push("ffn_gate.weight", vec![d, ff], false);
            }
            push("ffn_up.weight", vec![d, ff], false);
            if b.ffn {
                push("ffn_up.bias", vec![ff], true);
            }
            push("ffn_down.weight", vec![ff, d], false);
            if b.ffn {
                push("ffn_down.bias", vec![d], true);
            }
            push("layer_output_norm.weight", vec![d], true);
            push("layer_output_norm.bias", vec![d], true);
        }
        if let Some(c) = self.classifier {
            if c.pooler {
                out.push(("cls.weight".to_owned(), vec![d, d], false));
                out.push(("cls.bias".to_owned(), vec![d], true));
            }
            out.push(("cls.output.weight".to_owned(), vec![d, c.n_out as u64], false));
            out.push(("cls.output.bias".to_owned(), vec![c.n_out as u64], true));
        }
        out
    }

    fn check_tensors(&self, file: &GgufFile) -> Result<(), ModelConfigError> {
        for (name, expected, is_vector) in self.expected_tensors() {
            let t = file.tensor(&name)?;
            let mut found = t.shape().to_vec();
            while found.len() > expected.len() && found.last() == Some(&1) {
                found.pop();
            }
            // ggml drops trailing dimensions of 1 when it writes a tensor (`ggml_n_dims`): llama-quantize stores a
            // one-score head, `[n_embd, 1]`, as `[n_embd]`.
            while found.len() < expected.len() && expected[found.len()..].iter().all(|&d| d == 1) {
                found.push(1);
            }
            let matches = if name == "token_types.weight" {
                found.len() <= 2 && found.first() == expected.first()
            } else {
                found == expected
            };
            if !matches {
                return Err(ModelConfigError::TensorShape { tensor: name, expected, found: t.shape().to_vec() });
            }
            if is_vector && t.dtype() != GgmlType::F32 {
                return Err(ModelConfigError::NormNotF32 { tensor: name, dtype: t.dtype() });
            }
            t.require_supported()?;
        }
        Ok(())
    }
}

//! What an embedder runs: an encoder (`bert`, `nomic-bert`), or a decoder whose file (or the engine's `pooling`
//! option) declares a pooling (Qwen3-Embedding, Qwen3-Reranker); and the shape requests are checked against.

use crate::backend::cpu::{CpuDecoderEmbedder, CpuEncoder, EncodeError, Precision};
use crate::model::encoder::{DecoderHead, EncoderConfig, Pooling};
use crate::model::gguf::GgufFile;
use crate::model::llama::LlamaConfig;
use crate::model::TokenId;

/// What requests are checked against, whichever model runs.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbedShape {
    /// `general.architecture` (`"bert"`, `"qwen3"`, ...).
    pub arch: String,
    /// The vectors' width.
    pub n_embd: usize,
    pub vocab_size: usize,
    /// The longest input the model takes (its positions).
    pub context_length: usize,
    /// The pooling of requests that name none: the engine's `pooling` option, else the file's.
    pub pooling: Pooling,
    /// Scores per input of the classification head (rerankers), if the model has one.
    pub rank_outputs: Option<usize>,
    /// A decoder reranker's pair prompt (`tokenizer.chat_template.rerank`).
    pub rerank_template: Option<String>,
}

/// The model of an embedder, as loaded from its file.
pub enum Loaded {
    Encoder(EncoderConfig),
    Decoder(Box<LlamaConfig>, DecoderHead),
}

impl Loaded {
    /// Reads `file`'s configuration: an encoder's, or a decoder's with its pooling head (`pooling` overrides the
    /// file's). A decoder that declares no pooling is refused: it is a chat model.
    pub fn from_gguf(file: &GgufFile, pooling: Option<Pooling>) -> Result<Self, String> {
        if EncoderConfig::is_encoder(file) {
            let mut config = EncoderConfig::from_gguf(file).map_err(|e| e.to_string())?;
            if let Some(p) = pooling {
                config.pooling = p;
            }
            return Ok(Loaded::Encoder(config));
        }
        let config = LlamaConfig::from_gguf(file).map_err(|e| e.to_string())?;
        match DecoderHead::from_gguf(file, config.n_embd, pooling).map_err(|e| e.to_string())? {
            Some(head) => Ok(Loaded::Decoder(Box::new(config), head)),
            None => Err(format!(
                "{} is a generation model: its file declares no pooling ({}.pooling_type), so it gives no \
                 embeddings (start the engine with \"pooling\" to embed with it)",
                config.arch.name(),
                config.arch.name()
            )),
        }
    }

    /// Whether `file` is served as an embedding model: an encoder, a decoder declaring a pooling, or any model when
    /// the engine asks for a pooling. Cheap (keys only); [`Loaded::from_gguf`] does the checking.
    pub fn is_embedding_model(file: &GgufFile, pooling: Option<Pooling>) -> bool {
        if EncoderConfig::is_encoder(file) || pooling.is_some_and(|p| p != Pooling::None) {
            return true;
        }
        let Ok(arch) = file.str("general.architecture") else { return false };
        matches!(file.optional(&format!("{arch}.pooling_type"), GgufFile::u32), Ok(Some(v)) if v != 0)
    }

    pub fn shape(&self) -> EmbedShape {
        match self {
            Loaded::Encoder(c) => EmbedShape {
                arch: c.arch.name().into(),
                n_embd: c.n_embd,
                vocab_size: c.vocab_size,
                context_length: c.context_length,
                pooling: c.pooling,
                rank_outputs: c.classifier.map(|h| h.n_out),
                rerank_template: None,
            },
            Loaded::Decoder(c, head) => EmbedShape {
                arch: c.arch.name().into(),
                n_embd: c.n_embd,
                vocab_size: c.vocab_size,
                context_length: c.context_length,
                pooling: head.pooling,
                rank_outputs: head.classifier_outputs,
                rerank_template: head.rerank_template.clone(),
            },
        }
    }

    /// Starts the model on the CPU.
    pub fn start(
        self,
        file: &GgufFile,
        threads: usize,
        max_batch_tokens: usize,
        precision: Precision,
    ) -> Result<EmbedModel<'_>, String> {
        match self {
            Loaded::Encoder(c) => CpuEncoder::new(file, c, threads, max_batch_tokens, precision)
                .map(|e| EmbedModel::Encoder(Box::new(e)))
                .map_err(|e| e.to_string()),
            Loaded::Decoder(c, head) => CpuDecoderEmbedder::new(file, *c, head, threads, max_batch_tokens, precision)
                .map(|d| EmbedModel::Decoder(Box::new(d)))
                .map_err(|e| e.to_string()),
        }
    }
}

/// A running model: one forward pass over a batch of inputs, pooled.
pub enum EmbedModel<'m> {
    Encoder(Box<CpuEncoder<'m>>),
    Decoder(Box<CpuDecoderEmbedder<'m>>),
}

impl EmbedModel<'_> {
    pub fn kernel_path(&self) -> &'static str {
        match self {
            EmbedModel::Encoder(e) => e.kernel_path(),
            EmbedModel::Decoder(d) => d.kernel_path(),
        }
    }

    pub fn max_batch_tokens(&self) -> usize {
        match self {
            EmbedModel::Encoder(e) => e.max_batch_tokens(),
            EmbedModel::Decoder(d) => d.max_batch_tokens(),
        }
    }

    /// Each input's vector by `pooling`, unnormalized, into `out` (`[inputs][n_embd]`).
    pub fn embed(&mut self, inputs: &[&[TokenId]], pooling: Pooling, out: &mut [f32]) -> Result<(), EncodeError> {
        match self {
            EmbedModel::Encoder(e) => e.embed(inputs, pooling, out),
            EmbedModel::Decoder(d) => d.embed(inputs, pooling, out),
        }
    }

    /// Each input's scores from the classification head into `out` (`[inputs][labels]`).
    pub fn rank(&mut self, inputs: &[&[TokenId]], out: &mut [f32]) -> Result<(), EncodeError> {
        match self {
            EmbedModel::Encoder(e) => e.rank(inputs, out),
            EmbedModel::Decoder(d) => d.rank(inputs, out),
        }
    }
}

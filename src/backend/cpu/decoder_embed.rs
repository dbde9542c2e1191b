//! `CpuDecoderEmbedder`: a decoder model (Qwen3-Embedding, Qwen3-Reranker, any family whose file declares pooling)
//! run for vectors and scores instead of tokens. Each input is a sequence of its own from position 0, causal as the
//! model was trained; many inputs share one step of the decoder's forward pass (`model::llama::forward`), which
//! computes no logits, and each input's final-normed hidden states are pooled (`model::encoder::decoder_head`).
//!
//! The KV cache only lives through the step: each input's blocks are handed out from the start of the pool for
//! every step, and a batch whose inputs need more blocks than the pool has runs as several steps.

use super::kernels::{kernels, Kernels};
use super::{CpuBackend, CpuBackendError, CpuBackendOptions, EncodeError, Precision};
use crate::backend::KvCacheTypes;
use crate::model::encoder::{DecoderHead, Pooling};
use crate::model::gguf::{GgufError, GgufFile};
use crate::model::llama::batch::SeqChunk;
use crate::model::llama::forward::forward;
use crate::model::llama::LlamaConfig;
use crate::model::TokenId;

/// Positions per KV block of the step's cache.
const BLOCK: usize = 16;
/// Blocks beyond the batch's tokens, for the partial last block of each input (more inputs than this in one batch
/// split it into steps).
const SPARE_BLOCKS: usize = 256;

/// What pools one input after its step: `(backend, input, its first row in the step, its index)`.
type PoolInput<'f, 'm> = dyn FnMut(&CpuBackend<'m>, &[TokenId], usize, usize) + 'f;

pub struct CpuDecoderEmbedder<'m> {
    backend: CpuBackend<'m>,
    head: DecoderHead,
    /// `cls.output.weight` dequantized, `[labels][n_embd]` (rank pooling).
    classifier: Vec<f32>,
    max_batch_tokens: usize,
}

impl<'m> CpuDecoderEmbedder<'m> {
    /// Loads `file`'s decoder (`config`) with the pooling `head`, for batches of up to `max_batch_tokens` tokens.
    pub fn new(
        file: &'m GgufFile,
        config: LlamaConfig,
        head: DecoderHead,
        threads: usize,
        max_batch_tokens: usize,
        precision: Precision,
    ) -> Result<Self, CpuBackendError> {
        Self::with_kernels(file, config, head, threads, max_batch_tokens, precision, kernels())
    }

    /// [`CpuDecoderEmbedder::new`] on a given kernel path (every path computes the same bits).
    pub fn with_kernels(
        file: &'m GgufFile,
        config: LlamaConfig,
        head: DecoderHead,
        threads: usize,
        max_batch_tokens: usize,
        precision: Precision,
        kernels: &'static Kernels,
    ) -> Result<Self, CpuBackendError> {
        let d = config.n_embd;
        let classifier = match head.classifier_outputs {
            None => Vec::new(),
            Some(labels) => {
                let load = || -> Result<Vec<f32>, GgufError> {
                    let m = super::kernels::WeightMatrix::from_tensor(&file.tensor("cls.output.weight")?)?;
                    let mut all = vec![0f32; labels * d];
                    for (r, row) in all.chunks_exact_mut(d).enumerate() {
                        m.dequantize_row(r, row);
                    }
                    Ok(all)
                };
                load().map_err(CpuBackendError::Gguf)?
            }
        };
        let options = CpuBackendOptions {
            threads,
            max_batch_tokens,
            kv_block_size: BLOCK,
            kv_num_blocks: max_batch_tokens.div_ceil(BLOCK) + SPARE_BLOCKS,
            kv_window_blocks: None,
            precision,
            kv_cache: KvCacheTypes::default(),
        };
        let backend = CpuBackend::with_kernels(file, config, options, kernels)?;
        Ok(CpuDecoderEmbedder { backend, head, classifier, max_batch_tokens })
    }

    pub fn config(&self) -> &LlamaConfig {
        self.backend.config()
    }

    pub fn head(&self) -> &DecoderHead {
        &self.head
    }

    pub fn kernel_path(&self) -> &'static str {
        self.backend.kernel_path()
    }

    pub fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }

    /// Scores per input of [`CpuDecoderEmbedder::rank`] (`None`: the file has no classification head).
    pub fn rank_outputs(&self) -> Option<usize> {
        self.head.classifier_outputs
    }

    /// Each input's vector by `pooling` (`mean`, `cls`: first token, `last`) into `out` (`[inputs][n_embd]`),
    /// unnormalized.
    pub fn embed(&mut self, inputs: &[&[TokenId]], pooling: Pooling, out: &mut [f32]) -> Result<(), EncodeError> {
        let d = self.config().n_embd;
        if matches!(pooling, Pooling::None | Pooling::Rank) {
            return Err(EncodeError::Pooling(pooling));
        }
        if out.len() != inputs.len() * d {
            return Err(EncodeError::OutputLength { expected: inputs.len() * d, found: out.len() });
        }
        let mut row = vec![0f32; d];
        self.run(inputs, &mut |backend, input, first_row, vector: usize| {
            let pooled = &mut out[vector * d..(vector + 1) * d];
            match pooling {
                Pooling::Cls => backend.final_hidden(first_row, pooled),
                Pooling::Last => backend.final_hidden(first_row + input.len() - 1, pooled),
                _ => {
                    // Summed in f32 in token order, then scaled once (as `Pooling::pool`).
                    pooled.fill(0.0);
                    for r in first_row..first_row + input.len() {
                        backend.final_hidden(r, &mut row);
                        pooled.iter_mut().zip(&row).for_each(|(p, x)| *p += x);
                    }
                    let scale = 1.0 / input.len() as f32;
                    pooled.iter_mut().for_each(|p| *p *= scale);
                }
            }
        })
    }

    /// Scores each input with the classification head from its last token (a causal model's only token that saw
    /// the whole pair): `out` is `[inputs][labels]`, softmaxed for Qwen 3 (`[p(yes), p(no)]`).
    pub fn rank(&mut self, inputs: &[&[TokenId]], out: &mut [f32]) -> Result<(), EncodeError> {
        let labels = self.head.classifier_outputs.ok_or(EncodeError::Pooling(Pooling::Rank))?;
        if out.len() != inputs.len() * labels {
            return Err(EncodeError::OutputLength { expected: inputs.len() * labels, found: out.len() });
        }
        let d = self.config().n_embd;
        let mut last = vec![0f32; d];
        let (classifier, softmax) = (std::mem::take(&mut self.classifier), self.head.softmax);
        let result = self.run(inputs, &mut |backend, input, first_row, index| {
            backend.final_hidden(first_row + input.len() - 1, &mut last);
            let scores = &mut out[index * labels..(index + 1) * labels];
            for (s, w) in scores.iter_mut().zip(classifier.chunks_exact(d)) {
                *s = w.iter().zip(&last).map(|(w, x)| w * x).sum();
            }
            if softmax {
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                scores.iter_mut().for_each(|s| *s = (*s - max).exp());
                let sum: f32 = scores.iter().sum();
                scores.iter_mut().for_each(|s| *s /= sum);
            }
        });
        self.classifier = classifier;
        result
    }

    /// Runs `inputs` through the decoder in as few steps as the cache allows, calling `pool(backend, input, its
    /// first row in the step, its index)` for each after its step.
    fn run(&mut self, inputs: &[&[TokenId]], pool: &mut PoolInput<'_, 'm>) -> Result<(), EncodeError> {
        let (context, vocab) = (self.config().context_length, self.config().vocab_size);
        let max_input = context.min(self.max_batch_tokens);
        for (index, input) in inputs.iter().enumerate() {
            if input.is_empty() {
                return Err(EncodeError::EmptyInput { index });
            }
            if input.len() > max_input {
                return Err(EncodeError::InputTooLong { index, tokens: input.len(), max: max_input });
            }
            if let Some(&token) = input.iter().find(|&&t| t as usize >= vocab) {
                return Err(EncodeError::TokenOutOfRange { index, token, vocab_size: vocab });
            }
        }
        let num_blocks = self.backend.kv_cache().num_blocks();
        let tables: Vec<u32> = (0..num_blocks as u32).collect();
        let mut start = 0;
        while start < inputs.len() {
            // The longest run of inputs from `start` within the step's tokens and the cache's blocks.
            let (mut end, mut tokens, mut blocks) = (start, 0, 0);
            while end < inputs.len() {
                let len = inputs[end].len();
                if tokens + len > self.max_batch_tokens || blocks + len.div_ceil(BLOCK) > num_blocks {
                    break;
                }
                tokens += len;
                blocks += len.div_ceil(BLOCK);
                end += 1;
            }
            if end == start {
                // Unreachable for inputs within `max_input`: the pool holds a whole batch's blocks.
                return Err(EncodeError::BatchTooLarge { tokens: inputs[start].len(), max: self.max_batch_tokens });
            }
            let mut chunks = Vec::with_capacity(end - start);
            let mut next_block = 0;
            for input in &inputs[start..end] {
                let n = input.len().div_ceil(BLOCK);
                chunks.push(SeqChunk {
                    tokens: input,
                    start_pos: 0,
                    block_table: &tables[next_block..next_block + n],
                    window_table: &[],
                    logit_rows: 0,
                });
                next_block += n;
            }
            let config = self.backend.config().clone();
            forward(&config, &mut self.backend, &chunks, &mut []).map_err(|e| EncodeError::Backend(e.to_string()))?;
            let mut first_row = 0;
            for (offset, input) in inputs[start..end].iter().enumerate() {
                pool(&self.backend, input, first_row, start + offset);
                first_row += input.len();
            }
            start = end;
        }
        Ok(())
    }
}

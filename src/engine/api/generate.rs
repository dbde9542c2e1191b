//! Single-sequence generation without the engine thread: prefill the prompt in chunks, then decode token by
//! token. For tests, benchmarks and the command-line demo; the engine serves many sequences at once instead.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use crate::backend::cpu::CpuBackendOptions;
use crate::engine::kv::kv_window::WindowBlocks;
use crate::engine::output::finish::FinishReason;
use crate::engine::sampling::{Sampler, SamplingParams};
use crate::model::llama::{forward, LlamaBackend, LlamaConfig, SeqChunk};
use crate::model::TokenId;

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateRequest<'a> {
    pub prompt: &'a [TokenId],
    /// Most tokens to generate (the context may end generation earlier).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Tokens that end generation (typically the tokenizer's end-of-generation set); not part of the output.
    pub stop_ids: &'a [TokenId],
    /// Seed used when `sampling.seed` is unset.
    pub default_seed: u64,
}

/// The geometry the backend was built with: the batch size limits prefill chunks, the block size maps positions.
#[derive(Clone, Copy, Debug)]
pub struct SingleSequenceLayout {
    pub max_batch_tokens: usize,
    pub kv_block_size: usize,
    pub kv_num_blocks: usize,
    /// The sliding-window layers' pool, when the backend has one: the sequence keeps only the blocks its windows
    /// still read there. At least [`single_sequence_window_blocks`], or a step past the window fails (the backend
    /// refuses its window table).
    pub kv_window_blocks: Option<usize>,
}

impl SingleSequenceLayout {
    /// The layout of a CPU backend built with `options`.
    pub fn of(options: &CpuBackendOptions) -> Self {
        SingleSequenceLayout {
            max_batch_tokens: options.max_batch_tokens,
            kv_block_size: options.kv_block_size,
            kv_num_blocks: options.kv_num_blocks,
            kv_window_blocks: options.kv_window_blocks,
        }
    }
}

/// The window pool one sequence needs with `options` on a model with `config`'s layers (`None` when the model has
/// no sliding-window layers): what `CpuBackendOptions::kv_window_blocks` is set to for the windowed layers to keep
/// only their windows.
pub fn single_sequence_window_blocks(config: &LlamaConfig, options: &CpuBackendOptions) -> Option<usize> {
    let (max_chunk, bs, global) = (options.max_batch_tokens, options.kv_block_size, options.kv_num_blocks);
    config.max_window().map(|window| WindowBlocks::pool_size(window, max_chunk, bs, 1, global))
}

/// What came out, with the two phases timed.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<TokenId>,
    pub finish_reason: FinishReason,
    /// From the start until the first token was sampled (the whole prompt's prefill).
    pub time_to_first_token: Duration,
    /// From the first token to the last.
    pub decode_time: Duration,
}

impl Generation {
    /// Decode speed: tokens after the first over the time they took.
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        let secs = self.decode_time.as_secs_f64();
        (self.tokens.len() > 1 && secs > 0.0).then(|| (self.tokens.len() - 1) as f64 / secs)
    }
}

/// Generates from `request.prompt` on `backend`, calling `on_token` with each generated token as soon as it is
/// sampled (return `ControlFlow::Break` to stop early). The sequence owns KV blocks `0..` of the backend's cache,
/// and the window pool's blocks as it needs them.
pub fn generate<B: LlamaBackend>(
    config: &LlamaConfig,
    backend: &mut B,
    layout: SingleSequenceLayout,
    request: &GenerateRequest<'_>,
    mut on_token: impl FnMut(TokenId) -> ControlFlow<()>,
) -> Result<Generation, B::Error> {
    let start = Instant::now();
    let context = config.context_length.min(layout.kv_num_blocks * layout.kv_block_size);
    let block_table: Vec<u32> = (0..layout.kv_num_blocks as u32).collect();
    let mut window = match (layout.kv_window_blocks, config.max_window()) {
        (Some(blocks), Some(w)) => Some(WindowBlocks::new(blocks, layout.kv_block_size, w)),
        _ => None,
    };
    let mut window_table = Vec::new();
    // A pool too small leaves the table short of the step: the backend refuses it, with its reason.
    let mut fit = |start: usize, end: usize, table: &mut Vec<u32>| {
        if let Some(window) = &mut window {
            window.fit(table, start, end);
        }
    };
    let mut sampler = Sampler::new(request.sampling.clone(), request.prompt, request.default_seed);
    let mut logits = vec![0f32; config.vocab_size];
    let mut tokens = Vec::new();
    let mut first_token_at = None;

    // Prefill in chunks of the backend's batch size; logits only for the last chunk.
    let mut pos = 0;
    for chunk in request.prompt.chunks(layout.max_batch_tokens.max(1)) {
        let last = pos + chunk.len() == request.prompt.len();
        fit(pos, pos + chunk.len(), &mut window_table);
        let seq = SeqChunk {
            tokens: chunk,
            start_pos: pos,
            block_table: &block_table,
            window_table: &window_table,
            logit_rows: usize::from(last),
        };
        forward(config, backend, &[seq], if last { &mut logits } else { &mut [] })?;
        pos += chunk.len();
    }

    let finish_reason = loop {
        if tokens.len() >= request.max_tokens {
            break FinishReason::Length;
        }
        let token = sampler.sample(&mut logits);
        first_token_at.get_or_insert_with(Instant::now);
        if request.stop_ids.contains(&token) {
            break FinishReason::Stop;
        }
        sampler.accept(token);
        tokens.push(token);
        if on_token(token).is_break() {
            break FinishReason::Cancelled;
        }
        if pos >= context || tokens.len() >= request.max_tokens {
            break FinishReason::Length;
        }
        fit(pos, pos + 1, &mut window_table);
        let seq = SeqChunk {
            tokens: &[token],
            start_pos: pos,
            block_table: &block_table,
            window_table: &window_table,
            logit_rows: 1,
        };
        forward(config, backend, &[seq], &mut logits)?;
        pos += 1;
    };
    let first = first_token_at.unwrap_or_else(Instant::now);
    Ok(Generation {
        tokens,
        finish_reason,
        time_to_first_token: first - start,
        decode_time: Instant::now().saturating_duration_since(first),
    })
}

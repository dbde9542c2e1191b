//! What an embeddings or rerank call computed, in the two forms a host reads: the response body, and the floats
//! themselves, contiguous, with each input's token count and the request's timing metrics (what the C ABI's
//! `EmberEmbeddings` hands out in place, so that a host need not parse numbers back out of JSON). Also what the two
//! bodies write alike: `usage` and the gated `metrics`.

use serde::Serialize;

use super::json::Slot;
use super::metrics_gate::{MetricsGate, TimingMetricsJson};
use crate::engine::embed::{embed_timing_metrics, EmbedOutput, Embedder};
use crate::engine::metrics::PerRequestTimingMetrics;

/// One call's result.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderAnswer {
    /// `[count][dimensions]`, row-major: an embeddings request's vectors in input order, as the body has them
    /// (`dimensions` kept, normalized as asked); a rerank request's scores in document order, `dimensions` 1,
    /// every document's whatever `top_n` keeps in the body.
    pub floats: Vec<f32>,
    /// Floats per input.
    pub dimensions: usize,
    /// Each input's tokens, in input order (a rerank input is the query–document pair):
    /// `usage.prompt_tokens_per_input`.
    pub input_tokens: Vec<usize>,
    /// The five timing metrics (`engine::embed::embed_timing_metrics`), whatever the metrics gate says: the body
    /// carries them only behind it, the C getter whenever the engine records stats.
    pub metrics: PerRequestTimingMetrics,
    /// The response body (JSON).
    pub body: String,
}

impl EncoderAnswer {
    /// The number of inputs (embeddings request) or documents (rerank request).
    pub fn count(&self) -> usize {
        self.input_tokens.len()
    }
}

/// `usage` of both bodies: OpenAI's two integers, and each input's own count (ember's: the same tokens, by input,
/// under a name no OpenAI client reads as one of its integers).
#[derive(Serialize)]
pub(super) struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
    prompt_tokens_per_input: Vec<usize>,
}

impl Usage {
    pub fn of(output: &EmbedOutput) -> Self {
        let tokens = output.total_tokens();
        Usage { prompt_tokens: tokens, total_tokens: tokens, prompt_tokens_per_input: output.input_tokens.clone() }
    }
}

/// The request's five metrics, and the body's `metrics` behind chat's double gate (engine
/// `enable_per_request_metrics` and request `include_metrics`): an object, or absent. An encoder request is one
/// answer, so never the `null` of a chat request with several choices.
pub(super) fn gated_metrics(
    embedder: &Embedder,
    output: &EmbedOutput,
    include_metrics: bool,
) -> (PerRequestTimingMetrics, Slot<TimingMetricsJson>) {
    let config = embedder.config();
    let metrics = embed_timing_metrics(output, config.disable_log_stats);
    let gate = MetricsGate::new(config.enable_per_request_metrics, include_metrics, false);
    (metrics, gate.response(&[metrics]))
}

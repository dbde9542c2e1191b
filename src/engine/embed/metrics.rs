//! An embedding or rerank request's five timing metrics: chat's names (`engine::metrics`), defined over the
//! embedder's events, so that a host reads one set of fields for every request it sends
//! (`docs/per_request_metrics.md`, "Embeddings and reranking").
//!
//! The events, all on the monotonic clock (`EmbedTiming`): the call queues the request (`submitted`), the first
//! batch holding one of its inputs starts (`started`, chat's `scheduled_ts`), and its last vector is written
//! (`finished`). A vector is the request's answer, so it takes the place of the first token; nothing is generated
//! after it.

use super::request::EmbedOutput;
use crate::engine::metrics::PerRequestTimingMetrics;

/// The five metrics of a finished request; every field absent when the engine records no stats
/// (`disable_log_stats`).
///
/// - `time_to_first_token_ms`: first batch → last vector, `compute_time × 1000` (as chat's, from first
///   scheduling, so `queue_time_ms + time_to_first_token_ms` is the call's wait for its vectors).
/// - `queue_time_ms`: queued → first batch, `queue_time × 1000`.
/// - `generation_time_ms`, `mean_itl_ms`: absent, nothing is generated (a chat request's are absent before its
///   first token and with one token respectively; 0 would claim a measurement).
/// - `tokens_per_second`: the request's input tokens per second of `time_to_first_token_ms`, the encoder's
///   throughput for it (chat's rate includes its prefill likewise); absent when that time is 0.
pub fn embed_timing_metrics(output: &EmbedOutput, disable_log_stats: bool) -> PerRequestTimingMetrics {
    if disable_log_stats {
        return PerRequestTimingMetrics::default();
    }
    let timing = output.timing;
    PerRequestTimingMetrics {
        time_to_first_token_ms: Some(timing.compute_time * 1000.0),
        generation_time_ms: None,
        queue_time_ms: Some(timing.queue_time * 1000.0),
        mean_itl_ms: None,
        tokens_per_second: (timing.compute_time > 0.0).then(|| output.total_tokens() as f64 / timing.compute_time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::embed::EmbedTiming;

    fn output(queue_time: f64, compute_time: f64) -> EmbedOutput {
        EmbedOutput {
            dimensions: 1,
            vectors: vec![0.5, 0.25],
            input_tokens: vec![30, 10],
            timing: EmbedTiming { queue_time, compute_time, time_to_vectors: queue_time + compute_time },
        }
    }

    #[test]
    fn the_vectors_take_the_first_tokens_place() {
        let m = embed_timing_metrics(&output(0.002, 0.5), false);
        assert_eq!(m.time_to_first_token_ms, Some(500.0));
        assert_eq!(m.queue_time_ms, Some(2.0));
        assert_eq!(m.tokens_per_second, Some(80.0), "40 input tokens in half a second");
        assert_eq!((m.generation_time_ms, m.mean_itl_ms), (None, None), "nothing is generated");
    }

    #[test]
    fn no_rate_over_no_time_and_nothing_without_stats() {
        assert_eq!(embed_timing_metrics(&output(0.0, 0.0), false).tokens_per_second, None);
        assert_eq!(embed_timing_metrics(&output(0.1, 0.5), true), PerRequestTimingMetrics::default());
    }
}

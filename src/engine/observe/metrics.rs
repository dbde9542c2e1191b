//! Per-request timing metrics: every field's definition, next to its arithmetic, in one place.
//!
//! The definitions are a contract with hosts (billing, SLAs) and are documented field by field in
//! `docs/per_request_metrics.md`; change one here and there together. All inputs are the recorded events of
//! [`RequestStateStats`]; every output is optional: absent when an event it needs has not happened, or when the
//! engine records no stats at all.

use super::stats::RequestStateStats;

/// The five per-request timing metrics. Milliseconds, except `tokens_per_second`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerRequestTimingMetrics {
    /// `(first_token_ts − scheduled_ts) × 1000`: from first scheduling, not arrival (queueing is reported apart).
    pub time_to_first_token_ms: Option<f64>,
    /// `(last_token_ts − first_token_ts) × 1000`.
    pub generation_time_ms: Option<f64>,
    /// `(scheduled_ts − queued_ts) × 1000`.
    pub queue_time_ms: Option<f64>,
    /// `(last_token_ts − first_token_ts) / (n − 1) × 1000`, only for n > 1 generated tokens.
    pub mean_itl_ms: Option<f64>,
    /// `n / (last_token_ts − scheduled_ts)`, only when that interval is > 0. It includes the prefill, so it is not
    /// `1000 / mean_itl_ms`.
    pub tokens_per_second: Option<f64>,
}

/// Builds the five metrics from a request's stats and its number of generated tokens `n`.
/// No stats (recording disabled) → every field absent.
pub fn build_per_request_timing_metrics(
    stats: Option<&RequestStateStats>,
    num_generation_tokens: u32,
) -> PerRequestTimingMetrics {
    let Some(s) = stats else { return PerRequestTimingMetrics::default() };
    let n = num_generation_tokens;
    let ms = |later: Option<f64>, earlier: Option<f64>| Some((later? - earlier?) * 1000.0);
    PerRequestTimingMetrics {
        time_to_first_token_ms: ms(s.first_token_ts, s.scheduled_ts),
        generation_time_ms: ms(s.last_token_ts, s.first_token_ts),
        queue_time_ms: ms(s.scheduled_ts, s.queued_ts),
        mean_itl_ms: if n > 1 { ms(s.last_token_ts, s.first_token_ts).map(|t| t / f64::from(n - 1)) } else { None },
        tokens_per_second: match (s.last_token_ts, s.scheduled_ts) {
            (Some(last), Some(scheduled)) if last - scheduled > 0.0 => Some(f64::from(n) / (last - scheduled)),
            _ => None,
        },
    }
}

/// llama.cpp server's `timings` object, field for field, so that tools written for llama-server read ember's
/// responses unchanged. Each field is defined from ember's own metrics (`docs/per_request_metrics.md`, "llama.cpp
/// `timings`"); what llama-server leaves to a division by zero (inf, NaN) is `None` here.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LlamaCppTimings {
    /// Prompt tokens the prefix cache supplied: `num_cached_prompt_tokens`. `None` until first scheduled.
    pub cache_n: Option<u32>,
    /// Prompt tokens the request had to evaluate: `num_prompt_tokens − num_cached_prompt_tokens`. `None` until
    /// first scheduled.
    pub prompt_n: Option<u32>,
    /// From the start of prompt processing to the first sampled token: `time_to_first_token_ms`.
    pub prompt_ms: Option<f64>,
    /// `prompt_ms / prompt_n`, when `prompt_n > 0`.
    pub prompt_per_token_ms: Option<f64>,
    /// `prompt_n / prompt_ms × 1000`, when `prompt_ms > 0`.
    pub prompt_per_second: Option<f64>,
    /// Generated tokens, a stop token included (`completion_tokens`).
    pub predicted_n: Option<u32>,
    /// First to last generated token: `generation_time_ms` (0 for one token).
    pub predicted_ms: Option<f64>,
    /// `predicted_ms / (predicted_n − 1)` = `mean_itl_ms`: the `n − 1` gaps `predicted_ms` spans.
    pub predicted_per_token_ms: Option<f64>,
    /// `(predicted_n − 1) / predicted_ms × 1000`, when `predicted_ms > 0`: a decode-only rate.
    pub predicted_per_second: Option<f64>,
}

/// Builds llama.cpp's `timings` from a request's stats (its `n` is `num_generation_tokens`). The times are the
/// five metrics' own (one arithmetic for both objects); only the counts and the rates are new here. No stats →
/// every field absent.
pub fn build_llamacpp_timings(stats: Option<&RequestStateStats>) -> LlamaCppTimings {
    let Some(s) = stats else { return LlamaCppTimings::default() };
    let n = s.num_generation_tokens;
    let five = build_per_request_timing_metrics(Some(s), n);
    // The cache is looked up when the request is first scheduled: before, neither count is known.
    let scheduled = s.scheduled_ts.is_some();
    let cache_n = scheduled.then_some(s.num_cached_prompt_tokens);
    let prompt_n = scheduled.then(|| s.num_prompt_tokens.saturating_sub(s.num_cached_prompt_tokens));
    let prompt_ms = five.time_to_first_token_ms;
    let predicted_ms = five.generation_time_ms;
    // A rate over a zero-length interval, or a mean over no tokens, would be inf or NaN: absent instead.
    let per_token = |ms: Option<f64>, count: u32| ms.filter(|_| count > 0).map(|ms| ms / f64::from(count));
    let per_second = |ms: Option<f64>, count: u32| ms.filter(|&ms| ms > 0.0).map(|ms| f64::from(count) * 1000.0 / ms);
    LlamaCppTimings {
        cache_n,
        prompt_n,
        prompt_ms,
        prompt_per_token_ms: prompt_n.and_then(|p| per_token(prompt_ms, p)),
        prompt_per_second: prompt_n.and_then(|p| per_second(prompt_ms, p)),
        predicted_n: Some(n),
        predicted_ms,
        predicted_per_token_ms: five.mean_itl_ms,
        // One token spans no gap and has `predicted_ms` 0, so it has no rate either.
        predicted_per_second: per_second(predicted_ms, n.saturating_sub(1)),
    }
}

/// Metrics beyond the five, for latency debugging and billing. Milliseconds unless named otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExtendedTimingMetrics {
    /// `(finished_ts − arrival_ts) × 1000`: what the host experienced end to end; absent until finished.
    pub e2e_latency_ms: Option<f64>,
    /// `(first_token_ts − arrival_ts) × 1000`: TTFT as an outside observer measures it (queueing included),
    /// named apart from `time_to_first_token_ms`, which starts at scheduling.
    pub ttft_from_arrival_ms: Option<f64>,
    /// Wall time of the engine steps that computed this request's prompt tokens (recomputation included).
    pub prefill_time_ms: Option<f64>,
    /// `num_computed_prompt_tokens / prefill_time`, when that time is > 0.
    pub prefill_tokens_per_second: Option<f64>,
    pub num_prompt_tokens: Option<u32>,
    /// Prompt tokens whose keys and values were reused rather than computed.
    pub num_cached_prompt_tokens: Option<u32>,
    pub num_preemptions: Option<u32>,
    /// Speculative decoding (`speculative/`): draft tokens verified for the request, and those accepted.
    pub num_draft_tokens: Option<u32>,
    pub num_accepted_tokens: Option<u32>,
    /// Inter-token latency percentiles over the `n − 1` gaps between consecutive tokens (nearest-rank: the
    /// smallest gap with at least p% of gaps ≤ it); absent for n < 2.
    pub itl_p50_ms: Option<f64>,
    pub itl_p90_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub itl_max_ms: Option<f64>,
    /// Engine compute attributed to this request: Σ over its steps of step duration × (its tokens in the step /
    /// all tokens in the step). Sums to the engine's busy time over all requests: a fair basis for billing.
    pub compute_share_ms: Option<f64>,
    /// Mean time a generated token waited in the output queue before the host polled it; absent until the host
    /// has polled a token. Large values mean the host, not the engine, is slow.
    pub output_wait_ms: Option<f64>,
}

/// Builds the extended metrics from a request's stats. No stats → every field absent.
pub fn build_extended_timing_metrics(stats: Option<&RequestStateStats>) -> ExtendedTimingMetrics {
    let Some(s) = stats else { return ExtendedTimingMetrics::default() };
    let ms = |later: Option<f64>, earlier: Option<f64>| Some((later? - earlier?) * 1000.0);
    let prefill_s = prefill_time_s(s);
    let computed_prompt_tokens = num_computed_prompt_tokens(s);
    let mut gaps: Vec<f64> = s.token_ts.windows(2).map(|w| (w[1] - w[0]) * 1000.0).collect();
    gaps.sort_by(f64::total_cmp);
    ExtendedTimingMetrics {
        e2e_latency_ms: ms(s.finished_ts, s.arrival_ts),
        ttft_from_arrival_ms: ms(s.first_token_ts, s.arrival_ts),
        prefill_time_ms: (computed_prompt_tokens > 0).then_some(prefill_s * 1000.0),
        prefill_tokens_per_second: (prefill_s > 0.0).then(|| f64::from(computed_prompt_tokens) / prefill_s),
        num_prompt_tokens: Some(s.num_prompt_tokens),
        num_cached_prompt_tokens: Some(s.num_cached_prompt_tokens),
        num_preemptions: Some(s.num_preemptions),
        num_draft_tokens: Some(s.num_draft_tokens),
        num_accepted_tokens: Some(s.num_accepted_tokens),
        itl_p50_ms: nearest_rank(&gaps, 50.0),
        itl_p90_ms: nearest_rank(&gaps, 90.0),
        itl_p99_ms: nearest_rank(&gaps, 99.0),
        itl_max_ms: gaps.last().copied(),
        compute_share_ms: Some(compute_share_s(s) * 1000.0),
        output_wait_ms: (s.num_polled_tokens > 0).then(|| s.output_wait_s * 1000.0 / f64::from(s.num_polled_tokens)),
    }
}

/// Σ over the request's steps of the step's duration × (its tokens in the step ÷ all tokens in the step).
pub fn compute_share_s(s: &RequestStateStats) -> f64 {
    s.steps
        .iter()
        .filter(|e| e.batch_tokens > 0)
        .map(|e| (e.end_ts - e.start_ts) * f64::from(e.tokens) / f64::from(e.batch_tokens))
        .sum()
}

/// Σ of the durations of the steps that computed prompt tokens of the request (recomputation included); a
/// prefix-cache hit computes nothing, so it adds nothing.
pub fn prefill_time_s(s: &RequestStateStats) -> f64 {
    s.steps.iter().filter(|e| e.prefill).map(|e| e.end_ts - e.start_ts).sum()
}

/// Prompt tokens actually computed, recomputation after a preemption included (cached ones are not).
pub fn num_computed_prompt_tokens(s: &RequestStateStats) -> u32 {
    s.steps.iter().filter(|e| e.prefill).map(|e| e.tokens).sum()
}

/// The nearest-rank percentile of sorted values: the value at rank ⌈p/100 · N⌉ (1-based); `None` when empty.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Token timestamps relative to arrival, in milliseconds (`token_ts − arrival_ts`), for hosts that want the raw
/// series; empty when not recorded.
pub fn token_times_since_arrival_ms(stats: Option<&RequestStateStats>) -> Vec<f64> {
    match stats {
        Some(s) => match s.arrival_ts {
            Some(arrival) => s.token_ts.iter().map(|t| (t - arrival) * 1000.0).collect(),
            None => Vec::new(),
        },
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::observe::stats::StepEvent;

    fn stats(queued: Option<f64>, scheduled: Option<f64>, tokens: &[f64]) -> RequestStateStats {
        let mut s = RequestStateStats {
            arrival_time: 1.7e9,
            arrival_ts: Some(0.5),
            queued_ts: queued,
            scheduled_ts: scheduled,
            ..Default::default()
        };
        tokens.iter().for_each(|&t| s.record_token(t));
        s
    }

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("field present");
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    }

    #[test]
    fn no_stats_means_every_field_absent() {
        assert_eq!(build_per_request_timing_metrics(None, 5), PerRequestTimingMetrics::default());
        assert_eq!(build_extended_timing_metrics(None), ExtendedTimingMetrics::default());
        assert!(token_times_since_arrival_ms(None).is_empty());
    }

    #[test]
    fn all_five_from_complete_stats() {
        let s = stats(Some(1.0), Some(1.5), &[2.0, 2.1, 2.3, 2.6]);
        let m = build_per_request_timing_metrics(Some(&s), 4);
        close(m.queue_time_ms, 500.0);
        close(m.time_to_first_token_ms, 500.0);
        close(m.generation_time_ms, 600.0);
        close(m.mean_itl_ms, 200.0);
        close(m.tokens_per_second, 4.0 / 1.1);
    }

    #[test]
    fn zero_tokens_leaves_token_metrics_absent() {
        let s = stats(Some(1.0), Some(1.5), &[]);
        let m = build_per_request_timing_metrics(Some(&s), 0);
        close(m.queue_time_ms, 500.0);
        assert_eq!((m.time_to_first_token_ms, m.generation_time_ms), (None, None));
        assert_eq!((m.mean_itl_ms, m.tokens_per_second), (None, None));
    }

    #[test]
    fn one_token_has_zero_generation_time_and_no_itl() {
        let s = stats(Some(1.0), Some(1.5), &[2.0]);
        let m = build_per_request_timing_metrics(Some(&s), 1);
        close(m.generation_time_ms, 0.0);
        assert_eq!(m.mean_itl_ms, None);
        close(m.tokens_per_second, 2.0);
    }

    #[test]
    fn two_tokens_have_one_gap() {
        let s = stats(Some(1.0), Some(1.5), &[2.0, 2.25]);
        let m = build_per_request_timing_metrics(Some(&s), 2);
        close(m.mean_itl_ms, 250.0);
    }

    #[test]
    fn missing_timestamps_leave_their_fields_absent() {
        // Queued but not yet scheduled: nothing but nothing.
        let m = build_per_request_timing_metrics(Some(&stats(Some(1.0), None, &[])), 0);
        assert_eq!(m, PerRequestTimingMetrics::default());
        // Scheduled without a recorded queue time: no queue_time, the rest present.
        let m = build_per_request_timing_metrics(Some(&stats(None, Some(1.5), &[2.0, 3.0])), 2);
        assert_eq!(m.queue_time_ms, None);
        close(m.time_to_first_token_ms, 500.0);
        // Tokens without a scheduling time: no TTFT, no tokens/s, generation time still defined.
        let m = build_per_request_timing_metrics(Some(&stats(Some(1.0), None, &[2.0, 3.0])), 2);
        assert_eq!((m.time_to_first_token_ms, m.tokens_per_second), (None, None));
        close(m.generation_time_ms, 1000.0);
    }

    #[test]
    fn zero_length_intervals() {
        // Scheduled and first token at the same instant: TTFT 0, and tokens/s undefined (division by zero).
        let s = stats(Some(1.0), Some(1.0), &[1.0]);
        let m = build_per_request_timing_metrics(Some(&s), 1);
        close(m.queue_time_ms, 0.0);
        close(m.time_to_first_token_ms, 0.0);
        assert_eq!(m.tokens_per_second, None);
        // Several tokens at one instant: a zero mean ITL, which is defined.
        let s = stats(Some(1.0), Some(1.5), &[2.0, 2.0, 2.0]);
        close(build_per_request_timing_metrics(Some(&s), 3).mean_itl_ms, 0.0);
    }

    #[test]
    fn n_comes_from_the_caller_not_the_token_list() {
        let s = stats(Some(1.0), Some(1.5), &[2.0, 2.5]);
        close(build_per_request_timing_metrics(Some(&s), 3).mean_itl_ms, 250.0);
    }

    /// `stats` with a prompt of `prompt` tokens, `cached` of them from the prefix cache.
    fn with_prompt(mut s: RequestStateStats, prompt: u32, cached: u32) -> RequestStateStats {
        s.num_prompt_tokens = prompt;
        s.num_cached_prompt_tokens = cached;
        s
    }

    #[test]
    fn llamacpp_timings_from_complete_stats() {
        // Scheduled at 1.5 s, first token at 2.0 s, last at 2.6 s: 500 ms of prompt, 600 ms over 3 gaps.
        let s = with_prompt(stats(Some(1.0), Some(1.5), &[2.0, 2.1, 2.3, 2.6]), 37, 24);
        let t = build_llamacpp_timings(Some(&s));
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (Some(24), Some(13), Some(4)));
        close(t.prompt_ms, 500.0);
        close(t.prompt_per_token_ms, 500.0 / 13.0);
        close(t.prompt_per_second, 13.0 / 0.5);
        close(t.predicted_ms, 600.0);
        close(t.predicted_per_token_ms, 200.0);
        close(t.predicted_per_second, 5.0);
        // The same times as the five metrics, by construction.
        let m = build_per_request_timing_metrics(Some(&s), 4);
        assert_eq!((t.prompt_ms, t.predicted_ms), (m.time_to_first_token_ms, m.generation_time_ms));
        assert_eq!(t.predicted_per_token_ms, m.mean_itl_ms);
    }

    #[test]
    fn llamacpp_timings_without_stats_or_before_scheduling() {
        assert_eq!(build_llamacpp_timings(None), LlamaCppTimings::default());
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), None, &[]), 10, 0)));
        assert_eq!(t, LlamaCppTimings { predicted_n: Some(0), ..Default::default() });
    }

    #[test]
    fn llamacpp_timings_of_zero_tokens() {
        // Scheduled, cancelled before its first token: the counts, and no time.
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), Some(1.5), &[]), 10, 4)));
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (Some(4), Some(6), Some(0)));
        assert_eq!((t.prompt_ms, t.prompt_per_token_ms, t.prompt_per_second), (None, None, None));
        assert_eq!((t.predicted_ms, t.predicted_per_token_ms, t.predicted_per_second), (None, None, None));
    }

    #[test]
    fn llamacpp_timings_of_one_token() {
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), Some(1.5), &[2.0]), 10, 0)));
        assert_eq!(t.predicted_n, Some(1));
        close(t.predicted_ms, 0.0);
        assert_eq!((t.predicted_per_token_ms, t.predicted_per_second), (None, None), "one token has no gap");
        close(t.prompt_per_second, 20.0);
    }

    #[test]
    fn llamacpp_timings_of_zero_length_intervals_are_absent_not_infinite() {
        // First token sampled at the scheduling instant, and every token at one instant.
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), Some(1.0), &[1.0, 1.0, 1.0]), 8, 0)));
        close(t.prompt_ms, 0.0);
        close(t.prompt_per_token_ms, 0.0);
        assert_eq!(t.prompt_per_second, None);
        close(t.predicted_ms, 0.0);
        close(t.predicted_per_token_ms, 0.0);
        assert_eq!(t.predicted_per_second, None);
        // A prompt entirely evaluated before (prompt_n 0, which the engine avoids: it computes the last token).
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), Some(1.5), &[2.0]), 8, 8)));
        assert_eq!((t.prompt_n, t.prompt_per_token_ms), (Some(0), None));
        close(t.prompt_per_second, 0.0);
        let all = [t.prompt_ms, t.prompt_per_token_ms, t.prompt_per_second, t.predicted_ms];
        assert!(all.iter().flatten().all(|x| x.is_finite()));
    }

    #[test]
    fn llamacpp_timings_with_missing_timestamps() {
        // Tokens without a scheduling time: no prompt time, no counts; the generation time still defined.
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), None, &[2.0, 3.0]), 8, 0)));
        assert_eq!((t.cache_n, t.prompt_n, t.prompt_ms), (None, None, None));
        close(t.predicted_ms, 1000.0);
        close(t.predicted_per_second, 1.0);
        // More cached tokens than the prompt (inconsistent stats) cannot underflow.
        let t = build_llamacpp_timings(Some(&with_prompt(stats(Some(1.0), Some(1.5), &[2.0]), 4, 9)));
        assert_eq!(t.prompt_n, Some(0));
    }

    #[test]
    fn extended_metrics() {
        let mut s = stats(Some(1.0), Some(1.5), &[2.0, 2.1, 2.3, 2.6, 3.0]);
        s.finished_ts = Some(3.5);
        s.num_prompt_tokens = 10;
        // A prefill step of 0.4 s shared with 30 other tokens, then four decodes of 0.1 s shared with 3 others.
        let step = |start_ts, end_ts, tokens, batch_tokens, prefill| StepEvent {
            start_ts,
            end_ts,
            tokens,
            batch_tokens,
            prefill,
        };
        s.steps.push(step(1.5, 1.9, 10, 40, true));
        s.steps.extend((0..4).map(|i| step(2.0 + f64::from(i) * 0.1, 2.1 + f64::from(i) * 0.1, 1, 4, false)));
        s.output_wait_s = 0.01;
        s.num_polled_tokens = 5;
        let e = build_extended_timing_metrics(Some(&s));
        close(e.e2e_latency_ms, 3000.0);
        close(e.ttft_from_arrival_ms, 1500.0);
        close(e.prefill_time_ms, 400.0);
        close(e.prefill_tokens_per_second, 25.0);
        // Gaps: 100, 200, 300, 400 ms.
        close(e.itl_p50_ms, 200.0);
        close(e.itl_p90_ms, 400.0);
        close(e.itl_p99_ms, 400.0);
        close(e.itl_max_ms, 400.0);
        close(e.compute_share_ms, 0.4 * 10.0 / 40.0 * 1000.0 + 4.0 * 100.0 / 4.0);
        close(e.output_wait_ms, 2.0);
        assert_eq!(token_times_since_arrival_ms(Some(&s)).len(), 5);
        close(token_times_since_arrival_ms(Some(&s)).first().copied(), 1500.0);
    }

    #[test]
    fn extended_metrics_of_a_request_still_queued() {
        let s = stats(Some(1.0), None, &[]);
        let e = build_extended_timing_metrics(Some(&s));
        assert_eq!((e.e2e_latency_ms, e.ttft_from_arrival_ms, e.prefill_time_ms), (None, None, None));
        assert_eq!((e.itl_p50_ms, e.itl_max_ms, e.output_wait_ms), (None, None, None));
        assert_eq!(e.num_preemptions, Some(0));
        assert_eq!((e.num_draft_tokens, e.num_accepted_tokens), (Some(0), Some(0)));
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(nearest_rank(&[], 50.0), None);
        assert_eq!(nearest_rank(&[7.0], 99.0), Some(7.0));
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50.0), Some(50.0));
        assert_eq!(nearest_rank(&v, 99.0), Some(99.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
    }
}

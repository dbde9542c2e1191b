//! Where a response carries timing metrics: the double gate, and the JSON object of the five metrics.
//!
//! The rule (`docs/per_request_metrics.md`, "The double gate"): `metrics` appears only when the engine was started
//! with `enable_per_request_metrics` AND the request set `include_metrics: true`; otherwise the key is absent. When
//! it appears it is `null` if the request has more than one choice (`n > 1`, or several completion prompts), since
//! one timing for several sequences would be ambiguous; `include_choice_metrics: true` (same gate) puts each
//! choice's own metrics in the choice. A stream carries metrics only in its usage chunk, so a stream without
//! `include_usage` carries none.
//!
//! llama.cpp server's `timings` object follows the same rule as the response-level `metrics` (same gate, `null`
//! with several choices, only on a stream's usage chunk), so that a client written for llama-server finds it
//! where it looks and never mistakes one choice's timings for the request's.

use serde::Serialize;

use super::json::Slot;
use crate::engine::metrics::{LlamaCppTimings, PerRequestTimingMetrics};

/// The five metrics as JSON: milliseconds (and tokens per second), each `null` when the engine could not compute
/// it (see `crate::engine::metrics` for each definition).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct TimingMetricsJson {
    pub time_to_first_token_ms: Option<f64>,
    pub generation_time_ms: Option<f64>,
    pub queue_time_ms: Option<f64>,
    pub mean_itl_ms: Option<f64>,
    pub tokens_per_second: Option<f64>,
}

impl From<PerRequestTimingMetrics> for TimingMetricsJson {
    fn from(m: PerRequestTimingMetrics) -> Self {
        TimingMetricsJson {
            time_to_first_token_ms: m.time_to_first_token_ms,
            generation_time_ms: m.generation_time_ms,
            queue_time_ms: m.queue_time_ms,
            mean_itl_ms: m.mean_itl_ms,
            tokens_per_second: m.tokens_per_second,
        }
    }
}

/// llama.cpp server's `timings`, with its field names (see `crate::engine::metrics::LlamaCppTimings` for each
/// definition); `null` where llama-server would divide by zero.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct TimingsJson {
    pub cache_n: Option<u32>,
    pub prompt_n: Option<u32>,
    pub prompt_ms: Option<f64>,
    pub prompt_per_token_ms: Option<f64>,
    pub prompt_per_second: Option<f64>,
    pub predicted_n: Option<u32>,
    pub predicted_ms: Option<f64>,
    pub predicted_per_token_ms: Option<f64>,
    pub predicted_per_second: Option<f64>,
}

impl From<LlamaCppTimings> for TimingsJson {
    fn from(t: LlamaCppTimings) -> Self {
        TimingsJson {
            cache_n: t.cache_n,
            prompt_n: t.prompt_n,
            prompt_ms: t.prompt_ms,
            prompt_per_token_ms: t.prompt_per_token_ms,
            prompt_per_second: t.prompt_per_second,
            predicted_n: t.predicted_n,
            predicted_ms: t.predicted_ms,
            predicted_per_token_ms: t.predicted_per_token_ms,
            predicted_per_second: t.predicted_per_second,
        }
    }
}

/// Which metrics a response shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetricsGate {
    /// Both halves of the gate are open: engine `enable_per_request_metrics` and request `include_metrics`.
    open: bool,
    /// The request also set `include_choice_metrics`.
    per_choice: bool,
}

impl MetricsGate {
    pub fn new(engine_enabled: bool, include_metrics: bool, include_choice_metrics: bool) -> Self {
        let open = engine_enabled && include_metrics;
        MetricsGate { open, per_choice: open && include_choice_metrics }
    }

    /// The gate of a stream: closed unless the stream ends with a usage chunk, metrics' only carrier.
    pub fn for_stream(self, has_usage_chunk: bool) -> Self {
        MetricsGate { open: self.open && has_usage_chunk, per_choice: self.per_choice && has_usage_chunk }
    }

    /// The response-level `metrics` of a request whose choices have `metrics` (one entry per choice).
    pub fn response(&self, metrics: &[PerRequestTimingMetrics]) -> Slot<TimingMetricsJson> {
        match metrics {
            _ if !self.open => Slot::Absent,
            [one] => Slot::Value((*one).into()),
            _ => Slot::Null,
        }
    }

    /// The response-level `timings` of a request of `num_choices` choices; `timings` (choice 0's) is computed only
    /// when shown.
    pub fn timings(&self, num_choices: usize, timings: impl FnOnce() -> LlamaCppTimings) -> Slot<TimingsJson> {
        match num_choices {
            _ if !self.open => Slot::Absent,
            1 => Slot::Value(timings().into()),
            _ => Slot::Null,
        }
    }

    /// A choice's own `metrics`; `metrics` is computed only when shown.
    pub fn choice(&self, metrics: impl FnOnce() -> PerRequestTimingMetrics) -> Slot<TimingMetricsJson> {
        if self.per_choice {
            Slot::Value(metrics().into())
        } else {
            Slot::Absent
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: PerRequestTimingMetrics = PerRequestTimingMetrics {
        time_to_first_token_ms: Some(5.0),
        generation_time_ms: Some(20.0),
        queue_time_ms: Some(1.0),
        mean_itl_ms: Some(10.0),
        tokens_per_second: None,
    };

    #[test]
    fn both_halves_must_be_open() {
        for (engine, request) in [(false, false), (false, true), (true, false)] {
            let gate = MetricsGate::new(engine, request, true);
            assert_eq!(gate.response(&[M]), Slot::Absent);
            assert_eq!(gate.choice(|| M), Slot::Absent);
        }
        let gate = MetricsGate::new(true, true, false);
        assert_eq!(gate.response(&[M]), Slot::Value(M.into()));
        assert_eq!(gate.choice(|| M), Slot::Absent, "per-choice metrics need include_choice_metrics");
    }

    #[test]
    fn several_choices_make_the_response_metrics_null() {
        let gate = MetricsGate::new(true, true, true);
        assert_eq!(gate.response(&[M, M]), Slot::Null);
        assert_eq!(gate.choice(|| M), Slot::Value(M.into()));
    }

    #[test]
    fn a_stream_without_a_usage_chunk_carries_no_metrics() {
        let gate = MetricsGate::new(true, true, true);
        assert_eq!(gate.for_stream(false), MetricsGate::new(false, false, false));
        assert_eq!(gate.for_stream(true), gate);
    }

    #[test]
    fn timings_follow_the_response_metrics_rule() {
        let t = LlamaCppTimings { cache_n: Some(3), predicted_n: Some(2), ..Default::default() };
        for (engine, request) in [(false, false), (false, true), (true, false)] {
            assert_eq!(MetricsGate::new(engine, request, true).timings(1, || t), Slot::Absent);
        }
        let gate = MetricsGate::new(true, true, false);
        assert_eq!(gate.timings(1, || t), Slot::Value(t.into()));
        assert_eq!(gate.timings(2, || unreachable!("not computed for several choices")), Slot::Null);
        assert_eq!(gate.for_stream(false).timings(1, || t), Slot::Absent, "a stream without usage has none");
    }

    #[test]
    fn timings_json_has_llama_server_names() {
        let t = LlamaCppTimings {
            cache_n: Some(24),
            prompt_n: Some(13),
            prompt_ms: Some(81.5),
            prompt_per_token_ms: Some(6.25),
            prompt_per_second: Some(160.0),
            predicted_n: Some(1),
            predicted_ms: Some(0.0),
            predicted_per_token_ms: None,
            predicted_per_second: None,
        };
        assert_eq!(
            super::super::json::encode(&TimingsJson::from(t)),
            r#"{"cache_n":24,"prompt_n":13,"prompt_ms":81.5,"prompt_per_token_ms":6.25,"prompt_per_second":160.0,"predicted_n":1,"predicted_ms":0.0,"predicted_per_token_ms":null,"predicted_per_second":null}"#
        );
    }

    #[test]
    fn json_field_names_and_nulls() {
        let json = super::super::json::encode(&TimingMetricsJson::from(M));
        assert_eq!(
            json,
            r#"{"time_to_first_token_ms":5.0,"generation_time_ms":20.0,"queue_time_ms":1.0,"mean_itl_ms":10.0,"tokens_per_second":null}"#
        );
    }
}

//! Log probabilities of sampled tokens, for `logprobs` / `top_logprobs`.
//!
//! # What they are
//!
//! The log-softmax over the full vocabulary of the model's **raw** logits: before logit bias, penalties,
//! temperature and the truncation filters. That is what vLLM reports by default (its `raw_logprobs` mode) and what
//! llama.cpp's server reports with `post_sampling_probs` off (the semantics of the reference distributions in
//! `tests/fixtures/greedy_ref.json`). A client can therefore compare a token's log probability across requests
//! whatever they sampled with, and evaluate a text teacher-forced through the API. A token the sampler could never
//! have drawn (cut by top-k, say) still has its model probability here.
//!
//! # Cost
//!
//! The sampler uses the row as scratch space, so the raw row is copied first (196 KiB for a 49,152-token
//! vocabulary); then one pass for the maximum, one for the softmax denominator and, for `top_logprobs`, one
//! top-k pass that skips most chunks of the row. Tens of microseconds against a decode step of milliseconds.

use super::candidates::{more_likely_first, Candidate};
use super::prompt_logprobs::PromptTokenLogprob;
use super::{filters, row, Sampler};
use crate::model::TokenId;

/// The most alternatives a request may ask for per token (`top_logprobs`), as in the OpenAI API and vLLM.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// What OpenAI reports for a token the model gives no probability at all; also ember's answer for a degenerate
/// row (no finite logit, or NaN), so that a response never carries a non-number.
pub const IMPOSSIBLE_LOGPROB: f32 = -9999.0;

/// One sampled token's log probability and its most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    pub logprob: f32,
    /// The `top_logprobs` most likely tokens of the position with their log probabilities, most likely first
    /// (ties: lower id first); empty when the request asked for none.
    pub top: Vec<(TokenId, f32)>,
}

/// Samples with log probabilities, reusing its buffers from token to token.
#[derive(Debug, Default)]
pub struct LogprobSampler {
    raw: Vec<f32>,
    candidates: Vec<Candidate>,
}

impl LogprobSampler {
    /// Draws the next token of `logits` with `sampler` (exactly the token `sampler.sample` would draw: the same
    /// randomness is consumed) and returns it with its log probability and the `top` most likely alternatives
    /// (`top` is capped at the vocabulary size). The row is scratch space afterwards, as with `sample`.
    pub fn sample(&mut self, sampler: &mut Sampler, logits: &mut [f32], top: usize) -> TokenLogprob {
        self.keep_raw(logits);
        let token = sampler.sample(logits);
        self.report(token, top)
    }

    /// Keeps the raw row, before anything (a token mask, the sampler) changes it.
    pub fn keep_raw(&mut self, logits: &[f32]) {
        self.raw.clear();
        self.raw.extend_from_slice(logits);
    }

    /// The log probabilities of `token` and of the `top` most likely tokens in the row [`keep_raw`](Self::keep_raw)
    /// kept.
    pub fn report(&mut self, token: TokenId, top: usize) -> TokenLogprob {
        self.logprobs_of(token, top)
    }

    /// A prompt token's entry (`prompt_logprobs`): as [`report`](Self::report), with its rank in the row.
    pub fn report_prompt_token(&mut self, token: TokenId, top: usize) -> PromptTokenLogprob {
        let logprob = self.logprobs_of(token, top);
        PromptTokenLogprob { logprob, rank: self.rank_of(token) }
    }

    /// 1 + the number of tokens strictly more likely than `token` in the kept row (NaN counts as impossible).
    fn rank_of(&self, token: TokenId) -> u32 {
        let Some(&logit) = self.raw.get(token as usize).filter(|x| !x.is_nan()) else {
            return self.raw.iter().filter(|x| !x.is_nan()).count() as u32 + 1;
        };
        self.raw.iter().filter(|&&x| x > logit).count() as u32 + 1
    }

    /// The log probabilities of `token` and of the `top` most likely tokens in the raw row `self.raw`.
    fn logprobs_of(&mut self, token: TokenId, top: usize) -> TokenLogprob {
        let raw = &self.raw;
        let max = row::max(raw);
        // ln Σ exp(x) = max + ln Σ exp(x − max); a row without a finite maximum has no distribution to report.
        let log_norm = max + row::sum_exp(raw, max, 1.0).ln() as f32;
        let logprob = |logit: f32| {
            let lp = logit - log_norm;
            if lp.is_finite() {
                lp.max(IMPOSSIBLE_LOGPROB)
            } else {
                IMPOSSIBLE_LOGPROB
            }
        };
        let chosen = raw.get(token as usize).map_or(IMPOSSIBLE_LOGPROB, |&x| logprob(x));
        let top = top.min(raw.len());
        let mut alternatives = Vec::with_capacity(top);
        if top > 0 {
            filters::top_k(raw, top, &mut self.candidates);
            self.candidates.sort_unstable_by(more_likely_first);
            alternatives.extend(self.candidates.iter().map(|c| (c.id, logprob(c.logit))));
        }
        TokenLogprob { token, logprob: chosen, top: alternatives }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampling::SamplingParams;

    fn greedy() -> Sampler {
        Sampler::new(SamplingParams::default(), &[], 1)
    }

    /// log-softmax in f64, the reference.
    fn reference(row: &[f32]) -> Vec<f64> {
        let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let norm = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        row.iter().map(|&x| x as f64 - norm).collect()
    }

    #[test]
    fn log_softmax_of_the_raw_row_with_the_top_alternatives_in_order() {
        let mut rng = crate::engine::sampling::rng::Xoshiro256StarStar::from_seed(7);
        let row: Vec<f32> = (0..49_152).map(|_| (rng.next_f64() * 20.0 - 10.0) as f32).collect();
        let expected = reference(&row);
        let mut s = LogprobSampler::default();
        let out = s.sample(&mut greedy(), &mut row.clone(), 20);
        let argmax = (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        assert_eq!(out.token as usize, argmax);
        assert!((out.logprob as f64 - expected[argmax]).abs() < 1e-4, "{} vs {}", out.logprob, expected[argmax]);
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        assert_eq!(out.top.iter().map(|t| t.0 as usize).collect::<Vec<_>>(), order[..20]);
        for &(id, lp) in &out.top {
            assert!((lp as f64 - expected[id as usize]).abs() < 1e-4);
        }
    }

    #[test]
    fn reported_probabilities_ignore_bias_temperature_and_filters_and_sampling_is_unchanged() {
        let row: Vec<f32> = (0..300).map(|i| ((i * 37) % 101) as f32 / 10.0).collect();
        let expected = reference(&row);
        let params = SamplingParams {
            temperature: 0.8,
            top_k: 5,
            logit_bias: vec![(3, 100.0)],
            seed: Some(11),
            ..Default::default()
        };
        let mut plain = Sampler::new(params.clone(), &[], 1);
        let mut with_logprobs = Sampler::new(params, &[], 1);
        let mut s = LogprobSampler::default();
        for _ in 0..20 {
            let token = plain.sample(&mut row.clone());
            let out = s.sample(&mut with_logprobs, &mut row.clone(), 2);
            assert_eq!(out.token, token, "logprobs do not change what is drawn");
            // The bias forces token 3, whose raw probability is still reported.
            assert_eq!(token, 3);
            assert!((out.logprob as f64 - expected[3]).abs() < 1e-4);
            assert_eq!(out.top.len(), 2);
        }
    }

    #[test]
    fn a_prompt_token_has_its_rank() {
        let mut s = LogprobSampler::default();
        s.keep_raw(&[1.0, 3.0, 2.0, 3.0, f32::NAN]);
        let entry = s.report_prompt_token(2, 1);
        assert_eq!((entry.rank, entry.logprob.token, entry.logprob.top.len()), (3, 2, 1));
        assert_eq!(s.report_prompt_token(1, 0).rank, 1, "ties share the better rank");
        assert_eq!(s.report_prompt_token(4, 0).rank, 5, "a NaN logit ranks after every number");
        assert_eq!(s.report_prompt_token(9, 0).rank, 5, "so does a token outside the row");
    }

    #[test]
    fn degenerate_rows_report_numbers() {
        let mut s = LogprobSampler::default();
        let out = s.sample(&mut greedy(), &mut [f32::NEG_INFINITY; 8], 3);
        assert_eq!(out.logprob, IMPOSSIBLE_LOGPROB);
        assert!(out.top.iter().all(|&(_, lp)| lp == IMPOSSIBLE_LOGPROB));
        let out = s.sample(&mut greedy(), &mut [0.0, f32::NAN, -1e30], 5);
        assert_eq!(out.top.len(), 2, "NaN entries are never alternatives; top is capped by what the row has");
        assert!(out.top.iter().all(|&(_, lp)| lp.is_finite()));
        assert_eq!(out.top[1].1, IMPOSSIBLE_LOGPROB, "a probability below e^-9999 is reported as -9999");
        assert_eq!(out.logprob, 0.0);
    }
}

//! How many draft tokens each sequence verifies in a step: as many as raise the step's expected throughput.
//!
//! A step of `T` tokens (decodes, prefill chunks) yields about `T` tokens of progress in `t(T)` seconds
//! (`engine/step/step_cost.rs`). Giving it `D` draft tokens costs `t(T + D)` and adds their expected accepted
//! tokens: the `i`-th token of a draft whose tokens are each accepted with probability `p` adds `p^i`. The planner
//! sorts every offered draft position by that gain, and takes the number `D` of the best positions that maximizes
//! `(T + Σ gains) / t(T + D)`; `D = 0` when nothing beats the plain step.
//!
//! This is the "reduced or switched off when compute-bound" rule, measured rather than assumed: with many
//! sequences decoding, a step's time grows with every row and only near-certain drafts pay, so few or none
//! are taken; a single stream on a CPU whose matmul has spare compute at one column takes several.

use crate::engine::step::step_cost::StepCostModel;

/// A sequence's offer: up to `len` draft tokens, each accepted with probability `p` given the ones before.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftOffer {
    pub len: usize,
    pub p: f64,
}

/// The draft tokens each offer gets (in `offers`' order, at most its `len`, together at most `max_draft_tokens`)
/// in a step of `base_tokens` tokens. All 0 when the cost of the step is unknown.
pub fn plan_drafts(
    base_tokens: usize,
    offers: &[DraftOffer],
    max_draft_tokens: usize,
    cost: &StepCostModel,
) -> Vec<usize> {
    let mut taken = vec![0; offers.len()];
    let Some(base_seconds) = cost.estimate(base_tokens) else { return taken };
    // Every draft position with its gain, best first (a stable sort: on ties the earlier offer, then its
    // earlier token).
    let mut positions: Vec<(f64, usize)> = Vec::new();
    for (i, o) in offers.iter().enumerate() {
        let mut gain = 1.0;
        for _ in 0..o.len {
            gain *= o.p;
            positions.push((gain, i));
        }
    }
    positions.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut best = (base_tokens as f64 / base_seconds, 0);
    let mut value = base_tokens as f64;
    for (d, &(gain, _)) in positions.iter().enumerate().take(max_draft_tokens) {
        value += gain;
        let Some(seconds) = cost.estimate(base_tokens + d + 1) else { break };
        let rate = value / seconds;
        if rate > best.0 {
            best = (rate, d + 1);
        }
    }
    for &(_, i) in &positions[..best.1] {
        taken[i] += 1;
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cost model with these seconds for steps of 1, 2, … tokens.
    fn costs(seconds: &[f64]) -> StepCostModel {
        let mut m = StepCostModel::default();
        for (i, &s) in seconds.iter().enumerate() {
            m.observe(i + 1, s);
        }
        m
    }

    #[test]
    fn drafts_are_taken_while_they_raise_the_expected_rate() {
        // One row 10 ms, 2: 11, 3: 13, 4: 16, 5: 25.
        let m = costs(&[10.0, 11.0, 13.0, 16.0, 25.0]);
        let offer = |p| [DraftOffer { len: 4, p }];
        // p = 0.9: gains .9 .81 .73 .66; rates 1/10, 1.9/11, 2.71/13, 3.44/16, 4.1/25 → 3 tokens (0.215).
        assert_eq!(plan_drafts(1, &offer(0.9), 16, &m), [3]);
        // p = 0.3: 1.3/11 = 0.118 beats 0.1; 1.39/13 = 0.107 does not beat it.
        assert_eq!(plan_drafts(1, &offer(0.3), 16, &m), [1]);
        // p = 0.05: 1.05/11 < 1/10.
        assert_eq!(plan_drafts(1, &offer(0.05), 16, &m), [0]);
        assert_eq!(plan_drafts(1, &offer(0.9), 2, &m), [2], "within the step's room");
    }

    #[test]
    fn the_likelier_sequence_gets_the_tokens() {
        let m = costs(&[10.0, 10.0, 10.0, 10.5, 20.0, 30.0]);
        // Two decodes (base 2): 3 and 4 tokens are nearly free, 5 costs double.
        let offers = [DraftOffer { len: 3, p: 0.2 }, DraftOffer { len: 3, p: 0.8 }];
        assert_eq!(plan_drafts(2, &offers, 16, &m), [0, 2]);
    }

    #[test]
    fn a_compute_bound_step_takes_no_drafts_and_an_unknown_one_none_either() {
        // Every token costs as much as the last: only a certain draft could pay, and p < 1.
        let linear: Vec<f64> = (1..=40).map(|t| t as f64).collect();
        let m = costs(&linear);
        let offers = vec![DraftOffer { len: 4, p: 0.9 }; 16];
        assert!(plan_drafts(16, &offers, 64, &m).iter().all(|&d| d == 0));
        assert_eq!(plan_drafts(3, &[DraftOffer { len: 4, p: 0.9 }], 16, &StepCostModel::default()), [0]);
    }
}

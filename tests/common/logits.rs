//! Reading logits rows in the reference tests: probabilities and the greedy choice, computed plainly (in f64 where
//! it matters) so that they do not depend on the kernels under test. Included with `#[path]` by the tests that
//! need it.

use ember::model::TokenId;

/// Probabilities (softmax in f64) of a logits row.
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits.iter().map(|&l| (f64::from(l) - f64::from(max)).exp()).collect();
    let total: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / total).collect()
}

/// The lowest id among the largest logits (the sampler's greedy rule).
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as TokenId
}

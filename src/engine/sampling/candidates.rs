//! The tokens still in the running after the logits, and how top-p and min-p gather them from the row without
//! copying all of it.
//!
//! Both keep a most-likely-first prefix of the vocabulary (top-p: the first tokens whose mass reaches p; min-p:
//! every token above a probability). So instead of copying all 49,152 logits into a buffer and selecting among
//! them, the sampler gathers the tokens whose logit lies within a band below the maximum: for min-p the band is
//! known exactly, for top-p it widens until it holds enough mass. A band is closed under "more likely than", so
//! whatever the filter would keep from the whole sorted row, it keeps from the band. (Top-k knows how many tokens
//! it wants, and has its own one-pass gather in `filters.rs`.)

use std::cmp::Ordering;

use super::exp::exp_nonpositive;
use super::row::{any_in, LANES};
use crate::model::TokenId;

/// One token still in the running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) id: TokenId,
    /// Its logit after bias and penalties, before temperature: the key that orders candidates.
    pub(crate) logit: f32,
    /// exp((logit − row max) / temperature): its unnormalized probability, in [0, 1], the row's maximum weighing
    /// exactly 1. Set by [`set_weights`]; 0 until then.
    pub(crate) weight: f32,
}

/// Most likely first: by logit, descending (the same order as by probability, without the rounding of exp), then
/// by id, ascending, so that ties at a cut resolve the same way as greedy decoding and the order is total.
pub(crate) fn more_likely_first(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Sets each candidate's weight and returns their sum.
pub(crate) fn set_weights(candidates: &mut [Candidate], max: f32, inv_temperature: f32) -> f64 {
    let mut sum = 0.0;
    for candidate in candidates {
        candidate.weight = exp_nonpositive((candidate.logit - max) * inv_temperature);
        sum += candidate.weight as f64;
    }
    sum
}

/// How far below the maximum each successive band reaches, in multiples of the caller's unit, before the last band
/// takes everything else. Doubling keeps the passes few (six at most) whatever the logits' scale: a peaked row is
/// usually done after the first band, a flat one has most of its tokens in it.
const BAND_DEPTHS: [f32; 5] = [4.0, 8.0, 16.0, 32.0, 64.0];

/// Appends to `out` the tokens with logit ≥ `max − 4·unit`, then those in [`max − 8·unit`, `max − 4·unit`), and
/// so on down to −∞, handing each new band to `enough` until it returns true. `enough` may set the band's weights.
/// NaN logits are never gathered.
pub(crate) fn gather_bands(
    logits: &[f32],
    max: f32,
    unit: f32,
    out: &mut Vec<Candidate>,
    mut enough: impl FnMut(&mut [Candidate]) -> bool,
) {
    let mut upper = f32::INFINITY;
    for lower in BAND_DEPTHS.iter().map(|depth| max - depth * unit).chain([f32::NEG_INFINITY]) {
        let start = out.len();
        gather_band(logits, lower, upper, out);
        if enough(&mut out[start..]) || lower == f32::NEG_INFINITY {
            return;
        }
        upper = lower;
    }
}

/// Appends to `out` every token whose logit is in [`lower`, `upper`).
pub(crate) fn gather_band(logits: &[f32], lower: f32, upper: f32, out: &mut Vec<Candidate>) {
    for (chunk_index, chunk) in logits.chunks(LANES).enumerate() {
        if !any_in(chunk, lower, upper) {
            continue;
        }
        let first_id = chunk_index * LANES;
        for (offset, &logit) in chunk.iter().enumerate() {
            if logit >= lower && logit < upper {
                out.push(Candidate { id: (first_id + offset) as TokenId, logit, weight: 0.0 });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_widen_until_enough_and_never_repeat_a_token() {
        let logits = [10.0, 9.0, 5.0, -20.0, f32::NEG_INFINITY, f32::NAN, 7.0];
        let mut out = Vec::new();
        let mut bands = Vec::new();
        gather_bands(&logits, 10.0, 1.0, &mut out, |band| {
            bands.push(band.len());
            false
        });
        // [6, ∞): 10, 9, 7; [2, 6): 5; [-6, 2): none; [-22, -6): -20; [-54, -22): none; [-∞, -54): -∞. Never NaN.
        assert_eq!(bands, [3, 1, 0, 1, 0, 1]);
        let mut ids: Vec<TokenId> = out.iter().map(|c| c.id).collect();
        ids.sort();
        assert_eq!(ids, [0, 1, 2, 3, 4, 6]);

        out.clear();
        gather_bands(&logits, 10.0, 1.0, &mut out, |band| band.len() >= 2);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn order_is_by_logit_then_lowest_id() {
        let a = Candidate { id: 3, logit: 1.0, weight: 0.0 };
        let b = Candidate { id: 1, logit: 1.0, weight: 0.0 };
        let c = Candidate { id: 0, logit: 0.5, weight: 0.0 };
        let mut all = [a, c, b];
        all.sort_by(more_likely_first);
        assert_eq!(all, [b, a, c]);
    }
}

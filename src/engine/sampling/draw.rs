//! The draw: one uniform number u in [0, 1) picks the token whose cumulative weight first exceeds u × total
//! (inverse transform sampling), walking the survivors in a fixed order so that the same u gives the same token.

use super::candidates::Candidate;
use super::row::CHUNK;
use crate::model::TokenId;

/// Draws among `candidates` (walked in their order; most likely first makes the walk short). `None` only when no
/// candidate has a positive weight.
pub(crate) fn from_candidates(candidates: &[Candidate], u: f64) -> Option<TokenId> {
    let total: f64 = candidates.iter().map(|c| c.weight as f64).sum();
    let target = u * total;
    let mut cumulative = 0.0;
    for candidate in candidates {
        cumulative += candidate.weight as f64;
        if cumulative > target {
            return Some(candidate.id);
        }
    }
    // The walk re-adds the same weights in the same order, so it ends at `total` exactly; only u × total rounding
    // up to total itself brings us here, and then the last token that could be drawn is the right one.
    candidates.iter().rev().find(|c| c.weight > 0.0).map(|c| c.id)
}

/// Draws from a whole row of weights (see [`super::row::exp_in_place`], which also wrote `chunk_sums` and returned
/// `total`, their sum in order): finds the chunk first, then the token within it, so that a draw reads about 1/64
/// of the row. `None` only when no weight is positive.
pub(crate) fn from_row(weights: &[f32], chunk_sums: &[f32], total: f64, u: f64) -> Option<TokenId> {
    let target = u * total;
    let mut before_chunk = 0.0;
    // (index, weight of the chunks before it) of the chunk where the cumulative sum passes the target, or, when
    // u × total rounds up to total itself, of the last chunk with any weight.
    let mut chosen = None;
    for (chunk_index, &chunk_sum) in chunk_sums.iter().enumerate() {
        if chunk_sum > 0.0 {
            chosen = Some((chunk_index, before_chunk));
            if before_chunk + chunk_sum as f64 > target {
                break;
            }
        }
        before_chunk += chunk_sum as f64;
    }
    let (chunk_index, before_chosen) = chosen?;
    let start = chunk_index * CHUNK;
    let chunk = &weights[start..(start + CHUNK).min(weights.len())];
    let mut cumulative = before_chosen;
    let mut last_positive = None;
    for (offset, &weight) in chunk.iter().enumerate() {
        cumulative += weight as f64;
        if weight > 0.0 {
            last_positive = Some(offset);
            if cumulative > target {
                break;
            }
        }
    }
    // The chunk's sum was taken lane by lane and the walk adds in index order: when rounding leaves the walk just
    // short of the target, the chunk's last positive weight is the token the exact sums would have chosen.
    last_positive.map(|offset| (start + offset) as TokenId)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: TokenId, weight: f32) -> Candidate {
        Candidate { id, logit: 0.0, weight }
    }

    #[test]
    fn candidates_split_the_unit_interval_by_weight() {
        let candidates = [candidate(7, 0.5), candidate(3, 0.25), candidate(9, 0.0), candidate(4, 0.25)];
        assert_eq!(from_candidates(&candidates, 0.0), Some(7));
        assert_eq!(from_candidates(&candidates, 0.499), Some(7));
        assert_eq!(from_candidates(&candidates, 0.5), Some(3));
        assert_eq!(from_candidates(&candidates, 0.75), Some(4)); // never the zero-weight 9
        assert_eq!(from_candidates(&candidates, 1.0), Some(4)); // u = 1 cannot happen, but must not fail
        assert_eq!(from_candidates(&[candidate(1, 0.0)], 0.3), None);
    }

    #[test]
    fn row_draw_crosses_chunks_and_skips_zero_weights() {
        let mut weights = vec![0.0f32; 3 * CHUNK + 10];
        weights[5] = 1.0;
        weights[CHUNK + 1] = 2.0;
        weights[3 * CHUNK + 2] = 1.0;
        let chunk_sums: Vec<f32> = weights.chunks(CHUNK).map(|c| c.iter().sum()).collect();
        let total = 4.0;
        assert_eq!(from_row(&weights, &chunk_sums, total, 0.0), Some(5));
        assert_eq!(from_row(&weights, &chunk_sums, total, 0.25), Some((CHUNK + 1) as TokenId));
        assert_eq!(from_row(&weights, &chunk_sums, total, 0.74), Some((CHUNK + 1) as TokenId));
        assert_eq!(from_row(&weights, &chunk_sums, total, 0.75), Some((3 * CHUNK + 2) as TokenId));
        assert_eq!(from_row(&weights, &chunk_sums, total, 1.0), Some((3 * CHUNK + 2) as TokenId));
        assert_eq!(from_row(&[0.0; 10], &[0.0], 0.0, 0.5), None);
    }
}

//! Whole-row passes over one logits row (one f32 per vocabulary entry): argmax, maximum, and the softmax's
//! exponentials. Each is a single pass written with independent lanes, so that the compiler vectorizes it and no
//! floating-point sum runs as one long dependency chain. NaN logits are skipped: they never win and weigh 0.

use super::exp::exp_nonpositive;
use crate::model::TokenId;

/// Independent accumulators per pass: four SSE or two AVX registers' worth, enough to hide the add latency.
/// Also the chunk size of the gathers' skip test ([`any_in`]).
pub(crate) const LANES: usize = 16;

/// The weights are summed per chunk of this many logits: short enough that an f32 partial sum loses nothing
/// measurable (at most 4 additions per lane, then 16 lanes), and the chunk sums let a draw skip 64 weights at a
/// time. The chunk sums are then added in f64.
pub(crate) const CHUNK: usize = 64;

/// The index of the largest logit: the lowest index among equal maxima (llama.cpp and vLLM's greedy choice).
/// NaN never wins; 0 when no logit exceeds −∞.
pub(crate) fn argmax(row: &[f32]) -> TokenId {
    let mut best_value = [f32::NEG_INFINITY; LANES];
    // The chunk each lane's best came from, as an f32 so that the update is the same vector select as the value's
    // (exact below 2^24 chunks, far beyond any vocabulary).
    let mut best_chunk = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for (chunk_index, chunk) in chunks.enumerate() {
        let chunk_number = chunk_index as f32;
        for lane in 0..LANES {
            // Strictly greater: each lane keeps the first (lowest-index) occurrence of its maximum.
            let better = chunk[lane] > best_value[lane];
            best_value[lane] = if better { chunk[lane] } else { best_value[lane] };
            best_chunk[lane] = if better { chunk_number } else { best_chunk[lane] };
        }
    }
    let mut value = f32::NEG_INFINITY;
    let mut index = 0;
    for lane in 0..LANES {
        let lane_index = best_chunk[lane] as u32 * LANES as u32 + lane as u32;
        // A lane that never beat −∞ holds −∞, which can neither beat nor tie-break anything that did.
        if best_value[lane] > value || (best_value[lane] == value && value > f32::NEG_INFINITY && lane_index < index) {
            value = best_value[lane];
            index = lane_index;
        }
    }
    // The tail's indices are above every lane's, so only a strictly greater value replaces the winner.
    let tail_base = (row.len() - tail.len()) as u32;
    for (offset, &logit) in tail.iter().enumerate() {
        if logit > value {
            value = logit;
            index = tail_base + offset as u32;
        }
    }
    index
}

/// The largest logit; −∞ for an empty row or one with no logit above −∞.
pub(crate) fn max(row: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for lane in 0..LANES {
            // `if >` rather than `f32::max`: it is one MAXPS, and skips NaN just the same.
            lanes[lane] = if chunk[lane] > lanes[lane] { chunk[lane] } else { lanes[lane] };
        }
    }
    lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |max, &x| if x > max { x } else { max })
}

/// Σ exp((logit − max) / T) over the row, given `max` = [`max`]`(row)` and `inv_temperature` = 1/T: the softmax
/// denominator, the weight of the maximum being 1.
pub(crate) fn sum_exp(row: &[f32], max: f32, inv_temperature: f32) -> f64 {
    row.chunks(CHUNK)
        .map(|chunk| chunk_sum(chunk, |logit| exp_nonpositive((logit - max) * inv_temperature)) as f64)
        .sum()
}

/// Replaces each logit by its weight exp((logit − max) / T), writes the sum of each [`CHUNK`] of weights to
/// `chunk_sums` (length ⌈row length / CHUNK⌉ afterwards) and returns their sum in f64, added in chunk order.
pub(crate) fn exp_in_place(row: &mut [f32], max: f32, inv_temperature: f32, chunk_sums: &mut Vec<f32>) -> f64 {
    // Two loops rather than one per chunk: the exponentials vectorize best as one long loop, and the sums
    // then read the weights back from L1/L2.
    for logit in row.iter_mut() {
        *logit = exp_nonpositive((*logit - max) * inv_temperature);
    }
    chunk_sums.clear();
    chunk_sums.extend(row.chunks(CHUNK).map(|chunk| chunk_sum(chunk, |weight| weight)));
    chunk_sums.iter().map(|&sum| sum as f64).sum()
}

/// Whether any logit of `chunk` (at most [`LANES`] long) is in [`lower`, `upper`): one vectorized test, so that a
/// gather looking for a few tokens in a 49,152-entry row skips the chunks that hold none for a fraction of the cost
/// of a compare-and-branch per logit (the min-p case of `benches/sampling.rs` went from 31 to 14 µs).
#[inline(always)]
pub(crate) fn any_in(chunk: &[f32], lower: f32, upper: f32) -> bool {
    chunk.iter().fold(false, |any, &logit| any | ((logit >= lower) & (logit < upper)))
}

/// Whether any logit of `chunk` is ≥ `cut`; see [`any_in`].
#[inline(always)]
pub(crate) fn any_at_least(chunk: &[f32], cut: f32) -> bool {
    chunk.iter().fold(false, |any, &logit| any | (logit >= cut))
}

/// Σ f(x) over at most a few [`LANES`]-wide rows, lane by lane.
#[inline(always)]
fn chunk_sum(chunk: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let full = chunk.chunks_exact(LANES);
    let tail = full.remainder();
    for part in full {
        for lane in 0..LANES {
            lanes[lane] += f(part[lane]);
        }
    }
    lanes.iter().sum::<f32>() + tail.iter().map(|&x| f(x)).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_lowest_index_among_ties_in_any_lane_or_the_tail() {
        let mut row = vec![0.0f32; 3 * LANES + 5];
        row[LANES + 7] = 2.0;
        row[2 * LANES + 3] = 2.0; // another lane, later
        row[3 * LANES + 1] = 2.0; // the tail
        assert_eq!(argmax(&row), (LANES + 7) as TokenId);
        row[5] = 2.0; // a lane before, earlier
        assert_eq!(argmax(&row), 5);
        row[3 * LANES + 4] = 3.0;
        assert_eq!(argmax(&row), (3 * LANES + 4) as TokenId);
    }

    #[test]
    fn argmax_skips_nan_and_falls_back_to_zero() {
        assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 40]), 0);
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        let mut row = vec![f32::NAN; 40];
        row[33] = -5.0;
        assert_eq!(argmax(&row), 33);
    }

    #[test]
    fn max_skips_nan() {
        let mut row: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        row[36] = f32::NAN;
        assert_eq!(max(&row), 14.5); // entry 35; entry 36 is NaN
        assert_eq!(max(&[]), f32::NEG_INFINITY);
    }

    #[test]
    fn exp_in_place_chunk_sums_add_up_to_the_total() {
        let row: Vec<f32> = (0..150).map(|i| ((i * 37) % 23) as f32 * 0.3).collect();
        let max = max(&row);
        let expected: f64 = row.iter().map(|&x| ((x - max) as f64 / 0.7).exp()).sum();
        assert!((sum_exp(&row, max, 1.0 / 0.7) / expected - 1.0).abs() < 1e-6);
        let mut weights = row.clone();
        let mut chunk_sums = Vec::new();
        let total = exp_in_place(&mut weights, max, 1.0 / 0.7, &mut chunk_sums);
        assert_eq!(chunk_sums.len(), 3);
        assert_eq!(total, chunk_sums.iter().map(|&s| s as f64).sum::<f64>());
        assert!((total / expected - 1.0).abs() < 1e-6);
        for (weight, &x) in weights.iter().zip(&row) {
            assert!((*weight as f64 - ((x - max) as f64 / 0.7).exp()).abs() < 1e-6);
        }
    }
}

//! The truncation filters: top-k, top-p (nucleus) and min-p, each over the candidates gathered from the row.
//! None sorts more than it keeps, give or take a batch, and top-k reads the row only once.

use super::candidates::{more_likely_first, Candidate};
use super::row::{any_at_least, LANES};
use crate::model::TokenId;

/// How many candidates beyond `k` the top-k buffer takes before it is cut back to `k` (or `k` itself when larger):
/// each cut is a select over the buffer, so the slack amortizes it over at least this many admissions.
const MIN_TOP_K_SLACK: usize = 64;

/// Gathers the `k` most likely tokens of the row into `out` (cleared first), in no particular order; all tokens that
/// are not NaN when fewer than `k` are. Ties at the cut go to the lower token id.
///
/// One pass: a token enters the buffer when its logit reaches the running cut; whenever the buffer holds
/// `k + slack` tokens, a select keeps the best `k` and the cut rises above the k-th logit. After a few thousand
/// logits the cut is close to its final value, so almost every chunk of the row is skipped by one vectorized test.
///
/// # Panics
/// If `k` is 0: "off" is the caller's case.
pub(crate) fn top_k(logits: &[f32], k: usize, out: &mut Vec<Candidate>) {
    assert!(k > 0, "top-k with k = 0 is off, not a filter");
    out.clear();
    let capacity = k + k.max(MIN_TOP_K_SLACK);
    // A token enters when its logit is ≥ `cut` (never when NaN).
    let mut cut = f32::NEG_INFINITY;
    for (chunk_index, chunk) in logits.chunks(LANES).enumerate() {
        if !any_at_least(chunk, cut) {
            continue;
        }
        let first_id = chunk_index * LANES;
        for (offset, &logit) in chunk.iter().enumerate() {
            if logit >= cut {
                out.push(Candidate { id: (first_id + offset) as TokenId, logit, weight: 0.0 });
                if out.len() == capacity {
                    keep_most_likely(out, k);
                    // Every later token has a higher id than the k-th kept, so it loses a tie with it: only a
                    // strictly greater logit may still enter.
                    cut = out[k - 1].logit.next_up();
                }
            }
        }
    }
    keep_most_likely(out, k);
}

/// Keeps the `k` most likely candidates, the least likely of them last.
fn keep_most_likely(candidates: &mut Vec<Candidate>, k: usize) {
    if candidates.len() > k {
        candidates.select_nth_unstable_by(k - 1, more_likely_first);
        candidates.truncate(k);
    }
}

/// The first batch of candidates that top-p sorts; each further batch is [`BATCH_GROWTH`] times larger. A confident
/// chat model's nucleus is often a few dozen tokens, so the first batch should usually suffice (a guess, to check
/// against real rows once the engine produces them).
const FIRST_BATCH: usize = 64;
const BATCH_GROWTH: usize = 4;

/// Keeps the smallest most-likely-first prefix whose weight reaches `top_p × total`, where `total` is the weight
/// of every token still in the running (including any not among `candidates`, which must all be less likely than
/// every candidate), and at least one candidate. Afterwards the kept candidates are sorted most likely first.
///
/// Holtzman et al., "The curious case of neural text degeneration" (2020); "reaches" is ≥, as in Hugging
/// Face's `TopPLogitsWarper` and vLLM. Rather than sorting every candidate, it selects the 64 most likely, sorts
/// those and walks them, then the next 192 (up to 256), and so on.
pub(crate) fn top_p(candidates: &mut Vec<Candidate>, total: f64, top_p: f32) {
    let target = total * top_p as f64;
    let mut mass = 0.0;
    let mut sorted = 0;
    let mut batch_end = FIRST_BATCH;
    loop {
        let end = batch_end.min(candidates.len());
        if end < candidates.len() {
            // Afterwards candidates[sorted..end] are the next most likely, since candidates[..sorted] were the
            // most likely of all.
            candidates[sorted..].select_nth_unstable_by(end - sorted - 1, more_likely_first);
        }
        candidates[sorted..end].sort_unstable_by(more_likely_first);
        for index in sorted..end {
            mass += candidates[index].weight as f64;
            if mass >= target {
                candidates.truncate(index + 1);
                return;
            }
        }
        if end == candidates.len() {
            // The candidates' weight fell short of the target by rounding only: keep them all.
            return;
        }
        sorted = end;
        batch_end *= BATCH_GROWTH;
    }
}

/// Keeps the candidates whose weight is at least `min_p` times the largest weight (Nguyen et al., "Turning up the
/// heat: min-p sampling", 2024). The most likely candidate always stays, even for an unvalidated `min_p` above 1.
pub(crate) fn min_p(candidates: &mut Vec<Candidate>, min_p: f32) {
    let max_weight = candidates.iter().fold(0.0f32, |max, c| max.max(c.weight));
    let threshold = min_p.min(1.0) * max_weight;
    candidates.retain(|c| c.weight >= threshold);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates whose logits are the given values and whose weights equal them (a stand-in for exp).
    fn candidates(weights: &[f32]) -> Vec<Candidate> {
        weights.iter().enumerate().map(|(id, &w)| Candidate { id: id as TokenId, logit: w, weight: w }).collect()
    }

    fn ids(candidates: &[Candidate]) -> Vec<TokenId> {
        candidates.iter().map(|c| c.id).collect()
    }

    #[test]
    fn top_k_breaks_ties_at_the_cut_by_lower_id() {
        let mut out = Vec::new();
        top_k(&[0.1, 0.5, 0.3, 0.5, 0.5], 2, &mut out);
        let mut kept = ids(&out);
        kept.sort();
        assert_eq!(kept, [1, 3]);
    }

    #[test]
    fn top_k_survives_many_buffer_cuts() {
        // Rising logits make every token enter the buffer, so it is cut back again and again; the ties at 0.0
        // every seventh token exercise the strict cut after each.
        let logits: Vec<f32> = (0..1000).map(|i| if i % 7 == 0 { 0.0 } else { i as f32 }).collect();
        let mut out = Vec::new();
        top_k(&logits, 5, &mut out);
        let mut kept = ids(&out);
        kept.sort();
        assert_eq!(kept, [995, 996, 997, 998, 999]);
        // Only ties and NaN: the lowest ids win, NaN never enters.
        let mut flat = vec![1.0f32; 500];
        flat[0] = f32::NAN;
        top_k(&flat, 3, &mut out);
        let mut kept = ids(&out);
        kept.sort();
        assert_eq!(kept, [1, 2, 3]);
        top_k(&[f32::NAN, 2.0], 5, &mut out);
        assert_eq!(ids(&out), [1]);
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_that_reaches_the_target() {
        // Powers of two, so that every sum below is exact.
        let weights = [0.125, 0.5, 0.25, 0.125];
        let mut all = candidates(&weights);
        top_p(&mut all, 1.0, 0.75);
        assert_eq!(ids(&all), [1, 2]); // 0.5 + 0.25 reaches 0.75: ≥, not >
        let mut all = candidates(&weights);
        top_p(&mut all, 1.0, 0.76);
        assert_eq!(ids(&all), [1, 2, 0]); // the tie at 0.125 goes to the lower id
        let mut all = candidates(&weights);
        top_p(&mut all, 1.0, 1e-9);
        assert_eq!(ids(&all), [1]);
    }

    #[test]
    fn top_p_crosses_batch_boundaries() {
        // 1,000 equal weights: a target of 0.5 needs 500 of them, in the third batch (64, 256, 1024).
        let mut all = candidates(&[1.0; 1000]);
        top_p(&mut all, 1000.0, 0.5);
        assert_eq!(ids(&all), (0..500).collect::<Vec<TokenId>>());
    }

    #[test]
    fn min_p_is_relative_to_the_largest_weight() {
        let mut all = candidates(&[0.5, 0.04, 0.05, 0.06]);
        min_p(&mut all, 0.1);
        assert_eq!(ids(&all), [0, 2, 3]);
        let mut all = candidates(&[0.5, 0.04]);
        min_p(&mut all, 5.0);
        assert_eq!(ids(&all), [0]);
    }
}

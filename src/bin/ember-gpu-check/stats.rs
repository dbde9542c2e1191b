//! Summaries of repeated measurements.

/// The nearest-rank percentile `p` (0–100) of `values`: the smallest value with at least p% of values ≤ it, as the
/// engine's metrics define their percentiles; NaN when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// `‖ours − reference‖ / ‖reference‖`.
pub fn relative_error(ours: &[f32], reference: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(reference) {
        diff += (f64::from(a) - f64::from(b)).powi(2);
        norm += f64::from(b).powi(2);
    }
    (diff / norm).sqrt()
}

/// The lowest id among the largest logits (the sampler's greedy rule), NaN never winning.
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0), percentile(&v, 0.0)), (3.0, 5.0, 1.0));
        assert!(percentile(&[], 50.0).is_nan());
        assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0]), 2);
        assert!((relative_error(&[1.0, 1.0], &[1.0, 0.0]) - 1.0).abs() < 1e-12);
    }
}

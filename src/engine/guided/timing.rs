//! How long masks take: per token (one mask), and how long a step's sampling waited for its masks after the
//! forward pass (zero when the masks were ready first: they were off the critical path).
//!
//! Fixed histograms, so an engine that runs for weeks keeps a few kilobytes: 1 µs buckets below 1 ms, 100 µs
//! buckets below 100 ms, one bucket beyond. Percentiles are read as their bucket's lower edge.

use std::sync::Mutex;
use std::time::Duration;

const FINE_US: u64 = 1_000;
const COARSE_US: u64 = 100_000;
const COARSE_STEP_US: u64 = 100;
const BUCKETS: usize = (FINE_US + (COARSE_US - FINE_US) / COARSE_STEP_US + 1) as usize;

struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_us: f64,
}

impl Histogram {
    fn new() -> Self {
        Histogram { counts: vec![0; BUCKETS], total: 0, sum_us: 0.0 }
    }

    fn record(&mut self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        let whole = us as u64;
        let bucket = match whole {
            w if w < FINE_US => w,
            w if w < COARSE_US => FINE_US + (w - FINE_US) / COARSE_STEP_US,
            _ => BUCKETS as u64 - 1,
        };
        self.counts[bucket as usize] += 1;
        self.total += 1;
        self.sum_us += us;
    }

    /// The lower edge (µs) of the bucket holding the `q`-quantile.
    fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let i = i as u64;
                return match i < FINE_US {
                    true => i as f64,
                    false => (FINE_US + (i - FINE_US) * COARSE_STEP_US) as f64,
                };
            }
        }
        unreachable!("the counts sum to the total")
    }
}

/// The engine's mask timings, shared between the engine thread (which records) and the host (which reads).
pub struct MaskTimes {
    inner: Mutex<(Histogram, Histogram)>,
}

impl Default for MaskTimes {
    fn default() -> Self {
        MaskTimes { inner: Mutex::new((Histogram::new(), Histogram::new())) }
    }
}

/// A snapshot of [`MaskTimes`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MaskTimeSummary {
    /// Masks computed during steps (one per constrained token sampled but each choice's first, computed at
    /// submit).
    pub masks: u64,
    pub mask_p50_us: f64,
    pub mask_p99_us: f64,
    pub mask_mean_us: f64,
    /// Steps with constrained sequences, and how long each waited for its masks after its forward pass.
    pub steps: u64,
    pub wait_p50_us: f64,
    pub wait_p99_us: f64,
    pub wait_mean_us: f64,
}

impl MaskTimes {
    /// Records one step: the time of each mask it computed, and how long sampling waited for them.
    pub fn record_step(&self, masks: &[Duration], wait: Duration) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for &m in masks {
            inner.0.record(m);
        }
        inner.1.record(wait);
    }

    pub fn summary(&self) -> MaskTimeSummary {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (masks, waits) = (&inner.0, &inner.1);
        let mean = |h: &Histogram| if h.total == 0 { 0.0 } else { h.sum_us / h.total as f64 };
        MaskTimeSummary {
            masks: masks.total,
            mask_p50_us: masks.quantile(0.5),
            mask_p99_us: masks.quantile(0.99),
            mask_mean_us: mean(masks),
            steps: waits.total,
            wait_p50_us: waits.quantile(0.5),
            wait_p99_us: waits.quantile(0.99),
            wait_mean_us: mean(waits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_read_the_bucket_edges() {
        let t = MaskTimes::default();
        let us = Duration::from_micros;
        let masks: Vec<Duration> = (1..=100).map(us).chain([us(2_345), us(250_000)]).collect();
        t.record_step(&masks, us(0));
        let s = t.summary();
        assert_eq!((s.masks, s.steps), (102, 1));
        assert_eq!((s.mask_p50_us, s.mask_p99_us), (51.0, 2_300.0));
        assert_eq!(MaskTimes::default().summary(), MaskTimeSummary::default());
    }
}

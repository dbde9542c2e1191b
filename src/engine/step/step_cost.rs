//! What a step costs, learned from the steps the engine runs: the speculation planner weighs a draft's expected
//! tokens against the time its rows add (`speculative/plan.rs`), and the step budget sizes the prefill chunks
//! that join a step of decodes (`step_budget.rs`). The scheduler holds the models (`step_budget::StepCosts`) and
//! feeds them every step's tokens and seconds.
//!
//! Why learned rather than assumed: the shape of "seconds per step against tokens per step" is the machine's and
//! the model's. On a 2-vCPU AMD EPYC (AVX-512) a SmolLM2 step of 2 rows costs 1.1× one row, 4 rows 1.6×, 5 rows
//! 2.5× (the output projection streams its 30 MB once for up to 4 columns); on an AVX2-only CPU the curve is
//! steeper, and on a GPU it is flat for dozens of rows. A constant would be wrong on all but one of them.
//!
//! A model keeps, for each step size up to its number of sizes, a moving average of the wall time of the steps of that
//! many tokens it is shown. Which steps those are is the caller's choice (`step_budget::StepCosts`): the speculation
//! planner's model is shown the steps in which every token decodes or verifies, since every row then computes logits,
//! as a verification's do (a prefill chunk computes logits for its last row only, so it would understate a draft's
//! cost); the step budget's second model the steps with prefill work. A size not seen recently is estimated from its
//! neighbours: between two sizes seen, on the line through them; one above the largest seen, on the line through the
//! two largest (never falling: a step of more tokens costs no less), or at the largest's own cost when it is the only
//! one; further above, not at all. That one size of extrapolation is optimistic where the cost bends upwards (a
//! matmul's column tile fills, the compute saturates), so the planner tries it when it could pay and learns its real
//! cost in one step: the sizes are explored upwards one at a time, each at the price of one token more, never with a
//! whole step bet on a guess. (The step budget reads the sizes seen, [`StepCostModel::fresh_points`], and extrapolates
//! on its own terms.) An estimate is forgotten after [`STALE_STEPS`] steps shown to the model without being observed
//! again, and found in the same way, so that one slow step on a noisy machine (an estimate too high, which the planner
//! would otherwise avoid forever) costs at most that many steps.

/// Step sizes (tokens) with an estimate of their own in the [`Default`] model (the speculation planner's): larger
/// steps are never given drafts.
pub const MODELLED_TOKENS: usize = 256;

/// Steps shown to a model after which an estimate not observed again is forgotten.
pub const STALE_STEPS: u64 = 512;

/// Weight of a new observation in its size's moving average.
const SMOOTHING: f64 = 0.2;

#[derive(Clone, Copy, Debug, Default)]
struct Estimate {
    seconds: f64,
    /// The step count when it was last observed; `None`: never.
    seen_at: Option<u64>,
}

impl Estimate {
    /// Observed within the last [`STALE_STEPS`] of `steps`.
    fn fresh(&self, steps: u64) -> bool {
        self.seen_at.is_some_and(|at| steps - at <= STALE_STEPS)
    }
}

/// Seconds per step by step size (see the module's documentation).
#[derive(Clone, Debug)]
pub struct StepCostModel {
    /// `by_tokens[t - 1]`: steps of `t` tokens.
    by_tokens: Vec<Estimate>,
    /// Steps shown so far (those of sizes not modelled included: staleness counts steps).
    steps: u64,
}

impl Default for StepCostModel {
    fn default() -> Self {
        StepCostModel::with_sizes(MODELLED_TOKENS)
    }
}

impl StepCostModel {
    /// A model of steps of 1 to `sizes` tokens (at least 1).
    pub fn with_sizes(sizes: usize) -> Self {
        StepCostModel { by_tokens: vec![Estimate::default(); sizes.max(1)], steps: 0 }
    }

    /// Records a step of `tokens` tokens that took `seconds`.
    pub fn observe(&mut self, tokens: usize, seconds: f64) {
        self.steps += 1;
        if tokens == 0 || tokens > self.by_tokens.len() || !seconds.is_finite() || seconds < 0.0 {
            return;
        }
        let now = self.steps;
        let e = &mut self.by_tokens[tokens - 1];
        e.seconds = match e.fresh(now) {
            true => e.seconds + SMOOTHING * (seconds - e.seconds),
            false => seconds,
        };
        e.seen_at = Some(now);
    }

    /// The estimated seconds of a step of `tokens` tokens: its own recent average, or else from the sizes seen
    /// recently around it (see the module's documentation). `None` when no smaller size has been seen recently,
    /// when the size is more than one above the largest seen, or when it is not modelled.
    pub fn estimate(&self, tokens: usize) -> Option<f64> {
        let own = self.by_tokens.get(tokens.checked_sub(1)?)?;
        if own.fresh(self.steps) {
            return Some(own.seconds);
        }
        let seen = |e: &Estimate| e.fresh(self.steps).then_some(e.seconds);
        let mut below =
            self.by_tokens[..tokens - 1].iter().enumerate().rev().filter_map(|(i, e)| Some((i + 1, seen(e)?)));
        let (lo, t_lo) = below.next()?;
        let above = self.by_tokens[tokens..].iter().enumerate().find_map(|(i, e)| Some((tokens + 1 + i, seen(e)?)));
        let slope = match (above, below.next()) {
            (Some((hi, t_hi)), _) => (t_hi - t_lo) / (hi - lo) as f64,
            (None, _) if tokens > lo + 1 => return None,
            (None, Some((lo2, t_lo2))) => ((t_lo - t_lo2) / (lo - lo2) as f64).max(0.0),
            (None, None) => 0.0,
        };
        Some(t_lo + slope * (tokens - lo) as f64)
    }

    /// The sizes observed recently (not yet forgotten), smallest first, each with its moving average of seconds.
    pub fn fresh_points(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.by_tokens.iter().enumerate().filter(|(_, e)| e.fresh(self.steps)).map(|(i, e)| (i + 1, e.seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_never_seen_is_estimated_from_its_neighbours() {
        let mut m = StepCostModel::default();
        assert_eq!(m.estimate(1), None, "nothing seen");
        m.observe(2, 0.010);
        assert_eq!(m.estimate(1), None, "nothing smaller seen");
        assert_eq!(m.estimate(3), Some(0.010), "one size seen: the next at its cost");
        assert_eq!(m.estimate(4), None, "no further");
        m.observe(4, 0.014);
        assert_eq!(m.estimate(4), Some(0.014));
        assert_eq!(m.estimate(3), Some(0.012), "between two sizes: on their line");
        assert!((m.estimate(5).unwrap() - 0.016).abs() < 1e-12, "above: on the line of the two largest");
        assert_eq!(m.estimate(6), None);
        m.observe(6, 0.013);
        assert_eq!(m.estimate(7), Some(0.013), "never falling");
        assert_eq!(m.estimate(0), None);
        assert_eq!(m.estimate(MODELLED_TOKENS + 1), None, "not modelled");
    }

    #[test]
    fn observations_are_averaged_and_nonsense_is_not_learned() {
        let mut m = StepCostModel::default();
        m.observe(2, 0.010);
        m.observe(2, 0.020);
        assert!((m.estimate(2).unwrap() - 0.012).abs() < 1e-12, "{:?}", m.estimate(2));
        m.observe(3, f64::NAN);
        m.observe(0, 1.0);
        assert!((m.estimate(2).unwrap() - 0.012).abs() < 1e-12);
        assert_eq!(m.estimate(3), m.estimate(2), "size 3 has no estimate of its own");
    }

    #[test]
    fn the_sizes_seen_recently_are_listed_and_the_model_has_its_number_of_sizes() {
        let mut m = StepCostModel::with_sizes(8);
        m.observe(5, 0.020);
        m.observe(2, 0.010);
        m.observe(9, 0.030); // beyond its sizes
        assert_eq!(m.fresh_points().collect::<Vec<_>>(), [(2, 0.010), (5, 0.020)]);
        assert_eq!(m.estimate(9), None, "not modelled");
        for _ in 0..STALE_STEPS {
            m.observe(5, 0.020);
        }
        assert_eq!(m.fresh_points().collect::<Vec<_>>(), [(5, 0.020)], "size 2 forgotten");
    }

    #[test]
    fn an_estimate_not_seen_again_is_forgotten() {
        let mut m = StepCostModel::default();
        m.observe(1, 0.010);
        m.observe(2, 0.100); // one slow step
        for _ in 0..STALE_STEPS {
            m.observe(1, 0.010);
        }
        assert_eq!(m.estimate(2), Some(0.100), "still recent");
        m.observe(1, 0.010);
        assert_eq!(m.estimate(2), Some(0.010), "forgotten: estimated from size 1 alone again");
        m.observe(2, 0.011);
        assert_eq!(m.estimate(2), Some(0.011), "a fresh observation replaces a forgotten one");
    }
}

//! The step budget (the engine option `step_budget`): how many prompt tokens may join a step that carries
//! decodes, so that a running stream's next token does not wait for a neighbour's whole prefill chunk.
//!
//! # Why
//!
//! Every decode in a step waits for the whole step. Without a budget, a prompt arriving beside 16 streams fills
//! what `max_num_batched_tokens` leaves (112 tokens on the CPU), and that step costs ~2–3× a step of decodes
//! alone: the streams' inter-token latency p99 is that step, a stutter a chat UI shows. A token budget alone
//! cannot fix it for every machine and model, since what a token costs is theirs; so the budget is a time, and
//! the tokens that fit it come from the scheduler's learned costs (`step_cost.rs`, per step size, on the backend
//! and model that run).
//!
//! # The policy
//!
//! - `"throughput"`: no time limit; prefill takes all the token budget the decodes leave (the behaviour before
//!   the option, and the plan is the same, step for step).
//! - a number: a target step time in milliseconds, `T`;
//! - `"auto"` (the default): `T` = [`AUTO_FACTOR`] × the learned cost of a step of the same decodes alone, so the
//!   target follows the machine, the model and the number of streams.
//!
//! A step with `d` decodes gets `p` prefill tokens, the most whose estimated step of `d + p` tokens stays within
//! `T`, but at least [`min_prefill_chunk`]: an eighth of `max_num_batched_tokens`, so that a long prompt always
//! progresses, however costly the decodes; and 1.25× the prompt tokens arriving per step (a moving average over
//! 256 steps, [`PromptArrivals`]), so that prefill keeps pace with the load. A time target alone would let a
//! prefill-heavy load (long prompts, many clients) queue its prompts: fewer streams would decode at once, and the
//! tokens per second fall. Keeping pace costs steps over the target while the load needs them, but then most
//! steps carry prefill, so a stream's typical step and its slowest stay alike, which is what a smooth stream
//! needs. Decodes are scheduled first, always, and never skipped. A step without decodes keeps the whole token
//! budget: no stream waits on it. The prefill tokens a step may take are shared by its prefilling sequences and
//! admissions in priority order (`scheduler.rs`): a high-priority prompt is not kept behind a low-priority one's
//! chunks.
//!
//! The estimate: the cost of the decodes alone (`StepCosts::decode`, steps whose every row samples, the
//! speculation planner's model), then the costs of steps with prefill work seen recently (`StepCosts::prefill`, by
//! their tokens): the step cost is taken on the line between neighbouring sizes, and beyond the largest size seen
//! on the line from the decodes' step through it. A step's cost also depends on how far into its prompt a chunk
//! attends and on how its tokens split between decodes and prefill; the per-size averages absorb that, and a
//! wrong estimate is corrected by the step that follows it, which is observed in turn.
//!
//! Until the costs are known (the decodes' step never seen, or no step with prefill larger than the decodes seen
//! recently), a step takes today's full budget: that step is what teaches the model, and nothing is guessed.
//!
//! Speculative drafts are added after prefill, within the token budget left (`speculative/`): they raise a
//! stream's tokens per step, and the planner takes only those that pay.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::step_cost::StepCostModel;

/// `"auto"`'s target: this multiple of the cost of a step of the same decodes alone. The issue's target is an
/// inter-token latency p99 within 1.5× the p50, and a stream's p50 is a step of decodes plus the engine's work
/// between steps; 1.25 keeps the steps that carry prefill below 1.5× with room for a shared machine's noise
/// (16 streams on 2 CPU cores: p99 / p50 1.34 against 5.19 without a budget, at 97.8 % of the tokens per
/// second: docs/performance.md, "Step budget").
pub const AUTO_FACTOR: f64 = 1.25;

/// The largest target a number may set (a minute): beyond it the option is "throughput" in effect.
pub const MAX_TARGET_MS: f64 = 60_000.0;

/// The engine's `step_budget` option.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum StepBudget {
    /// No time limit: prefill takes what the decodes leave of `max_num_batched_tokens`.
    Throughput,
    /// A target of [`AUTO_FACTOR`] × the cost of the step's decodes alone.
    #[default]
    Auto,
    /// A target step time, in milliseconds.
    TargetMs(f64),
}

impl StepBudget {
    /// Why the option cannot work, if it cannot.
    pub fn problem(&self) -> Option<String> {
        match *self {
            StepBudget::TargetMs(ms) if !(ms > 0.0 && ms <= MAX_TARGET_MS) => {
                Some(format!("step_budget = {ms} ms is not a target in (0, {MAX_TARGET_MS}] ms"))
            }
            _ => None,
        }
    }

    /// The most prefill tokens a step may take beside its `decodes` decoding rows: `None` (no limit but the token
    /// budget) without a time limit, without decodes, or while the costs are unknown; else the most whose
    /// estimated step stays within the target, but at least `min_chunk`.
    pub fn prefill_cap(self, costs: &StepCosts, decodes: usize, min_chunk: usize) -> Option<usize> {
        let target = match self {
            StepBudget::Throughput => return None,
            StepBudget::Auto => None,
            StepBudget::TargetMs(ms) => Some(ms / 1e3),
        };
        if decodes == 0 {
            return None;
        }
        let base = costs.decode.estimate(decodes)?;
        let target = target.unwrap_or(AUTO_FACTOR * base);
        let tokens = largest_within(decodes, base, costs.prefill.fresh_points(), target)?;
        Some((tokens - decodes).max(min_chunk))
    }
}

/// The least prefill tokens a step with decodes is given when a prompt waits for them: an eighth of the step's
/// token budget (16 of the CPU's 128, 256 of a GPU's 2048), so that a prompt beside costly decodes still
/// progresses at an eighth of its unbudgeted rate or better; and at least [`ARRIVAL_MARGIN`] × the prompt tokens
/// that arrive per step (`arrivals`), so that prefill keeps pace with the prompts arriving.
pub fn min_prefill_chunk(max_num_batched_tokens: usize, arrivals: &PromptArrivals) -> usize {
    let pace = (ARRIVAL_MARGIN * arrivals.per_step()).ceil() as usize;
    (max_num_batched_tokens / 8).max(1).max(pace)
}

/// Steps over which the prompt tokens arriving per step are averaged: a few seconds of steps, long enough that
/// one long prompt raises the average little (its steps keep to the target), short enough to follow a load.
pub const ARRIVAL_STEPS: f64 = 256.0;

/// How much faster than they arrive prompts are computed at least: the backlog drains, and most steps of a
/// prefill-heavy load carry prefill, so that the streams' typical step and their slowest are alike.
pub const ARRIVAL_MARGIN: f64 = 1.25;

/// The prompt tokens that arrive per step, a moving average over about [`ARRIVAL_STEPS`] steps. Why: a time
/// target alone caps prefill at what fits beside the decodes, and when prompts arrive faster than that (long
/// prompts, many clients), they queue, fewer streams decode, and tokens per second fall; keeping pace with the
/// arrivals bounds that loss, at the cost of steps over the target while the load needs them.
#[derive(Clone, Debug, Default)]
pub struct PromptArrivals {
    /// Tokens arrived since the last step.
    pending: usize,
    /// The moving average, starting from 0: a fresh engine follows its first prompts' rate over its first steps.
    rate: f64,
}

impl PromptArrivals {
    /// A prompt of `tokens` tokens arrived (its sequence waits).
    pub fn arrived(&mut self, tokens: usize) {
        self.pending += tokens;
    }

    /// A step is planned: the tokens arrived since the last one join the average.
    pub fn step(&mut self) {
        self.rate += (self.pending as f64 - self.rate) / ARRIVAL_STEPS;
        self.pending = 0;
    }

    /// Prompt tokens arriving per step, on average.
    pub fn per_step(&self) -> f64 {
        self.rate
    }
}

/// The largest step size whose estimated cost is within `target` seconds, starting from a step of `decodes`
/// tokens that costs `base` and going up through `points` (sizes and seconds of steps with prefill, smallest
/// first; those not above `decodes` are ignored): the first crossing of the target on the line through them, or
/// beyond the largest, on the line from `(decodes, base)` through it (no end when that line does not rise).
/// `decodes` itself when `base` is over the target; `None` when no point is above `decodes`.
fn largest_within(decodes: usize, base: f64, points: impl Iterator<Item = (usize, f64)>, target: f64) -> Option<usize> {
    if base >= target {
        return Some(decodes);
    }
    let (mut at, mut seconds, mut seen) = (decodes, base, false);
    for (tokens, t) in points.filter(|&(tokens, _)| tokens > decodes) {
        seen = true;
        if t > target {
            // `seconds` <= target < t: the crossing is between `at` and `tokens`.
            let x = at as f64 + (target - seconds) / (t - seconds) * (tokens - at) as f64;
            return Some((x.floor() as usize).clamp(at, tokens));
        }
        (at, seconds) = (tokens, t);
    }
    if !seen {
        return None;
    }
    let slope = (seconds - base) / (at - decodes) as f64;
    if slope <= 0.0 {
        return Some(usize::MAX);
    }
    let x = at as f64 + (target - seconds) / slope;
    Some(if x >= usize::MAX as f64 { usize::MAX } else { x.floor() as usize })
}

/// What the scheduler learns of its steps' costs, by their tokens: steps whose every row samples (decodes and
/// draft verifications: the speculation planner's model, and the step budget's cost of decodes alone), and
/// steps with prefill work. Each model is shown only its own steps, so that an estimate is forgotten after
/// [`STALE_STEPS`](super::step_cost::STALE_STEPS) steps of its kind, however rare they are.
#[derive(Clone, Debug)]
pub struct StepCosts {
    pub decode: StepCostModel,
    pub prefill: StepCostModel,
}

impl StepCosts {
    /// Models for steps of up to `max_num_batched_tokens` tokens (the decode model: of up to
    /// [`MODELLED_TOKENS`](super::step_cost::MODELLED_TOKENS)).
    pub fn new(max_num_batched_tokens: usize) -> Self {
        StepCosts { decode: StepCostModel::default(), prefill: StepCostModel::with_sizes(max_num_batched_tokens) }
    }

    /// Records a step of `tokens` tokens that took `seconds`; `every_row_samples`: no chunk of it was prefill.
    pub fn observe(&mut self, tokens: usize, seconds: f64, every_row_samples: bool) {
        match every_row_samples {
            true => self.decode.observe(tokens, seconds),
            false => self.prefill.observe(tokens, seconds),
        }
    }
}

impl Serialize for StepBudget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            StepBudget::Throughput => s.serialize_str("throughput"),
            StepBudget::Auto => s.serialize_str("auto"),
            StepBudget::TargetMs(ms) => s.serialize_f64(ms),
        }
    }
}

// By hand rather than untagged, so that a wrong value says what is expected ("invalid type: sequence, expected
// ...") instead of serde's "did not match any variant".
impl<'de> Deserialize<'de> for StepBudget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StepBudgetVisitor)
    }
}

struct StepBudgetVisitor;

impl Visitor<'_> for StepBudgetVisitor {
    type Value = StepBudget;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("\"throughput\", \"auto\" or a target step time in milliseconds")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<StepBudget, E> {
        match v {
            "throughput" => Ok(StepBudget::Throughput),
            "auto" => Ok(StepBudget::Auto),
            _ => Err(E::custom(format!(
                "unknown step budget {v:?}, expected \"throughput\", \"auto\" or a target step time in milliseconds"
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<StepBudget, E> {
        Ok(StepBudget::TargetMs(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<StepBudget, E> {
        Ok(StepBudget::TargetMs(v as f64))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<StepBudget, E> {
        Ok(StepBudget::TargetMs(v as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Costs of decode-only steps of 1..=`decode.len()` tokens and of steps with prefill of the given sizes.
    fn costs(decode: &[f64], prefill: &[(usize, f64)]) -> StepCosts {
        let mut c = StepCosts::new(128);
        for (i, &s) in decode.iter().enumerate() {
            c.observe(i + 1, s, true);
        }
        for &(tokens, s) in prefill {
            c.observe(tokens, s, false);
        }
        c
    }

    /// 4 decodes cost 20 ms; steps with prefill of 20 and 100 tokens were seen at 29 and 69 ms.
    fn seen() -> StepCosts {
        costs(&[0.014, 0.016, 0.018, 0.020], &[(20, 0.029), (100, 0.069)])
    }

    #[test]
    fn a_step_with_decodes_gets_the_prefill_that_fits_its_target() {
        let c = seen();
        // 25 ms: 4 + 5/9 × 16 = 12.9 tokens.
        assert_eq!(StepBudget::TargetMs(25.0).prefill_cap(&c, 4, 16), Some(16), "8 tokens fit: the minimum");
        assert_eq!(StepBudget::TargetMs(25.0).prefill_cap(&c, 4, 4), Some(8));
        // 20 + 1.2/40 × 80 = 22.4; 20 + 20.2/40 × 80 = 60.4.
        assert_eq!(StepBudget::TargetMs(30.2).prefill_cap(&c, 4, 4), Some(18), "between the sizes seen");
        assert_eq!(StepBudget::TargetMs(49.2).prefill_cap(&c, 4, 4), Some(56));
        // Beyond 100: on the line from (4, 20 ms) through (100, 69 ms), 100 + 10.2 × 96/49 = 119.98.
        assert_eq!(StepBudget::TargetMs(79.2).prefill_cap(&c, 4, 4), Some(115), "beyond: on the line");
        // auto: 1.25 × 20 ms = 25 ms.
        assert_eq!(StepBudget::Auto.prefill_cap(&c, 4, 4), Some(8));
        assert_eq!(StepBudget::Auto.prefill_cap(&c, 4, 16), Some(16), "at least the minimum chunk");
    }

    #[test]
    fn decodes_over_the_target_leave_the_minimum_chunk() {
        let c = seen();
        assert_eq!(StepBudget::TargetMs(5.0).prefill_cap(&c, 4, 16), Some(16));
        assert_eq!(StepBudget::TargetMs(5.0).prefill_cap(&c, 4, 1), Some(1), "a prompt always progresses");
    }

    #[test]
    fn a_step_without_decodes_and_the_throughput_policy_have_no_limit() {
        let c = seen();
        assert_eq!(StepBudget::Auto.prefill_cap(&c, 0, 16), None);
        assert_eq!(StepBudget::TargetMs(1.0).prefill_cap(&c, 0, 16), None);
        assert_eq!(StepBudget::Throughput.prefill_cap(&c, 4, 16), None);
        assert_eq!(StepBudget::Throughput.prefill_cap(&StepCosts::new(128), 4, 16), None);
    }

    #[test]
    fn unknown_costs_set_no_limit_until_a_step_teaches_them() {
        let none = StepCosts::new(128);
        assert_eq!(StepBudget::Auto.prefill_cap(&none, 4, 16), None, "nothing known");
        let decodes_only = costs(&[0.014, 0.016, 0.018, 0.020], &[]);
        assert_eq!(StepBudget::Auto.prefill_cap(&decodes_only, 4, 16), None, "no step with prefill seen");
        let smaller_only = costs(&[0.014, 0.016, 0.018, 0.020], &[(3, 0.012)]);
        assert_eq!(StepBudget::Auto.prefill_cap(&smaller_only, 4, 16), None, "none above the decodes");
        let bigger_decodes = costs(&[0.014, 0.016], &[(20, 0.028)]);
        assert_eq!(StepBudget::Auto.prefill_cap(&bigger_decodes, 8, 16), None, "8 decodes never seen");
        // The full step is then observed, and the next one is budgeted: 4 + 10/62.5 × 124 = 23.8.
        let mut learnt = decodes_only;
        learnt.observe(128, 0.0825, false);
        assert_eq!(StepBudget::TargetMs(30.0).prefill_cap(&learnt, 4, 8), Some(19));
    }

    #[test]
    fn prompts_arriving_faster_than_the_target_lets_them_raise_the_least_chunk() {
        let mut a = PromptArrivals::default();
        assert_eq!(min_prefill_chunk(128, &a), 16, "an eighth of the token budget");
        assert_eq!(min_prefill_chunk(4, &a), 1);
        a.arrived(2000);
        a.step();
        assert_eq!(min_prefill_chunk(128, &a), 16, "one long prompt raises the average little: {}", a.per_step());
        let mut a = PromptArrivals::default();
        for _ in 0..4096 {
            a.arrived(20);
            a.step();
        }
        assert!((a.per_step() - 20.0).abs() < 1e-3, "{}", a.per_step());
        assert_eq!(min_prefill_chunk(128, &a), 25, "1.25 × 20 a step");
        for _ in 0..4096 {
            a.step();
        }
        assert_eq!(min_prefill_chunk(128, &a), 16, "forgotten once prompts stop");
    }

    #[test]
    fn a_flat_cost_curve_sets_no_effective_limit() {
        // A GPU: more tokens cost no more.
        let c = costs(&[0.008, 0.008, 0.008, 0.008], &[(64, 0.008)]);
        assert!(StepBudget::Auto.prefill_cap(&c, 4, 256).is_some_and(|cap| cap >= 2044));
    }

    #[test]
    fn the_option_reads_names_and_milliseconds() {
        let read = |json: &str| serde_json::from_str::<StepBudget>(json);
        assert_eq!(read(r#""throughput""#).unwrap(), StepBudget::Throughput);
        assert_eq!(read(r#""auto""#).unwrap(), StepBudget::Auto);
        assert_eq!(read("30").unwrap(), StepBudget::TargetMs(30.0));
        assert_eq!(read("12.5").unwrap(), StepBudget::TargetMs(12.5));
        assert!(read(r#""fast""#).unwrap_err().to_string().contains("unknown step budget \"fast\""));
        assert!(read("[1]").unwrap_err().to_string().contains("expected \"throughput\", \"auto\" or a target"));
        assert_eq!(StepBudget::default(), StepBudget::Auto);
        for b in [StepBudget::Throughput, StepBudget::Auto, StepBudget::TargetMs(25.5)] {
            assert_eq!(read(&serde_json::to_string(&b).unwrap()).unwrap(), b);
        }
        assert!(StepBudget::TargetMs(0.0).problem().is_some());
        assert!(StepBudget::TargetMs(-3.0).problem().is_some());
        assert!(StepBudget::TargetMs(f64::NAN).problem().is_some());
        assert!(StepBudget::TargetMs(1e9).problem().is_some());
        assert!(StepBudget::TargetMs(0.5).problem().is_none() && StepBudget::Auto.problem().is_none());
    }
}

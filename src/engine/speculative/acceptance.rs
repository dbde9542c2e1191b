//! How likely a draft token is to be accepted, learned from the verifications so far.
//!
//! Two things predict it (measured on SmolLM2 greedy outputs, `benches/speculative.rs`'s prompts): the length of
//! the match the draft came from (a 4-token match's continuation was accepted 80–100 % of the time, a 2-token
//! one's 35–50 % in text that quotes its prompt and 10–35 % in free text, a 1-token one's about 10 %), and the
//! sequence itself (a request that copies its prompt keeps accepting; a story rarely does). So the estimate is
//! the engine's rate for the match length, scaled by how the sequence has fared against that rate recently:
//! `p = rate(match_len) × (accepted + W) / (expected + W)`, where `expected` sums the rate over the sequence's
//! own recent trials and `W` pseudo-trials pull a new sequence's factor to 1.
//!
//! A trial is one draft position the verification decided: every accepted token, and the first rejected one
//! (those after it were never compared). The chance that the `i`-th draft token is accepted is then `p^i`.

/// The longest match length with a rate of its own (longer ones share it).
const MAX_MATCH_LEN: usize = 16;

/// Decay of the engine's counts per verification: they follow the workload (half-life about 140 verifications).
const ENGINE_DECAY: f64 = 0.995;

/// Decay of a sequence's counts per verification: they follow where it is in its text (half-life about 3).
const SEQ_DECAY: f64 = 0.8;

/// Pseudo-trials of the prior: a rate starts at 1/2 with the weight of 2 trials, a sequence's factor at 1 with
/// the weight of [`SEQ_PRIOR_TRIALS`].
const PRIOR_TRIALS: f64 = 2.0;
const SEQ_PRIOR_TRIALS: f64 = 2.0;

/// The highest acceptance probability the planner is given: even a perfect record does not make the next
/// token certain.
const MAX_PROBABILITY: f64 = 0.98;

/// Decayed counts of accepted tokens and trials.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    accepted: f64,
    trials: f64,
}

/// The engine's acceptance rate per match length.
#[derive(Clone, Debug)]
pub struct AcceptanceRates {
    by_match_len: [Counts; MAX_MATCH_LEN],
}

impl Default for AcceptanceRates {
    fn default() -> Self {
        AcceptanceRates { by_match_len: [Counts::default(); MAX_MATCH_LEN] }
    }
}

/// One sequence's record against the engine's rates.
#[derive(Clone, Copy, Debug, Default)]
pub struct SeqAcceptance {
    accepted: f64,
    /// The accepted tokens the engine's rates predicted for the same trials.
    expected: f64,
}

impl AcceptanceRates {
    fn counts(&self, match_len: usize) -> &Counts {
        &self.by_match_len[match_len.clamp(1, MAX_MATCH_LEN) - 1]
    }

    /// The engine's rate for drafts from matches of `match_len` tokens.
    pub fn rate(&self, match_len: usize) -> f64 {
        let c = self.counts(match_len);
        (c.accepted + 0.5 * PRIOR_TRIALS) / (c.trials + PRIOR_TRIALS)
    }

    /// The probability that each token of sequence `seq`'s draft from a `match_len`-token match is accepted,
    /// given the ones before it were.
    pub fn probability(&self, seq: &SeqAcceptance, match_len: usize) -> f64 {
        let factor = (seq.accepted + SEQ_PRIOR_TRIALS) / (seq.expected + SEQ_PRIOR_TRIALS);
        (self.rate(match_len) * factor).clamp(0.0, MAX_PROBABILITY)
    }

    /// Records a verification of `drafted` tokens from a `match_len`-token match, of which the first `accepted`
    /// were accepted, in the engine's rates and the sequence's record.
    pub fn record(&mut self, seq: &mut SeqAcceptance, match_len: usize, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let trials = (accepted + usize::from(accepted < drafted)) as f64;
        let accepted = accepted as f64;
        let rate = self.rate(match_len);
        seq.accepted = SEQ_DECAY * seq.accepted + accepted;
        seq.expected = SEQ_DECAY * seq.expected + rate * trials;
        let c = &mut self.by_match_len[match_len.clamp(1, MAX_MATCH_LEN) - 1];
        c.accepted = ENGINE_DECAY * c.accepted + accepted;
        c.trials = ENGINE_DECAY * c.trials + trials;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_start_even_and_follow_the_verifications() {
        let mut rates = AcceptanceRates::default();
        let mut seq = SeqAcceptance::default();
        assert_eq!(rates.rate(3), 0.5);
        assert_eq!(rates.probability(&seq, 3), 0.5);
        for _ in 0..50 {
            rates.record(&mut seq, 4, 4, 4); // always accepted: 4 trials, 4 accepted
            rates.record(&mut SeqAcceptance::default(), 2, 4, 0); // rejected at once: 1 trial
        }
        assert!(rates.rate(4) > 0.95, "{}", rates.rate(4));
        assert!(rates.rate(2) < 0.05, "{}", rates.rate(2));
        assert_eq!(rates.rate(3), 0.5, "each match length has its own rate");
        assert_eq!(rates.rate(40), rates.rate(MAX_MATCH_LEN), "long matches share the last rate");
        assert!(rates.probability(&seq, 4) <= MAX_PROBABILITY);
    }

    #[test]
    fn a_sequence_that_beats_the_rate_gets_a_higher_probability_and_one_that_misses_a_lower() {
        let mut rates = AcceptanceRates::default();
        let (mut copier, mut storyteller) = (SeqAcceptance::default(), SeqAcceptance::default());
        for _ in 0..20 {
            rates.record(&mut copier, 2, 3, 3);
            rates.record(&mut storyteller, 2, 3, 0);
        }
        let rate = rates.rate(2);
        assert!(rates.probability(&copier, 2) > rate, "{} vs {rate}", rates.probability(&copier, 2));
        assert!(rates.probability(&storyteller, 2) < rate / 2.0, "{}", rates.probability(&storyteller, 2));
        rates.record(&mut copier, 2, 0, 0);
        assert_eq!(rates.rate(2), rate, "an empty draft records nothing");
    }
}

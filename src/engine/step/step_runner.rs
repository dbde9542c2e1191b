//! The runner stage of a step: the scheduler's chunks become one batched forward pass, and each chunk that reaches
//! its sequence's last token gets its next token sampled. Sampling lives here, behind the runner, so the engine
//! core never asks how: a backend that can take the argmax on the device returns token ids only (a GPU need not
//! copy 49,152-float rows to the host for greedy requests); otherwise the logits rows come back and each
//! sequence's sampler draws from its own row on the host.

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashMap;

use super::runner::BatchForward;
use super::{RunnerOutput, SampledToken, ScheduledChunk, SchedulerOutput, StepError};
use crate::engine::guided::{Accepted, GuidedMatcher, MaskJobs, MaskTimes};
use crate::engine::observe::stats::EngineClock;
use crate::engine::sampling::prompt_logprobs::PromptScoring;
use crate::engine::sampling::{LogprobSampler, Sampler, TokenLogprob};
use crate::engine::sequence::{SeqId, Sequence};
use crate::model::llama::SeqChunk;
use crate::model::TokenId;

/// How a sequence's next tokens are drawn, and its prompt scored: the step runner's part of a sequence
/// (`Sequence::sampling`). The runner draws from its rows and scores the prompt; besides, the scheduler's update
/// tells it each token appended ([`count`](Self::count), [`advance_grammar`](Self::advance_grammar)), and a step's
/// masks take the grammar matcher out for the length of the forward pass (`guided/masks.rs`).
pub struct SeqSampling {
    sampler: Sampler,
    /// Structured outputs: the choice's grammar matcher (`None` when unconstrained). Taken out for the length of
    /// a forward pass, while its next mask is computed (`guided/masks.rs`).
    guided: Option<Box<GuidedMatcher>>,
    /// `prompt_logprobs` (and `echo` with `logprobs`): this choice scores its prompt for every choice of it
    /// (`prompt_logprobs.rs`). Set on a prompt's first choice; `None` otherwise.
    prompt_scoring: Option<Box<PromptScoring>>,
}

impl SeqSampling {
    /// Draws with `sampler`, unconstrained, scoring nothing.
    pub fn new(sampler: Sampler) -> Self {
        SeqSampling { sampler, guided: None, prompt_scoring: None }
    }

    /// At submission: constrained by `matcher` (structured outputs; `None`: unconstrained).
    pub fn with_grammar(self, matcher: Option<GuidedMatcher>) -> Self {
        SeqSampling { guided: matcher.map(Box::new), ..self }
    }

    /// At submission: scores its prompt with `scoring` (`prompt_logprobs`; `None`: it scores nothing).
    pub fn with_prompt_scoring(self, scoring: Option<PromptScoring>) -> Self {
        SeqSampling { prompt_scoring: scoring.map(Box::new), ..self }
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// Whether a grammar constrains the sequence (structured outputs).
    pub fn is_constrained(&self) -> bool {
        self.guided.is_some()
    }

    /// The prompt's scoring, on the choice that scores it.
    pub fn prompt_scoring(&self) -> Option<&PromptScoring> {
        self.prompt_scoring.as_deref()
    }

    /// The scheduler's update: `token` was appended; the sampler counts it (penalties).
    pub fn count(&mut self, token: TokenId) {
        self.sampler.accept(token);
    }

    /// The scheduler's update: the grammar accepts `token`, appended (not a stop id). `None` when unconstrained.
    pub fn advance_grammar(&mut self, token: TokenId) -> Option<Accepted> {
        self.guided.as_mut().map(|guided| guided.accept(token))
    }

    /// A step's masks: takes the grammar matcher out for the length of the forward pass, while its next mask is
    /// computed beside it.
    pub fn take_matcher(&mut self) -> Option<Box<GuidedMatcher>> {
        self.guided.take()
    }

    /// A step's masks: gives back the matcher [`take_matcher`](Self::take_matcher) took, its mask computed.
    pub fn restore_matcher(&mut self, matcher: Box<GuidedMatcher>) {
        self.guided = Some(matcher);
    }
}

/// `min_tokens`: until a sequence has generated that many tokens, its stop ids (end-of-generation and
/// `stop_token_ids`) cannot be sampled (vLLM's semantics). `ahead`: the row samples the token after that many
/// more (a draft's row, `speculative/`).
fn ban_early_stops(seq: &Sequence, ahead: usize, logits: &mut [f32]) {
    if seq.bans_stops_after(ahead) {
        for &id in seq.stop_ids() {
            if let Some(logit) = logits.get_mut(id as usize) {
                *logit = f32::NEG_INFINITY;
            }
        }
    }
}

/// Runs steps on a backend, with the buffers reused from step to step.
pub struct StepRunner<'m> {
    forward: Box<dyn BatchForward + 'm>,
    vocab_size: usize,
    /// `[logits rows][vocab]`: each chunk's rows (`chunk_rows`), in chunk order.
    logits: Vec<f32>,
    /// Per chunk of the step: its logits rows (`SeqChunk::logit_rows`).
    chunk_rows: Vec<usize>,
    /// `[sampling chunks]`: the argmax of each row, when the backend took it on the device.
    device_ids: Vec<TokenId>,
    device_values: Vec<f32>,
    logprobs: LogprobSampler,
    /// The input of the draft a chunk verifies, copied out of its sequence while its rows are sampled.
    draft_input: Vec<TokenId>,
    /// Where the structured-output masks' times go (the engine's, shared with its host).
    mask_times: Arc<MaskTimes>,
}

impl<'m> StepRunner<'m> {
    pub fn new(forward: Box<dyn BatchForward + 'm>, vocab_size: usize) -> Self {
        StepRunner {
            forward,
            vocab_size,
            logits: Vec::new(),
            chunk_rows: Vec::new(),
            device_ids: Vec::new(),
            device_values: Vec::new(),
            logprobs: LogprobSampler::default(),
            draft_input: Vec::new(),
            mask_times: Arc::default(),
        }
    }

    /// Records the structured-output mask times in `times` (the engine's counters).
    pub fn with_mask_times(mut self, times: Arc<MaskTimes>) -> Self {
        self.mask_times = times;
        self
    }

    /// Runs `step` over `seqs` (the scheduler's) and samples the next token of every chunk that reaches its
    /// sequence's end, with that sequence's sampler; scores the prompt positions of chunks that ask for it
    /// (`prompt_logprobs.rs`), publishing a prompt's result once it is complete.
    pub fn execute(
        &mut self,
        step: &SchedulerOutput,
        seqs: &mut FxHashMap<SeqId, Sequence>,
        clock: &EngineClock,
    ) -> Result<RunnerOutput, StepError> {
        self.chunk_rows.clear();
        self.chunk_rows.extend(step.chunks.iter().map(|c| logit_rows(c, &seqs[&c.seq])));
        let n_rows: usize = self.chunk_rows.iter().sum();
        let device_greedy = self.forward_with_masks(step, seqs, n_rows)?;
        let mut out = RunnerOutput { sampled: Vec::with_capacity(step.chunks.len()) };
        let (mut row, vocab) = (0, self.vocab_size);
        let chunk_rows = std::mem::take(&mut self.chunk_rows);
        for (c, &k) in step.chunks.iter().zip(&chunk_rows) {
            let rows = row..row + k;
            row += k;
            if device_greedy {
                // Only sampling rows, nothing scored (`forward_batch`): a decode's one row, or a draft's rows.
                if c.samples {
                    let ids = &self.device_ids[rows];
                    push_verified(&mut out, c, seqs[&c.seq].draft.input(), clock, |j| (ids[j], None));
                }
                continue;
            }
            let seq = seqs.get_mut(&c.seq).expect("scheduled sequences exist");
            let first_pos = c.start + c.n_tokens - k;
            for pos in seq.rows_to_score(c.start, c.n_tokens) {
                let r = rows.start + pos - first_pos;
                self.logprobs.keep_raw(&self.logits[r * vocab..(r + 1) * vocab]);
                let next = seq.tokens()[pos + 1];
                let scoring = seq.sampling.prompt_scoring.as_mut().expect("a sequence that scores has its scoring");
                let entry = self.logprobs.report_prompt_token(next, scoring.top);
                scoring.push(pos, entry);
            }
            let prompt_len = seq.prompt_len();
            let scored = match seq.sampling.prompt_scoring.as_mut() {
                Some(scoring) => scoring.take_finished(prompt_len).map(|done| (scoring.choices.clone(), done)),
                None => None,
            };
            if let Some((choices, done)) = scored {
                seq.request().set_prompt_logprobs(choices, done);
            }
            if !c.samples {
                continue;
            }
            // A decode's row is its last; a draft's rows are all the chunk's, sampled in order while they
            // confirm the draft.
            let first = rows.end - 1 - c.draft;
            self.draft_input.clear();
            self.draft_input.extend_from_slice(seq.draft.input());
            let (logits, logprobs) = (&mut self.logits, &mut self.logprobs);
            push_verified(&mut out, c, &self.draft_input, clock, |j| {
                let r = first + j;
                sample_row(seq, j, &mut logits[r * vocab..(r + 1) * vocab], logprobs)
            });
        }
        self.chunk_rows = chunk_rows;
        Ok(out)
    }

    /// The forward pass, with the structured-output masks of the constrained sampling sequences computed on a
    /// second thread meanwhile (off the critical path: they depend only on tokens accepted before the step).
    /// Their matchers are back in their sequences when this returns, whatever the forward's outcome.
    fn forward_with_masks(
        &mut self,
        step: &SchedulerOutput,
        seqs: &mut FxHashMap<SeqId, Sequence>,
        n_rows: usize,
    ) -> Result<bool, StepError> {
        let mut jobs = MaskJobs::take(step, seqs);
        if jobs.is_empty() {
            return self.forward_batch(step, seqs, n_rows, false);
        }
        let (ran, wait) = std::thread::scope(|s| {
            let worker = s.spawn(|| jobs.compute());
            let ran = self.forward_batch(step, seqs, n_rows, true);
            let forward_done = Instant::now();
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
            (ran, forward_done.elapsed())
        });
        self.mask_times.record_step(jobs.times(), wait);
        jobs.restore(seqs);
        ran
    }

    /// The forward pass. True when the backend took each row's argmax itself (every sampling sequence is plain
    /// greedy, unconstrained and without log probabilities, and the backend can), false when the logits rows are
    /// in `self.logits`.
    fn forward_batch(
        &mut self,
        step: &SchedulerOutput,
        seqs: &FxHashMap<SeqId, Sequence>,
        n_rows: usize,
        constrained: bool,
    ) -> Result<bool, StepError> {
        let batch: Vec<SeqChunk<'_>> = step
            .chunks
            .iter()
            .zip(self.chunk_rows.iter().copied())
            .map(|(c, rows)| {
                let s = &seqs[&c.seq];
                SeqChunk {
                    tokens: s.chunk_tokens(c.start, c.n_tokens),
                    start_pos: c.start,
                    block_table: s.kv.block_table(),
                    window_table: s.kv.window_table(),
                    logit_rows: rows,
                }
            })
            .collect();
        // The device's argmax serves the rows that sample (a decode's, a draft's): nothing may be scored.
        let one_row_each =
            step.chunks.iter().zip(&self.chunk_rows).all(|(c, &k)| k == usize::from(c.samples) + c.draft);
        let all_greedy = one_row_each
            && step.chunks.iter().filter(|c| c.samples).all(|c| {
                let p = seqs[&c.seq].sampling.sampler.params();
                let s = &seqs[&c.seq];
                p.is_greedy()
                    && !p.has_penalties()
                    && p.logit_bias.is_empty()
                    && s.logprobs().is_none()
                    && !s.bans_stops()
            });
        if all_greedy && !constrained && n_rows > 0 {
            self.device_ids.resize(n_rows, 0);
            self.device_values.resize(n_rows, 0.0);
            if let Some(ran) = self.forward.run_top_k(&batch, 1, &mut self.device_ids, &mut self.device_values) {
                return ran.map(|()| true);
            }
        }
        self.logits.resize(n_rows * self.vocab_size, 0.0);
        self.forward.run(&batch, &mut self.logits).map(|()| false)
    }
}

/// Samples row `ahead` of a sequence's step (0: its next token; `j`: the token after `j` draft tokens) with its
/// own sampler, as plain decoding samples: the grammar mask, the `min_tokens` ban, then the sampler; with the
/// token's log probability (of the raw row) when the sequence asks for them.
fn sample_row(
    seq: &mut Sequence,
    ahead: usize,
    logits: &mut [f32],
    logprobs: &mut LogprobSampler,
) -> (TokenId, Option<TokenLogprob>) {
    // Log probabilities are the raw model's: kept before any mask.
    if seq.logprobs().is_some() {
        logprobs.keep_raw(logits);
    }
    apply_mask(logits, seq);
    ban_early_stops(seq, ahead, logits);
    let token = seq.sampling.sampler.sample(logits);
    (token, seq.logprobs().map(|top| logprobs.report(token, top)))
}

/// Pushes chunk `c`'s tokens: the token `sample(0)` without a draft; with one (`draft_input`: the last token,
/// then the draft), `sample(j)` for `j = 0, 1, …` while it equals draft token `j`, and the first that does not
/// (or the one after the whole draft). Sampling stops at the first disagreement, so exactly one sample is drawn
/// per token pushed, as plain decoding draws them (`speculative/`: why the output is unchanged). The tokens
/// share one timestamp: when the last of them was on the host.
fn push_verified(
    out: &mut RunnerOutput,
    c: &ScheduledChunk,
    draft_input: &[TokenId],
    clock: &EngineClock,
    mut sample: impl FnMut(usize) -> (TokenId, Option<TokenLogprob>),
) {
    let draft = draft_input.get(1..).filter(|_| c.draft > 0).unwrap_or_default();
    let first = out.sampled.len();
    for j in 0..=draft.len() {
        let (token, logprob) = sample(j);
        out.sampled.push(SampledToken { seq: c.seq, token, ts: 0.0, logprob });
        if draft.get(j) != Some(&token) {
            break;
        }
    }
    let ts = clock.now();
    for t in &mut out.sampled[first..] {
        t.ts = ts;
    }
}

/// The logits rows chunk `c` of `seq` asks for: its last one when it samples, and from its first position that
/// scores the prompt when it scores (the rows from there to the end are contiguous: the prompt's last position
/// samples).
fn logit_rows(c: &ScheduledChunk, seq: &Sequence) -> usize {
    if c.draft > 0 {
        // Every row verifies one draft token, the last one yields the token after the draft.
        return c.n_tokens;
    }
    let scored = seq.rows_to_score(c.start, c.n_tokens);
    if scored.is_empty() {
        usize::from(c.samples)
    } else {
        c.start + c.n_tokens - scored.start
    }
}

/// Structured outputs: the tokens the sequence's grammar does not allow next get −∞ before its sampler sees the
/// row, so temperature, top-p and the rest act on the allowed ones. A mask that could not be computed leaves the
/// row as it is; the scheduler's update then fails the choice (`GuidedMatcher::accept`).
fn apply_mask(logits: &mut [f32], seq: &mut Sequence) {
    if let Some(guided) = seq.sampling.guided.as_mut() {
        let _ = guided.apply_mask(logits);
    }
}

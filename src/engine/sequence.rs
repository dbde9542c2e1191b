//! One sequence: a choice of a request, with its tokens and shared options, and one part for each stage that
//! changes it, each part's type defined by its stage with its fields private to it: its state (`SeqState`, the
//! scheduler's, `step/scheduler.rs`), its KV blocks (`SeqKv`, the KV pools', `kv/kv_pools.rs`), its sampler,
//! grammar matcher and prompt scoring (`SeqSampling`, the step runner's, `step/step_runner.rs`), its speculative
//! drafts (`SeqDraft`, `speculative/seq_draft.rs`), its prompt progress (`ProgressReporter`,
//! `observe/prompt_progress.rs`) and its text (`TextOutput`, the output stage's, `output/text_output.rs`). A part
//! that more than one stage changes is changed through methods named for each stage's transition.
//!
//! Every stage reaches the parts; a part's fields only its own stage does. What identifies the sequence and what
//! every stage reads is private to this module, read through methods: it is set while the sequence is built and
//! owned by value (`Engine::submit`: [`Sequence::new`] and the `with_*` methods; the engine thread numbers it,
//! [`Sequence::numbered`]) and never changes after, but for its tokens, which only [`Sequence::append_token`]
//! appends to.
//!
//! A step touches a sequence in two stages: the scheduler's update appends the sampled token and applies the
//! rules that need no text (stop ids, `max_tokens`, the context), then the output stage turns the new tokens into
//! text and matches the stop strings.

use std::ops::Range;
use std::sync::Arc;

use crate::engine::api::seq_options::SharedOptions;
use crate::engine::guided::{Accepted, GuidedMatcher};
use crate::engine::kv::kv_pools::SeqKv;
use crate::engine::observe::prompt_progress::ProgressReporter;
use crate::engine::output::finish::FinishReason;
use crate::engine::output::text_output::{Sink, TextOutput};
use crate::engine::output::RequestShared;
use crate::engine::sampling::prompt_logprobs::{PromptScoring, SCORING_CHUNK_TOKENS};
use crate::engine::sampling::{Sampler, TokenLogprob};
use crate::engine::speculative::seq_draft::SeqDraft;
use crate::engine::step::scheduler::SeqState;
use crate::engine::step::step_runner::SeqSampling;
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

/// Engine-wide sequence number (requests have ids; each of their choices is a sequence).
pub type SeqId = u64;

/// A sequence being generated: what identifies it and what every stage reads (private, read through methods),
/// then one part per stage that changes it (reachable in the engine, each part's fields private to its stage).
pub struct Sequence {
    id: SeqId,
    request: Arc<RequestShared>,
    choice: usize,
    /// Prompt then generated tokens.
    tokens: Vec<TokenId>,
    prompt_len: usize,
    /// Most tokens to generate: the request's `max_tokens`, or the room its prompt leaves.
    max_tokens: usize,
    /// The request's options, shared by its sequences.
    options: Arc<SharedOptions>,
    /// Whether this choice is the first of its prompt: the one whose cached prompt tokens `usage` reports (a
    /// prompt is billed once, however many choices share it).
    bills_prompt: bool,
    /// Where the sequence is in its life (the scheduler's); the scheduler's queues agree with it.
    pub(super) state: SeqState,
    /// Reports how far its prompt has been computed (`observe/prompt_progress.rs`): on the first choice of each
    /// prompt of a request with `return_progress`, `None` otherwise.
    pub(super) progress: Option<ProgressReporter>,
    /// Its keys and values (the KV pools', which the scheduler grows and frees).
    pub(super) kv: SeqKv,
    /// How its next tokens are drawn (the step runner's).
    pub(super) sampling: SeqSampling,
    /// Its speculative drafts (planned by the scheduler, verified by the step runner, appended by the output
    /// stage).
    pub(super) draft: SeqDraft,
    /// Its text (the output stage's).
    text: TextOutput,
}

impl Sequence {
    /// Choice `choice` of `request`, generating at most `max_tokens` after `prompt` with `sampler`. Choice 0 bills
    /// its prompt ([`with_prompt_role`](Self::with_prompt_role) says otherwise).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: SeqId,
        request: Arc<RequestShared>,
        choice: usize,
        prompt: &[TokenId],
        max_tokens: usize,
        options: Arc<SharedOptions>,
        sampler: Sampler,
    ) -> Self {
        let text = TextOutput::new(&options.given);
        Sequence {
            id,
            request,
            choice,
            tokens: prompt.to_vec(),
            prompt_len: prompt.len(),
            max_tokens,
            options,
            bills_prompt: choice == 0,
            state: SeqState::default(),
            progress: None,
            kv: SeqKv::default(),
            sampling: SeqSampling::new(sampler),
            draft: SeqDraft::default(),
            text,
        }
    }

    /// At submission, the per-choice part of a prompt that several choices share (`n`): whether this choice is
    /// the prompt's first, which bills the prompt (`usage` counts it once), reports its progress when the request
    /// asks (`reports_progress`, `return_progress`) and scores it for every choice of it (`scoring`,
    /// `prompt_logprobs`).
    pub fn with_prompt_role(mut self, first: bool, reports_progress: bool, scoring: Option<PromptScoring>) -> Self {
        self.bills_prompt = first;
        self.progress = reports_progress.then(ProgressReporter::default);
        self.sampling = self.sampling.with_prompt_scoring(scoring);
        self
    }

    /// At submission: structured outputs, the choice's grammar matcher (`None`: unconstrained).
    pub fn with_grammar(mut self, matcher: Option<GuidedMatcher>) -> Self {
        self.sampling = self.sampling.with_grammar(matcher);
        self
    }

    /// The engine thread numbers each sequence as it takes it from the inbox.
    pub fn numbered(mut self, id: SeqId) -> Self {
        self.id = id;
        self
    }

    pub fn id(&self) -> SeqId {
        self.id
    }

    /// The request the sequence is a choice of.
    pub fn request(&self) -> &RequestShared {
        &self.request
    }

    /// Which choice of its request the sequence is.
    pub fn choice(&self) -> usize {
        self.choice
    }

    /// Prompt then generated tokens.
    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// Most tokens to generate: the request's `max_tokens`, or the room its prompt leaves.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Whether this choice bills its prompt (the first choice of it): `usage` counts a prompt once.
    pub fn bills_prompt(&self) -> bool {
        self.bills_prompt
    }

    /// Its KV part, with the tokens the pools hash and look its blocks up by.
    pub fn kv_with_tokens(&mut self) -> (&mut SeqKv, &[TokenId]) {
        (&mut self.kv, &self.tokens)
    }

    /// `Some(k)`: every sampled token gets its log probability and its `k` most likely alternatives (the request's
    /// `logprobs`).
    pub fn logprobs(&self) -> Option<usize> {
        self.options.given.logprobs
    }

    /// The request's `priority`: lower is scheduled first, and may preempt higher.
    pub fn priority(&self) -> i32 {
        self.options.given.priority
    }

    /// Monotonic engine time after which the sequence ends with `Deadline` (the request's `deadline_ms`).
    pub fn deadline(&self) -> Option<f64> {
        self.options.deadline
    }

    /// Tokens that end the sequence (the request's stop ids, and end-of-generation unless ignored).
    pub fn stop_ids(&self) -> &[TokenId] {
        &self.options.stop_ids
    }

    /// `min_tokens`: until this many tokens are generated, stop ids cannot be sampled and stop strings do not
    /// match (vLLM's semantics).
    fn min_tokens(&self) -> usize {
        self.options.given.min_tokens
    }

    /// The reason the sequence ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.state.finish_reason()
    }

    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Whether the sequence still has prompt positions to score (`prompt_logprobs`).
    fn is_scoring(&self) -> bool {
        self.sampling.prompt_scoring().is_some_and(|s| !s.is_published())
    }

    /// The most leading positions the prefix cache may serve at admission (it serves whole blocks of them): all
    /// but the last token, whose logits are needed; while the prompt is scored, only the positions scored.
    pub fn cacheable_prefix(&self) -> usize {
        let all_but_last = self.tokens.len().saturating_sub(1);
        match self.sampling.prompt_scoring() {
            Some(s) if self.is_scoring() => all_but_last.min(s.cacheable_positions()),
            _ => all_but_last,
        }
    }

    /// The most tokens one step may compute for the sequence (bounded while it scores its prompt, since every row
    /// then returns logits).
    pub fn max_chunk_tokens(&self) -> usize {
        if self.is_scoring() {
            SCORING_CHUNK_TOKENS
        } else {
            usize::MAX
        }
    }

    /// The positions of a chunk `start .. start + n` whose logits rows score the prompt (empty when it scores
    /// nothing).
    pub fn rows_to_score(&self, start: usize, n: usize) -> Range<usize> {
        match self.sampling.prompt_scoring() {
            Some(s) if self.is_scoring() => s.rows_to_score(start, n, self.prompt_len),
            _ => start..start,
        }
    }

    /// The tokens of the text its output is expected to repeat (`RequestOptions::prediction`), if any.
    pub fn prediction(&self) -> Option<&[TokenId]> {
        self.options.given.prediction.as_deref()
    }

    /// Whether the sequence may verify drafts (`speculative/`): it did not opt out, and nothing that depends on
    /// the tokens before a row shapes the row, other than what the step runner applies per row (the
    /// `min_tokens` ban): no penalties (their counts would need the draft tokens before acceptance), no grammar
    /// (its matcher would need to walk the draft).
    pub fn can_speculate(&self) -> bool {
        self.options.given.speculative_decoding
            && !self.sampling.sampler().params().has_penalties()
            && !self.sampling.is_constrained()
    }

    /// The tokens chunk `start .. start + n` computes: the sequence's own, or the last one and the draft.
    pub fn chunk_tokens(&self, start: usize, n: usize) -> &[TokenId] {
        let draft = self.draft.input();
        if !draft.is_empty() && start + 1 == self.tokens.len() {
            &draft[..n]
        } else {
            &self.tokens[start..start + n]
        }
    }

    /// Whether the next token must not be a stop id (`min_tokens` not reached yet).
    pub fn bans_stops(&self) -> bool {
        self.bans_stops_after(0)
    }

    /// Whether the token after the next `ahead` ones must not be a stop id: the ban of a draft's row `ahead`,
    /// which samples as if the draft tokens before it had been generated.
    pub fn bans_stops_after(&self, ahead: usize) -> bool {
        self.num_generated() + ahead < self.min_tokens()
    }

    /// Tokens whose keys and values are still to be computed (the prompt, a recomputation after preemption, or
    /// the one token sampled last step).
    pub fn num_uncomputed(&self) -> usize {
        self.tokens.len() - self.kv.num_computed()
    }

    /// The scheduler's update: records token `token`, sampled at monotonic time `ts` (with its log probability
    /// when asked for), and decides what needs no text: a stop id ends the sequence (`Stop`), so does a
    /// constrained choice's grammar once complete; then `max_tokens` and `context` (the most positions the
    /// sequence may have; `Length`). `None` while it goes on.
    pub fn append_token(
        &mut self,
        token: TokenId,
        ts: f64,
        logprob: Option<TokenLogprob>,
        context: usize,
    ) -> Option<FinishReason> {
        self.tokens.push(token);
        // A stop id produces no text, so it has no place among the logprobs of the text either (as it has none
        // in OpenAI's responses).
        let stop_id = self.options.stop_ids.contains(&token);
        self.text.hold(ts, logprob.filter(|_| !stop_id));
        self.sampling.count(token);
        self.request.count_token(self.choice, token);
        self.request.with_stats(self.choice, |s| s.record_token(ts));
        if stop_id {
            return Some(FinishReason::Stop);
        }
        if let Some(accepted) = self.sampling.advance_grammar(token) {
            match accepted {
                Accepted::More => {}
                Accepted::Complete => return Some(FinishReason::Stop),
                // The mask could not be computed (a parser limit), so the token was drawn unconstrained: the
                // output can no longer be guaranteed, and the request fails saying why.
                Accepted::Failed(message) => {
                    self.request.fail(message);
                    return Some(FinishReason::Error);
                }
            }
        }
        if self.num_generated() >= self.max_tokens || self.tokens.len() >= context {
            return Some(FinishReason::Length);
        }
        None
    }

    /// The output stage, after [`emit_text`](Self::emit_text) and while the sequence goes on: appends the next
    /// token a verified draft yielded ([`SeqDraft::next_accepted`]), as the scheduler's update appends one; its
    /// position's predecessor was computed in the step. `None` when nothing is pending; `Some(reason)` when it
    /// ended the sequence (the rest are dropped).
    pub fn append_accepted(&mut self, context: usize) -> Option<Option<FinishReason>> {
        let (token, ts, logprob) = self.draft.next_accepted()?;
        self.kv.computed(1);
        let ended = self.append_token(token, ts, logprob, context);
        if ended.is_some() {
            self.draft.drop_accepted();
        }
        Some(ended)
    }

    /// The output stage: turns the tokens appended since the last call into text (`TextOutput::emit`).
    /// `Some(Stop)` when a stop string matched; at the end of a sequence, releases what is still held.
    pub fn emit_text(&mut self, tokenizer: &Tokenizer) -> Option<FinishReason> {
        let finished = self.finish_reason().is_some();
        let generated = &self.tokens[self.prompt_len..];
        let sink = Sink { request: &self.request, choice: self.choice };
        self.text.emit(tokenizer, generated, &self.options, finished, sink)
    }

    /// The sequence ends without a stop string: release what the detokenizer and stop matcher still hold.
    pub fn release_rest(&mut self) {
        self.text.release_rest(Sink { request: &self.request, choice: self.choice });
    }
}

//! One sequence: a choice of a request, with its tokens and shared options, and one part for each stage that
//! changes it: its KV blocks (`SeqKv`, the scheduler's), its sampler, grammar matcher and prompt scoring
//! (`SeqSampling`, the step runner's), its speculative drafts (`SeqDraft`) and its text (`TextOutput`,
//! `text_output.rs`, the output stage's).
//!
//! A step touches a sequence in two stages: the scheduler's update appends the sampled token and applies the
//! rules that need no text (stop ids, `max_tokens`, the context), then the output stage turns the new tokens into
//! text and matches the stop strings.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use crate::engine::api::seq_options::SharedOptions;
use crate::engine::guided::{Accepted, GuidedMatcher};
use crate::engine::kv::kv_prefix::BlockHash;
use crate::engine::observe::prompt_progress::ProgressReporter;
use crate::engine::output::finish::FinishReason;
use crate::engine::output::text_output::{Sink, TextOutput};
use crate::engine::output::RequestShared;
use crate::engine::sampling::prompt_logprobs::{PromptScoring, SCORING_CHUNK_TOKENS};
use crate::engine::sampling::{Sampler, TokenLogprob};
use crate::engine::speculative::acceptance::SeqAcceptance;
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

/// Engine-wide sequence number (requests have ids; each of their choices is a sequence).
pub type SeqId = u64;

/// A sequence being generated: what identifies it and what every stage reads, then one part per stage that
/// changes it.
pub struct Sequence {
    pub id: SeqId,
    pub request: Arc<RequestShared>,
    pub choice: usize,
    /// Prompt then generated tokens.
    pub tokens: Vec<TokenId>,
    pub prompt_len: usize,
    /// Most tokens to generate: the request's `max_tokens`, or the room its prompt leaves.
    pub max_tokens: usize,
    /// The request's options, shared by its sequences.
    pub options: Arc<SharedOptions>,
    /// Where the sequence is in its life; the scheduler's queues agree with it.
    pub status: SeqStatus,
    /// Whether this choice is the first of its prompt: the one whose cached prompt tokens `usage` reports (a
    /// prompt is billed once, however many choices share it).
    pub bills_prompt: bool,
    /// Reports how far its prompt has been computed (`prompt_progress.rs`): on the first choice of each prompt of
    /// a request with `return_progress`, `None` otherwise.
    pub progress: Option<ProgressReporter>,
    /// Its keys and values (the scheduler's).
    pub kv: SeqKv,
    /// How its next tokens are drawn (the step runner's).
    pub sampling: SeqSampling,
    /// Its speculative drafts (planned by the scheduler, verified by the step runner, appended by the output
    /// stage).
    pub draft: SeqDraft,
    /// Its text (the output stage's).
    text: TextOutput,
}

/// Where a sequence's keys and values are. The scheduler changes it as it admits, grows, preempts and frees.
#[derive(Default)]
pub struct SeqKv {
    /// Positions whose keys and values are in the KV cache: `tokens[..num_computed]`.
    pub num_computed: usize,
    /// KV cache blocks holding positions `0..num_computed` (and room scheduled for more).
    pub block_table: Vec<u32>,
    /// Window-pool blocks of the sliding-window layers, indexed like `block_table`: those of the positions the
    /// next step may still read, `NO_BLOCK` before them (empty without a window pool).
    pub window_table: Vec<u32>,
    /// Hashes of the sequence's full blocks of tokens, in order: its keys in the prefix cache (`kv_prefix.rs`;
    /// empty when the engine caches no prefixes).
    pub block_hashes: Vec<BlockHash>,
}

/// How a sequence's next tokens are drawn, and its prompt scored. The step runner uses it; the scheduler's update
/// tells the sampler and the grammar each token.
pub struct SeqSampling {
    pub sampler: Sampler,
    /// Structured outputs: the choice's grammar matcher (`None` when unconstrained). Taken out for the length of
    /// a forward pass, while its next mask is computed (`guided/masks.rs`).
    pub guided: Option<Box<GuidedMatcher>>,
    /// `prompt_logprobs` (and `echo` with `logprobs`): this choice scores its prompt for every choice of it
    /// (`prompt_logprobs.rs`). Set on a prompt's first choice; `None` otherwise.
    pub prompt_scoring: Option<Box<PromptScoring>>,
}

/// Speculative decoding's state of a sequence (`speculative/`).
#[derive(Default)]
pub struct SeqDraft {
    /// The step's input when it verifies a draft: the last token, then the draft. Empty otherwise; the scheduler
    /// sets it for the step it plans.
    pub input: Vec<TokenId>,
    /// The length of the match the draft being verified came from (`speculative/ngram.rs`).
    pub match_len: usize,
    /// How the sequence's drafts have fared (`speculative/acceptance.rs`).
    pub acceptance: SeqAcceptance,
    /// Tokens a verified draft yields after the first (the accepted draft tokens, then the model's own), with
    /// their timestamp and log probability, for the output stage to append one at a time
    /// ([`Sequence::append_accepted`]).
    pub accepted_pending: VecDeque<(TokenId, f64, Option<TokenLogprob>)>,
}

/// A sequence's state. Only the scheduler changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqStatus {
    /// Never scheduled: in the waiting queue.
    Waiting,
    /// Admitted: in the running queue, its blocks allocated.
    Running,
    /// Its blocks were taken back for another sequence: at the head of the waiting queue, to be recomputed.
    Preempted,
    /// Ended; the scheduler releases it (blocks, queues) before the next step.
    Finished(FinishReason),
}

impl Sequence {
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
            status: SeqStatus::Waiting,
            bills_prompt: choice == 0,
            progress: None,
            kv: SeqKv::default(),
            sampling: SeqSampling { sampler, guided: None, prompt_scoring: None },
            draft: SeqDraft::default(),
            text,
        }
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
        match self.status {
            SeqStatus::Finished(reason) => Some(reason),
            _ => None,
        }
    }

    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Whether the sequence still has prompt positions to score (`prompt_logprobs`).
    fn is_scoring(&self) -> bool {
        self.sampling.prompt_scoring.as_ref().is_some_and(|s| !s.is_published())
    }

    /// The most leading positions the prefix cache may serve at admission (it serves whole blocks of them): all
    /// but the last token, whose logits are needed; while the prompt is scored, only the positions scored.
    pub fn cacheable_prefix(&self) -> usize {
        let all_but_last = self.tokens.len().saturating_sub(1);
        match &self.sampling.prompt_scoring {
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
        match &self.sampling.prompt_scoring {
            Some(s) if self.is_scoring() => s.rows_to_score(start, n, self.prompt_len),
            _ => start..start,
        }
    }

    /// Whether the sequence may verify drafts (`speculative/`): it did not opt out, and nothing that depends on
    /// the tokens before a row shapes the row, other than what the step runner applies per row (the
    /// `min_tokens` ban): no penalties (their counts would need the draft tokens before acceptance), no grammar
    /// (its matcher would need to walk the draft).
    pub fn can_speculate(&self) -> bool {
        self.options.given.speculative_decoding
            && !self.sampling.sampler.params().has_penalties()
            && self.sampling.guided.is_none()
    }

    /// The tokens chunk `start .. start + n` computes: the sequence's own, or the last one and the draft.
    pub fn chunk_tokens(&self, start: usize, n: usize) -> &[TokenId] {
        if !self.draft.input.is_empty() && start + 1 == self.tokens.len() {
            &self.draft.input[..n]
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
        self.tokens.len() - self.kv.num_computed
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
        self.sampling.sampler.accept(token);
        self.request.count_token(self.choice, token);
        self.request.with_stats(self.choice, |s| s.record_token(ts));
        if stop_id {
            return Some(FinishReason::Stop);
        }
        if let Some(guided) = &mut self.sampling.guided {
            match guided.accept(token) {
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
    /// token a verified draft yielded (`accepted_pending`), as the scheduler's update appends one; its position's
    /// predecessor was computed in the step. `None` when nothing is pending; `Some(reason)` when it ended the
    /// sequence (the rest are dropped).
    pub fn append_accepted(&mut self, context: usize) -> Option<Option<FinishReason>> {
        let (token, ts, logprob) = self.draft.accepted_pending.pop_front()?;
        self.kv.num_computed += 1;
        let ended = self.append_token(token, ts, logprob, context);
        if ended.is_some() {
            self.draft.accepted_pending.clear();
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

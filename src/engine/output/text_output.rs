//! The output stage's part of a sequence: its generated tokens become text (the detokenizer), pass the stop
//! strings (the stop matcher), and are released to the request's queue together with the tokens, timestamps and
//! log probabilities they came from. Only the output stage changes it; the scheduler's update only hands it each
//! token's timestamp and log probability ([`TextOutput::hold`]).

use super::finish::FinishReason;
use super::stop::{Released, StopMatcher};
use super::RequestShared;
use crate::engine::api::request::RequestOptions;
use crate::engine::api::seq_options::SharedOptions;
use crate::engine::sampling::TokenLogprob;
use crate::model::tokenizer::{StreamDecoder, Tokenizer};
use crate::model::TokenId;

/// Where a sequence's text goes: its request's queue, as choice `choice`.
pub struct Sink<'a> {
    pub request: &'a RequestShared,
    pub choice: usize,
}

/// A sequence's text so far, and what it holds back.
pub struct TextOutput {
    detokenizer: StreamDecoder,
    stops: StopMatcher,
    /// Generated tokens whose text has not been released yet, and the sum of their timestamps.
    unreleased_tokens: u32,
    unreleased_ts_sum: f64,
    /// Their log probabilities, when asked for: they travel with the text they produced.
    unreleased_logprobs: Vec<TokenLogprob>,
    /// Generated tokens already turned into text (or withheld by the stop matcher).
    num_emitted: usize,
}

impl TextOutput {
    /// The text of a choice of a request with `options` (its stop strings, what to keep of stops and control
    /// tokens).
    pub fn new(options: &RequestOptions) -> Self {
        TextOutput {
            detokenizer: StreamDecoder::new(!options.skip_special_tokens),
            stops: StopMatcher::new(options.stop.clone(), options.include_stop_str_in_output),
            unreleased_tokens: 0,
            unreleased_ts_sum: 0.0,
            unreleased_logprobs: Vec::new(),
            num_emitted: 0,
        }
    }

    /// A token was generated at monotonic time `ts`: it is accounted for with the next text released, and so is
    /// its log probability, when there is one.
    pub fn hold(&mut self, ts: f64, logprob: Option<TokenLogprob>) {
        self.unreleased_logprobs.extend(logprob);
        self.unreleased_tokens += 1;
        self.unreleased_ts_sum += ts;
    }

    /// Turns the tokens of `generated` (all the sequence's generated tokens) not emitted yet into text, releasing
    /// what the stop matcher lets through. `Some(Stop)` when a stop string matched (the text from it on is
    /// withheld, and the sequence must end even if the update had not ended it); when `finished`, releases what
    /// the detokenizer and stop matcher still hold. A stop id produces no text, unless its text is kept
    /// (`include_stop_str_in_output`): then it goes through the stop matcher like any text, and ends the output.
    pub fn emit(
        &mut self,
        tokenizer: &Tokenizer,
        generated: &[TokenId],
        options: &SharedOptions,
        finished: bool,
        sink: Sink<'_>,
    ) -> Option<FinishReason> {
        while self.num_emitted < generated.len() {
            let token = generated[self.num_emitted];
            self.num_emitted += 1;
            let stop_token = options.stop_ids.contains(&token);
            if stop_token && !options.given.include_stop_str_in_output {
                break;
            }
            // Sampled ids are always in the vocabulary, so the decoder cannot fail; an error ends the sequence.
            let piece = match self.detokenizer.push(tokenizer, token) {
                Ok(piece) => piece.to_owned(),
                Err(_) => return Some(FinishReason::Error),
            };
            // Before `min_tokens` tokens, text passes by the stop strings unmatched.
            let released = match self.num_emitted <= options.given.min_tokens {
                true => Released::text(piece),
                false => self.stops.push(&piece),
            };
            self.release(released.text, &sink);
            if released.stopped {
                self.release_final(String::new(), &sink);
                if let Some(stop) = released.matched {
                    sink.request.set_stop_string(sink.choice, stop);
                }
                return Some(FinishReason::Stop);
            }
            if stop_token {
                break;
            }
        }
        if finished {
            self.release_rest(sink);
        }
        None
    }

    /// The sequence ends without a stop string: release what the detokenizer and stop matcher still hold.
    pub fn release_rest(&mut self, sink: Sink<'_>) {
        let mut tail = self.stops.push(self.detokenizer.finish()).text;
        tail.push_str(&self.stops.flush());
        self.release_final(tail, &sink);
    }

    /// Releases text to the host together with the tokens not yet accounted for.
    fn release(&mut self, text: String, sink: &Sink<'_>) {
        if !text.is_empty() {
            self.release_final(text, sink);
        }
    }

    /// Releases `text`, even empty. An empty final release only drops the pending token accounting: tokens
    /// that produced no text (a stop token, a stop string withheld) never reach the host, so they never wait in
    /// its queue, and their log probabilities are not reported.
    fn release_final(&mut self, text: String, sink: &Sink<'_>) {
        let logprobs = std::mem::take(&mut self.unreleased_logprobs);
        if !text.is_empty() {
            sink.request.push_delta(sink.choice, text, self.unreleased_tokens, self.unreleased_ts_sum, logprobs);
        }
        self.unreleased_tokens = 0;
        self.unreleased_ts_sum = 0.0;
    }
}

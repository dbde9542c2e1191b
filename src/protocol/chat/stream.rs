//! Streaming: turns a request's events into OpenAI chunk bodies, in order.
//!
//! Chat (`chat.completion.chunk`), per choice: a chunk whose delta is `{"role": "assistant", "content": ""}`,
//! then one chunk per text delta (`{"content": ...}`; a thinking model's reasoning as `{"reasoning_content": ...}`),
//! then one with an empty delta and the `finish_reason`.
//! Completions (`text_completion`): one chunk per text delta, then one with `"text": ""` and the `finish_reason`.
//! With a usage chunk (`stream_options.include_usage`, or the engine's `force_include_usage`), every chunk has
//! `"usage": null` and a last chunk with empty `choices` carries `usage` and, behind the double gate, `metrics`.
//! An engine error ends the stream with one `{"error": {...}}` body. The host frames each body (`data: ...`) and
//! writes `data: [DONE]` after the last.
//! A request with `return_progress` also gets, before its first token, one chunk per prompt progress event, in
//! llama-server's shape: a top-level `prompt_progress` object, and a choice whose delta is `{"role":
//! "assistant", "content": null}` (chat) or whose text is `""` (completions); such chunks open no choice (its
//! role chunk still comes before its first content).

use std::collections::VecDeque;

use serde::Serialize;

use super::super::error::ApiError;
use super::super::json::{encode, Slot};
use super::super::metrics_gate::{MetricsGate, TimingMetricsJson, TimingsJson};
use super::super::prompt_progress::PromptProgressJson;
use super::super::reasoning::{ReasoningDelta, ReasoningReader, ReasoningStream};
use super::super::request::ApiKind;
use super::super::tools::auto_stream::AutoDelta;
use super::super::tools::call_reader::{CallReader, ChoiceCallStream};
use super::super::tools::{CallDelta, TOOL_CALLS_FINISH_REASON};
use super::logprobs::{encode_logprobs, LogprobsJson, SharedPieces, TextOffsets};
use super::prompt_logprobs::{PositionJson, PromptScores};
use super::response::{ResponseHeader, Usage};
use crate::engine::sampling::TokenLogprob;
use crate::engine::{FinishReason, PromptProgress, RequestEvent, RequestHandle};

/// The answer to "what is the next chunk?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkPoll {
    /// A chunk body: JSON, without the `data: ` framing.
    Chunk(String),
    /// The stream has ended (every later call answers this again).
    Done,
    /// Nothing arrived within the timeout.
    TimedOut,
}

/// Encodes one request's events into chunks.
#[derive(Debug)]
pub(crate) struct ChunkEncoder {
    kind: ApiKind,
    /// Per choice: its role chunk has been encoded (chat only).
    announced: Vec<bool>,
    /// Per choice: its finish chunk has been encoded.
    finished: Vec<bool>,
    /// The stream ends with a usage chunk.
    include_usage: bool,
    /// The request's gate, closed when there is no usage chunk (see [`MetricsGate::for_stream`]).
    gate: MetricsGate,
    /// Encoded chunks not yet handed out, oldest first.
    ready: VecDeque<String>,
    /// The last chunk has been encoded: once `ready` is empty, the stream is done.
    ended: bool,
    /// When the request asked for log probabilities: their token names, and each choice's text offsets so far.
    logprobs: Option<(SharedPieces, Vec<TextOffsets>)>,
    /// Per choice, with `echo`: its prompt, until the choice's first chunk carries it.
    echo: Vec<Option<String>>,
    /// Per choice, with tools: its text becomes content or `tool_calls` deltas (empty otherwise).
    calls: Vec<ChoiceCallStream>,
    /// With a thinking model's chat: how its outputs split (for the usage chunk), and each choice's split so far.
    reasoning: Option<(ReasoningReader, Vec<ReasoningStream>)>,
    /// Per choice, with reasoning split off: log probabilities of tokens whose text is still held back, for the
    /// next chunk of that choice.
    held_logprobs: Vec<Vec<TokenLogprob>>,
    /// When the request scores its prompts (`prompt_logprobs`, `echo` with `logprobs`): each choice's first chunk
    /// carries its prompt's scores.
    prompt_scores: Option<(PromptScores, SharedPieces)>,
    /// The request has a `prediction`: the usage chunk counts its drafts.
    predicted: bool,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    usage: Slot<Usage>,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
    /// llama.cpp server's `timings`: on the usage chunk only, like `metrics`.
    #[serde(skip_serializing_if = "Slot::is_absent")]
    timings: Slot<TimingsJson>,
    /// llama-server's `prompt_progress`: on progress chunks only (`return_progress`).
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_progress: Option<PromptProgressJson>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: usize,
    #[serde(flatten)]
    piece: Piece<'a>,
    /// The log probabilities of the tokens of this chunk's text; `null` unless asked for (and in role and finish
    /// chunks, which have no tokens).
    logprobs: Option<LogprobsJson>,
    finish_reason: Option<&'static str>,
    /// The choice's own metrics, in its finish chunk, when `include_choice_metrics` opened them.
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
    /// vLLM's `prompt_logprobs`, in a completion choice's first chunk when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_logprobs: Option<Option<Vec<Option<PositionJson>>>>,
}

/// What a chunk adds to a choice: `"delta": {...}` (chat) or `"text": "..."` (completion).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum Piece<'a> {
    Delta(Delta<'a>),
    Text(&'a str),
    /// A chat progress chunk's delta, as llama-server writes it.
    #[serde(rename = "delta")]
    Progress(ProgressDelta),
}

/// `{"role": "assistant", "content": null}`: llama-server's delta in a chat progress chunk.
#[derive(Serialize)]
struct ProgressDelta {
    role: &'static str,
    content: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    /// A thinking model's reasoning (`reasoning.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDelta<'a>; 1]>,
}

impl<'a> Delta<'a> {
    fn content(content: Option<&'a str>) -> Self {
        Delta { role: None, content, reasoning_content: None, tool_calls: None }
    }
}

/// OpenAI's streamed tool call: the first delta has the id, type and name (arguments `""`), later ones pieces of
/// the arguments; `index` numbers the choice's calls from 0.
#[derive(Serialize)]
struct ToolCallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

impl<'a> ToolCallDelta<'a> {
    fn of(index: usize, delta: &'a CallDelta) -> Self {
        match delta {
            CallDelta::Header { id, name } => ToolCallDelta {
                index,
                id: Some(id),
                kind: Some("function"),
                function: FunctionDelta { name: Some(name), arguments: "" },
            },
            CallDelta::Arguments(piece) => {
                ToolCallDelta { index, id: None, kind: None, function: FunctionDelta { name: None, arguments: piece } }
            }
        }
    }
}

impl ChunkEncoder {
    /// An encoder for a request of `num_choices` choices. `gate` is the request's own; it is closed here when
    /// there is no usage chunk. `logprobs`: the request asked for log probabilities, named by these pieces.
    /// `echo`: each choice's prompt text, which opens its stream (empty: no echo).
    pub fn new(
        kind: ApiKind,
        num_choices: usize,
        include_usage: bool,
        gate: MetricsGate,
        logprobs: Option<SharedPieces>,
        echo: Vec<String>,
    ) -> Self {
        // A choice's text offsets count from the end of its echoed prompt.
        let offsets: Vec<TextOffsets> =
            (0..num_choices).map(|c| TextOffsets::starting_at(echo.get(c).map_or(0, |e| e.chars().count()))).collect();
        ChunkEncoder {
            echo: echo.into_iter().map(Some).collect(),
            logprobs: logprobs.map(|p| (p, offsets)),
            kind,
            announced: vec![false; num_choices],
            finished: vec![false; num_choices],
            include_usage,
            gate: gate.for_stream(include_usage),
            ready: VecDeque::new(),
            ended: false,
            calls: Vec::new(),
            reasoning: None,
            held_logprobs: vec![Vec::new(); num_choices],
            prompt_scores: None,
            predicted: false,
        }
    }

    /// The request has a `prediction`: the usage chunk counts its drafts.
    pub fn with_prediction(mut self) -> Self {
        self.predicted = true;
        self
    }

    /// The request scores its prompts: each completion choice opens with a chunk that carries them.
    pub fn with_prompt_scores(mut self, scores: PromptScores, pieces: SharedPieces) -> Self {
        self.prompt_scores = Some((scores, pieces));
        self
    }

    /// Every choice's output is read as a tool call by `reader`, with these ids, one per choice.
    pub fn with_calls(mut self, reader: &CallReader, ids: &[String]) -> Self {
        self.calls = ids.iter().map(|id| reader.stream(id.clone())).collect();
        self
    }

    /// A thinking model's outputs are split into `reasoning_content` and content (which `with_calls` may read).
    pub fn with_reasoning(mut self, reader: &ReasoningReader) -> Self {
        let streams = self.announced.iter().map(|_| reader.stream()).collect();
        self.reasoning = Some((reader.clone(), streams));
        self
    }

    /// Emits what a choice's split released: reasoning deltas, and content deltas (read as calls with tools).
    /// The log probabilities of the tokens go with the next of its chunks that has text.
    fn emit_split(&mut self, header: &ResponseHeader, choice: usize, deltas: Vec<ReasoningDelta>) {
        for d in deltas {
            let logprobs = self.take_held_logprobs(choice);
            let delta = match &d {
                ReasoningDelta::Reasoning(text) => Delta { reasoning_content: Some(text), ..Delta::content(None) },
                ReasoningDelta::Content(text) => match self.calls.get_mut(choice) {
                    Some(call) => {
                        let deltas = call.push(text);
                        self.emit_calls(header, choice, deltas);
                        continue;
                    }
                    None => Delta::content(Some(text)),
                },
            };
            self.emit(header, choice, Piece::Delta(delta), None, Slot::Absent, logprobs);
        }
    }

    /// The log probabilities held for `choice`'s next chunk, encoded (`None` unless the request asked for them).
    fn take_held_logprobs(&mut self, choice: usize) -> Option<LogprobsJson> {
        let held = std::mem::take(&mut self.held_logprobs[choice]);
        let kind = self.kind;
        self.logprobs
            .as_mut()
            .map(|(pieces, offsets)| encode_logprobs(kind, &held, pieces.0.as_ref(), &mut offsets[choice]))
    }

    fn emit_calls(&mut self, header: &ResponseHeader, choice: usize, deltas: Vec<AutoDelta>) {
        for d in &deltas {
            let delta = match d {
                AutoDelta::Content(text) => Delta::content(Some(text)),
                AutoDelta::Call(index, call) => {
                    Delta { tool_calls: Some([ToolCallDelta::of(*index, call)]), ..Delta::content(None) }
                }
            };
            self.emit(header, choice, Piece::Delta(delta), None, Slot::Absent, None);
        }
    }

    /// The next encoded chunk, `Done` once the last one was handed out, or `None` when an event is needed.
    pub fn next_ready(&mut self) -> Option<ChunkPoll> {
        match self.ready.pop_front() {
            Some(chunk) => Some(ChunkPoll::Chunk(chunk)),
            None if self.ended => Some(ChunkPoll::Done),
            None => None,
        }
    }

    /// Encodes `event`, one of `handle`'s (which also answers usage and metrics when the stream ends).
    pub fn push(&mut self, header: &ResponseHeader, event: RequestEvent, handle: &RequestHandle) {
        if self.ended {
            return;
        }
        match event {
            RequestEvent::Delta { choice, text, logprobs, .. } => {
                self.announce(header, choice, handle);
                if let Some((_, splits)) = &mut self.reasoning {
                    let deltas = splits[choice].push(&text);
                    self.held_logprobs[choice].extend(logprobs);
                    return self.emit_split(header, choice, deltas);
                }
                if let Some(call) = self.calls.get_mut(choice) {
                    let deltas = call.push(&text);
                    return self.emit_calls(header, choice, deltas);
                }
                if !text.is_empty() {
                    let piece = match self.kind {
                        ApiKind::Chat => Piece::Delta(Delta::content(Some(&text))),
                        ApiKind::Completion => Piece::Text(&text),
                    };
                    let kind = self.kind;
                    let logprobs = self.logprobs.as_mut().map(|(pieces, offsets)| {
                        encode_logprobs(kind, &logprobs, pieces.0.as_ref(), &mut offsets[choice])
                    });
                    self.emit(header, choice, piece, None, Slot::Absent, logprobs);
                }
            }
            RequestEvent::Finished { choice, reason } => {
                self.finish(header, choice, reason, handle);
                if self.finished.iter().all(|&f| f) {
                    self.end(header, handle);
                }
            }
            RequestEvent::Error { message } => self.fail(message),
            RequestEvent::PromptProgress { choice, progress } => self.progress(header, choice, progress),
        }
    }

    /// A progress chunk (`return_progress`): llama-server's, which opens no choice.
    fn progress(&mut self, header: &ResponseHeader, choice: usize, progress: PromptProgress) {
        let piece = match self.kind {
            ApiKind::Chat => Piece::Progress(ProgressDelta { role: "assistant", content: None }),
            ApiKind::Completion => Piece::Text(""),
        };
        let choice = ChunkChoice {
            index: choice,
            piece,
            logprobs: None,
            finish_reason: None,
            metrics: Slot::Absent,
            prompt_logprobs: None,
        };
        let usage = if self.include_usage { Slot::Null } else { Slot::Absent };
        let chunk = self.chunk(header, vec![choice], usage, Slot::Absent, Slot::Absent, Some(progress.into()));
        self.ready.push_back(chunk);
    }

    /// The handle's events are over (its poll answered `Done`). When this encoder has not seen the end, another
    /// consumer of the handle took the final events: end the stream from the accumulated output, as those
    /// events would have (an error body, or the missing finish chunks and the usage chunk).
    pub fn push_done(&mut self, header: &ResponseHeader, handle: &RequestHandle) {
        if self.ended {
            return;
        }
        if let Some(message) = handle.error() {
            return self.fail(message);
        }
        for (choice, output) in handle.choices().iter().enumerate() {
            if !self.finished[choice] {
                // Every choice has its reason once the request has ended; `Stop` is never actually used.
                self.finish(header, choice, output.finish_reason.unwrap_or(FinishReason::Stop), handle);
            }
        }
        self.end(header, handle);
    }

    /// What opens a choice, once: a chat choice's role chunk; a completion choice's prompt with `echo`, and its
    /// prompt's scores when asked for (a chunk of its own, empty text without `echo`).
    fn announce(&mut self, header: &ResponseHeader, choice: usize, handle: &RequestHandle) {
        if self.announced[choice] {
            return;
        }
        self.announced[choice] = true;
        if self.kind == ApiKind::Chat {
            let role = Piece::Delta(Delta { role: Some("assistant"), ..Delta::content(Some("")) });
            return self.emit(header, choice, role, None, Slot::Absent, None);
        }
        let echo = self.echo.get_mut(choice).and_then(Option::take);
        if echo.is_none() && self.prompt_scores.is_none() {
            return;
        }
        let text = echo.unwrap_or_default();
        let (logprobs, prompt_logprobs) = match &self.prompt_scores {
            Some((scores, pieces)) => (
                scores.echoed(choice, handle, pieces.0.as_ref(), &text).map(LogprobsJson::Completion),
                scores.prompt_logprobs_json(choice, handle, pieces.0.as_ref()),
            ),
            None => (None, None),
        };
        let opening = ChunkChoice {
            index: choice,
            piece: Piece::Text(&text),
            logprobs,
            finish_reason: None,
            metrics: Slot::Absent,
            prompt_logprobs,
        };
        let usage = if self.include_usage { Slot::Null } else { Slot::Absent };
        self.ready.push_back(self.chunk(header, vec![opening], usage, Slot::Absent, Slot::Absent, None));
    }

    fn finish(&mut self, header: &ResponseHeader, choice: usize, reason: FinishReason, handle: &RequestHandle) {
        self.announce(header, choice, handle);
        self.finished[choice] = true;
        let mut finish_reason = reason.as_str();
        if let Some((_, splits)) = &mut self.reasoning {
            let deltas = splits[choice].finish();
            self.emit_split(header, choice, deltas);
            // Tokens whose text never came out (whitespace after `</think>`) still have their log probabilities.
            if !self.held_logprobs[choice].is_empty() {
                let logprobs = self.take_held_logprobs(choice);
                self.emit(header, choice, Piece::Delta(Delta::content(Some(""))), None, Slot::Absent, logprobs);
            }
        }
        if let Some(call) = self.calls.get_mut(choice) {
            let deltas = call.finish();
            // A call cut short (`max_tokens`) keeps its own reason; a complete one is OpenAI's "tool_calls".
            if reason == FinishReason::Stop && call.is_complete() {
                finish_reason = TOOL_CALLS_FINISH_REASON;
            }
            self.emit_calls(header, choice, deltas);
        }
        let piece = match self.kind {
            ApiKind::Chat => Piece::Delta(Delta::content(None)),
            ApiKind::Completion => Piece::Text(""),
        };
        let metrics = self.gate.choice(|| handle.timing_metrics(choice));
        self.emit(header, choice, piece, Some(finish_reason), metrics, None);
    }

    /// The one `{"error": ...}` body that ends a failed request's stream.
    fn fail(&mut self, message: String) {
        self.ready.push_back(ApiError::server(message).to_json());
        self.ended = true;
    }

    /// The usage chunk, when asked for; then the stream is over.
    fn end(&mut self, header: &ResponseHeader, handle: &RequestHandle) {
        if self.include_usage {
            let outputs = handle.choices();
            let metrics: Vec<_> = (0..outputs.len()).map(|i| handle.timing_metrics(i)).collect();
            let reasoning = self.reasoning.as_ref().map(|(r, _)| r);
            let usage = Slot::Value(Usage::of(handle, &outputs, reasoning, self.predicted));
            let timings = self.gate.timings(outputs.len(), || handle.llamacpp_timings(0));
            self.ready.push_back(self.chunk(header, Vec::new(), usage, self.gate.response(&metrics), timings, None));
        }
        self.ended = true;
    }

    fn emit(
        &mut self,
        header: &ResponseHeader,
        index: usize,
        piece: Piece<'_>,
        finish_reason: Option<&'static str>,
        metrics: Slot<TimingMetricsJson>,
        logprobs: Option<LogprobsJson>,
    ) {
        let choice = ChunkChoice { index, piece, logprobs, finish_reason, metrics, prompt_logprobs: None };
        // OpenAI: with include_usage, every chunk but the last has `"usage": null`.
        let usage = if self.include_usage { Slot::Null } else { Slot::Absent };
        self.ready.push_back(self.chunk(header, vec![choice], usage, Slot::Absent, Slot::Absent, None));
    }

    fn chunk(
        &self,
        header: &ResponseHeader,
        choices: Vec<ChunkChoice<'_>>,
        usage: Slot<Usage>,
        metrics: Slot<TimingMetricsJson>,
        timings: Slot<TimingsJson>,
        prompt_progress: Option<PromptProgressJson>,
    ) -> String {
        let object = match self.kind {
            ApiKind::Chat => "chat.completion.chunk",
            ApiKind::Completion => "text_completion",
        };
        encode(&Chunk {
            id: &header.id,
            object,
            created: header.created,
            model: &header.model,
            choices,
            usage,
            metrics,
            timings,
            prompt_progress,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::engine::EventPoll;
    use crate::protocol::test_support::{header, FakeRequest};

    fn encoder(kind: ApiKind, choices: usize, include_usage: bool, gate: (bool, bool, bool)) -> ChunkEncoder {
        ChunkEncoder::new(kind, choices, include_usage, MetricsGate::new(gate.0, gate.1, gate.2), None, Vec::new())
    }

    /// The `choices[0]` of each chunk, with the chunk's own fields checked.
    fn choices(chunks: &[Value], object: &str) -> Vec<Value> {
        chunks
            .iter()
            .map(|c| {
                assert_eq!((c["id"].as_str(), c["object"].as_str()), (Some("chatcmpl-test"), Some(object)), "{c}");
                assert_eq!((c["created"].as_u64(), c["model"].as_str()), (Some(1_700_000_000), Some("m")));
                c["choices"][0].clone()
            })
            .collect()
    }

    #[test]
    fn a_chat_stream_announces_the_role_then_content_then_the_finish() {
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Chat, 1, false, (true, true, true));
        r.token(0, "Hel", 2.0);
        let (first, done) = r.drain(&mut e, &header());
        assert!(!done);
        r.token(0, "lo", 2.1);
        r.finish(0, FinishReason::Length);
        let (rest, done) = r.drain(&mut e, &header());
        assert!(done);
        let all: Vec<Value> = first.into_iter().chain(rest).collect();
        let expected = [
            json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}),
            json!({"index": 0, "delta": {"content": "Hel"}, "logprobs": null, "finish_reason": null}),
            json!({"index": 0, "delta": {"content": "lo"}, "logprobs": null, "finish_reason": null}),
            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}),
        ];
        assert_eq!(choices(&all, "chat.completion.chunk"), expected);
        // Without a usage chunk there is no usage key, and no metrics anywhere, whatever the gate says.
        assert!(all
            .iter()
            .all(|c| c.get("usage").is_none() && c.get("metrics").is_none() && c.get("timings").is_none()));
        assert_eq!(e.next_ready(), Some(ChunkPoll::Done), "done stays done");
    }

    /// llama-server's progress chunks (`return_progress`): `prompt_progress` at the top, and a choice that opens
    /// nothing, so the rest of the stream is as it is without them.
    #[test]
    fn progress_chunks_come_before_the_stream_in_llama_servers_shape() {
        for kind in [ApiKind::Chat, ApiKind::Completion] {
            let r = FakeRequest::new(1, 10);
            let mut e = encoder(kind, 1, true, (false, false, false));
            let at = |processed, time_ms| PromptProgress { processed, total: 10, cached: 4, time_ms };
            r.shared.push_progress(0, at(4, 0));
            r.shared.push_progress(0, at(10, 7));
            r.token(0, "a", 2.0);
            r.finish(0, FinishReason::Stop);
            let (chunks, done) = r.drain(&mut e, &header());
            assert!(done);
            let object = if kind == ApiKind::Chat { "chat.completion.chunk" } else { "text_completion" };
            let opening = match kind {
                ApiKind::Chat => json!({"index": 0, "delta": {"role": "assistant", "content": null}, "logprobs": null,
                    "finish_reason": null}),
                ApiKind::Completion => json!({"index": 0, "text": "", "logprobs": null, "finish_reason": null}),
            };
            assert_eq!(choices(&chunks[..2], object), [opening.clone(), opening]);
            let progress: Vec<&Value> = chunks.iter().map(|c| &c["prompt_progress"]).collect();
            assert_eq!(progress[0], &json!({"total": 10, "cache": 4, "processed": 4, "time_ms": 0}));
            assert_eq!(progress[1], &json!({"total": 10, "cache": 4, "processed": 10, "time_ms": 7}));
            assert!(progress[2..].iter().all(|p| p.is_null()), "only progress chunks carry it");
            assert!(chunks[..2].iter().all(|c| c["usage"].is_null() && c.get("usage").is_some()));
            // The rest is the stream without progress: the role chunk (chat), the text, the finish, the usage.
            let r2 = FakeRequest::new(1, 10);
            let mut plain = encoder(kind, 1, true, (false, false, false));
            r2.token(0, "a", 2.0);
            r2.finish(0, FinishReason::Stop);
            let (without, _) = r2.drain(&mut plain, &header());
            assert_eq!(chunks[2..], without[..]);
        }
    }

    #[test]
    fn a_completion_stream_sends_text_pieces() {
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Completion, 1, false, (false, false, false));
        r.token(0, "a", 2.0);
        r.finish(0, FinishReason::Stop);
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        let expected = [
            json!({"index": 0, "text": "a", "logprobs": null, "finish_reason": null}),
            json!({"index": 0, "text": "", "logprobs": null, "finish_reason": "stop"}),
        ];
        assert_eq!(choices(&chunks, "text_completion"), expected);
    }

    #[test]
    fn echo_opens_each_completion_choice_with_its_prompt() {
        let r = FakeRequest::new(2, 10);
        let gate = MetricsGate::new(false, false, false);
        let mut e = ChunkEncoder::new(ApiKind::Completion, 2, false, gate, None, vec!["A:".into(), "B:".into()]);
        r.token(0, "a", 2.0);
        r.finish(0, FinishReason::Stop);
        r.finish(1, FinishReason::Length);
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        let pieces: Vec<(u64, &str)> = chunks
            .iter()
            .map(|c| (c["choices"][0]["index"].as_u64().unwrap(), c["choices"][0]["text"].as_str().unwrap()))
            .collect();
        assert_eq!(pieces, [(0, "A:"), (0, "a"), (0, ""), (1, "B:"), (1, "")], "a choice without text still echoes");
    }

    #[test]
    fn the_usage_chunk_comes_last_with_usage_and_gated_metrics() {
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Chat, 1, true, (true, true, false));
        r.token(0, "x", 2.0);
        r.token(0, "y", 2.5);
        r.finish(0, FinishReason::Stop);
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        let (last, others) = chunks.split_last().unwrap();
        assert!(others
            .iter()
            .all(|c| c["usage"].is_null() && c.get("metrics").is_none() && c.get("timings").is_none()));
        assert_eq!(last["choices"], json!([]));
        let details = json!({"cached_tokens": 0});
        let usage =
            json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12, "prompt_tokens_details": details});
        assert_eq!(last["usage"], usage);
        // Scheduled at 1.5 s, tokens at 2.0 and 2.5 s (see FakeRequest).
        let expected = json!({"time_to_first_token_ms": 500.0, "generation_time_ms": 500.0, "queue_time_ms": 500.0,
                              "mean_itl_ms": 500.0, "tokens_per_second": 2.0});
        assert_eq!(last["metrics"], expected);
        let expected = json!({"cache_n": 0, "prompt_n": 10, "prompt_ms": 500.0, "prompt_per_token_ms": 50.0,
                              "prompt_per_second": 20.0, "predicted_n": 2, "predicted_ms": 500.0,
                              "predicted_per_token_ms": 500.0, "predicted_per_second": 2.0});
        assert_eq!(last["timings"], expected);
    }

    #[test]
    fn several_choices_get_null_request_metrics_and_their_own_in_their_finish_chunks() {
        let r = FakeRequest::new(2, 10);
        let mut e = encoder(ApiKind::Completion, 2, true, (true, true, true));
        r.token(1, "b", 2.0);
        r.token(0, "a", 2.0);
        r.finish(1, FinishReason::Stop);
        r.finish(0, FinishReason::Length);
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        let finishes: Vec<&Value> = chunks.iter().filter(|c| !c["choices"][0]["finish_reason"].is_null()).collect();
        assert_eq!(finishes.len(), 2);
        for f in finishes {
            assert_eq!(f["choices"][0]["metrics"]["time_to_first_token_ms"], json!(500.0));
        }
        let last = chunks.last().unwrap();
        assert_eq!((last["metrics"].clone(), last["usage"]["completion_tokens"].clone()), (Value::Null, json!(2)));
        assert_eq!(last["timings"], Value::Null);
    }

    #[test]
    fn an_engine_error_ends_the_stream_with_an_error_body() {
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Chat, 1, true, (true, true, false));
        r.token(0, "x", 2.0);
        r.shared.fail("forward pass failed: out of memory".into());
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        assert_eq!(chunks.len(), 3, "role, content, error: {chunks:?}");
        let error = &chunks[2]["error"];
        assert_eq!(
            (error["type"].as_str(), error["message"].as_str()),
            (Some("server_error"), Some("forward pass failed: out of memory"))
        );
    }

    #[test]
    fn events_taken_by_another_consumer_still_let_the_stream_end() {
        let r = FakeRequest::new(2, 10);
        let mut e = encoder(ApiKind::Chat, 2, true, (false, false, false));
        r.token(0, "a", 2.0);
        r.finish(0, FinishReason::Stop);
        r.finish(1, FinishReason::Cancelled);
        // The host polls the handle directly for choice 0's delta and finish, then switches to chunks.
        assert!(matches!(r.handle.poll(None), EventPoll::Event(RequestEvent::Delta { .. })));
        assert!(matches!(r.handle.poll(None), EventPoll::Event(RequestEvent::Finished { choice: 0, .. })));
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done, "the handle's end closes the stream");
        let reasons: Vec<(u64, &str)> = chunks
            .iter()
            .filter_map(|c| Some((c["choices"][0]["index"].as_u64()?, c["choices"][0]["finish_reason"].as_str()?)))
            .collect();
        assert_eq!(reasons, [(1, "cancelled"), (0, "stop")]);
        assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], json!(1));
    }

    #[test]
    fn an_error_taken_by_another_consumer_still_ends_the_stream_with_its_body() {
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Completion, 1, true, (false, false, false));
        r.shared.fail("forward pass failed: boom".into());
        assert!(matches!(r.handle.poll(None), EventPoll::Event(RequestEvent::Error { .. })));
        let (chunks, done) = r.drain(&mut e, &header());
        assert!(done);
        assert_eq!(chunks.len(), 1, "{chunks:?}");
        assert_eq!(chunks[0]["error"]["message"], json!("forward pass failed: boom"));
    }

    /// An `"auto"` choice (ember's format): a message streams as content, a call as tool-call deltas, and text
    /// held back while it could have become a call is flushed before the finish chunk.
    #[test]
    fn an_auto_stream_sends_content_or_a_call() {
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::EMBER;
        let calls = AutoCalls::new(EMBER, &[], true, &crate::protocol::test_support::tokenizer());
        let calls = AutoCalls { names: vec!["f".into()], ..calls };
        let reader = CallReader::Auto(calls);
        let run = |pieces: &[&str], reason: FinishReason| {
            let r = FakeRequest::new(1, 10);
            let mut e = encoder(ApiKind::Chat, 1, false, (false, false, false)).with_calls(&reader, &["call_1".into()]);
            // Drained after each piece: the handle's queue would join pieces that wait together.
            let mut chunks = Vec::new();
            for p in pieces {
                r.token(0, p, 2.0);
                chunks.extend(r.drain(&mut e, &header()).0);
            }
            r.finish(0, reason);
            let (last, done) = r.drain(&mut e, &header());
            assert!(done);
            chunks.extend(last);
            let choices = choices(&chunks, "chat.completion.chunk");
            choices[1..].iter().map(|c| (c["delta"].clone(), c["finish_reason"].clone())).collect::<Vec<_>>()
        };
        let content = |text: &str| (json!({"content": text}), Value::Null);
        let finish = |reason: &str| (json!({}), json!(reason));
        assert_eq!(run(&[" ", "Hi", "!"], FinishReason::Stop), [content(" Hi"), content("!"), finish("stop")]);
        assert_eq!(run(&["\n", " "], FinishReason::Length), [content("\n "), finish("length")], "flushed");
        let header = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": ""}}]});
        let args = |a: &str| (json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}), Value::Null);
        assert_eq!(
            run(&["{\"name\": \"f\", ", "\"arguments\": {\"a\"", ": 1}}"], FinishReason::Stop),
            [(header, Value::Null), args("{\"a\""), args(": 1}"), finish("tool_calls")],
            "the arguments end at their closing brace, the call's is not sent"
        );
        // Cut short before the name: nothing was announced, so the text comes as content.
        assert_eq!(run(&["{\"na"], FinishReason::Length), [content("{\"na"), finish("length")]);
    }

    /// A thinking model's `"auto"` choice (Hermes): the reasoning streams as `reasoning_content` (a marker cut
    /// across pieces held back), the whitespace after it goes, and the rest is read as calls.
    #[test]
    fn reasoning_streams_apart_and_the_rest_is_read_as_calls() {
        use crate::protocol::test_support::{thinking_reader, tokenizer};
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::HERMES;
        let calls = AutoCalls { names: vec!["f".into()], ..AutoCalls::new(HERMES, &[], true, &tokenizer()) };
        let reader = CallReader::Auto(calls);
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Chat, 1, false, (false, false, false))
            .with_reasoning(&thinking_reader())
            .with_calls(&reader, &["call_1".into()]);
        let mut chunks = Vec::new();
        let call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
        for p in ["<thi", "nk>Let me", " look.</th", "ink>\n\n", call] {
            r.token(0, p, 2.0);
            chunks.extend(r.drain(&mut e, &header()).0);
        }
        r.finish(0, FinishReason::Stop);
        chunks.extend(r.drain(&mut e, &header()).0);
        let choices = choices(&chunks, "chat.completion.chunk");
        let deltas: Vec<&Value> = choices[1..].iter().map(|c| &c["delta"]).collect();
        assert_eq!(deltas[..2], [&json!({"reasoning_content": "Let me"}), &json!({"reasoning_content": " look."})]);
        let arguments: String =
            deltas.iter().filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str()).collect();
        assert_eq!(arguments, "{\"a\": 1}");
        assert_eq!(deltas[2]["tool_calls"][0]["function"]["name"], "f", "{deltas:?}");
        assert!(deltas.iter().all(|d| d.get("content").is_none()), "{deltas:?}");
        assert_eq!(choices.last().unwrap()["finish_reason"], "tool_calls");
    }

    /// gpt-oss' harmony (`"auto"`): the analysis channel streams as `reasoning_content`, the headers after it are
    /// held back and left out, and the commentary channel's call streams as tool-call deltas.
    #[test]
    fn harmony_reasoning_then_a_call_streams_apart() {
        use crate::protocol::test_support::{harmony_reader, tokenizer};
        use crate::protocol::tools::auto_call::AutoCalls;
        use crate::protocol::tools::call_syntax::HARMONY;
        let calls = AutoCalls { names: vec!["f".into()], ..AutoCalls::new(HARMONY, &[], false, &tokenizer()) };
        let reader = CallReader::Auto(calls);
        let r = FakeRequest::new(1, 10);
        let mut e = encoder(ApiKind::Chat, 1, false, (false, false, false))
            .with_reasoning(&harmony_reader(tokenizer()))
            .with_calls(&reader, &["call_1".into()]);
        let mut chunks = Vec::new();
        for p in [
            "<|channel|>analysis<|mess",
            "age|>Let me",
            " look.<|en",
            "d|><|start|>assistant<|chan",
            "nel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\"",
            ": 1}",
        ] {
            r.token(0, p, 2.0);
            chunks.extend(r.drain(&mut e, &header()).0);
        }
        r.finish(0, FinishReason::Stop);
        chunks.extend(r.drain(&mut e, &header()).0);
        let choices = choices(&chunks, "chat.completion.chunk");
        let deltas: Vec<&Value> = choices[1..].iter().map(|c| &c["delta"]).collect();
        assert_eq!(deltas[..2], [&json!({"reasoning_content": "Let me"}), &json!({"reasoning_content": " look."})]);
        assert_eq!(deltas[2]["tool_calls"][0]["function"]["name"], "f", "{deltas:?}");
        assert_eq!(deltas[2]["tool_calls"][0]["id"], "call_1", "{deltas:?}");
        let arguments: String =
            deltas.iter().filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str()).collect();
        assert_eq!(arguments, "{\"a\": 1}");
        assert!(deltas.iter().all(|d| d.get("content").is_none()), "{deltas:?}");
        assert_eq!(choices.last().unwrap()["finish_reason"], "tool_calls");
    }
}

//! `ApiRequest`: one OpenAI request submitted to an engine, and the two ways to read its answer — the whole body
//! once it has ended, or streaming chunks as they come.

use std::time::{Duration, Instant};

use std::collections::VecDeque;
use std::sync::Arc;

use super::api::Api;
use super::chat::{response_body, ChoiceExtras, ChunkEncoder, ChunkPoll, PromptScores, ResponseHeader, SharedPieces};
use super::error::ApiError;
use super::metrics_gate::MetricsGate;
use super::prompt_tokens::request_prompts;
use super::reasoning::ReasoningReader;
use super::request::{ApiKind, ParsedRequest};
use super::responses::ResponseStore;
use super::tools::call_reader::CallReader;
use super::tools::tool_schemas::blame_tool;
use super::translate::{read_request, rename_fields, OutputWriter, Purpose, TranslateContext};
use crate::engine::{Engine, EventPoll, RequestHandle, SubmitRequest};
use crate::model::TokenId;

/// An OpenAI request submitted to an engine.
///
/// A host reads a request's events in one of two ways, not both: through [`ApiRequest::handle`]'s `poll` (plain
/// text deltas; what the C `engine_poll` does) or through [`ApiRequest::next_chunk_json`] (streaming bodies).
/// Both take events from the same queue, so each event goes to whichever asked first. [`ApiRequest::response_json`]
/// works either way: it reads the accumulated output, not the queue. Dropping an `ApiRequest` does not stop the
/// generation: cancel it with `handle().cancel()`.
#[derive(Debug)]
pub struct ApiRequest {
    handle: RequestHandle,
    /// The API the request came in; another than OpenAI's has `translated`.
    api: Api,
    /// For another API than OpenAI's: how its answers are written, and its stream events not yet handed out.
    translated: Option<Translated>,
    kind: ApiKind,
    stream: bool,
    header: ResponseHeader,
    gate: MetricsGate,
    chunks: ChunkEncoder,
    /// Names the tokens of the log probabilities, when the request asked for them.
    logprobs: Option<SharedPieces>,
    /// With `echo`: each choice's prompt text (empty otherwise).
    echo: Vec<String>,
    /// With tools: how outputs are read as calls, and each choice's call id.
    calls: Option<(CallReader, Vec<String>)>,
    /// With a thinking model's chat: how outputs split into reasoning and content.
    reasoning: Option<ReasoningReader>,
    /// When the request scores its prompts (`prompt_logprobs`, `echo` with `logprobs`), and their token names.
    prompt_scores: Option<(PromptScores, SharedPieces)>,
    /// The request has a `prediction`: usage counts its drafts.
    predicted: bool,
    /// Fields accepted that cannot act on this model, each with why.
    warnings: Vec<String>,
}

impl ApiRequest {
    /// Parses and validates `json`, renders/tokenizes, submits. Kind: `Some(kind)` forces it; `None` decides by the
    /// presence of "messages" (chat) or "prompt" (completion); both or neither is an error.
    ///
    /// Every refusal is an [`ApiError`] naming the request field at fault; nothing is queued then.
    pub fn submit(engine: &Engine, json: &str, kind: Option<ApiKind>) -> Result<ApiRequest, ApiError> {
        Self::submit_parsed(engine, ParsedRequest::parse(json, kind)?)
    }

    /// Submits `json`, a request body of `api`. OpenAI's own are [`ApiRequest::submit`]'s; another API's request
    /// is read into OpenAI's (`translate.rs`), and its response body and chunks are written in its own shape.
    /// `responses` keeps the OpenAI Responses that later requests continue (`previous_response_id`).
    pub fn submit_api(
        engine: &Engine,
        json: &str,
        api: Api,
        responses: &Arc<ResponseStore>,
    ) -> Result<ApiRequest, ApiError> {
        let context = TranslateContext { engine, responses, purpose: Purpose::Generate };
        let (parsed, translated) = read_request(api, json, &context)?;
        let Some((writer, names)) = translated else {
            return Self::submit_parsed(engine, parsed);
        };
        let mut request = Self::submit_parsed(engine, parsed).map_err(|e| rename_fields(e, names))?;
        request.api = api;
        request.translated = Some(Translated { writer, ready: VecDeque::new(), ended: false });
        Ok(request)
    }

    fn submit_parsed(engine: &Engine, mut request: ParsedRequest) -> Result<ApiRequest, ApiError> {
        let model = engine.model();
        let echo_prompts = if request.echo { request.input.echo_texts(model) } else { Vec::new() };
        let prompt_logprobs = request.scored_prompt_alternatives();
        let prompts = request_prompts(model, &mut request)?;
        // Choice `p × n + j` is prompt `p`'s.
        let first_tokens: Vec<TokenId> =
            prompts.iter().flat_map(|p| std::iter::repeat_n(p.first().copied().unwrap_or(0), request.n)).collect();
        let echoed_logprobs = request.options.logprobs.filter(|_| request.echo);
        let scores = PromptScores::new(request.options.prompt_logprobs, echoed_logprobs, first_tokens);
        // The engine computes the alternatives both uses need; each use keeps its own (`PromptScores`).
        request.options.prompt_logprobs = prompt_logprobs;
        // The tools' constraint depends on the model's tool-call format, known only here.
        let reader = request.tools.as_ref().map(|t| t.reader(&model.chat_template, &model.tokenizer)).transpose()?;
        // A thinking model's chat output is split into reasoning and content, unless a forced call is all of it.
        let reasoning = match (request.kind, &reader, prompts.first()) {
            (ApiKind::Chat, None | Some(CallReader::Auto(_)), Some(prompt)) => {
                ReasoningReader::for_request(&model.chat_template, &model.tokenizer, prompt, request.reasoning_format)
            }
            _ => None,
        };
        let options = &mut request.options;
        // Markers that are control tokens (a format's calls', a vocabulary's `</think>`) need their text kept.
        options.skip_special_tokens &= !reader.as_ref().is_some_and(CallReader::needs_special_text)
            && !reasoning.as_ref().is_some_and(ReasoningReader::needs_special_text);
        let reasoning = reasoning.map(|r| r.with_special_text(!options.skip_special_tokens));
        // With tools, the constraint is the tools' (the reader refuses any other with them).
        if let (Some(tools), Some(reader)) = (&request.tools, &reader) {
            options.guided = Some(tools.constraint(reader));
        }
        options.prediction = prediction_tokens(engine, request.prediction.as_deref())?;
        let predicted = options.prediction.is_some();
        let (include_metrics, logprobs) = (options.include_metrics, options.logprobs);
        // The one options value of the request: the engine shares it among the choices as it is.
        let submit = SubmitRequest { prompts, n: request.n, options: request.options };
        let handle = engine.submit(submit).map_err(|e| {
            let error = ApiError::from_submit(&e, request.names);
            match &request.tools {
                // The tools' constraint is compiled as one; the client is told which tool when one is at fault.
                Some(tools) if error.param.as_deref() == Some("tools") => blame_tool(&tools.tools, engine, error),
                _ => error,
            }
        })?;
        let config = engine.config();
        let gate = MetricsGate::new(config.enable_per_request_metrics, include_metrics, request.include_choice_metrics);
        let include_usage = request.include_usage || config.force_include_usage;
        let header = ResponseHeader::new(request.kind, request.model.unwrap_or_else(|| model.name()), handle.id());
        let logprobs = logprobs.map(|_| SharedPieces(engine.shared_model()));
        let echo: Vec<String> =
            echo_prompts.iter().flat_map(|prompt| std::iter::repeat_n(prompt.clone(), request.n)).collect();
        let mut chunks =
            ChunkEncoder::new(request.kind, handle.num_choices(), include_usage, gate, logprobs.clone(), echo.clone());
        // Each choice's first call has an id drawn here, in the shape the template accepts back.
        let calls: Option<(CallReader, Vec<String>)> = reader.map(|r| {
            let style = r.id_style();
            (r, (0..handle.num_choices()).map(|i| style.new_id(i as u64)).collect())
        });
        if let Some((reader, ids)) = &calls {
            chunks = chunks.with_calls(reader, ids);
        }
        if let Some(reasoning) = &reasoning {
            chunks = chunks.with_reasoning(reasoning);
        }
        if predicted {
            chunks = chunks.with_prediction();
        }
        let prompt_scores = scores.map(|s| (s, SharedPieces(engine.shared_model())));
        if let Some((scores, pieces)) = &prompt_scores {
            chunks = chunks.with_prompt_scores(scores.clone(), pieces.clone());
        }
        Ok(ApiRequest {
            handle,
            api: Api::OpenAi,
            translated: None,
            kind: request.kind,
            stream: request.stream,
            header,
            gate,
            chunks,
            logprobs,
            echo,
            calls,
            reasoning,
            prompt_scores,
            predicted,
            warnings: request.warnings,
        })
    }

    /// The engine request: poll it, cancel it, read its metrics.
    pub fn handle(&self) -> &RequestHandle {
        &self.handle
    }

    pub fn kind(&self) -> ApiKind {
        self.kind
    }

    /// Whether the request asked for a stream (`"stream": true`). Either way of reading works regardless; this
    /// tells the host which one the client expects.
    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// The `id` every body and chunk of this request carries.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// The whole response body (`chat.completion` / `text_completion`) once the request has ended; None before.
    /// A request the engine failed still gets a body: its unfinished choices end with `"error"`, and an `error`
    /// object says why.
    pub fn response_json(&self) -> Option<String> {
        let extras = ChoiceExtras {
            logprobs: self.logprobs.as_ref().map(|p| p.0.as_ref()),
            echo: &self.echo,
            calls: self.calls.as_ref().map(|(reader, ids)| (reader, ids.as_slice())),
            reasoning: self.reasoning.as_ref(),
            prompt_scores: self.prompt_scores.as_ref().map(|(scores, pieces)| (scores, pieces.0.as_ref())),
            predicted: self.predicted,
        };
        let body = self
            .handle
            .is_finished()
            .then(|| response_body(self.kind, &self.header, self.gate, &self.handle, extras))?;
        Some(match &self.translated {
            // The OpenAI body is ember's own writing: it always parses.
            Some(t) => t.writer.response(serde_json::from_str(&body).unwrap_or_default(), &self.handle),
            None => body,
        })
    }

    /// Fields of the request accepted although they have no effect here, each with why (`verbosity`,
    /// `reasoning_effort` on a template without a reasoning setting): a host passes them on to its client.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The API the request came in.
    pub fn api(&self) -> Api {
        self.api
    }

    /// The next streaming chunk body (JSON, no "data: " framing), consuming the handle's events; waits up to
    /// `timeout` (None = until one is ready; zero = only what is ready now).
    pub fn next_chunk_json(&mut self, timeout: Option<Duration>) -> ChunkPoll {
        let deadline = timeout.map(|t| Instant::now() + t);
        if self.translated.is_none() {
            return self.next_openai_chunk(deadline);
        }
        loop {
            let t = self.translated.as_mut().expect("checked above");
            if let Some(event) = t.ready.pop_front() {
                return ChunkPoll::Chunk(event);
            }
            if t.ended {
                return ChunkPoll::Done;
            }
            let next = self.next_openai_chunk(deadline);
            let t = self.translated.as_mut().expect("checked above");
            match next {
                ChunkPoll::Chunk(chunk) => {
                    t.writer.chunk(serde_json::from_str(&chunk).unwrap_or_default(), &self.handle, &mut t.ready)
                }
                ChunkPoll::Done => {
                    t.writer.end(&self.handle, &mut t.ready);
                    t.ended = true;
                }
                ChunkPoll::TimedOut => return ChunkPoll::TimedOut,
            }
        }
    }

    /// The next OpenAI chunk, waiting until `deadline` (None: as long as it takes).
    fn next_openai_chunk(&mut self, deadline: Option<Instant>) -> ChunkPoll {
        loop {
            if let Some(ready) = self.chunks.next_ready() {
                return ready;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.handle.poll(left) {
                EventPoll::Event(event) => self.chunks.push(&self.header, event, &self.handle),
                EventPoll::Done => self.chunks.push_done(&self.header, &self.handle),
                EventPoll::TimedOut => return ChunkPoll::TimedOut,
            }
        }
    }
}

/// Another API's side of a request: its writer, and the events of its stream not yet handed out.
#[derive(Debug)]
struct Translated {
    writer: Box<dyn OutputWriter>,
    ready: VecDeque<String>,
    /// The writer has closed the stream: once `ready` is empty, it is done.
    ended: bool,
}

/// A prediction's tokens. No output is longer than the context, so a longer prediction is refused: it could
/// only cost each step a longer search for drafts.
fn prediction_tokens(engine: &Engine, text: Option<&str>) -> Result<Option<Arc<[TokenId]>>, ApiError> {
    let Some(text) = text else { return Ok(None) };
    let tokens = engine.model().tokenizer.encode(text, false);
    let limit = engine.max_model_len();
    if tokens.len() > limit {
        return Err(ApiError::invalid(
            "prediction",
            format!("prediction has {} tokens, more than any output can have ({limit})", tokens.len()),
        ));
    }
    Ok(Some(tokens.into()))
}

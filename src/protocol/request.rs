//! What every API's request becomes once read: [`ParsedRequest`], the request core that `api_request.rs`
//! renders, tokenizes and submits. `chat/request.rs` reads it from a Chat Completions or Completions body, which
//! is what every other API's body is translated into (`translate.rs`), so there is one reader for all of them.

use super::error::RequestFieldNames;
use super::prompt::PromptInput;
use super::reasoning::ReasoningFormat;
use super::template_options::TemplateOptions;
use super::tools::ToolsRequest;
use crate::engine::RequestOptions;

/// Which OpenAI endpoint a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiKind {
    /// `/v1/chat/completions`: `messages` in, `chat.completion` out.
    Chat,
    /// `/v1/completions`: `prompt` in, `text_completion` out.
    Completion,
}

/// A request body, read and type-checked, not yet tokenized.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParsedRequest {
    pub kind: ApiKind,
    /// `model`, echoed in responses; `None` → the model's own name.
    pub model: Option<String>,
    pub input: PromptInput,
    /// What the engine is asked (sampling, limits, stops, reports, scheduling, structured outputs), filled by the
    /// reader as it reads each field; a field the body leaves out keeps `RequestOptions::default()`'s value,
    /// except where OpenAI's default differs (`temperature`, completions' `max_tokens`). Submitting adjusts the
    /// few that depend on the model (`api_request.rs`): `skip_special_tokens` (off when a tool-call format's or
    /// a reasoning split's markers are control tokens), `prompt_logprobs` (widened to what `echo` with
    /// `logprobs` needs; until then it is the request's own), `guided` (the tools' constraint: a request with
    /// `tools` has none of its own) and `prediction` (the tokens of [`ParsedRequest::prediction`]).
    pub options: RequestOptions,
    /// Choices per prompt.
    pub n: usize,
    /// Completions' `suffix`: the text after the gap of a fill-in-the-middle prompt; `None` when absent or "".
    pub suffix: Option<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: the stream ends with a usage chunk.
    pub include_usage: bool,
    /// Our addition: each choice carries its own `metrics` (same double gate as `metrics`).
    pub include_choice_metrics: bool,
    /// `echo` (completions): each choice's text starts with its prompt.
    pub echo: bool,
    /// `tools` with a `tool_choice` other than `"none"` (chat only).
    pub tools: Option<ToolsRequest>,
    /// How a chat request's template renders (`add_generation_prompt`, `continue_final_message`,
    /// `chat_template_kwargs`).
    pub template: TemplateOptions,
    /// `reasoning_format` (chat): a thinking model's reasoning apart from its content, or inline.
    pub reasoning_format: ReasoningFormat,
    /// What the engine's field names stand for in this request.
    pub names: RequestFieldNames,
    /// OpenAI's Predicted Outputs (`prediction`): the text the output is expected to repeat, a draft source for
    /// speculative decoding (`prediction.rs`).
    pub prediction: Option<String>,
    /// Fields accepted although they cannot act here (`verbosity`; `reasoning_effort` on a template with no
    /// reasoning setting), each with why: the host tells its client (the gateway's `Warning` header).
    pub warnings: Vec<String>,
}

impl ParsedRequest {
    /// The alternatives the engine computes per prompt token: `prompt_logprobs`'s, or with `echo` the
    /// `logprobs` of the echoed prompt, whichever is more (each use keeps its own most likely ones). `None`: the
    /// prompt is not scored.
    pub fn scored_prompt_alternatives(&self) -> Option<usize> {
        let echoed = self.options.logprobs.filter(|_| self.echo);
        match (self.options.prompt_logprobs, echoed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

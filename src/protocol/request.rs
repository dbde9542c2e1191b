//! What every API's request becomes once read: [`ParsedRequest`], the request core that `api_request.rs`
//! renders, tokenizes and submits. `chat/request.rs` reads it from a Chat Completions or Completions body, which
//! is what every other API's body is translated into (`translate.rs`), so there is one reader for all of them.

use super::error::RequestFieldNames;
use super::prompt::PromptInput;
use super::reasoning::ReasoningFormat;
use super::template_options::TemplateOptions;
use super::tools::ToolsRequest;
use crate::engine::guided::GuidedRequest;
use crate::engine::sampling::SamplingParams;
use crate::model::TokenId;

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
    pub sampling: SamplingParams,
    /// Most tokens per choice; `None` → until the context is full.
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stop: Vec<String>,
    /// `stop_token_ids` (vLLM's extension): token ids that end a choice besides the model's own.
    pub stop_token_ids: Vec<TokenId>,
    /// vLLM's `include_stop_str_in_output`: what stopped a choice stays at the end of its text.
    pub include_stop_str_in_output: bool,
    /// vLLM's `skip_special_tokens` (default true): false writes control tokens' text.
    pub skip_special_tokens: bool,
    /// Completions' `suffix`: the text after the gap of a fill-in-the-middle prompt; `None` when absent or "".
    pub suffix: Option<String>,
    pub stream: bool,
    /// `stream_options.include_usage`: the stream ends with a usage chunk.
    pub include_usage: bool,
    pub include_metrics: bool,
    /// Our addition: each choice carries its own `metrics` (same double gate as `metrics`).
    pub include_choice_metrics: bool,
    /// Our addition: generate past end-of-generation tokens.
    pub ignore_eos: bool,
    /// `Some(k)`: each generated token's log probability and its `k` most likely alternatives (chat: `logprobs:
    /// true` with `top_logprobs: k`; completions: `logprobs: k`).
    pub logprobs: Option<usize>,
    /// `Some(k)`: each prompt token's log probability (the first's excepted) and its `k` most likely
    /// alternatives (vLLM's `prompt_logprobs`, completions only).
    pub prompt_logprobs: Option<usize>,
    /// `min_tokens` (vLLM's extension).
    pub min_tokens: usize,
    /// Our addition: `speculative_decoding: false` keeps the request out of the engine's speculative decoding.
    pub speculative_decoding: bool,
    /// Our addition: `deadline_ms`, milliseconds from submission after which the request ends with
    /// `finish_reason` `"deadline"`.
    pub deadline_ms: Option<u64>,
    /// vLLM's `priority` (lower is scheduled first).
    pub priority: i32,
    /// llama-server's `return_progress`: report how far the prompt has been computed (`prompt_progress`).
    pub return_progress: bool,
    /// `echo` (completions): each choice's text starts with its prompt.
    pub echo: bool,
    /// Structured outputs (`response_format`, vLLM's `guided_*`), compiled by the engine at submit. A request
    /// with `tools` has none: its constraint is the tools' (`ToolsRequest::constraint`, once the model's
    /// tool-call format is known).
    pub guided: Option<GuidedRequest>,
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
        let echoed = self.logprobs.filter(|_| self.echo);
        match (self.prompt_logprobs, echoed) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

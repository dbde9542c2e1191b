//! Ollama's API over the chat core: `POST /api/chat` (`chat.rs`) and `POST /api/generate` (`generate.rs`) are
//! read into Chat Completions or Completions bodies, with what they share (`request.rs`: `format`, `think`,
//! `stream`, `logprobs`; `options.rs`: Ollama's `options`); `writer.rs` writes Ollama's objects and NDJSON stream
//! with the request's durations. Model management (pull, push, create, delete, copy), `/api/tags` and `/api/show`
//! are the host's (the gateway's). docs/protocol.md, "Ollama", lists what is served, what has no effect and what
//! is refused.

mod chat;
mod generate;
mod options;
mod request;
mod writer;

use serde_json::Value;

use super::error::ApiError;
use super::fields::get;
use super::request::ApiKind;
use super::translate::{TranslateContext, Translation};
use writer::{OllamaWriter, Shape};

/// The chat fields a translated body uses, with the Ollama name a refusal should give (the first that fits the
/// refused field is used: the longer names first).
macro_rules! field_names {
    ($($extra:expr),*) => {
        &[
            $($extra,)*
            ("max_tokens", "options.num_predict"),
            ("temperature", "options.temperature"),
            ("top_p", "options.top_p"),
            ("top_k", "options.top_k"),
            ("min_p", "options.min_p"),
            ("stop", "options.stop"),
            ("seed", "options.seed"),
            ("presence_penalty", "options.presence_penalty"),
            ("frequency_penalty", "options.frequency_penalty"),
            ("repetition_penalty", "options.repeat_penalty"),
            ("response_format.json_schema.schema", "format"),
            ("response_format", "format"),
            ("reasoning_effort", "think"),
        ]
    };
}

const CHAT_FIELD_NAMES: &[(&str, &str)] = field_names!();

/// A templated `/api/generate` prompt is its chat's last message.
const GENERATE_FIELD_NAMES: &[(&str, &str)] = field_names!(("messages", "prompt"));

/// Reads an `/api/chat` request into its chat body and the writer of its answers.
pub(crate) fn translate_chat(body: Value, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let chat = chat::read(&body, &context.engine.model().chat_template)?;
    let writer = OllamaWriter::new(Shape::Chat, model_name(&body, context), 0);
    Ok(Translation { body: chat, kind: ApiKind::Chat, output: Box::new(writer), field_names: CHAT_FIELD_NAMES })
}

/// Reads an `/api/generate` request into its chat (templated) or completion (`raw`, `suffix`) body and the writer
/// of its answers.
pub(crate) fn translate_generate(body: Value, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let (translated, kind) = generate::read(&body, context.engine)?;
    // A completion's top_logprobs map also holds the sampled token: the writer keeps the most likely ones.
    let top = match kind {
        ApiKind::Completion => translated["logprobs"].as_u64().unwrap_or(0) as usize,
        ApiKind::Chat => 0,
    };
    let writer = OllamaWriter::new(Shape::Generate, model_name(&body, context), top);
    Ok(Translation { body: translated, kind, output: Box::new(writer), field_names: GENERATE_FIELD_NAMES })
}

/// The `model` the answers name: the request's, as Ollama echoes it, else the engine's served name.
fn model_name(body: &Value, context: &TranslateContext<'_>) -> String {
    match body.as_object().and_then(|o| get(o, "model")).and_then(Value::as_str) {
        Some(model) => model.to_owned(),
        None => context.engine.served_model_name(),
    }
}

//! llama-server's own `POST /completion` (and `/completions`) over the Completions core: `input.rs` reads a
//! request into a Completions body (`prompt.rs` its token-valued fields, `settings.rs` llama-server's defaults,
//! `unsupported.rs` what is accepted only switched off), `writer.rs` writes the answer object or the stream's
//! objects (`probs.rs` their `completion_probabilities`).
//! docs/protocol.md, "llama-server endpoints", lists what it serves, accepts without effect, refuses and lacks.

mod input;
mod probs;
mod prompt;
mod settings;
mod unsupported;
mod writer;

use std::sync::Arc;

use serde_json::Value;

use super::error::ApiError;
use super::request::ApiKind;
use super::translate::{TranslateContext, Translation};
use writer::{Head, LlamaWriter};

/// Reads a `/completion` request into its Completions body and the writer of its answers.
pub(crate) fn translate(body: Value, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let engine = context.engine;
    let model = engine.shared_model();
    let request = input::read(&body, &model, engine.max_model_len())?;
    // The metrics gate (docs/per_request_metrics.md): both halves open, or no timings at all.
    let include_metrics = request.body.get("include_metrics").and_then(Value::as_bool) == Some(true);
    let gate_open = engine.config().enable_per_request_metrics && include_metrics;
    let head = Head {
        // llama-server's `model` is its alias for the model; ember's is the name it serves it under (/v1/models).
        model: request.model.unwrap_or_else(|| engine.served_model_name()),
        generation_settings: request.settings.json(),
        // An id the vocabulary does not have reads back as nothing here; the engine refuses it, naming `prompt`.
        prompt: model.tokenizer.decode(&request.prompt, true).unwrap_or_default(),
        prompt_tokens: request.prompt.len(),
        n_predict: request.n_predict,
        return_tokens: request.return_tokens,
        n_probs: request.settings.n_probs > 0,
        timings_per_token: request.settings.timings_per_token && gate_open,
        response_fields: request.response_fields,
    };
    Ok(Translation {
        body: request.body,
        kind: ApiKind::Completion,
        output: Box::new(LlamaWriter::new(head, Arc::clone(&model))),
        field_names: input::FIELD_NAMES,
    })
}

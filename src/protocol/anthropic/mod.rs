//! Anthropic's Messages API (`POST /v1/messages`) over the chat core: `input.rs` reads a request into a chat
//! body, `output.rs` writes the message object, `writer.rs` it and the stream's events. docs/protocol.md,
//! "Anthropic Messages", lists what it serves and lacks.

mod input;
mod output;
mod writer;

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::error::ApiError;
use super::fields::get;
use super::request::ApiKind;
use super::translate::{new_id, TranslateContext, Translation};
use output::Head;
use writer::MessagesWriter;

/// Reads a Messages request into its chat body and the writer of its answers.
pub(crate) fn translate(body: Value, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let model = context.engine.model();
    let request = input::read(&body, &model.chat_template, context.purpose)?;
    let name = match body.as_object().and_then(|o| get(o, "model")).and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => model.name(),
    };
    let salt = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
    let head = Head {
        id: new_id("msg_", salt),
        model: name,
        max_tokens: request.max_tokens,
        omit_thinking: request.omit_thinking,
    };
    Ok(Translation {
        body: request.body,
        kind: ApiKind::Chat,
        output: Box::new(MessagesWriter::new(head)),
        field_names: input::FIELD_NAMES,
    })
}

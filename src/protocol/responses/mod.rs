//! OpenAI's Responses API (`POST /v1/responses`) over the chat core: `input.rs` reads a request into a chat body,
//! `writer.rs` writes the response object and the stream's events, `store.rs` keeps the responses that
//! `previous_response_id` continues. docs/protocol.md, "Responses", lists what it serves and lacks.

mod input;
mod output;
mod store;
mod writer;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::error::ApiError;
use super::fields::{get, opt_str};
use super::request::ApiKind;
use super::translate::{TranslateContext, Translation};
use output::{new_id, Head};
pub use store::{ResponseStore, MAX_STORED_BYTES, MAX_STORED_RESPONSES, STORED_RESPONSE_TTL};
use writer::ResponsesWriter;

/// Reads a Responses request into its chat body and the writer of its answers.
pub(crate) fn translate(body: Value, context: &TranslateContext<'_>) -> Result<Translation, ApiError> {
    let o = body.as_object().ok_or_else(|| ApiError::malformed("the request body must be a JSON object"))?;
    let previous = match opt_str(o, "previous_response_id")? {
        Some(id) => Some(context.responses.get(id).ok_or_else(|| {
            ApiError::invalid("previous_response_id", format!("Previous response with id '{id}' not found."))
        })?),
        None => None,
    };
    let request = input::read(&body, previous.as_deref().map(Vec::as_slice))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let model = match get(o, "model").and_then(Value::as_str) {
        Some(model) => model.to_owned(),
        None => context.engine.model().name(),
    };
    let head =
        Head { id: new_id("resp_", now.as_nanos() as u64), created_at: now.as_secs(), model, echo: request.echo };
    let store = request.store.then(|| (Arc::clone(context.responses), request.conversation));
    Ok(Translation {
        body: request.body,
        kind: ApiKind::Chat,
        output: Box::new(ResponsesWriter::new(head, store)),
        field_names: input::FIELD_NAMES,
    })
}

//! Reading Ollama's `POST /api/generate` into a chat or completion body. A templated prompt (the default) is a
//! chat of the optional `system` message and the `prompt` as the user's; `raw: true` sends the prompt to the model
//! as it is (a completion), and so does a `suffix` (a fill-in-the-middle completion, on models that have the
//! tokens for it). Ollama's own Go `template` and its `context` token arrays are refused: ember renders the
//! model's Jinja template, and a conversation is `/api/chat`'s `messages`.

use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_str, get, opt_bool};
use super::super::prompt::tokenize;
use super::super::request::ApiKind;
use super::options::read_options;
use super::request::{
    check_keep_alive, copy_fields, read_format, read_logprobs, read_stream, read_think, refuse_images, refuse_text,
    Field,
};
use crate::engine::Engine;

/// The `/api/generate` fields. Any other is refused by name.
const FIELDS: &[(&str, Field)] = &[
    ("model", Field::Copy),
    ("prompt", Field::Own),
    ("suffix", Field::Own),
    ("system", Field::Own),
    ("template", Field::Own),
    ("context", Field::Own),
    ("raw", Field::Own),
    ("format", Field::Own),
    ("options", Field::Own),
    ("stream", Field::Own),
    ("think", Field::Own),
    ("images", Field::Own),
    ("keep_alive", Field::Own),
    ("logprobs", Field::Own),
    ("top_logprobs", Field::Own),
    // ember's own, with chat's meaning: the gateway sets `deadline_ms` from a client's timeout header.
    ("priority", Field::Copy),
    ("deadline_ms", Field::Copy),
];

/// Reads a `/api/generate` body into its chat or completion body, and which it is.
pub(super) fn read(body: &Value, engine: &Engine) -> Result<(Value, ApiKind), ApiError> {
    let o = body.as_object().ok_or_else(|| ApiError::malformed("the request body must be a JSON object"))?;
    let mut out = Map::new();
    copy_fields(o, FIELDS, &mut out)?;
    check_keep_alive(o)?;
    refuse_text(o, "template", "template is not supported: ember renders the model's own chat template")?;
    if let Some(context) = get(o, "context") {
        if !as_array(context, "context")?.is_empty() {
            return Err(ApiError::invalid(
                "context",
                "context is not supported: send the conversation as /api/chat messages instead",
            ));
        }
    }
    refuse_images(get(o, "images"), "images")?;
    let prompt = match get(o, "prompt") {
        Some(p) => as_str(p, "prompt")?,
        None => "",
    };
    if prompt.is_empty() {
        // Ollama's clients send an empty prompt to load a model: the host answers that call (the gateway does).
        return Err(ApiError::invalid("prompt", "prompt is required (an empty prompt only loads the model)"));
    }
    let suffix = get(o, "suffix").map(|s| as_str(s, "suffix")).transpose()?.filter(|s| !s.is_empty());
    let raw = opt_bool(o, "raw")?.unwrap_or(false);
    let kind = if raw || suffix.is_some() { ApiKind::Completion } else { ApiKind::Chat };
    let system = get(o, "system").map(|s| as_str(s, "system")).transpose()?.filter(|s| !s.is_empty());
    match kind {
        ApiKind::Chat => {
            let mut messages = Vec::new();
            if let Some(system) = system {
                messages.push(json!({"role": "system", "content": system}));
            }
            messages.push(json!({"role": "user", "content": prompt}));
            out.insert("messages".into(), Value::Array(messages));
            read_think(o, &engine.model().chat_template, &mut out)?;
        }
        ApiKind::Completion => {
            if system.is_some() {
                return Err(ApiError::invalid(
                    "system",
                    "system: a raw or fill-in-the-middle prompt is sent as it is, with no template to put it in",
                ));
            }
            // `false` asks for nothing a raw prompt does not do already.
            if get(o, "think").is_some_and(|t| t != &json!(false)) {
                return Err(ApiError::invalid(
                    "think",
                    "think is given to the chat template, which a raw or fill-in-the-middle prompt does not use",
                ));
            }
            out.insert("prompt".into(), json!(prompt));
            if let Some(suffix) = suffix {
                out.insert("suffix".into(), json!(suffix));
            }
        }
    }
    read_format(o, &mut out)?;
    read_options(get(o, "options"), &mut out)?;
    read_stream(o, &mut out)?;
    read_logprobs(o, kind, &mut out)?;
    if kind == ApiKind::Completion && !out.contains_key("max_tokens") {
        out.insert("max_tokens".into(), json!(rest_of_context(engine, prompt, suffix)));
    }
    Ok((Value::Object(out), kind))
}

/// The tokens a completion of `prompt` may generate to the end of the context: what `num_predict` -1 means. A
/// completion without `max_tokens` would stop at OpenAI's 16. A prompt that fills the context is then refused by
/// the engine, naming `prompt`.
fn rest_of_context(engine: &Engine, prompt: &str, suffix: Option<&str>) -> usize {
    let model = engine.model();
    // A fill-in-the-middle prompt adds the suffix and at most four marker tokens (BOS, prefix, suffix, middle).
    let tokens = tokenize(model, prompt).len() + suffix.map_or(0, |s| tokenize(model, s).len() + 4);
    engine.max_model_len().saturating_sub(tokens).max(1)
}

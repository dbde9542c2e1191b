//! What `/api/chat` and `/api/generate` requests share: the table of top-level fields, `stream` (Ollama streams
//! unless told not to), `format`, `think`, `logprobs`, and the fields accepted without effect.

use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::fields::{as_array, as_str, get, opt_bool, type_error, Object};
use super::super::reasoning::thinks;
use super::super::request::ApiKind;
use crate::model::chat_template::ChatTemplate;

/// How a top-level field of an Ollama request is read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    /// The chat field of the same name, unchanged.
    Copy,
    /// Read by the endpoint's reader or here.
    Own,
}

/// Copies the `Copy` fields of `o` into `chat`; a field `fields` does not list is refused by name, as ember
/// refuses unknown fields everywhere (Ollama ignores them, so a client could believe it got a feature it did not).
pub(super) fn copy_fields(o: &Object, fields: &[(&str, Field)], chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in o.iter().filter(|(_, v)| !v.is_null()) {
        match fields.iter().find(|(known, _)| known == name).map(|&(_, f)| f) {
            Some(Field::Copy) => {
                chat.insert(name.clone(), value.clone());
            }
            Some(Field::Own) => {}
            None => return Err(ApiError::invalid(name.as_str(), format!("unrecognized request argument: {name}"))),
        }
    }
    Ok(())
}

/// `stream`, true when absent (Ollama's default, unlike OpenAI's), written into the chat body: the stream decides
/// what the chat core allows (`logprobs` with tools, say).
pub(super) fn read_stream(o: &Object, chat: &mut Map<String, Value>) -> Result<bool, ApiError> {
    let stream = opt_bool(o, "stream")?.unwrap_or(true);
    chat.insert("stream".into(), json!(stream));
    Ok(stream)
}

/// `keep_alive` (how long Ollama keeps the model loaded after the request: a duration string or seconds): type
/// checked, no effect, as ember's model stays loaded for the engine's life.
pub(super) fn check_keep_alive(o: &Object) -> Result<(), ApiError> {
    match get(o, "keep_alive") {
        None | Some(Value::String(_) | Value::Number(_)) => Ok(()),
        Some(other) => Err(type_error("keep_alive", "a duration string or a number of seconds", other)),
    }
}

/// `images` must be absent or empty: the models ember serves read text only.
pub(super) fn refuse_images(value: Option<&Value>, param: &str) -> Result<(), ApiError> {
    match value {
        Some(images) if !as_array(images, param)?.is_empty() => {
            Err(ApiError::invalid(param, format!("{param}: images are not supported: this model reads text only")))
        }
        _ => Ok(()),
    }
}

/// `format`: `"json"` (a JSON object) or a JSON schema object, as `response_format`; `""` is none.
pub(super) fn read_format(o: &Object, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let format = match get(o, "format") {
        None => return Ok(()),
        Some(Value::String(s)) if s.is_empty() => return Ok(()),
        Some(Value::String(s)) if s == "json" => json!({"type": "json_object"}),
        Some(Value::String(s)) => {
            return Err(ApiError::invalid("format", format!("format must be \"json\" or a JSON schema, got {s:?}")))
        }
        Some(schema @ Value::Object(_)) => {
            json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}})
        }
        Some(other) => return Err(type_error("format", "\"json\" or a JSON schema object", other)),
    };
    chat.insert("response_format".into(), format);
    Ok(())
}

/// The template variables that switch reasoning, as `reasoning_effort` maps onto them (`template_options.rs`).
const THINKING_VARIABLES: [&str; 3] = ["reasoning_effort", "enable_thinking", "thinking"];

/// `think`: `true`, `false`, or gpt-oss' `"low"`, `"medium"`, `"high"`, given to the template through chat's
/// `reasoning_effort` where the template has a switch. `false` turns off what a switch of `enable_thinking` or
/// `thinking` turns off, and is without effect otherwise (gpt-oss reasons whatever it is told, as under Ollama; a
/// model that does not think has nothing to turn off). `true` or an effort on a template that has no switch is
/// without effect when the model thinks anyway (DeepSeek R1's), and refused when it does not think at all, as
/// Ollama refuses it.
pub(super) fn read_think(o: &Object, template: &ChatTemplate, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let effort = match get(o, "think") {
        None => return Ok(()),
        Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some("medium"),
        Some(Value::String(s)) if ["low", "medium", "high"].contains(&s.as_str()) => Some(s.as_str()),
        Some(other) => return Err(type_error("think", "true, false, \"low\", \"medium\" or \"high\"", other)),
    };
    let switch = THINKING_VARIABLES.into_iter().find(|v| template.reads_variable(v));
    let reasoning_effort = match (effort, switch) {
        (None, Some("enable_thinking" | "thinking")) => "none",
        (None, _) => return Ok(()),
        (Some(effort), Some(_)) => effort,
        (Some(_), None) if thinks(template) => return Ok(()),
        (Some(_), None) => {
            return Err(ApiError::invalid(
                "think",
                "think: this model does not support thinking (its chat template has no reasoning)",
            ))
        }
    };
    chat.insert("reasoning_effort".into(), json!(reasoning_effort));
    Ok(())
}

/// `logprobs` (bool) and `top_logprobs` (alternatives per token, 0 to 20), in chat's shape or, for a completion,
/// as its one `logprobs` count.
pub(super) fn read_logprobs(o: &Object, kind: ApiKind, chat: &mut Map<String, Value>) -> Result<(), ApiError> {
    let logprobs = opt_bool(o, "logprobs")?.unwrap_or(false);
    let top = get(o, "top_logprobs");
    if !logprobs {
        if top.is_some_and(|t| t.as_u64() != Some(0)) {
            return Err(ApiError::invalid("top_logprobs", "top_logprobs needs logprobs: true"));
        }
        return Ok(());
    }
    match kind {
        ApiKind::Chat => {
            chat.insert("logprobs".into(), json!(true));
            if let Some(top) = top {
                chat.insert("top_logprobs".into(), top.clone());
            }
        }
        // A completion's `logprobs` is the number of alternatives (its range is checked there).
        ApiKind::Completion => {
            chat.insert("logprobs".into(), top.cloned().unwrap_or(json!(0)));
        }
    }
    Ok(())
}

/// A string field that must be absent or empty: `param` and why.
pub(super) fn refuse_text(o: &Object, param: &str, why: &str) -> Result<(), ApiError> {
    match get(o, param) {
        Some(v) if !as_str(v, param)?.is_empty() => Err(ApiError::invalid(param, why)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `reasoning_effort` `think` becomes with `source` as the template (`None`: none is set).
    fn effort(source: &str, think: Value) -> Result<Option<Value>, String> {
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let o = json!({"think": think});
        let mut chat = Map::new();
        match read_think(o.as_object().unwrap(), &template, &mut chat) {
            Ok(()) => Ok(chat.get("reasoning_effort").cloned()),
            Err(e) => Err(e.param.unwrap_or_default()),
        }
    }

    #[test]
    fn think_goes_to_the_templates_switch() {
        // Qwen 3's switch: on and off.
        let qwen = "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}";
        assert_eq!(effort(qwen, json!(true)), Ok(Some(json!("medium"))));
        assert_eq!(effort(qwen, json!(false)), Ok(Some(json!("none"))));
        // gpt-oss' effort: given as it is; `false` cannot turn its reasoning off.
        let harmony = "{{ reasoning_effort }}<|channel|>analysis";
        assert_eq!(effort(harmony, json!("high")), Ok(Some(json!("high"))));
        assert_eq!(effort(harmony, json!(false)), Ok(None));
        // A model that always thinks (DeepSeek R1's template writes `</think>`, reads no switch).
        assert_eq!(effort("{{ '</think>' }}", json!(true)), Ok(None));
        // One that never does.
        assert_eq!(effort("{{ messages }}", json!(true)), Err("think".into()));
        assert_eq!(effort("{{ messages }}", json!(false)), Ok(None));
        assert_eq!(effort("{{ messages }}", json!("max")), Err("think".into()));
    }
}

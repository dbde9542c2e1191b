//! How a chat request asks the model's template to render, with vLLM's and transformers' names:
//! - `add_generation_prompt` (default true): the prompt ends where the assistant's reply begins;
//! - `continue_final_message` (default false): the prompt ends inside the last message, which the model continues
//!   (prefilling the start of an assistant reply). It needs `add_generation_prompt: false`, as transformers says;
//! - `chat_template_kwargs`: more variables for the template (Qwen 3's `enable_thinking`, say). The variables ember
//!   sets itself (`messages`, `tools`, `add_generation_prompt`, `bos_token`, `eos_token`) cannot be set this way;
//! - `reasoning_effort` (OpenAI's): given to the template in the variable it reads for it (see
//!   [`reasoning_effort_variable`]), when it reads none, accepted with a warning by the request core (`api_request.rs`; docs/protocol.md, "Field policy").

use serde_json::{Map, Value};

use super::error::ApiError;
use super::fields::{as_object, get, opt_bool, opt_str, Object};
use super::request::ApiKind;
use crate::model::chat_template::{ChatMessage, ChatTemplate, RENDER_VARIABLES};

/// OpenAI's `reasoning_effort` values.
const REASONING_EFFORTS: [&str; 5] = ["none", "minimal", "low", "medium", "high"];

/// A chat request's rendering options (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateOptions {
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    pub kwargs: Map<String, Value>,
    /// `reasoning_effort`: one of [`REASONING_EFFORTS`].
    pub reasoning_effort: Option<&'static str>,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            add_generation_prompt: true,
            continue_final_message: false,
            kwargs: Map::new(),
            reasoning_effort: None,
        }
    }
}

/// The options of request object `o`; on a completions request each of them is refused by name.
pub(crate) fn parse_template_options(o: &Object, kind: ApiKind) -> Result<TemplateOptions, ApiError> {
    if kind == ApiKind::Completion {
        let chat_only = ["add_generation_prompt", "continue_final_message", "chat_template_kwargs", "reasoning_effort"];
        if let Some(name) = chat_only.into_iter().find(|name| get(o, name).is_some()) {
            return Err(ApiError::invalid(name, format!("{name} is a chat field: a completion has no template")));
        }
        return Ok(TemplateOptions::default());
    }
    let add_generation_prompt = opt_bool(o, "add_generation_prompt")?.unwrap_or(true);
    let continue_final_message = opt_bool(o, "continue_final_message")?.unwrap_or(false);
    if add_generation_prompt && continue_final_message {
        return Err(ApiError::invalid(
            "continue_final_message",
            "continue_final_message needs add_generation_prompt: false (the prompt cannot both continue the last \
             message and open a new one)",
        ));
    }
    let kwargs = match get(o, "chat_template_kwargs") {
        None => Map::new(),
        Some(v) => as_object(v, "chat_template_kwargs")?.clone(),
    };
    if let Some(name) = kwargs.keys().find(|k| RENDER_VARIABLES.contains(&k.as_str())) {
        let param = format!("chat_template_kwargs.{name}");
        return Err(ApiError::invalid(param, format!("{name} is a variable ember sets itself")));
    }
    let reasoning_effort = match opt_str(o, "reasoning_effort")? {
        None => None,
        Some(effort) => Some(REASONING_EFFORTS.into_iter().find(|&e| e == effort).ok_or_else(|| {
            ApiError::invalid(
                "reasoning_effort",
                format!("reasoning_effort {effort:?} is not one of {}", REASONING_EFFORTS.join(", ")),
            )
        })?),
    };
    Ok(TemplateOptions { add_generation_prompt, continue_final_message, kwargs, reasoning_effort })
}

/// The template variable that carries `effort`, and its value, for the templates that have one:
/// - `reasoning_effort` itself (gpt-oss's), the effort as it is;
/// - `enable_thinking` (Qwen 3's, SmolLM3's) or `thinking` (DeepSeek V3.1's, Granite 3.3's): false for `"none"`,
///   true otherwise (they think or they do not).
///
/// A template that reads none of them cannot be told: the effort is refused, naming `reasoning_effort`.
pub(crate) fn reasoning_effort_variable(
    template: &ChatTemplate,
    effort: &str,
) -> Result<(&'static str, Value), ApiError> {
    if template.reads_variable("reasoning_effort") {
        return Ok(("reasoning_effort", Value::String(effort.to_owned())));
    }
    match ["enable_thinking", "thinking"].into_iter().find(|v| template.reads_variable(v)) {
        Some(variable) => Ok((variable, Value::Bool(effort != "none"))),
        None => Err(ApiError::invalid(
            "reasoning_effort",
            "this model's chat template has no reasoning setting (it reads none of reasoning_effort, \
             enable_thinking, thinking)",
        )),
    }
}

/// With `continue_final_message`, the rendered chat cut after the last message's text (its last occurrence, as
/// transformers cuts it, surrounding whitespace aside), so that the end-of-turn the template wrote after it goes.
pub(crate) fn continue_final_message(mut rendered: String, messages: &[ChatMessage]) -> Result<String, ApiError> {
    let last = messages.last().map_or("", |m| m.content.trim());
    match rendered.rfind(last) {
        Some(at) => {
            rendered.truncate(at + last.len());
            Ok(rendered)
        }
        None => Err(ApiError::invalid(
            "continue_final_message",
            "the chat template does not write the last message's content as it is, so the prompt cannot end in it",
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value, kind: ApiKind) -> Result<TemplateOptions, ApiError> {
        parse_template_options(body.as_object().unwrap(), kind)
    }

    fn param(body: Value, kind: ApiKind) -> String {
        parse(body, kind).unwrap_err().param.unwrap()
    }

    #[test]
    fn options_parse_with_transformers_defaults_and_refusals() {
        assert_eq!(parse(json!({}), ApiKind::Chat).unwrap(), TemplateOptions::default());
        let continued = parse(json!({"add_generation_prompt": false, "continue_final_message": true}), ApiKind::Chat);
        assert!(continued.as_ref().is_ok_and(|o| o.continue_final_message && !o.add_generation_prompt));
        assert_eq!(param(json!({"continue_final_message": true}), ApiKind::Chat), "continue_final_message");
        assert_eq!(param(json!({"add_generation_prompt": 1}), ApiKind::Chat), "add_generation_prompt");
        let kwargs = parse(json!({"chat_template_kwargs": {"enable_thinking": false}}), ApiKind::Chat).unwrap();
        assert_eq!(kwargs.kwargs["enable_thinking"], json!(false));
        assert_eq!(param(json!({"chat_template_kwargs": [1]}), ApiKind::Chat), "chat_template_kwargs");
        let reserved = json!({"chat_template_kwargs": {"messages": []}});
        assert_eq!(param(reserved, ApiKind::Chat), "chat_template_kwargs.messages");
        assert_eq!(parse(json!({"reasoning_effort": "low"}), ApiKind::Chat).unwrap().reasoning_effort, Some("low"));
        assert_eq!(param(json!({"reasoning_effort": "max"}), ApiKind::Chat), "reasoning_effort");
        for field in ["add_generation_prompt", "continue_final_message", "chat_template_kwargs", "reasoning_effort"] {
            assert_eq!(param(json!({ field: true }), ApiKind::Completion), field, "a chat field");
        }
    }

    #[test]
    fn the_effort_goes_in_the_variable_the_template_reads() {
        let template = |source: &str| ChatTemplate::new(Some(source), "", "").unwrap();
        let effort = |source: &str, e: &str| reasoning_effort_variable(&template(source), e);
        let gpt_oss = "Reasoning: {{ reasoning_effort }}";
        assert_eq!(effort(gpt_oss, "high").unwrap(), ("reasoning_effort", json!("high")));
        let qwen3 = "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}";
        assert_eq!(effort(qwen3, "none").unwrap(), ("enable_thinking", json!(false)));
        assert_eq!(effort(qwen3, "minimal").unwrap(), ("enable_thinking", json!(true)));
        assert_eq!(effort("{% if thinking %}/think{% endif %}", "low").unwrap(), ("thinking", json!(true)));
        // Nemotron 3's: a default set first still leaves the variable the template's to read.
        let defaulted = "{%- set enable_thinking = enable_thinking if enable_thinking is defined else true %}";
        assert_eq!(effort(defaulted, "none").unwrap(), ("enable_thinking", json!(false)));
        let plain = effort("{{ messages[0].content }}", "low").unwrap_err();
        assert_eq!(plain.param.as_deref(), Some("reasoning_effort"));
    }

    #[test]
    fn a_continued_prompt_ends_in_the_last_message() {
        let messages = [ChatMessage::new("user", "hi"), ChatMessage::new("assistant", " The answer is ")];
        let rendered = "<u>hi</u><a>The answer is</a>\n".to_owned();
        assert_eq!(continue_final_message(rendered, &messages).unwrap(), "<u>hi</u><a>The answer is");
        let missing = continue_final_message("<u>hi</u><a>[redacted]</a>".into(), &messages).unwrap_err();
        assert_eq!(missing.param.as_deref(), Some("continue_final_message"));
    }
}

//! What a request asks the model to continue: chat `messages` or completion `prompt`s, read from JSON and turned
//! into the token ids the engine takes.

use serde_json::Value;

use super::error::ApiError;
use super::fields::{as_array, as_object, as_str, as_u64, get, type_error};
use super::reasoning::is_harmony;
use super::template_options::{continue_final_message, reasoning_effort_variable, TemplateOptions};
use super::template_roles::fit_to_template;
use super::tools::call_syntax::{EMBER, PHI4_MINI};
use super::tools::tool_format::reads_tools_from_system_message;
use super::tools::{calls_as_text, ToolsRequest};
use crate::engine::request::MAX_CHOICES;
use crate::model::chat_template::ChatMessage;
use crate::model::tokenizer::Tokenizer;
use crate::model::{Model, TokenId};

/// A request's input, before tokenization.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PromptInput {
    /// Chat: a conversation, rendered by the model's chat template into one prompt.
    Messages(Vec<ChatMessage>),
    /// Completions: texts, one prompt each.
    Texts(Vec<String>),
    /// Completions: token ids, one prompt per list, used as given.
    Tokens(Vec<Vec<TokenId>>),
}

impl PromptInput {
    /// Reads `messages`: a non-empty array of `{role, content}` objects.
    ///
    /// Any non-empty `role` is accepted and handed to the chat template, which decides: SmolLM2's template (like
    /// ChatML) renders any role, while templates that allow only some roles refuse the others with
    /// `raise_exception`, which comes back as an error naming `messages`. `content` is a string or an array of
    /// `{"type": "text", "text": ...}` parts, joined with `"\n"` as vLLM joins them.
    pub fn parse_messages(value: &Value) -> Result<Self, ApiError> {
        let list = as_array(value, "messages")?;
        if list.is_empty() {
            return Err(ApiError::invalid("messages", "messages must contain at least one message"));
        }
        let messages = list.iter().enumerate().map(|(i, m)| parse_message(m, i)).collect::<Result<_, _>>()?;
        Ok(PromptInput::Messages(messages))
    }

    /// Reads `prompt`: a string, an array of strings, an array of token ids, or an array of arrays of token ids.
    /// Each string or id list is one prompt of a single engine request.
    pub fn parse_prompt(value: &Value) -> Result<Self, ApiError> {
        let list = match value {
            Value::String(text) => return Ok(PromptInput::Texts(vec![text.clone()])),
            Value::Array(list) => list,
            other => return Err(type_error("prompt", "a string or an array", other)),
        };
        let Some(first) = list.first() else {
            return Err(ApiError::invalid("prompt", "prompt must not be an empty array"));
        };
        // The first element decides which of the three array forms this is; every other element must match it.
        if let Value::Number(_) = first {
            return Ok(PromptInput::Tokens(vec![token_ids(list, "prompt")?]));
        }
        // Each element is a prompt. The engine caps choices at MAX_CHOICES; checking here spares tokenizing
        // prompts it would refuse.
        if list.len() > MAX_CHOICES {
            let message = format!("at most {MAX_CHOICES} prompts are allowed, got {}", list.len());
            return Err(ApiError::invalid("prompt", message));
        }
        match first {
            Value::String(_) => {
                let texts = list.iter().enumerate().map(|(i, v)| Ok(as_str(v, &format!("prompt[{i}]"))?.to_owned()));
                Ok(PromptInput::Texts(texts.collect::<Result<_, ApiError>>()?))
            }
            Value::Array(_) => {
                let prompts = list.iter().enumerate().map(|(i, v)| {
                    let param = format!("prompt[{i}]");
                    token_ids(as_array(v, &param)?, &param)
                });
                Ok(PromptInput::Tokens(prompts.collect::<Result<_, ApiError>>()?))
            }
            other => Err(type_error("prompt[0]", "a string, a token id or an array of token ids", other)),
        }
    }

    /// The text `echo` puts before each prompt's completions: the prompt string itself, or the token ids decoded
    /// (special tokens written out). Chat messages have none (`echo` is a completions field).
    pub fn echo_texts(&self, model: &Model) -> Vec<String> {
        match self {
            PromptInput::Texts(texts) => texts.clone(),
            // Ids were checked against the vocabulary by now (the engine accepted them); an unknown one echoes
            // as nothing rather than failing a request that succeeded.
            PromptInput::Tokens(prompts) => {
                prompts.iter().map(|ids| model.tokenizer.decode(ids, true).unwrap_or_default()).collect()
            }
            PromptInput::Messages(_) => Vec::new(),
        }
    }

    /// The engine's prompts. Text is tokenized with special tokens parsed (so a chat template's `<|im_start|>`
    /// becomes its control token) and starts with BOS when the model asks for it (`tokenizer.ggml.add_bos_token`)
    /// and the text did not already begin with it. Token-id prompts are used as given; the engine checks them.
    ///
    /// With a `suffix` (completions), each prompt is the text before the gap of a fill-in-the-middle prompt
    /// ([`fim_prompt`]); a model without infill tokens refuses it, naming `suffix`.
    ///
    /// With `tools` (chat), a template that formats tools gets them in its `tools` variable; another gets ember's
    /// description of them in the system message (`tools.rs`). Either way, earlier tool calls in `messages` reach
    /// the model: through the template's own format, or written out as the text ember's calls have.
    pub fn into_token_prompts(
        self,
        model: &Model,
        suffix: Option<&str>,
        tools: Option<&ToolsRequest>,
        options: &TemplateOptions,
    ) -> Result<Vec<Vec<TokenId>>, ApiError> {
        if let Some(suffix) = suffix {
            let tokenizer = &model.tokenizer;
            let prefixes = match self {
                PromptInput::Tokens(prompts) => prompts,
                PromptInput::Texts(texts) => texts.iter().map(|text| tokenizer.encode(text, false)).collect(),
                // The parser refuses a suffix in a chat request.
                PromptInput::Messages(_) => return Err(ApiError::invalid("suffix", "suffix is a completions field")),
            };
            return prefixes.into_iter().map(|prefix| fim_prompt(tokenizer, prefix, suffix)).collect();
        }
        let texts = match self {
            PromptInput::Tokens(prompts) => return Ok(prompts),
            PromptInput::Texts(texts) => texts,
            PromptInput::Messages(messages) => vec![render_chat(model, &messages, tools, options)?],
        };
        Ok(texts.iter().map(|text| tokenize(model, text)).collect())
    }
}

/// The prompt text of a chat: `messages` through the model's chat template, with `tools` as the template takes
/// them (its `tools` variable, or ember's description in the system message), ending with the assistant's turn
/// (or as `options` say: without it, or inside the last message).
pub(crate) fn render_chat(
    model: &Model,
    messages: &[ChatMessage],
    tools: Option<&ToolsRequest>,
    options: &TemplateOptions,
) -> Result<String, ApiError> {
    let template = &model.chat_template;
    // `reasoning_effort` is one more variable; one the request sets in chat_template_kwargs stays as it is set.
    let mut kwargs = options.kwargs.clone();
    if let Some(effort) = options.reasoning_effort {
        let (variable, value) = reasoning_effort_variable(template, effort)?;
        kwargs.entry(variable).or_insert(value);
    }
    let harmony_messages;
    let messages = match is_harmony(template) {
        true => {
            harmony_messages = with_thinking(messages);
            &harmony_messages[..]
        }
        false => messages,
    };
    // Last, the conversation is fitted to the roles the template takes (a system message, tool results).
    let sent = messages;
    let render = |messages: &[ChatMessage], tools: Option<&Value>| {
        let fitted = fit_to_template(messages, sent, template.caps());
        template.render_with_variables(
            fitted.as_deref().unwrap_or(messages),
            tools,
            options.add_generation_prompt,
            &kwargs,
        )
    };
    let rendered = match (tools, template.supports_tools()) {
        // Phi-4-mini's template shows the tools of the system message, and no calls.
        _ if reads_tools_from_system_message(template) => {
            let messages = tools.map_or_else(|| messages.to_vec(), |t| t.in_system_message(messages));
            render(&calls_as_text(&messages, &PHI4_MINI), None)
        }
        (Some(t), true) => render(messages, Some(&t.tools_json)),
        (Some(t), false) => render(&calls_as_text(&t.with_instruction(messages), &EMBER), None),
        (None, true) => render(messages, None),
        (None, false) => render(&calls_as_text(messages, &EMBER), None),
    };
    let rendered = rendered.map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    match options.continue_final_message {
        true => continue_final_message(rendered, messages),
        false => Ok(rendered),
    }
}

/// gpt-oss' template reads an assistant turn's reasoning from `thinking` (and shows it before that turn's call,
/// where the model is to go on from it), while ember's responses give it as `reasoning_content`, which clients
/// send back: such a turn's `reasoning_content` becomes its `thinking` when it has none, as llama.cpp does. A turn
/// with calls then loses its `content`, as there, since the template refuses both (one analysis message).
fn with_thinking(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    messages
        .iter()
        .map(|m| {
            let reasoning = m.extra.get("reasoning_content").filter(|r| r.is_string());
            match reasoning {
                Some(r) if m.role == "assistant" && !m.extra.contains_key("thinking") => {
                    let mut m = m.clone();
                    m.extra.insert("thinking".into(), r.clone());
                    if m.tool_calls.is_some() {
                        m.content.clear();
                    }
                    m
                }
                _ => m.clone(),
            }
        })
        .collect()
}

/// The message keys ember reads itself; the others go to the template as they are.
const MESSAGE_KEYS: [&str; 4] = ["role", "content", "tool_calls", "tool_call_id"];

/// `messages[index]`.
fn parse_message(value: &Value, index: usize) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{index}]");
    let message = as_object(value, &param)?;
    let role_param = format!("{param}.role");
    let role = as_str(get(message, "role").ok_or_else(|| missing(&role_param))?, &role_param)?;
    if role.is_empty() {
        return Err(ApiError::invalid(role_param, "a message role must not be empty"));
    }
    let tool_calls = match get(message, "tool_calls") {
        None => None,
        Some(calls) => Some(parse_tool_calls(calls, &format!("{param}.tool_calls"))?),
    };
    let tool_call_id = get(message, "tool_call_id").map(|v| as_str(v, &format!("{param}.tool_call_id"))).transpose()?;
    let content_param = format!("{param}.content");
    let content = match get(message, "content") {
        // An assistant turn that called tools may have no content (OpenAI's clients send null).
        None if tool_calls.is_some() => String::new(),
        None => return Err(missing(&content_param)),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            let texts = parts.iter().enumerate().map(|(j, part)| text_part(part, &format!("{content_param}[{j}]")));
            texts.collect::<Result<Vec<_>, _>>()?.join("\n")
        }
        Some(other) => return Err(type_error(&content_param, "a string or an array of text parts", other)),
    };
    let extra = message.iter().filter(|(k, v)| !MESSAGE_KEYS.contains(&k.as_str()) && !v.is_null());
    Ok(ChatMessage {
        tool_calls,
        tool_call_id: tool_call_id.map(str::to_owned),
        extra: extra.map(|(k, v)| (k.clone(), v.clone())).collect(),
        ..ChatMessage::new(role, content)
    })
}

/// An assistant turn's `tool_calls`: `[{"id", "type": "function", "function": {"name", "arguments"}}]`, checked,
/// then given to the template as vLLM and llama.cpp give it: `arguments`, a JSON string in OpenAI's API, as the
/// object it encodes (templates write it with `tojson` or iterate it with `|items`, as transformers' callers pass
/// dicts); an `arguments` string that is not a JSON object stays the string.
fn parse_tool_calls(value: &Value, param: &str) -> Result<Value, ApiError> {
    let mut calls = value.clone();
    for (i, call) in as_array(value, param)?.iter().enumerate() {
        let call_param = format!("{param}[{i}]");
        let function_param = format!("{call_param}.function");
        let function =
            as_object(get(as_object(call, &call_param)?, "function").unwrap_or(&Value::Null), &function_param)?;
        for key in ["name", "arguments"] {
            let key_param = format!("{function_param}.{key}");
            as_str(get(function, key).ok_or_else(|| missing(&key_param))?, &key_param)?;
        }
        let arguments = &mut calls[i]["function"]["arguments"];
        if let Some(object) =
            arguments.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()).filter(Value::is_object)
        {
            *arguments = object;
        }
    }
    Ok(calls)
}

/// One content part; only text parts exist for a text-only model.
fn text_part<'a>(value: &'a Value, param: &str) -> Result<&'a str, ApiError> {
    let part = as_object(value, param)?;
    let type_param = format!("{param}.type");
    let kind = as_str(get(part, "type").ok_or_else(|| missing(&type_param))?, &type_param)?;
    if kind != "text" {
        return Err(ApiError::invalid(
            type_param,
            format!("only \"text\" content parts are supported, got \"{kind}\""),
        ));
    }
    let text_param = format!("{param}.text");
    as_str(get(part, "text").ok_or_else(|| missing(&text_param))?, &text_param)
}

/// Token ids from a JSON array whose field is `param`; each must fit a `TokenId`.
fn token_ids(list: &[Value], param: &str) -> Result<Vec<TokenId>, ApiError> {
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let element = format!("{param}[{i}]");
            let id = as_u64(v, &element)?;
            TokenId::try_from(id).map_err(|_| ApiError::invalid(element, format!("token id {id} is out of range")))
        })
        .collect()
}

/// The ids the engine computes for a prompt text: its control tokens' texts parsed as those tokens, and BOS
/// first when the model asks for it (and the text did not write it).
pub(crate) fn tokenize(model: &Model, text: &str) -> Vec<TokenId> {
    let tokenizer = &model.tokenizer;
    let mut ids = tokenizer.encode(text, true);
    if let Some(bos) = tokenizer.bos_id().filter(|_| tokenizer.add_bos()) {
        // A template that writes `bos_token` itself already put it there: llama.cpp warns about a doubled BOS.
        if ids.first() != Some(&bos) {
            ids.insert(0, bos);
        }
    }
    ids
}

/// A fill-in-the-middle prompt in llama.cpp's `/infill` order (prefix, suffix, middle: "PSM"):
/// `[BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID`, BOS when the model asks for it. The model then writes the text
/// that goes between `prefix` and `suffix`. Both texts are tokenized without parsing special tokens, as llama.cpp
/// does: the prompt's structure is the FIM tokens placed here, and a `<fim_suffix>` written in the code being
/// completed must not move it.
fn fim_prompt(tokenizer: &Tokenizer, prefix: Vec<TokenId>, suffix: &str) -> Result<Vec<TokenId>, ApiError> {
    let Some(fim) = tokenizer.fim_tokens() else {
        return Err(ApiError::invalid(
            "suffix",
            "suffix needs a model with fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id, \
             fim_suf_token_id and fim_mid_token_id), and this model has none",
        ));
    };
    let suffix = tokenizer.encode(suffix, false);
    let bos = tokenizer.bos_id().filter(|_| tokenizer.add_bos());
    let mut ids = Vec::with_capacity(prefix.len() + suffix.len() + 4);
    ids.extend(bos);
    ids.push(fim.pre);
    ids.extend(prefix);
    ids.push(fim.suf);
    ids.extend(suffix);
    ids.push(fim.mid);
    Ok(ids)
}

fn missing(param: &str) -> ApiError {
    ApiError::invalid(param, format!("{param} is required"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn param_of(result: Result<PromptInput, ApiError>) -> String {
        result.unwrap_err().param.unwrap()
    }

    #[test]
    fn messages_with_string_and_part_contents() {
        let v = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "x"},
        ]);
        let named = ChatMessage {
            extra: json!({"name": "x"}).as_object().unwrap().clone(),
            ..ChatMessage::new("user", "a\nb")
        };
        assert_eq!(
            PromptInput::parse_messages(&v).unwrap(),
            PromptInput::Messages(vec![ChatMessage::new("system", "be brief"), named])
        );
    }

    /// Tool-call arguments reach the template as the object their JSON string encodes, keys in order; a string
    /// that is not a JSON object stays a string.
    #[test]
    fn tool_call_arguments_become_objects_for_the_template() {
        let call = |arguments: &str| {
            json!([{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": arguments}}]}])
        };
        let arguments_of = |v: Value| match PromptInput::parse_messages(&v).unwrap() {
            PromptInput::Messages(m) => m[0].tool_calls.as_ref().unwrap()[0]["function"]["arguments"].clone(),
            other => panic!("{other:?}"),
        };
        let parsed = arguments_of(call(r#"{"z": 1, "a": "b"}"#));
        assert_eq!(parsed, json!({"z": 1, "a": "b"}));
        assert_eq!(serde_json::to_string(&parsed).unwrap(), r#"{"z":1,"a":"b"}"#, "the request's key order");
        assert_eq!(arguments_of(call("not json")), json!("not json"));
        assert_eq!(arguments_of(call("[1]")), json!("[1]"));
    }

    #[test]
    fn each_bad_message_names_its_field() {
        let parse = |v| param_of(PromptInput::parse_messages(&v));
        assert_eq!(parse(json!([])), "messages");
        assert_eq!(parse(json!("hi")), "messages");
        assert_eq!(parse(json!([{"role": "user", "content": "a"}, 3])), "messages[1]");
        assert_eq!(parse(json!([{"content": "a"}])), "messages[0].role");
        assert_eq!(parse(json!([{"role": "", "content": "a"}])), "messages[0].role");
        assert_eq!(parse(json!([{"role": 1, "content": "a"}])), "messages[0].role");
        assert_eq!(parse(json!([{"role": "user"}])), "messages[0].content");
        assert_eq!(parse(json!([{"role": "user", "content": null}])), "messages[0].content");
        assert_eq!(parse(json!([{"role": "user", "content": 5}])), "messages[0].content");
        assert_eq!(parse(json!([{"role": "user", "content": [{"type": "image_url"}]}])), "messages[0].content[0].type");
        assert_eq!(parse(json!([{"role": "user", "content": [{"type": "text"}]}])), "messages[0].content[0].text");
        assert_eq!(parse(json!([{"role": "user", "content": ["a"]}])), "messages[0].content[0]");
    }

    #[test]
    fn the_four_prompt_forms() {
        let parse = |v| PromptInput::parse_prompt(&v).unwrap();
        assert_eq!(parse(json!("hi")), PromptInput::Texts(vec!["hi".into()]));
        assert_eq!(parse(json!(["a", "b"])), PromptInput::Texts(vec!["a".into(), "b".into()]));
        assert_eq!(parse(json!([1, 2, 3])), PromptInput::Tokens(vec![vec![1, 2, 3]]));
        assert_eq!(parse(json!([[1, 2], [3]])), PromptInput::Tokens(vec![vec![1, 2], vec![3]]));
        // One prompt of many tokens is not many prompts.
        assert_eq!(parse(json!(vec![7; 1000])), PromptInput::Tokens(vec![vec![7; 1000]]));
    }

    fn tokenizer(fim: bool, add_bos: bool) -> Tokenizer {
        use crate::model::tokenizer::{TokenType, TokenizerSpec};
        let tokens: Vec<String> = ["<s>", "<pre>", "<suf>", "<mid>", "a", "b"].iter().map(|s| s.to_string()).collect();
        let types = [0, 1, 2, 3].map(|_| TokenType::Control as i32).into_iter().chain([1, 1]).collect::<Vec<_>>();
        let spec = TokenizerSpec {
            token_types: Some(&types),
            bos_id: Some(0),
            add_bos,
            fim_pre_id: Some(1),
            fim_suf_id: Some(2),
            fim_mid_id: fim.then_some(3),
            ..TokenizerSpec::new(&tokens, &[], "smollm")
        };
        Tokenizer::from_spec(&spec).unwrap()
    }

    #[test]
    fn a_fim_prompt_is_prefix_suffix_middle() {
        let t = tokenizer(true, false);
        assert_eq!(fim_prompt(&t, vec![4, 4], "b").unwrap(), [1, 4, 4, 2, 5, 3]);
        assert_eq!(fim_prompt(&t, vec![], "").unwrap(), [1, 2, 3], "an empty prefix is still a gap to fill");
        let t = tokenizer(true, true);
        assert_eq!(fim_prompt(&t, vec![4], "b").unwrap(), [0, 1, 4, 2, 5, 3], "BOS first when the model asks");
    }

    #[test]
    fn a_suffix_without_fim_tokens_is_refused_by_name() {
        // Two of the three tokens are not enough.
        let e = fim_prompt(&tokenizer(false, false), vec![4], "b").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("suffix"));
        assert!(e.message.contains("fill-in-the-middle"), "{}", e.message);
    }

    #[test]
    fn each_bad_prompt_names_its_element() {
        let parse = |v| param_of(PromptInput::parse_prompt(&v));
        assert_eq!(parse(json!(5)), "prompt");
        assert_eq!(parse(json!([])), "prompt");
        assert_eq!(parse(json!(["a", 1])), "prompt[1]");
        assert_eq!(parse(json!([1, -2])), "prompt[1]");
        assert_eq!(parse(json!([1, 4294967296u64])), "prompt[1]");
        assert_eq!(parse(json!([[1], 2])), "prompt[1]");
        assert_eq!(parse(json!([[1], [2.5]])), "prompt[1][0]");
        assert_eq!(parse(json!([{}])), "prompt[0]");
        assert_eq!(parse(json!(vec!["a"; MAX_CHOICES + 1])), "prompt");
        assert_eq!(parse(json!(vec![vec![1]; MAX_CHOICES + 1])), "prompt");
    }
}

//! Tools: `tools` and `tool_choice` in, `message.tool_calls` out.
//!
//! ember makes a tool call valid rather than hoped for: every call it returns was generated under a constraint
//! (structured outputs, `engine/guided`) over the tools' names and `parameters` schemas.
//!
//! - `tool_choice: "required"` or a named function: the output is one call, constrained to the named
//!   function's `parameters` schema, or to `{"name": …, "arguments": …}` over the tools (read and streamed by
//!   `forced_call.rs`).
//! - `"auto"` (OpenAI's default when tools are given): the model decides between a message and calls, in the
//!   tool-call format of its chat template (`tool_format.rs`, `call_syntax.rs`: Hermes' `<tool_call>`, Llama
//!   3.x's JSON, Mistral's `[TOOL_CALLS]`, Granite's, DeepSeek's, gpt-oss' harmony channels (whose grammar holds
//!   the whole output, a forced call's too, which may then follow reasoning: `harmony.rs`); for a template
//!   without a tool format, ember's own: a reply that is exactly one `{"name": …, "arguments": …}` object). A
//!   lazy grammar leaves text free and makes begun calls valid ones (`auto_call.rs`); the calls are read back from the output
//!   (`call_reader.rs`), and streamed once they are certain (`auto_stream.rs`). Several calls per choice where
//!   the format has them, unless `parallel_tool_calls` is false. A template that formats tools in another way is
//!   refused for `"auto"`, naming `tool_choice` (or `tools`).
//! - `"none"`: a message; the tools are not shown to the model.
//!
//! A complete call is returned as `tool_calls` with `finish_reason: "tool_calls"`. The model sees the tools
//! through its chat template's `tools` variable when the template has one; otherwise ember puts them in a
//! system message of its own ([`ToolsRequest::with_instruction`]), since a call the model was never told about
//! would be a guess. A forced call is one call.

pub(crate) mod auto_call;
pub(crate) mod auto_stream;
pub(crate) mod call_reader;
pub(crate) mod call_syntax;
pub(crate) mod forced_call;
pub(crate) mod tool_format;
pub(crate) mod tool_schemas;
pub(crate) mod xml_arguments;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use serde_json::{json, Value};

use self::auto_call::AutoCalls;
use self::call_reader::CallReader;
use self::call_syntax::{CallSyntax, EMBER, HARMONY};
use self::tool_format::{call_id_style, tool_format, ToolFormat};
use self::tool_schemas::rebased;
use super::error::ApiError;
use super::fields::{as_array, as_object, as_str, get, opt_bool, type_error, Object};
use crate::engine::guided::{GuidedRequest, GuidedSpec};
use crate::model::chat_template::{python_json_dumps, tojson_text, ChatMessage, ChatTemplate};
use crate::model::tokenizer::Tokenizer;

/// The `finish_reason` of a choice whose output is a complete call.
pub(crate) const TOOL_CALLS_FINISH_REASON: &str = "tool_calls";

/// One function a request offers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tool {
    pub name: String,
    /// Its arguments' JSON schema (`{"type": "object"}` when the tool gives none, as OpenAI reads it).
    pub parameters: Value,
}

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallShape {
    /// The arguments of this function, alone (`tool_choice` names it).
    Arguments { name: String },
    /// `{"name": NAME, "arguments": ARGS}` for one of the tools (`"required"`).
    NameAndArguments,
}

/// Whether the output must be a call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ToolChoice {
    /// `"auto"`: the model decides. `explicit`: `tool_choice` said so (else it is the default of `tools`).
    Auto { explicit: bool },
    /// `"required"` or a named function: a call of this shape.
    Forced(CallShape),
}

/// A request's tools and what it asks of them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolsRequest {
    pub tools: Vec<Tool>,
    /// `tools` as sent, for the chat template.
    pub tools_json: Value,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): several calls per choice where the format has them.
    pub parallel: bool,
}

/// OpenAI's rule for function names: `^[a-zA-Z0-9_-]{1,64}$`. It also keeps them free of JSON escapes, which the
/// streaming of calls relies on.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads `tools` and `tool_choice`. `None`: no call can be made (no tools, or `tool_choice: "none"`).
pub(crate) fn parse_tools(o: &Object) -> Result<Option<ToolsRequest>, ApiError> {
    let tools = match get(o, "tools") {
        None => Vec::new(),
        Some(v) => as_array(v, "tools")?.iter().enumerate().map(|(i, t)| parse_tool(t, i)).collect::<Result<_, _>>()?,
    };
    let choice = get(o, "tool_choice");
    if tools.is_empty() {
        return match choice {
            None => Ok(None),
            Some(v) if v.as_str() == Some("none") => Ok(None),
            Some(_) => Err(ApiError::invalid("tool_choice", "tool_choice needs tools")),
        };
    }
    let choice = match choice {
        None => ToolChoice::Auto { explicit: false },
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => ToolChoice::Auto { explicit: true },
            "required" => ToolChoice::Forced(CallShape::NameAndArguments),
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("tool_choice must be \"none\", \"auto\", \"required\" or a function, got \"{other}\""),
                ))
            }
        },
        Some(v @ Value::Object(_)) => ToolChoice::Forced(CallShape::Arguments { name: named_choice(v, &tools)? }),
        Some(other) => return Err(type_error("tool_choice", "a string or an object", other)),
    };
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ApiError::invalid("tools", format!("two tools are named \"{}\"", w[0])));
    }
    let parallel = opt_bool(o, "parallel_tool_calls")?.unwrap_or(true);
    Ok(Some(ToolsRequest { tools, tools_json: get(o, "tools").cloned().unwrap_or(Value::Null), choice, parallel }))
}

/// `tools[index]`: `{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`.
fn parse_tool(value: &Value, index: usize) -> Result<Tool, ApiError> {
    let param = format!("tools[{index}]");
    let tool = as_object(value, &param)?;
    let kind_param = format!("{param}.type");
    let kind =
        as_str(get(tool, "type").ok_or_else(|| ApiError::invalid(&kind_param, "type is required"))?, &kind_param)?;
    if kind != "function" {
        return Err(ApiError::invalid(kind_param, format!("only \"function\" tools exist, got \"{kind}\"")));
    }
    let function_param = format!("{param}.function");
    let function = as_object(
        get(tool, "function").ok_or_else(|| ApiError::invalid(&function_param, "function is required"))?,
        &function_param,
    )?;
    let name_param = format!("{function_param}.name");
    let name =
        as_str(get(function, "name").ok_or_else(|| ApiError::invalid(&name_param, "name is required"))?, &name_param)?;
    if !valid_name(name) {
        return Err(ApiError::invalid(
            name_param,
            format!("a function name is 1 to 64 of a-z, A-Z, 0-9, _ and -, got \"{name}\""),
        ));
    }
    let parameters = match get(function, "parameters") {
        None => json!({"type": "object"}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => return Err(type_error(&format!("{function_param}.parameters"), "a JSON schema object", other)),
    };
    Ok(Tool { name: name.to_owned(), parameters })
}

/// `{"type": "function", "function": {"name": NAME}}`, naming one of `tools`.
fn named_choice(v: &Value, tools: &[Tool]) -> Result<String, ApiError> {
    let o = as_object(v, "tool_choice")?;
    if get(o, "type").and_then(Value::as_str) != Some("function") {
        return Err(ApiError::invalid(
            "tool_choice",
            "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}",
        ));
    }
    let function = as_object(get(o, "function").unwrap_or(&Value::Null), "tool_choice.function")?;
    let name = as_str(get(function, "name").unwrap_or(&Value::Null), "tool_choice.function.name")?;
    if !tools.iter().any(|t| t.name == name) {
        return Err(ApiError::invalid("tool_choice.function.name", format!("no tool is named \"{name}\"")));
    }
    Ok(name.to_owned())
}

impl ToolsRequest {
    /// How the outputs are read back as calls, for a model with `template` and `tokenizer`: `"auto"` needs a
    /// tool-call format ember can read (`tool_format.rs`), and is refused naming `tool_choice` (or `tools`, whose
    /// default it is) for any other.
    pub fn reader(&self, template: &ChatTemplate, tokenizer: &Tokenizer) -> Result<CallReader, ApiError> {
        let id_style = call_id_style(template);
        let format = tool_format(template);
        let explicit = match (&self.choice, format) {
            // Harmony's grammar holds the whole output to its channels, a forced call too (`harmony.rs`).
            (ToolChoice::Forced(shape), ToolFormat::Known(_, HARMONY)) => {
                let tools: Vec<Tool> = match shape {
                    CallShape::Arguments { name } => self.tools.iter().filter(|t| &t.name == name).cloned().collect(),
                    CallShape::NameAndArguments => self.tools.clone(),
                };
                let calls = AutoCalls::new(HARMONY, &tools, false, tokenizer);
                return Ok(CallReader::Auto(AutoCalls { id_style, required: true, ..calls }));
            }
            (ToolChoice::Forced(shape), _) => return Ok(CallReader::Forced(shape.clone(), id_style)),
            (ToolChoice::Auto { explicit }, _) => explicit,
        };
        let syntax = match format {
            ToolFormat::Ember => EMBER,
            ToolFormat::Known(_, syntax) => syntax,
            ToolFormat::Unknown => {
                return Err(ApiError::invalid(
                    if *explicit { "tool_choice" } else { "tools" },
                    "tool_choice \"auto\" (the default with tools) is not supported for this model: its chat \
                     template has a tool-call format ember cannot read back (ember reads Hermes' <tool_call>, \
                     Llama 3.x's JSON, Mistral's [TOOL_CALLS], Granite's <|tool_call|>, Qwen3-Coder's <function=…> blocks, \
                     Phi-4-mini's functools, DeepSeek's, gpt-oss' harmony channels and its own for templates without one); set tool_choice to \"required\" or to a function (ember then \
                     constrains the output to a valid call), or to \"none\"",
                ))
            }
        };
        let calls = AutoCalls::new(syntax, &self.tools, self.parallel, tokenizer);
        Ok(CallReader::Auto(AutoCalls { id_style, ..calls }))
    }

    /// The constraint on the output: one valid call (forced), or free text or one valid call (`"auto"`).
    pub fn constraint(&self, reader: &CallReader) -> GuidedRequest {
        let schema = match reader {
            CallReader::Forced(CallShape::Arguments { name }, _) => {
                self.tools.iter().find(|t| &t.name == name).map(|t| t.parameters.clone()).unwrap_or(json!({}))
            }
            CallReader::Forced(CallShape::NameAndArguments, _) => self.call_schema(),
            CallReader::Auto(calls) => return calls.constraint(&self.tools),
        };
        GuidedRequest::new(GuidedSpec::JsonSchema(schema), "tools")
    }

    /// `{"name": NAME, "arguments": ARGS}` for one of the tools. `name` before `arguments`, which the schema's
    /// property order makes the output's (serde_json keeps insertion order here: the `preserve_order` feature),
    /// so that a stream knows the function first.
    /// Each tool's parameters keep their own `$ref`s, rewritten to where they are placed (`tool_schemas.rs`).
    fn call_schema(&self) -> Value {
        json!({"anyOf": self.tools.iter().enumerate().map(|(i, t)| json!({
            "type": "object",
            "properties": {
                "name": {"const": t.name},
                "arguments": rebased(&t.parameters, &format!("#/anyOf/{i}/properties/arguments")),
            },
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })).collect::<Vec<_>>()})
    }

    /// For a template without a tool format: the messages with ember's description of the tools in the system
    /// message (the first message's, or a new first one).
    pub fn with_instruction(&self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let tools: Vec<Value> =
            self.tools.iter().map(|t| json!({"name": t.name, "parameters": t.parameters})).collect();
        let listed = serde_json::to_string(&tools).unwrap_or_default();
        let instruction = match &self.choice {
            ToolChoice::Forced(CallShape::Arguments { name }) => {
                format!("You call the function \"{name}\". Functions: {listed}\nReply with its arguments as JSON.")
            }
            ToolChoice::Forced(CallShape::NameAndArguments) => format!(
                "You call one of these functions: {listed}\nReply with JSON: {{\"name\": the function, \"arguments\": \
                 its arguments}}."
            ),
            ToolChoice::Auto { .. } => format!(
                "You can call these functions: {listed}\nTo call a function, reply with only a JSON object: \
                 {{\"name\": the function, \"arguments\": its arguments}}. Otherwise, answer normally."
            ),
        };
        let mut out = messages.to_vec();
        match out.first_mut() {
            Some(first) if first.role == "system" => first.content = format!("{}\n\n{instruction}", first.content),
            _ => out.insert(0, ChatMessage::new("system", instruction)),
        }
        out
    }

    /// For a template that reads the tools from the system message (Phi-4-mini's): the functions
    /// (`[{"name", "description", "parameters"}, …]`, as Python's `json.dumps` writes them) in the first system
    /// message's `tools`, or in an empty system message of their own.
    pub fn in_system_message(&self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let functions: Vec<Value> = self
            .tools_json
            .as_array()
            .into_iter()
            .flatten()
            .map(|tool| {
                let f = &tool["function"];
                let mut listed = serde_json::Map::new();
                for key in ["name", "description", "parameters"] {
                    if let Some(v) = f.get(key) {
                        listed.insert(key.to_owned(), v.clone());
                    }
                }
                Value::Object(listed)
            })
            .collect();
        let tools = Some(python_json_dumps(&Value::Array(functions)));
        let mut out = messages.to_vec();
        match out.first_mut() {
            // The request's tools replace any the system message brought (as Phi-4-mini's own examples send).
            Some(first) if first.role == "system" => {
                first.extra.remove("tools");
                first.tools = tools;
            }
            _ => out.insert(0, ChatMessage { tools, ..ChatMessage::new("system", "") }),
        }
        out
    }
}

/// For a template that renders no calls (one without a tool format, Phi-4-mini's): each assistant turn's
/// `tool_calls` written into its content as `syntax` writes calls (ember's: `{"name": …, "arguments": …}`, one
/// per line), so that the model sees what it called. A `tool` turn keeps its role and content (templates like
/// SmolLM2's render any role; one that takes no `tool` turn gets it as user text: `template_roles.rs`).
pub(crate) fn calls_as_text(messages: &[ChatMessage], syntax: &CallSyntax) -> Vec<ChatMessage> {
    messages
        .iter()
        .map(|m| {
            let Some(calls) = m.tool_calls.as_ref().and_then(Value::as_array) else { return m.clone() };
            // `arguments` is the object its JSON string encoded by now (`prompt.rs`): written back as JSON, as
            // templates with a tool format write it.
            let arguments: Vec<String> = calls
                .iter()
                .map(|call| match &call["function"]["arguments"] {
                    Value::String(text) => text.clone(),
                    Value::Null => "{}".to_owned(),
                    object => tojson_text(object),
                })
                .collect();
            let names = calls.iter().map(|call| call["function"]["name"].as_str().unwrap_or_default());
            let written = syntax.write(names.zip(arguments.iter().map(String::as_str)));
            let content = match m.content.is_empty() {
                true => written,
                false => format!("{}\n{written}", m.content),
            };
            ChatMessage { content, tool_calls: None, ..m.clone() }
        })
        .collect()
}

/// The shape of the call ids a model's template accepts back in later turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallIdStyle {
    /// OpenAI's: `call_` and 24 hex digits.
    OpenAi,
    /// Nine letters and digits: Mistral's templates refuse any other id (`raise_exception`), so a call ember
    /// returned could not be sent back otherwise (vLLM's Mistral parser makes the same ids).
    NineAlphanumeric,
}

impl CallIdStyle {
    /// A new call id, unique without global state (as response ids are).
    pub fn new_id(self, salt: u64) -> String {
        let draw = RandomState::new().hash_one(salt);
        let more = RandomState::new().hash_one(salt ^ 0x9e37_79b9_7f4a_7c15);
        match self {
            CallIdStyle::OpenAi => format!("call_{draw:016x}{:08x}", more as u32),
            CallIdStyle::NineAlphanumeric => {
                const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
                let mut bits = u128::from(draw) << 64 | u128::from(more);
                (0..9)
                    .map(|_| {
                        let c = ALPHABET[(bits % ALPHABET.len() as u128) as usize] as char;
                        bits /= ALPHABET.len() as u128;
                        c
                    })
                    .collect()
            }
        }
    }
}

/// What a stream sends of a call as its text comes: the header (id and name) once the name is known, then pieces
/// of the arguments.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallDelta {
    Header { id: String, name: String },
    Arguments(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::tools::call_syntax::HERMES;

    fn parse(body: Value) -> Result<Option<ToolsRequest>, ApiError> {
        parse_tools(body.as_object().unwrap())
    }

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "now"}}])
    }

    #[test]
    fn tool_choice_decides_what_is_asked() {
        let r = parse(json!({"tools": weather(), "tool_choice": "required"})).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Forced(CallShape::NameAndArguments));
        assert_eq!(r.tools[1].parameters, json!({"type": "object"}), "no parameters: an object");
        let named = json!({"type": "function", "function": {"name": "now"}});
        let r = parse(json!({"tools": weather(), "tool_choice": named})).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Forced(CallShape::Arguments { name: "now".into() }));
        let r = parse(json!({"tools": weather(), "tool_choice": "auto"})).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Auto { explicit: true });
        let r = parse(json!({"tools": weather()})).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Auto { explicit: false }, "OpenAI's default with tools");
        assert_eq!(parse(json!({"tools": weather(), "tool_choice": "none"})).unwrap(), None);
        assert_eq!(parse(json!({"tools": [], "tool_choice": "none"})).unwrap(), None);
        assert_eq!(parse(json!({})).unwrap(), None);
        for (body, param) in [
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tool_choice": "auto"}), "tool_choice"),
            (json!({"tools": weather(), "tool_choice": "sometimes"}), "tool_choice"),
            (
                json!({"tools": weather(), "tool_choice": {"type": "function", "function": {"name": "x"}}}),
                "tool_choice.function.name",
            ),
            (json!({"tools": weather(), "tool_choice": 3}), "tool_choice"),
            (json!({"tools": [{"type": "retrieval"}], "tool_choice": "required"}), "tools[0].type"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a b"}}], "tool_choice": "required"}),
                "tools[0].function.name",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}], "tool_choice": "required"}),
                "tools[0].function.parameters",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]}),
                "tools",
            ),
            (json!({"tools": {}, "tool_choice": "required"}), "tools"),
            (json!({"tools": weather(), "parallel_tool_calls": "no"}), "parallel_tool_calls"),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn auto_reads_the_templates_format_and_refuses_one_it_cannot_read() {
        let plain = ChatTemplate::new(None, "", "").unwrap();
        let hermes =
            ChatTemplate::new(Some(include_str!("../../../tests/fixtures/hermes_template.jinja")), "", "").unwrap();
        let other = ChatTemplate::new(Some("{{ tools | tojson }} [TOOL_CALLS]"), "", "").unwrap();
        let tokenizer = crate::protocol::test_support::tokenizer();
        let auto = parse(json!({"tools": weather()})).unwrap().unwrap();
        let names = vec!["get_weather".to_owned(), "now".to_owned()];
        let reader = auto.reader(&plain, &tokenizer).unwrap();
        let strings: Vec<Vec<String>> = auto
            .tools
            .iter()
            .map(|t| crate::protocol::tools::xml_arguments::string_parameters(&t.parameters))
            .collect();
        let auto_calls = |syntax, parallel| AutoCalls {
            syntax,
            names: names.clone(),
            strings: strings.clone(),
            parallel,
            control_markers: vec![],
            id_style: CallIdStyle::OpenAi,
            required: false,
        };
        assert_eq!(reader, CallReader::Auto(auto_calls(EMBER, true)));
        assert!(matches!(auto.constraint(&reader).spec, GuidedSpec::Lark(_)));
        let reader = auto.reader(&hermes, &tokenizer).unwrap();
        assert_eq!(reader, CallReader::Auto(auto_calls(HERMES, true)));
        let one = parse(json!({"tools": weather(), "parallel_tool_calls": false})).unwrap().unwrap();
        assert_eq!(one.reader(&hermes, &tokenizer).unwrap(), CallReader::Auto(auto_calls(HERMES, false)));
        let e = auto.reader(&other, &tokenizer).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"), "the default names tools");
        let explicit = parse(json!({"tools": weather(), "tool_choice": "auto"})).unwrap().unwrap();
        let e = explicit.reader(&other, &tokenizer).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(e.message.contains("\"required\""), "{}", e.message);
        let forced = parse(json!({"tools": weather(), "tool_choice": "required"})).unwrap().unwrap();
        let any = CallReader::Forced(CallShape::NameAndArguments, CallIdStyle::OpenAi);
        assert_eq!(forced.reader(&other, &tokenizer).unwrap(), any, "any template");
    }

    #[test]
    fn the_constraint_puts_the_name_first() {
        let plain = ChatTemplate::new(None, "", "").unwrap();
        let tokenizer = crate::protocol::test_support::tokenizer();
        let constraint = |r: &ToolsRequest| r.constraint(&r.reader(&plain, &tokenizer).unwrap());
        let r = parse(json!({"tools": weather(), "tool_choice": "required"})).unwrap().unwrap();
        let GuidedSpec::JsonSchema(schema) = constraint(&r).spec else { panic!() };
        let first = &schema["anyOf"][0];
        assert_eq!(first["properties"].as_object().unwrap().keys().collect::<Vec<_>>(), ["name", "arguments"]);
        assert_eq!(first["properties"]["name"], json!({"const": "get_weather"}));
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let r = parse(json!({"tools": weather(), "tool_choice": named})).unwrap().unwrap();
        let GuidedSpec::JsonSchema(schema) = constraint(&r).spec else { panic!() };
        assert_eq!(schema["required"], json!(["city"]));
    }

    #[test]
    fn the_instruction_joins_the_system_message() {
        let r = parse(json!({"tools": weather(), "tool_choice": "required"})).unwrap().unwrap();
        let m = r.with_instruction(&[ChatMessage::new("user", "hi")]);
        assert_eq!((m.len(), m[0].role.as_str()), (2, "system"));
        assert!(m[0].content.contains("get_weather") && m[0].content.contains("\"arguments\""));
        let m = r.with_instruction(&[ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "hi")]);
        assert_eq!(m.len(), 2);
        assert!(m[0].content.starts_with("Be brief.\n\n"));
        // "auto" leaves the choice to the model, and says how a call is written.
        let auto = parse(json!({"tools": weather()})).unwrap().unwrap();
        let m = auto.with_instruction(&[ChatMessage::new("user", "hi")]);
        assert!(m[0].content.contains("only a JSON object") && m[0].content.contains("Otherwise, answer normally"));
        let id = |style: CallIdStyle| style.new_id(1);
        assert!(id(CallIdStyle::OpenAi).starts_with("call_") && id(CallIdStyle::OpenAi).len() == 29);
        assert_ne!(id(CallIdStyle::OpenAi), id(CallIdStyle::OpenAi));
        let short = id(CallIdStyle::NineAlphanumeric);
        assert!(short.len() == 9 && short.bytes().all(|b| b.is_ascii_alphanumeric()), "{short}");
        assert_ne!(short, id(CallIdStyle::NineAlphanumeric));
    }
}

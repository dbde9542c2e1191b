//! Renders chat messages into a prompt with the model's own Jinja template (`tokenizer.chat_template`).
//!
//! Templates are rendered the way Hugging Face transformers renders them (`apply_chat_template`): Jinja with
//! `trim_blocks` and `lstrip_blocks`, loop controls, Python string methods (`.strip()`, `.startswith()`, ...) via
//! minijinja-contrib's pycompat layer (`methods.rs`), `raise_exception(msg)`, HF's `tojson` (Python's `json.dumps`
//! with its keywords, keys in the order given: `json.rs`), `strftime_now(format)` (UTC: `strftime.rs`),
//! `{% generation %}` blocks (`tags.rs`), and the variables `messages`, `add_generation_prompt`, `bos_token` and
//! `eos_token`. A model without a template gets ChatML, the format SmolLM2 and many other instruction models use.
//!
//! A template is code from a model file or a host's option, run inside the host's process: everything it can
//! grow is bounded (`limits.rs`, the engine option `chat_template_limits`), it runs on a thread of its own
//! (`sandbox.rs`), and every value it binds passes a depth check (`rewrite.rs`, `hold.rs`). Every failure is an
//! error; one that reached a limit names it and the template's origin.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use minijinja::{Environment, ErrorKind, State};
use serde::Serialize;

use crate::model::gguf::{GgufError, GgufFile};

mod caps;
mod filters;
mod hold;
mod json;
mod limits;
mod methods;
mod pretty;
mod rewrite;
mod sandbox;
mod strftime;
mod tags;

pub use caps::TemplateCaps;
pub use limits::{Limit, TemplateLimits};
// The UTC clock arithmetic, for the timestamps other APIs write (Ollama's `created_at`).
pub(crate) use strftime::strftime;

/// Which chat template a model gets (the file's own, or another's text: the engine option `chat_template`), and
/// within which limits (`chat_template_limits`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateChoice {
    /// Jinja text that replaces the file's template; `None`: the file's own (ChatML when it has none).
    pub source: Option<String>,
    pub limits: TemplateLimits,
}

impl TemplateChoice {
    /// The file's own template within the default limits.
    pub fn is_default(&self) -> bool {
        *self == TemplateChoice::default()
    }

    /// The template chosen, compiled with the bos/eos texts of the model in `file`. The file's own template is
    /// read only when it is the one chosen.
    pub fn compile(&self, file: &GgufFile) -> Result<ChatTemplate, TemplateError> {
        match &self.source {
            Some(source) => ChatTemplate::from_gguf_with(file, Some(source), TemplateOrigin::Option, &self.limits),
            None => {
                let source = file.optional("tokenizer.chat_template", GgufFile::str)?;
                ChatTemplate::from_gguf_with(file, source, TemplateOrigin::ModelFile, &self.limits)
            }
        }
    }
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant turn's tool calls, in OpenAI's shape (`[{"id", "type", "function": {"name", "arguments"}}]`),
    /// for templates that render them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A `tool` turn's answer to this call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A system message's tools as JSON text, for a template that reads them there (Phi-4-mini's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<String>,
    /// The message's other keys (`name`, an earlier answer's `reasoning_content`, ...), given to the template as
    /// they came, as transformers gives it the whole message.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            tools: None,
            extra: serde_json::Map::new(),
        }
    }
}

/// `json.dumps(value)` with Python's defaults (`ensure_ascii=True`, `", "` and `": "`): JSON text as a Python host
/// writes it for a template that shows it as it is (Phi-4-mini's system-message tools).
pub fn python_json_dumps(value: &serde_json::Value) -> String {
    json::dumps(value, &json::DumpOptions { ensure_ascii: true, ..Default::default() })
}

/// `value | tojson` as transformers writes it (`json.dumps` with `ensure_ascii=False`, `", "` and `": "`): JSON text
/// as templates with a tool format write an earlier call's arguments, for a template that is given them as text.
pub fn tojson_text(value: &serde_json::Value) -> String {
    json::dumps(value, &json::DumpOptions::default())
}

/// The fallback template, used only when a model has none: ChatML.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const TEMPLATE_NAME: &str = "chat";

/// Where a template came from, which its errors name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model file's `tokenizer.chat_template`.
    ModelFile,
    /// The engine option `chat_template` (or a caller of [`ChatTemplate::new`]).
    Option,
    /// ChatML, for a model without a template.
    ChatMl,
}

impl fmt::Display for TemplateOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TemplateOrigin::ModelFile => "the model file's chat template (tokenizer.chat_template)",
            TemplateOrigin::Option => "the chat template of the chat_template option",
            TemplateOrigin::ChatMl => "the ChatML fallback template",
        })
    }
}

/// A failure to compile or render a chat template.
#[derive(Debug)]
pub enum TemplateError {
    /// The GGUF metadata needed to set the template up is unreadable.
    Gguf(GgufError),
    /// The template does not parse.
    Syntax(String),
    /// The template failed while rendering (including `raise_exception` calls).
    Render(String),
    /// Compiling or rendering reached one of the template's limits.
    Limit { limit: Limit, value: u64, origin: TemplateOrigin, detail: String },
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Gguf(e) => write!(f, "cannot read the chat template: {e}"),
            TemplateError::Syntax(e) => write!(f, "invalid chat template: {e}"),
            TemplateError::Render(e) => write!(f, "chat template failed to render: {e}"),
            TemplateError::Limit { limit, value, origin, detail } => {
                write!(f, "{origin} reached its limit {limit} = {value}: {detail}")
            }
        }
    }
}

impl std::error::Error for TemplateError {}

impl From<GgufError> for TemplateError {
    fn from(e: GgufError) -> Self {
        TemplateError::Gguf(e)
    }
}

/// A compiled chat template with the special-token texts it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    origin: TemplateOrigin,
    limits: TemplateLimits,
    /// The Jinja text as written, kept for [`ChatTemplate::source`] (what is compiled is the rewritten text).
    source: String,
    /// What it renders of a system message, tools and tool results (`caps.rs`), found on first use.
    caps: OnceLock<TemplateCaps>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("origin", &self.origin)
            .finish()
    }
}

/// The variables ember gives every template (`RenderContext`'s fields); a request's `chat_template_kwargs` adds
/// others.
pub const RENDER_VARIABLES: [&str; 5] = ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"];

#[derive(Serialize)]
struct RenderContext<'a> {
    messages: &'a [ChatMessage],
    /// The request's tools (OpenAI's `[{"type": "function", "function": {...}}]`), as transformers passes them:
    /// `none` when there are none, which templates test with `tools is not none`.
    tools: Option<&'a serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &'a str,
    eos_token: &'a str,
}

impl ChatTemplate {
    /// Compiles `source` (from the `chat_template` option, or a caller's), or ChatML when `source` is `None`,
    /// with the default limits.
    pub fn new(source: Option<&str>, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        let origin = if source.is_some() { TemplateOrigin::Option } else { TemplateOrigin::ChatMl };
        Self::compile(source, bos_token, eos_token, origin, &TemplateLimits::default())
    }

    /// Compiles `source` (ChatML when `None`, whatever `origin` says) within `limits`. The source is checked,
    /// rewritten and compiled on a thread of its own: minijinja's compiler recurses over an expression's tree, as
    /// deep as a filter chain is long.
    pub fn compile(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
        origin: TemplateOrigin,
        limits: &TemplateLimits,
    ) -> Result<Self, TemplateError> {
        let (source, origin) = match source {
            Some(s) => (s, origin),
            None => (CHATML_TEMPLATE, TemplateOrigin::ChatMl),
        };
        let limit =
            |limit: Limit, detail: String| TemplateError::Limit { limit, value: limit.value(limits), origin, detail };
        if source.len() > limits.max_source_bytes {
            return Err(limit(Limit::Source, format!("the template is {} bytes long", source.len())));
        }
        let time = Duration::from_millis(limits.time_ms);
        let (env, _) = sandbox::run(time, limits.max_output_bytes, || {
            let mut env = Environment::new();
            let syntax = env.syntax().to_builder().trim_blocks(true).lstrip_blocks(true).build();
            env.set_syntax(syntax.map_err(|e| TemplateError::Syntax(describe(&e)))?);
            let compiled = tags::rewrite_generation_tags(source);
            let rewritten = rewrite::rewrite(compiled.as_ref(), env.syntax().clone(), limits.max_expression_nodes)
                .map_err(|e| match e {
                    rewrite::RewriteError::Syntax(e) => TemplateError::Syntax(e),
                    rewrite::RewriteError::ExpressionTooLarge { line, nodes, .. } => limit(
                        Limit::ExpressionNodes,
                        format!("the expression at line {line} has {nodes} or more nodes"),
                    ),
                })?;
            add_functions(&mut env, limits);
            env.add_template_owned(TEMPLATE_NAME, rewritten).map_err(|e| TemplateError::Syntax(describe(&e)))?;
            Ok::<_, TemplateError>(env)
        })
        .map_err(TemplateError::Render)?;
        Ok(ChatTemplate {
            env: env?,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            origin,
            limits: limits.clone(),
            source: source.to_owned(),
            caps: OnceLock::new(),
        })
    }

    /// The template of a GGUF model (`tokenizer.chat_template`, ChatML when absent), with the texts of its
    /// bos/eos tokens (`tokenizer.ggml.bos_token_id` / `eos_token_id` looked up in `tokenizer.ggml.tokens`;
    /// empty when the model does not define them), within the default limits.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TemplateError> {
        TemplateChoice::default().compile(file)
    }

    /// `source` (ChatML when `None`) from `origin`, with the bos/eos texts of the model in `file`, within
    /// `limits`.
    pub fn from_gguf_with(
        file: &GgufFile,
        source: Option<&str>,
        origin: TemplateOrigin,
        limits: &TemplateLimits,
    ) -> Result<Self, TemplateError> {
        let tokens = file.string_array("tokenizer.ggml.tokens")?;
        let token_text = |key: &str| -> Result<String, TemplateError> {
            Ok(file.optional(key, GgufFile::u32)?.and_then(|id| tokens.get(id as usize)).cloned().unwrap_or_default())
        };
        let bos = token_text("tokenizer.ggml.bos_token_id")?;
        let eos = token_text("tokenizer.ggml.eos_token_id")?;
        Self::compile(source, &bos, &eos, origin, limits)
    }

    /// The template with its clock stopped at `unix_seconds` (UTC): `strftime_now` always answers that time, so
    /// that a render can be reproduced (a reference comparison, a cached prompt that must not change at midnight).
    pub fn with_fixed_clock(mut self, unix_seconds: i64) -> Self {
        self.env.add_function("strftime_now", move |state: &State, format: String| {
            pay_for_date(state, &format)?;
            strftime::strftime(&format, unix_seconds).map_err(date_error)
        });
        self
    }

    /// True when the model had no template and ChatML is used.
    pub fn is_fallback(&self) -> bool {
        self.origin == TemplateOrigin::ChatMl
    }

    /// Where the template came from.
    pub fn origin(&self) -> TemplateOrigin {
        self.origin
    }

    /// The limits it compiles and renders within.
    pub fn limits(&self) -> &TemplateLimits {
        &self.limits
    }

    /// Renders `messages`; with `add_generation_prompt` the prompt ends where the assistant's reply begins.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, TemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// Renders `messages` with `tools` (a JSON array of OpenAI tool objects) in the template's `tools` variable,
    /// for templates that format tools ([`supports_tools`](Self::supports_tools)); others ignore it.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_variables(messages, tools, add_generation_prompt, &serde_json::Map::new())
    }

    /// [`render_with_tools`](Self::render_with_tools) with more variables (a request's `chat_template_kwargs`);
    /// ember's own ([`RENDER_VARIABLES`]) take precedence over any of `extra`'s of the same name.
    pub fn render_with_variables(
        &self,
        messages: &[ChatMessage],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, TemplateError> {
        let ctx = RenderContext {
            messages,
            tools,
            add_generation_prompt,
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
        };
        // transformers also passes `documents` (RAG templates': Command R's, Granite's), `none` unless given.
        let mut variables = serde_json::Map::from_iter([("documents".to_owned(), serde_json::Value::Null)]);
        variables.extend(extra.clone());
        match serde_json::to_value(&ctx) {
            Ok(serde_json::Value::Object(own)) => variables.extend(own),
            other => return Err(TemplateError::Render(format!("the template's variables: {other:?}"))),
        }
        let time = Duration::from_millis(self.limits.time_ms);
        let (result, reached) = sandbox::run(time, self.limits.max_output_bytes, || {
            let template = self.env.get_template(TEMPLATE_NAME).map_err(|e| (e.kind(), describe(&e)))?;
            let mut output = sandbox::Output { bytes: Vec::new() };
            // Everything the render made (its state, its values) is dropped here, on the render's own stack.
            let rendered = template.render_captured_to(minijinja::value::Serde(variables), &mut output).map(drop);
            rendered.map(|()| output.bytes).map_err(|e| (e.kind(), describe(&e)))
        })
        .map_err(TemplateError::Render)?;
        match (result, reached) {
            (Ok(bytes), _) => String::from_utf8(bytes).map_err(|e| TemplateError::Render(e.to_string())),
            (Err((_, detail)), Some(limit)) => Err(self.limit_error(limit, detail)),
            (Err((ErrorKind::OutOfFuel, detail)), None) => Err(self.limit_error(Limit::Fuel, detail)),
            (Err((_, detail)), None) if detail.contains("recursion limit exceeded") => {
                Err(self.limit_error(Limit::CallDepth, detail))
            }
            (Err((_, detail)), None) => Err(TemplateError::Render(detail)),
        }
    }

    fn limit_error(&self, limit: Limit, detail: String) -> TemplateError {
        TemplateError::Limit { limit, value: limit.value(&self.limits), origin: self.origin, detail }
    }

    /// Renders the conversation every chat template must take (a system and a user message, with the generation
    /// prompt; for a template without a system role, the system text in the user turn, as ember sends it): an
    /// engine tries it at load, so that a template that cannot render says so then, not on the first request.
    pub fn probe(&self) -> Result<String, TemplateError> {
        let (system, user) = ("You are a helpful assistant.", "Hello!");
        match self.caps().system_role {
            true => self.render(&[ChatMessage::new("system", system), ChatMessage::new("user", user)], true),
            false => self.render(&[ChatMessage::new("user", format!("{system}\n\n{user}"))], true),
        }
    }

    /// What the template renders of a system message, tools and tool results, found by rendering probes on
    /// first use (`caps.rs`).
    pub fn caps(&self) -> TemplateCaps {
        *self.caps.get_or_init(|| caps::detect(self))
    }

    /// The template's Jinja source (ChatML's for the fallback), for what only its text says: which tool-call
    /// format it teaches the model (`protocol/tool_format.rs`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template shows the tools of its `tools` variable ([`TemplateCaps::renders_tools`]): it has a
    /// format of its own for tool definitions (and presumably for calls). Templates without one, like SmolLM2's,
    /// never show the model a tool.
    pub fn supports_tools(&self) -> bool {
        self.caps().renders_tools
    }

    /// Whether the template reads the variable `name` (one it does not set itself): `enable_thinking`, say. A
    /// template that gives it a default first (`set enable_thinking = enable_thinking if enable_thinking is
    /// defined else true`, Nemotron 3's) sets it too, which minijinja's analysis counts as declared: asking
    /// `is defined` of it says the template reads it.
    pub fn reads_variable(&self, name: &str) -> bool {
        let undeclared =
            self.env.get_template(TEMPLATE_NAME).map(|t| t.undeclared_variables(false).contains(name)).unwrap_or(false);
        undeclared || self.source.contains(&format!("{name} is defined"))
    }
}

/// Ember's functions, filters and tests, and the limits that minijinja enforces itself.
fn add_functions(env: &mut Environment<'static>, limits: &TemplateLimits) {
    env.set_fuel(Some(limits.fuel));
    env.set_recursion_limit(limits.max_call_depth);
    env.set_unknown_method_callback(methods::unknown_method);
    filters::add_paid_filters(env);
    pretty::add_paid_pretty(env);
    env.add_filter("tojson", json::tojson);
    env.add_test("iterable", is_iterable);
    env.add_function("strftime_now", |state: &State, format: String| {
        pay_for_date(state, &format)?;
        strftime::strftime_now(&format).map_err(date_error)
    });
    env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    let max_depth = limits.max_depth;
    env.add_function(rewrite::HOLD_FUNCTION, move |state: &State, value| hold::hold(state, value, max_depth, false));
    env.add_function(rewrite::HOLD_ATTR_FUNCTION, move |state: &State, value| {
        hold::hold(state, value, max_depth, true)
    });
}

/// A date's text is at most five times its format (`%A` is "Wednesday"): paid for before it is written.
fn pay_for_date(state: &State, format: &str) -> Result<(), minijinja::Error> {
    sandbox::check_time()?;
    methods::pay(state, format.len().saturating_mul(5))
}

/// Jinja2's `iterable` test, which templates use to tell given tools from none (`tools is iterable and tools |
/// length > 0`): `none` is not iterable, an undefined variable is (it iterates as empty in jinja2, as here).
/// minijinja's own answers true for `none` too, which sends those templates into `none | length`.
fn is_iterable(value: minijinja::Value) -> bool {
    value.is_undefined() || (!value.is_none() && value.try_iter().is_ok())
}

fn date_error(message: String) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, message)
}

/// The longest error text a render returns: a template's `raise_exception` message is its own to choose.
const MAX_ERROR_CHARS: usize = 1_024;

/// minijinja's error with its detail and source location, on one line, at most [`MAX_ERROR_CHARS`] long.
fn describe(e: &minijinja::Error) -> String {
    let mut s = e.to_string();
    if let Some(detail) = e.detail() {
        if !s.contains(detail) {
            s = format!("{s}: {detail}");
        }
    }
    match s.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::new("user", text)
    }

    #[test]
    fn chatml_fallback_renders_generation_prompt() {
        let t = ChatTemplate::new(None, "", "").unwrap();
        assert!(t.is_fallback());
        let out = t.render(&[user("hi")], true).unwrap();
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(t.render(&[user("hi")], false).unwrap(), "<|im_start|>user\nhi<|im_end|>\n");
    }

    #[test]
    fn tools_reach_templates_that_read_them() {
        let plain = ChatTemplate::new(None, "", "").unwrap();
        assert!(!plain.supports_tools());
        let src = "{% if tools %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif %}\
                   {% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}\
                   {{ m.tool_calls[0].function.name }}{% endif %};{% endfor %}";
        let t = ChatTemplate::new(Some(src), "", "").unwrap();
        assert!(t.supports_tools());
        assert_eq!((t.source(), plain.source()), (src, CHATML_TEMPLATE));
        let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather"}}]);
        let call = serde_json::json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
        let messages = [user("hi"), ChatMessage { tool_calls: Some(call), ..ChatMessage::new("assistant", "") }];
        assert_eq!(t.render_with_tools(&messages, Some(&tools), false).unwrap(), "[get_weather]user:hi;assistant:f;");
        assert_eq!(t.render(&messages[..1], false).unwrap(), "user:hi;");
    }

    /// Tools reach the model as transformers writes them: keys in the request's order, Python's separators, no
    /// HTML escapes, `indent` and `separators` honoured; an unknown keyword is a render error.
    #[test]
    fn tojson_writes_tools_as_transformers_does() {
        let src = "{% for t in tools %}{{ t | tojson }}|{{ t.function.parameters | tojson(indent=2) }}|\
                   {{ t.function.parameters.required | tojson(separators=(',', ':')) }}{% endfor %}";
        let t = ChatTemplate::new(Some(src), "", "").unwrap();
        let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather",
            "description": "Zürich <now>", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city", "day"]}}}]);
        let want = concat!(
            r#"{"type": "function", "function": {"name": "get_weather", "description": "Zürich <now>", "#,
            r#""parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city", "day"]}}}"#,
            "|{\n  \"type\": \"object\",\n  \"properties\": {\n    \"city\": {\n      \"type\": \"string\"\n    }\n  },\n",
            "  \"required\": [\n    \"city\",\n    \"day\"\n  ]\n}|[\"city\",\"day\"]"
        );
        assert_eq!(t.render_with_tools(&[user("hi")], Some(&tools), false).unwrap(), want);
        let unknown = ChatTemplate::new(Some("{{ messages | tojson(colour=1) }}"), "", "").unwrap();
        assert!(matches!(unknown.render(&[user("x")], false), Err(TemplateError::Render(_))));
    }

    /// transformers' `{% generation %}` renders its content; `strftime_now` is there (its directives are tested in
    /// `strftime.rs`; `%%` keeps this test independent of the date) and refuses what it cannot format.
    #[test]
    fn generation_blocks_and_strftime_now_render() {
        let src = "{% for m in messages %}{%- generation -%} {{ m.content }} {%- endgeneration %}{% endfor %}\
                   {{ strftime_now('100%%') }}";
        let t = ChatTemplate::new(Some(src), "", "").unwrap();
        assert_eq!(t.render(&[user("a"), user("b")], false).unwrap(), "ab100%");
        assert_eq!(t.source(), src, "the source as written");
        let fixed = ChatTemplate::new(Some("{{ strftime_now('%d %b %Y') }}"), "", "").unwrap().with_fixed_clock(0);
        assert_eq!(fixed.render(&[], false).unwrap(), "01 Jan 1970");
        let bad = ChatTemplate::new(Some("{{ strftime_now('%Q') }}"), "", "").unwrap();
        assert!(bad.render(&[user("x")], false).unwrap_err().to_string().contains("%Q"));
    }

    /// A request's extra variables reach the template; ember's own win over any of the same name.
    #[test]
    fn extra_variables_reach_the_template() {
        let t = ChatTemplate::new(Some("{{ enable_thinking }}|{{ add_generation_prompt }}"), "", "").unwrap();
        let extra = serde_json::json!({"enable_thinking": false, "add_generation_prompt": "x"});
        let extra = extra.as_object().unwrap();
        // Booleans print as Python prints them, as in transformers.
        assert_eq!(t.render_with_variables(&[user("a")], None, true, extra).unwrap(), "False|True");
    }

    #[test]
    fn syntax_errors_are_returned() {
        let err = ChatTemplate::new(Some("{% for x in %}"), "", "").unwrap_err();
        assert!(matches!(err, TemplateError::Syntax(_)), "{err}");
    }

    #[test]
    fn raise_exception_is_a_render_error() {
        let t = ChatTemplate::new(Some("{{ raise_exception('only user turns') }}"), "", "").unwrap();
        let err = t.render(&[user("x")], true).unwrap_err();
        assert!(err.to_string().contains("only user turns"), "{err}");
    }

    #[test]
    fn runaway_templates_run_out_of_fuel() {
        let t = ChatTemplate::new(
            Some("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"),
            "",
            "",
        )
        .unwrap();
        let err = t.render(&[user("x")], true).unwrap_err();
        assert!(matches!(err, TemplateError::Limit { limit: Limit::Fuel, value: 2_000_000, .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("chat_template_limits.fuel = 2000000") && text.contains("chat_template option"),
            "{text}"
        );
    }

    #[test]
    fn python_string_methods_and_special_tokens_work() {
        let src = "{{ bos_token }}{% for m in messages %}{{ m.content.strip() }}{% endfor %}{{ eos_token }}";
        let t = ChatTemplate::new(Some(src), "<s>", "</s>").unwrap();
        assert_eq!(t.render(&[user("  padded  ")], false).unwrap(), "<s>padded</s>");
    }

    #[test]
    fn trim_and_lstrip_blocks_match_transformers() {
        let src = "{% for m in messages %}\n    {{ m.content }}\n{% endfor %}";
        let t = ChatTemplate::new(Some(src), "", "").unwrap();
        assert_eq!(t.render(&[user("a"), user("b")], false).unwrap(), "    a\n    b\n");
    }
}

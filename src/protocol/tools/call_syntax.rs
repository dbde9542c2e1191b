//! How each tool-call format writes its calls, as data: the markers around a call's name and its arguments, and
//! around the list of calls. One description serves the grammar that constrains an `"auto"` output
//! (`auto_call.rs`), the exact reading of a whole output (here) and the streaming of one (`auto_stream.rs`).
//!
//! Every format's call is `PRE name MID arguments POST`: the name is a tool's (its characters are
//! `[A-Za-z0-9_-]`, so it ends exactly where `MID` begins) and the arguments are one JSON object (but in one
//! format, below). Calls are
//! written after `OPEN`, separated by `SEP` where the format has several per message, and followed by `CLOSE`:
//!
//! | format | OPEN | PRE | MID | POST | SEP | CLOSE |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | ember's, Llama 3.x (`"parameters"`) | | `{"name": "` | `", "arguments": ` | `}` | — | |
//! | Hermes, Qwen 2.5/3, Granite 4 | `<tool_call>` | `\n{"name": "` | `", "arguments": ` | `}\n</tool_call>` | `\n<tool_call>` | |
//! | Mistral Nemo | `[TOOL_CALLS][` | `{"name": "` | `", "arguments": ` | `}` | `, ` | `]` |
//! | Mistral v11 (Small 3.2, Devstral) | `[TOOL_CALLS]` | | `[ARGS]` | | `[TOOL_CALLS]` | |
//! | Granite 3.x | `<\|tool_call\|>[` | `{"name": "` | `", "arguments": ` | `}` | `, ` | `]` |
//! | Phi-4-mini | `functools[` | `{"name": "` | `", "arguments": ` | `}` | `, ` | `]` |
//! | DeepSeek R1 | `<｜tool▁calls▁begin｜>` | `<｜tool▁call▁begin｜>function<｜tool▁sep｜>` | ``\n```json\n`` | ``\n```<｜tool▁call▁end｜>`` | `\n` | `<｜tool▁calls▁end｜>` |
//! | DeepSeek V3.1 | `<｜tool▁calls▁begin｜>` | `<｜tool▁call▁begin｜>` | `<｜tool▁sep｜>` | `<｜tool▁call▁end｜>` | (none) | `<｜tool▁calls▁end｜>` |
//! | Qwen3-Coder XML (Qwen 3.5, Nemotron 3) | `<tool_call>` | `\n<function=` | `>\n` | `</function>\n</tool_call>` | `\n<tool_call>` | |
//! | gpt-oss harmony (after the reasoning split) | `<\|channel\|>commentary to=functions.` | | ` <\|constrain\|>json<\|message\|>` | | — | |
//!
//! Qwen3-Coder's arguments are parameter blocks, not a JSON object (`xml_arguments.rs`): they are read into one.
//!
//! ember's and Llama 3.x's replies are a call from their first non-whitespace character on (a `{`), or a message;
//! the others may write text before `OPEN`. The layout inside is fixed (the grammar writes exactly these
//! markers, and the arguments with `json_layout`'s separators), so reading back is exact, not a search.

use serde_json::Value;

use super::xml_arguments;

/// A tool-call format's markers (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallSyntax {
    /// Text may come before the calls; otherwise the reply is a call from its first non-whitespace character.
    pub text_first: bool,
    pub open: &'static str,
    pub pre: &'static str,
    pub mid: &'static str,
    pub post: &'static str,
    /// Between two calls; `None`: one call per message.
    pub sep: Option<&'static str>,
    pub close: &'static str,
    /// A stop token the model ends its calls with (gpt-oss' `<|call|>`): the engine's grammar ends the output
    /// before it, and an output that kept it anyway is read as if it had not.
    pub end: &'static str,
    pub arguments: Arguments,
}

/// How a format writes a call's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arguments {
    /// One JSON object, as OpenAI's `arguments` carries it.
    Json,
    /// Qwen3-Coder's parameter blocks (`xml_arguments.rs`), read into that JSON object.
    XmlBlocks,
}

/// Every marker text that is a control token in some family's vocabulary (Mistral's `[TOOL_CALLS]`, DeepSeek's
/// `<｜tool▁sep｜>`...). Where the model's vocabulary has it as a control token, the grammar names that token and
/// the output's text keeps it (`AutoCalls::needs_special_text`); elsewhere it is ordinary text.
pub(crate) const MARKER_TOKENS: [&str; 14] = [
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|tool_call|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<|call|>",
];

const JSON_PRE: &str = "{\"name\": \"";
const JSON_MID: &str = "\", \"arguments\": ";

pub(crate) const EMBER: CallSyntax = CallSyntax {
    text_first: false,
    open: "",
    pre: JSON_PRE,
    mid: JSON_MID,
    post: "}",
    sep: None,
    close: "",
    end: "",
    arguments: Arguments::Json,
};
pub(crate) const LLAMA3_JSON: CallSyntax = CallSyntax { mid: "\", \"parameters\": ", ..EMBER };
pub(crate) const HERMES: CallSyntax = CallSyntax {
    text_first: true,
    open: "<tool_call>",
    pre: "\n{\"name\": \"",
    mid: JSON_MID,
    post: "}\n</tool_call>",
    sep: Some("\n<tool_call>"),
    close: "",
    end: "",
    arguments: Arguments::Json,
};
pub(crate) const MISTRAL_LIST: CallSyntax = CallSyntax {
    text_first: true,
    open: "[TOOL_CALLS][",
    pre: JSON_PRE,
    mid: JSON_MID,
    post: "}",
    sep: Some(", "),
    close: "]",
    end: "",
    arguments: Arguments::Json,
};
pub(crate) const MISTRAL_NAMED: CallSyntax = CallSyntax {
    text_first: true,
    open: "[TOOL_CALLS]",
    pre: "",
    mid: "[ARGS]",
    post: "",
    sep: Some("[TOOL_CALLS]"),
    close: "",
    end: "",
    arguments: Arguments::Json,
};
pub(crate) const GRANITE: CallSyntax = CallSyntax { open: "<|tool_call|>[", ..MISTRAL_LIST };
pub(crate) const PHI4_MINI: CallSyntax = CallSyntax { open: "functools[", ..MISTRAL_LIST };
/// Apriel's: the list inside `<tool_calls>` tags, which its templates ask for and write an earlier turn's calls in.
pub(crate) const APRIEL: CallSyntax = CallSyntax { open: "<tool_calls>[", close: "]</tool_calls>", ..MISTRAL_LIST };
pub(crate) const QWEN3_XML: CallSyntax = CallSyntax {
    text_first: true,
    open: "<tool_call>",
    pre: "\n<function=",
    mid: ">\n",
    post: "</function>\n</tool_call>",
    sep: Some("\n<tool_call>"),
    close: "",
    end: "",
    arguments: Arguments::XmlBlocks,
};
pub(crate) const DEEPSEEK_R1: CallSyntax = CallSyntax {
    text_first: true,
    open: "<｜tool▁calls▁begin｜>",
    pre: "<｜tool▁call▁begin｜>function<｜tool▁sep｜>",
    mid: "\n```json\n",
    post: "\n```<｜tool▁call▁end｜>",
    sep: Some("\n"),
    close: "<｜tool▁calls▁end｜>",
    end: "",
    arguments: Arguments::Json,
};
pub(crate) const DEEPSEEK_V31: CallSyntax = CallSyntax {
    text_first: true,
    open: "<｜tool▁calls▁begin｜>",
    pre: "<｜tool▁call▁begin｜>",
    mid: "<｜tool▁sep｜>",
    post: "<｜tool▁call▁end｜>",
    sep: Some(""),
    close: "<｜tool▁calls▁end｜>",
    end: "",
    arguments: Arguments::Json,
};

/// gpt-oss' harmony: a call is a message on the commentary channel to `functions.NAME`, its arguments JSON. The
/// message header `<|start|>assistant` and any reasoning before it are left out by the reasoning split
/// (`reasoning.rs`, whose headers this syntax shares), so what is read here begins at the channel; its grammar
/// (`harmony.rs`) holds the whole output to the channels. One call per output: `<|call|>` ends generation in
/// gpt-oss' vocabulary, and its template renders one call per assistant turn.
pub(crate) const HARMONY: CallSyntax = CallSyntax {
    text_first: true,
    open: "<|channel|>commentary to=functions.",
    pre: "",
    mid: " <|constrain|>json<|message|>",
    post: "",
    sep: None,
    close: "",
    end: "<|call|>",
    arguments: Arguments::Json,
};

/// One call read from an output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    pub name: String,
    /// The arguments' JSON text, as written.
    pub arguments: String,
}

/// A whole output read as calls.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ReadCalls<'t> {
    /// Text the model wrote before the calls, without its trailing whitespace; `None` when there is none.
    pub content: Option<&'t str>,
    pub calls: Vec<Call>,
}

impl CallSyntax {
    /// `calls` (name, arguments' JSON text) written in the format, as a model writes them (an earlier turn's calls
    /// for a template that renders none); one per line where the format has no separator.
    pub fn write<'c>(&self, calls: impl IntoIterator<Item = (&'c str, &'c str)>) -> String {
        let written: Vec<String> = calls
            .into_iter()
            .map(|(name, arguments)| {
                let quoted = serde_json::to_string(name).unwrap_or_default();
                format!("{}{}{}{arguments}{}", self.pre, &quoted[1..quoted.len() - 1], self.mid, self.post)
            })
            .collect();
        format!("{}{}{}", self.open, written.join(self.sep.unwrap_or("\n")), self.close)
    }

    /// Where the calls begin in `text` and the content before them, once they have: the byte of `OPEN` (of the
    /// first call's `{` for a format without text before its call).
    pub fn calls_start(&self, text: &str) -> Option<(usize, usize)> {
        if !self.text_first {
            let start = text.len() - text.trim_start().len();
            return text[start..].starts_with(self.pre).then_some((0, start));
        }
        let at = text.find(self.open)?;
        Some((text[..at].trim_end().len(), at))
    }

    /// The separator before the next call, when `rest` (text after a call) begins one; `None` when it does not
    /// (yet): the calls end there, or `rest` is too short to say.
    pub fn next_call<'t>(&self, rest: &'t str, parallel: bool) -> Option<&'t str> {
        let sep = self.sep.filter(|_| parallel)?;
        rest.strip_prefix(sep).filter(|r| r.starts_with(self.pre)).map(|r| &rest[..rest.len() - r.len()])
    }

    /// `text`, a whole output, read as calls of the tools named `names` (one unless `parallel`); `None` when it
    /// is a message (no calls, or calls cut short or malformed). `strings[i]`: the parameters of tool `names[i]`
    /// whose values are raw text in parameter blocks (`Arguments::XmlBlocks`; unused otherwise).
    pub fn read<'t>(
        &self,
        text: &'t str,
        names: &[String],
        strings: &[Vec<String>],
        parallel: bool,
    ) -> Option<ReadCalls<'t>> {
        let (content_end, start) = self.calls_start(text)?;
        let content = Some(&text[..content_end]).filter(|c| !c.is_empty());
        let mut rest = text[start..].strip_prefix(self.open)?;
        let mut calls = Vec::new();
        loop {
            let (call, after) = self.read_call(rest, names, strings)?;
            calls.push(call);
            rest = after;
            match self.next_call(rest, parallel) {
                Some(sep) => rest = &rest[sep.len()..],
                None => break,
            }
        }
        let rest = rest.strip_prefix(self.close)?.trim();
        (rest.is_empty() || rest == self.end).then_some(ReadCalls { content, calls })
    }

    /// One call at the start of `text`, and the text after it.
    fn read_call<'t>(&self, text: &'t str, names: &[String], strings: &[Vec<String>]) -> Option<(Call, &'t str)> {
        let rest = text.strip_prefix(self.pre)?;
        let name_end = rest.find(self.mid)?;
        let name = &rest[..name_end];
        let tool = names.iter().position(|n| n == name)?;
        let rest = &rest[name_end + self.mid.len()..];
        let (arguments, end) = match self.arguments {
            Arguments::Json => {
                let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
                let Some(Ok(Value::Object(_))) = values.next() else { return None };
                let end = values.byte_offset();
                (rest[..end].to_owned(), end)
            }
            Arguments::XmlBlocks => xml_arguments::read(rest, strings.get(tool).map_or(&[], Vec::as_slice))?,
        };
        let after = rest[end..].strip_prefix(self.post)?;
        Some((Call { name: name.to_owned(), arguments }, after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["get_weather".into(), "now".into()]
    }

    fn call(name: &str, arguments: &str) -> Call {
        Call { name: name.into(), arguments: arguments.into() }
    }

    const ARGS: &str = r#"{"city": "P{a}\"ris"}"#;

    fn write(s: &CallSyntax, calls: &[(&str, &str)]) -> String {
        s.write(calls.iter().copied())
    }

    const ALL: [CallSyntax; 10] =
        [EMBER, LLAMA3_JSON, HERMES, MISTRAL_LIST, MISTRAL_NAMED, GRANITE, APRIEL, DEEPSEEK_R1, DEEPSEEK_V31, HARMONY];

    #[test]
    fn each_format_reads_what_it_writes() {
        for s in ALL {
            let one = write(&s, &[("get_weather", ARGS)]);
            let read = s.read(&one, &names(), &[], true).unwrap_or_else(|| panic!("{one:?}"));
            assert_eq!(read, ReadCalls { content: None, calls: vec![call("get_weather", ARGS)] }, "{one:?}");
            assert_eq!(
                s.read(&format!("\n {one}\n"), &names(), &[], false).unwrap().calls.len(),
                1,
                "whitespace around"
            );
            // Cut short anywhere, or naming no tool, it is a message.
            for cut in (0..one.len()).filter(|&i| one.is_char_boundary(i)) {
                assert_eq!(s.read(&one[..cut], &names(), &[], true), None, "{:?}", &one[..cut]);
            }
            assert_eq!(s.read(&one.replace("get_weather", "get_time"), &names(), &[], true), None);
            assert_eq!(s.read(&write(&s, &[("now", "[1]")]), &names(), &[], true), None, "arguments are an object");
            assert_eq!(s.read(&format!("{one} more"), &names(), &[], true), None, "nothing after the calls");
        }
    }

    #[test]
    fn text_before_the_calls_is_content_where_the_format_allows_it() {
        for s in ALL {
            let text = format!("Let me look.  \n{}", write(&s, &[("now", "{}")]));
            match s.text_first {
                true => assert_eq!(s.read(&text, &names(), &[], true).unwrap().content, Some("Let me look.")),
                false => assert_eq!(s.read(&text, &names(), &[], true), None, "{text:?}"),
            }
        }
    }

    #[test]
    fn several_calls_where_the_format_separates_them_and_parallel_calls_are_allowed() {
        for s in ALL {
            let two = write(&s, &[("get_weather", ARGS), ("now", "{}")]);
            match s.sep {
                Some(_) => {
                    let read = s.read(&two, &names(), &[], true).unwrap_or_else(|| panic!("{two:?}"));
                    assert_eq!(read.calls, [call("get_weather", ARGS), call("now", "{}")]);
                    assert_eq!(s.read(&two, &names(), &[], false), None, "one call only: {two:?}");
                }
                None => assert_eq!(s.read(&two, &names(), &[], true), None),
            }
        }
    }

    #[test]
    fn the_real_renders_of_each_family_are_read() {
        // Each family's own template wrote these for the call get_weather({"city": "Paris"}) (llama.cpp's
        // models/templates, rendered by transformers: tests/fixtures/templates/expected.json).
        let cases = [
            (LLAMA3_JSON, r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#),
            (HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            (MISTRAL_LIST, r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]"#),
            (MISTRAL_NAMED, r#"[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}"#),
            (
                DEEPSEEK_R1,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n\
                 {\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            (
                DEEPSEEK_V31,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}\
                 <｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
        ];
        for (s, text) in cases {
            assert_eq!(s.read(text, &names(), &[], true).unwrap().calls, [call("get_weather", r#"{"city": "Paris"}"#)]);
        }
        // gpt-oss' call as OpenAI's harmony renderer writes it (after the reasoning split has left out the header),
        // its closing `<|call|>` kept or not.
        let harmony = r#"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}"#;
        for text in [harmony.to_owned(), format!("{harmony}<|call|>")] {
            assert_eq!(
                HARMONY.read(&text, &names(), &[], true).unwrap().calls,
                [call("get_weather", r#"{"city": "Paris"}"#)]
            );
        }
        // Qwen3-Coder's: its parameter blocks read as the JSON object of their values.
        let xml =
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";
        let strings = [vec!["city".to_owned()], vec![]];
        assert_eq!(
            QWEN3_XML.read(xml, &names(), &strings, true).unwrap().calls,
            [call("get_weather", r#"{"city": "Paris"}"#)]
        );
        assert_eq!(QWEN3_XML.read(&xml[..xml.len() - 1], &names(), &strings, true), None, "cut short");
    }
}

//! One `"auto"` choice, streamed: its text becomes content deltas or tool-call deltas as soon as it is certain
//! which it is.
//!
//! Text that may still turn into calls is held back: for ember's and Llama 3.x's formats, while the text is only
//! whitespace (a `{` next would make it a call); for the others, trailing whitespace and any end of the text that
//! could be the start of the format's opening marker. Once the calls have begun (the lazy grammar makes begun
//! calls valid ones), each call sends its header (id and name) once its name is complete, then pieces of its
//! arguments as they come; the markers around them are never sent. When the output ends before any call's header
//! was sent (it was cut short), everything not yet sent is flushed as content, so that the stream's text is the
//! whole body's.

use super::auto_call::AutoCalls;
use super::call_syntax::Arguments;
use super::xml_arguments::XmlScan;
use super::CallDelta;

/// What a stream sends of an `"auto"` choice: content, or a delta of the choice's call number `.0`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AutoDelta {
    Content(String),
    Call(usize, CallDelta),
}

/// Where the reading of the calls is: what comes next at byte `pos` of the text.
#[derive(Clone, Debug)]
enum Stage {
    Open,
    Pre,
    Name,
    /// Inside a JSON object of arguments, which began at `start`; `sent`: bytes of the text sent so far.
    Arguments {
        scan: ObjectScan,
        start: usize,
        sent: usize,
    },
    /// Inside parameter blocks (`xml_arguments.rs`), which began at `start` and are sent as their JSON.
    Blocks {
        scan: XmlScan,
        start: usize,
    },
    Post,
    /// After a call: another one, or the end.
    Between,
    Done,
}

#[derive(Clone, Debug)]
enum Phase {
    /// Text so far is content, or may still become calls.
    Text,
    Calls {
        pos: usize,
        stage: Stage,
        index: usize,
        header_sent: bool,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct AutoStream {
    calls: AutoCalls,
    /// The first call's id; later calls get new ones.
    id: String,
    /// The whole text so far.
    text: String,
    /// Bytes of `text` sent as content.
    sent: usize,
    phase: Phase,
}

impl AutoStream {
    pub fn new(calls: AutoCalls, id: String) -> Self {
        AutoStream { calls, id, text: String::new(), sent: 0, phase: Phase::Text }
    }

    /// Whether the text so far is complete calls.
    pub fn is_complete(&self) -> bool {
        self.calls.read(&self.text).is_some()
    }

    /// The deltas `piece` of output text releases.
    pub fn push(&mut self, piece: &str) -> Vec<AutoDelta> {
        self.text.push_str(piece);
        let mut out = Vec::new();
        if let Phase::Text = self.phase {
            match self.calls_start() {
                Some((content_end, start)) => {
                    self.content_until(content_end, &mut out);
                    self.phase = Phase::Calls { pos: start, stage: Stage::Open, index: 0, header_sent: false };
                }
                None => {
                    let until = self.text.len() - self.held_back();
                    self.content_until(until, &mut out);
                    return out;
                }
            }
        }
        self.advance(&mut out);
        out
    }

    /// The rest at the end of the output: nothing once a call was announced (its text was sent as it came), or,
    /// when none was, all the text not yet sent, as content.
    pub fn finish(&mut self) -> Vec<AutoDelta> {
        let mut out = Vec::new();
        if !matches!(self.phase, Phase::Calls { header_sent: true, .. }) {
            self.content_until(self.text.len(), &mut out);
        }
        out
    }

    fn content_until(&mut self, until: usize, out: &mut Vec<AutoDelta>) {
        if until > self.sent {
            out.push(AutoDelta::Content(self.text[self.sent..until].to_owned()));
            self.sent = until;
        }
    }

    /// Where the calls begin in the text, if they have: the end of the content before them and their first byte.
    fn calls_start(&self) -> Option<(usize, usize)> {
        let syntax = &self.calls.syntax;
        match syntax.text_first {
            true => syntax.calls_start(&self.text),
            // The `{` decides: the grammar makes what follows a call.
            false => {
                let start = self.text.len() - self.text.trim_start().len();
                self.text[start..].starts_with('{').then_some((0, start))
            }
        }
    }

    /// How many bytes at the end of the text (not yet calls) may still be part of them.
    fn held_back(&self) -> usize {
        let text = &self.text;
        if !self.calls.syntax.text_first {
            return if text.trim_start().is_empty() { text.len() } else { 0 };
        }
        // The longest end of the text that begins the marker, then the whitespace before it.
        let open = self.calls.syntax.open;
        let marker = (0..text.len()).filter(|&i| text.is_char_boundary(i)).find(|&i| open.starts_with(&text[i..]));
        text.len() - text[..marker.unwrap_or(text.len())].trim_end().len()
    }

    /// Reads the calls as far as the text goes, sending headers and argument pieces.
    fn advance(&mut self, out: &mut Vec<AutoDelta>) {
        let Phase::Calls { pos, stage, index, header_sent } = &mut self.phase else { return };
        let syntax = &self.calls.syntax;
        let text = self.text.as_str();
        loop {
            let rest = &text[*pos..];
            // A fixed marker: consumed once all of it is there.
            let marker = |expected: &str, next: Stage, pos: &mut usize, stage: &mut Stage| {
                let there = rest.len() >= expected.len();
                if there {
                    *pos += expected.len();
                    *stage = next;
                }
                there
            };
            let progressed = match stage {
                Stage::Open => marker(syntax.open, Stage::Pre, pos, stage),
                Stage::Pre => marker(syntax.pre, Stage::Name, pos, stage),
                Stage::Post => marker(syntax.post, Stage::Between, pos, stage),
                Stage::Name => match rest.find(syntax.mid) {
                    Some(end) => {
                        let id = match *index {
                            0 => self.id.clone(),
                            i => self.calls.id_style.new_id(i as u64),
                        };
                        out.push(AutoDelta::Call(*index, CallDelta::Header { id, name: rest[..end].to_owned() }));
                        *header_sent = true;
                        *pos += end + syntax.mid.len();
                        *stage = match syntax.arguments {
                            Arguments::Json => {
                                Stage::Arguments { scan: ObjectScan::default(), start: *pos, sent: *pos }
                            }
                            Arguments::XmlBlocks => {
                                let tool = self.calls.names.iter().position(|n| *n == rest[..end]);
                                let strings = tool.and_then(|t| self.calls.strings.get(t)).cloned().unwrap_or_default();
                                Stage::Blocks { scan: XmlScan::new(strings), start: *pos }
                            }
                        };
                        true
                    }
                    None => false,
                },
                Stage::Arguments { scan, start, sent } => {
                    let end = scan.feed(&text[*start..]).map(|e| *start + e);
                    let to = end.unwrap_or(text.len());
                    if to > *sent {
                        out.push(AutoDelta::Call(*index, CallDelta::Arguments(text[*sent..to].to_owned())));
                        *sent = to;
                    }
                    match end {
                        Some(e) => {
                            *pos = e;
                            *stage = Stage::Post;
                            true
                        }
                        None => false,
                    }
                }
                Stage::Blocks { scan, start } => {
                    let json = scan.feed(&text[*start..]);
                    if !json.is_empty() {
                        out.push(AutoDelta::Call(*index, CallDelta::Arguments(json)));
                    }
                    match scan.end {
                        Some(e) => {
                            *pos = *start + e;
                            *stage = Stage::Post;
                            true
                        }
                        None => false,
                    }
                }
                Stage::Between => match syntax.sep.filter(|_| self.calls.parallel) {
                    Some(sep) if syntax.next_call(rest, true).is_some() => {
                        *pos += sep.len();
                        *index += 1;
                        *stage = Stage::Pre;
                        true
                    }
                    // Too little text to say yet.
                    Some(sep) if format!("{sep}{}", syntax.pre).starts_with(rest) => false,
                    _ => {
                        *stage = Stage::Done;
                        false
                    }
                },
                Stage::Done => false,
            };
            if !progressed {
                return;
            }
        }
    }
}

/// Finds the end of the JSON object at the start of a text that grows: braces are counted outside strings, whose
/// escapes are skipped, and each byte is looked at once.
#[derive(Clone, Debug, Default)]
struct ObjectScan {
    scanned: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl ObjectScan {
    /// The object's length (up to and including its closing brace) in `s`, the text so far, once it has closed.
    fn feed(&mut self, s: &str) -> Option<usize> {
        for (i, b) in s.bytes().enumerate().skip(self.scanned) {
            self.scanned = i + 1;
            match (self.in_string, self.escaped, b) {
                (true, true, _) => self.escaped = false,
                (true, false, b'\\') => self.escaped = true,
                (true, false, b'"') => self.in_string = false,
                (true, false, _) => {}
                (false, _, b'"') => self.in_string = true,
                (false, _, b'{' | b'[') => self.depth += 1,
                (false, _, b'}' | b']') => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::pieces;
    use crate::protocol::tools::call_syntax::{
        CallSyntax, DEEPSEEK_R1, EMBER, HERMES, MISTRAL_LIST, MISTRAL_NAMED, QWEN3_XML,
    };

    const CALL: &str = r#"{"name": "get_weather", "arguments": {"city": "P{ä}\"r"}}"#;
    const ARGS: &str = r#"{"city": "P{ä}\"r"}"#;

    fn stream(syntax: CallSyntax) -> AutoStream {
        let calls = AutoCalls {
            syntax,
            names: vec!["get_weather".into(), "now".into()],
            strings: vec![vec!["city".into()], vec![]],
            parallel: true,
            control_markers: Vec::new(),
            id_style: crate::protocol::tools::CallIdStyle::OpenAi,
            required: false,
        };
        AutoStream::new(calls, "call_1".into())
    }

    /// `text` streamed in pieces of `size` bytes (at char boundaries): the content sent, the calls' names and
    /// arguments (each header first, once), and whether the stream saw complete calls.
    fn run(syntax: CallSyntax, text: &str, size: usize) -> (String, Vec<(String, String)>, bool) {
        let mut s = stream(syntax);
        let mut deltas = Vec::new();
        for piece in pieces(text, size) {
            deltas.extend(s.push(piece));
        }
        deltas.extend(s.finish());
        let (mut content, mut calls) = (String::new(), Vec::<(String, String)>::new());
        for d in deltas {
            match d {
                AutoDelta::Content(c) => {
                    assert!(calls.is_empty(), "content after the calls began: {c:?}");
                    content.push_str(&c);
                }
                AutoDelta::Call(index, CallDelta::Header { id, name }) => {
                    assert_eq!(index, calls.len(), "one header per call, in order");
                    assert!(index > 0 || id == "call_1", "the first call has the choice's id");
                    calls.push((name, String::new()));
                }
                AutoDelta::Call(index, CallDelta::Arguments(a)) => {
                    assert_eq!(index + 1, calls.len(), "arguments of the last call announced");
                    calls[index].1.push_str(&a);
                }
            }
        }
        (content, calls, s.is_complete())
    }

    fn every_size(syntax: CallSyntax, text: &str) -> (String, Vec<(String, String)>, bool) {
        let first = run(syntax, text, 1);
        for size in 2..=text.len() {
            assert_eq!(run(syntax, text, size), first, "{text:?} in pieces of {size}");
        }
        first
    }

    fn the_call() -> Vec<(String, String)> {
        vec![("get_weather".into(), ARGS.into())]
    }

    #[test]
    fn ember_content_is_sent_once_it_cannot_be_a_call() {
        let mut s = stream(EMBER);
        assert_eq!(s.push("\n "), [], "whitespace may still precede a call");
        assert_eq!(s.push("It"), [AutoDelta::Content("\n It".into())]);
        assert_eq!(s.push(" {x}"), [AutoDelta::Content(" {x}".into())], "a brace later is text");
        assert_eq!(s.finish(), []);
        assert_eq!(every_size(EMBER, "Sunny, {\"x\"}."), ("Sunny, {\"x\"}.".into(), vec![], false));
        assert_eq!(every_size(EMBER, "  "), ("  ".into(), vec![], false), "held back, then flushed");
    }

    #[test]
    fn an_ember_call_streams_as_one_call_whatever_the_pieces() {
        assert_eq!(every_size(EMBER, CALL), (String::new(), the_call(), true));
        assert_eq!(every_size(EMBER, &format!("\n{CALL}")), (String::new(), the_call(), true));
        // Cut short before the name is known: nothing was announced, so the text is content after all.
        let cut = &CALL[..12];
        assert_eq!(every_size(EMBER, cut), (cut.to_owned(), vec![], false));
        // Cut short inside the arguments: the call was announced and stays one (finish_reason says "length").
        let (content, calls, complete) = every_size(EMBER, &CALL[..CALL.len() - 4]);
        assert_eq!((content.as_str(), calls[0].0.as_str(), complete), ("", "get_weather", false));
    }

    #[test]
    fn hermes_text_then_calls_streams_the_text_then_the_calls() {
        let tagged = format!("<tool_call>\n{CALL}\n</tool_call>");
        assert_eq!(every_size(HERMES, &tagged), (String::new(), the_call(), true));
        let text = format!("Let me <b>look</b>. \n{tagged}");
        assert_eq!(every_size(HERMES, &text), ("Let me <b>look</b>.".into(), the_call(), true));
        let two = format!("{tagged}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>");
        let mut calls = the_call();
        calls.push(("now".into(), "{}".into()));
        assert_eq!(every_size(HERMES, &two), (String::new(), calls, true));
        // The same text without a call is all content, the held-back end included.
        for text in ["Let me look. <tool_ca", "a <tool_call>", "<<tool_call", "é <"] {
            assert_eq!(every_size(HERMES, text), (text.to_owned(), vec![], false), "{text:?}");
        }
    }

    #[test]
    fn hermes_holds_back_only_what_may_begin_the_tag() {
        let mut s = stream(HERMES);
        assert_eq!(s.push("Hi <tool"), [AutoDelta::Content("Hi".into())]);
        assert_eq!(s.push("s>"), [AutoDelta::Content(" <tools>".into())]);
        assert_eq!(s.push(" ok\n"), [AutoDelta::Content(" ok".into())]);
    }

    #[test]
    fn the_other_formats_stream_their_calls_without_their_markers() {
        let args = r#"{"city": "P{ä}\"r"}"#;
        let cases = [
            (MISTRAL_LIST, format!("Sure.[TOOL_CALLS][{CALL}, {{\"name\": \"now\", \"arguments\": {{}}}}]")),
            (MISTRAL_NAMED, format!("Sure. [TOOL_CALLS]get_weather[ARGS]{args}[TOOL_CALLS]now[ARGS]{{}}")),
            (
                DEEPSEEK_R1,
                format!(
                    "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n\
                     {args}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{{}}\n\
                     ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
                ),
            ),
            // Qwen3-Coder's blocks stream as the JSON of their values (the raw `"` escaped).
            (
                QWEN3_XML,
                "Sure.<tool_call>\n<function=get_weather>\n<parameter=city>\nP{ä}\"r\n</parameter>\n</function>\n\
                 </tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>"
                    .to_owned(),
            ),
        ];
        for (syntax, text) in cases {
            let mut calls = the_call();
            calls.push(("now".into(), "{}".into()));
            assert_eq!(every_size(syntax, &text), ("Sure.".into(), calls, true), "{text}");
        }
    }

    #[test]
    fn object_ends_are_found_outside_strings_whatever_the_pieces() {
        let end = |s: &str| ObjectScan::default().feed(s);
        assert_eq!(end(CALL), Some(CALL.len()));
        assert_eq!(end(&format!("{CALL}\n</tool_call>")), Some(CALL.len()));
        assert_eq!(end(r#"{"a": "}"#), None);
        assert_eq!(end(r#"{"a": [1, {"b": 2}]"#), None);
        let mut scan = ObjectScan::default();
        assert_eq!((scan.feed(&CALL[..10]), scan.feed(CALL)), (None, Some(CALL.len())));
    }
}

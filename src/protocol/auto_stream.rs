//! One `"auto"` choice, streamed: its text becomes content deltas or tool-call deltas as soon as it is certain
//! which it is.
//!
//! Text that may still turn into a call is held back: ember's format, while the text is only whitespace (a `{`
//! next would make it a call); Hermes, trailing whitespace and any end of the text that could be the start of
//! `<tool_call>`. Once the call has begun (the lazy grammar makes a begun call a valid one), its object goes
//! through a [`CallStream`], which sends the header once the name is known, then pieces of the arguments; the
//! Hermes closing tag is never sent. When the output ends without the call's header having been sent (it was
//! cut short), everything not yet sent is flushed as content, so that the stream's text is the whole body's.

use super::auto_call::{AutoCalls, AutoFormat, HERMES_OPEN};
use super::tools::{CallDelta, CallShape, CallStream};

/// What a stream sends of an `"auto"` choice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AutoDelta {
    Content(String),
    Call(CallDelta),
}

#[derive(Clone, Debug)]
enum Phase {
    /// Text so far is content, or may still become a call.
    Text,
    /// The call has begun at byte `start` of the text (its object's `{`); `end` once its object has closed.
    Call { stream: CallStream, start: usize, end: Option<usize> },
}

#[derive(Clone, Debug)]
pub(crate) struct AutoStream {
    calls: AutoCalls,
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

    /// Whether the text so far is a complete call.
    pub fn is_complete(&self) -> bool {
        self.calls.read(&self.text).is_some()
    }

    /// The deltas `piece` of output text releases.
    pub fn push(&mut self, piece: &str) -> Vec<AutoDelta> {
        let from = self.text.len();
        self.text.push_str(piece);
        let mut out = Vec::new();
        if let Phase::Text = self.phase {
            match self.call_start() {
                Some((content_end, start)) => {
                    self.content_until(content_end, &mut out);
                    let stream = CallStream::new(CallShape::NameAndArguments, self.id.clone());
                    self.phase = Phase::Call { stream, start, end: None };
                }
                None => {
                    let until = self.text.len() - self.held_back();
                    self.content_until(until, &mut out);
                    return out;
                }
            }
        }
        let Phase::Call { stream, start, end } = &mut self.phase else { return out };
        if end.is_none() {
            // The object's new text: from where the last piece ended (or where the object starts), up to its
            // closing brace once there is one.
            let new_from = from.max(*start);
            *end = object_end(&self.text[*start..]).map(|e| *start + e);
            let new_to = end.unwrap_or(self.text.len());
            if new_to > new_from {
                out.extend(stream.push(&self.text[new_from..new_to]).into_iter().map(AutoDelta::Call));
            }
        }
        out
    }

    /// The rest at the end of the output: the call's held-back end, or, when no call was announced, all the text
    /// not yet sent, as content.
    pub fn finish(&mut self) -> Vec<AutoDelta> {
        let mut out = Vec::new();
        match &mut self.phase {
            Phase::Call { stream, .. } if stream.header_sent() => {
                out.extend(stream.finish().into_iter().map(AutoDelta::Call));
            }
            _ => self.content_until(self.text.len(), &mut out),
        }
        out
    }

    fn content_until(&mut self, until: usize, out: &mut Vec<AutoDelta>) {
        if until > self.sent {
            out.push(AutoDelta::Content(self.text[self.sent..until].to_owned()));
            self.sent = until;
        }
    }

    /// Where a call begins in the text, if it has: the end of the content before it and the byte of its `{`.
    fn call_start(&self) -> Option<(usize, usize)> {
        match self.calls.format {
            AutoFormat::Ember => {
                let start = self.text.len() - self.text.trim_start().len();
                self.text[start..].starts_with('{').then_some((0, start))
            }
            AutoFormat::Hermes => {
                let at = self.text.find(HERMES_OPEN)?;
                let after = at + HERMES_OPEN.len();
                let rest = &self.text[after..];
                // The object starts after the tag's whitespace; until its `{` has come, the call has not begun.
                let start = after + (rest.len() - rest.trim_start().len());
                self.text[start..].starts_with('{').then_some((self.text[..at].trim_end().len(), start))
            }
        }
    }

    /// How many bytes at the end of the text (not yet a call) may still be part of one.
    fn held_back(&self) -> usize {
        match self.calls.format {
            AutoFormat::Ember => match self.text.trim_start().is_empty() {
                true => self.text.len(),
                false => 0,
            },
            AutoFormat::Hermes => {
                // The longest end of the text that begins the tag (the whole tag may be there, its object not
                // yet), then the whitespace before it.
                let tag = (0..self.text.len())
                    .filter(|&i| self.text.is_char_boundary(i))
                    .find(|&i| HERMES_OPEN.starts_with(&self.text[i..]) || self.text[i..].starts_with(HERMES_OPEN))
                    .unwrap_or(self.text.len());
                self.text.len() - self.text[..tag].trim_end().len()
            }
        }
    }
}

/// The length of the JSON object at the start of `s` (up to and including its closing brace), or `None` while it
/// is not closed: braces are counted outside strings, whose escapes are skipped.
fn object_end(s: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, b) in s.bytes().enumerate() {
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => in_string = false,
            (true, false, _) => {}
            (false, _, b'"') => in_string = true,
            (false, _, b'{' | b'[') => depth += 1,
            (false, _, b'}' | b']') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = r#"{"name": "get_weather", "arguments": {"city": "P{ä}\"r"}}"#;
    const ARGS: &str = r#"{"city": "P{ä}\"r"}"#;

    fn stream(format: AutoFormat) -> AutoStream {
        AutoStream::new(AutoCalls { format, names: vec!["get_weather".into()] }, "call_1".into())
    }

    /// `text` streamed in pieces of `size` bytes (at char boundaries): the content sent, the call's name and
    /// arguments (header first, once), and whether the stream saw a complete call.
    fn run(format: AutoFormat, text: &str, size: usize) -> (String, Option<(String, String)>, bool) {
        let mut s = stream(format);
        let mut deltas = Vec::new();
        let mut piece = String::new();
        for c in text.chars() {
            piece.push(c);
            if piece.len() >= size {
                deltas.extend(s.push(&std::mem::take(&mut piece)));
            }
        }
        deltas.extend(s.push(&piece));
        deltas.extend(s.finish());
        let (mut content, mut call) = (String::new(), None::<(String, String)>);
        for d in deltas {
            match d {
                AutoDelta::Content(c) => {
                    assert!(call.is_none(), "content after the call began: {c:?}");
                    content.push_str(&c);
                }
                AutoDelta::Call(CallDelta::Header { id, name }) => {
                    assert!(call.is_none() && id == "call_1", "one header");
                    call = Some((name, String::new()));
                }
                AutoDelta::Call(CallDelta::Arguments(a)) => call.as_mut().expect("header first").1.push_str(&a),
            }
        }
        (content, call, s.is_complete())
    }

    fn every_size(format: AutoFormat, text: &str) -> (String, Option<(String, String)>, bool) {
        let first = run(format, text, 1);
        for size in 2..=text.len() {
            assert_eq!(run(format, text, size), first, "{text:?} in pieces of {size}");
        }
        first
    }

    fn the_call() -> Option<(String, String)> {
        Some(("get_weather".into(), ARGS.into()))
    }

    #[test]
    fn ember_content_is_sent_once_it_cannot_be_a_call() {
        let mut s = stream(AutoFormat::Ember);
        assert_eq!(s.push("\n "), [], "whitespace may still precede a call");
        assert_eq!(s.push("It"), [AutoDelta::Content("\n It".into())]);
        assert_eq!(s.push(" {x}"), [AutoDelta::Content(" {x}".into())], "a brace later is text");
        assert_eq!(s.finish(), []);
        assert_eq!(every_size(AutoFormat::Ember, "Sunny, {\"x\"}."), ("Sunny, {\"x\"}.".into(), None, false));
        assert_eq!(every_size(AutoFormat::Ember, "  "), ("  ".into(), None, false), "held back, then flushed");
    }

    #[test]
    fn an_ember_call_streams_as_one_call_whatever_the_pieces() {
        assert_eq!(every_size(AutoFormat::Ember, CALL), (String::new(), the_call(), true));
        assert_eq!(every_size(AutoFormat::Ember, &format!("\n{CALL}")), (String::new(), the_call(), true));
        // Cut short before the name is known: nothing was announced, so the text is content after all.
        let cut = &CALL[..12];
        assert_eq!(every_size(AutoFormat::Ember, cut), (cut.to_owned(), None, false));
        // Cut short inside the arguments: the call was announced and stays one (finish_reason says "length").
        let (content, call, complete) = every_size(AutoFormat::Ember, &CALL[..CALL.len() - 4]);
        assert_eq!((content.as_str(), call.map(|c| c.0), complete), ("", Some("get_weather".into()), false));
    }

    #[test]
    fn hermes_text_then_a_call_streams_the_text_then_the_call() {
        let tagged = format!("<tool_call>\n{CALL}\n</tool_call>");
        assert_eq!(every_size(AutoFormat::Hermes, &tagged), (String::new(), the_call(), true));
        let text = format!("Let me <b>look</b>. \n{tagged}");
        assert_eq!(every_size(AutoFormat::Hermes, &text), ("Let me <b>look</b>.".into(), the_call(), true));
        // The same text without a call is all content, the held-back end included.
        for text in ["Let me look. <tool_ca", "a <tool_call>", "x\n<tool_call>\n{\"na", "<<tool_call", "é <"] {
            assert_eq!(every_size(AutoFormat::Hermes, text), (text.to_owned(), None, false), "{text:?}");
        }
    }

    #[test]
    fn hermes_holds_back_only_what_may_begin_the_tag() {
        let mut s = stream(AutoFormat::Hermes);
        assert_eq!(s.push("Hi <tool"), [AutoDelta::Content("Hi".into())]);
        assert_eq!(s.push("s>"), [AutoDelta::Content(" <tools>".into())]);
        assert_eq!(s.push(" ok\n"), [AutoDelta::Content(" ok".into())]);
    }

    #[test]
    fn object_ends_are_found_outside_strings() {
        assert_eq!(object_end(CALL), Some(CALL.len()));
        assert_eq!(object_end(&format!("{CALL}\n</tool_call>")), Some(CALL.len()));
        assert_eq!(object_end(r#"{"a": "}"#), None);
        assert_eq!(object_end(r#"{"a": [1, {"b": 2}]"#), None);
    }
}

//! One forced call (`tool_choice: "required"` or a named function), whose constraint makes the whole output the
//! call: read whole, or streamed as the call's header and then pieces of its arguments.

use serde_json::Value;

use super::{CallDelta, CallShape};

/// The prefix of a `NameAndArguments` output up to its arguments: the constraint's fixed layout writes exactly
/// `{"name": "NAME", "arguments": ` (names have no escapes), then the arguments, then `}`.
fn split_name_prefix(text: &str) -> Option<(&str, usize)> {
    let rest = text.strip_prefix("{\"name\": \"")?;
    let end = rest.find('"')?;
    let after = &rest[end..];
    let args_at = after.strip_prefix("\", \"arguments\": ")?;
    Some((&rest[..end], text.len() - args_at.len()))
}

/// A whole output read as a call: the function's name and its arguments' JSON text. `None` when the text is not a
/// complete call (generation ended early).
pub(crate) fn parse_call(shape: &CallShape, text: &str) -> Option<(String, String)> {
    let (name, arguments) = match shape {
        CallShape::Arguments { name } => (name.clone(), text),
        CallShape::NameAndArguments => {
            let (name, at) = split_name_prefix(text)?;
            (name.to_owned(), text[at..].strip_suffix('}')?)
        }
    };
    serde_json::from_str::<Value>(arguments).ok()?;
    Some((name, arguments.to_owned()))
}

/// One choice's call, streamed: the text is buffered until the name is known, and the last character is held
/// back until the end, since for `NameAndArguments` it may be the object's closing brace, not an argument's.
#[derive(Clone, Debug)]
pub(crate) struct CallStream {
    shape: CallShape,
    id: String,
    text: String,
    header_sent: bool,
    /// Bytes of `text` accounted for: the name prefix and the arguments sent.
    sent: usize,
}

impl CallStream {
    pub fn new(shape: CallShape, id: String) -> Self {
        CallStream { shape, id, text: String::new(), header_sent: false, sent: 0 }
    }

    /// Whether the text so far is a complete call.
    pub fn is_complete(&self) -> bool {
        parse_call(&self.shape, &self.text).is_some()
    }

    /// The deltas `piece` of output text releases.
    pub fn push(&mut self, piece: &str) -> Vec<CallDelta> {
        let mut out = Vec::new();
        self.text.push_str(piece);
        if !self.header_sent {
            let name = match &self.shape {
                CallShape::Arguments { name } => name.clone(),
                CallShape::NameAndArguments => {
                    let Some((name, at)) = split_name_prefix(&self.text) else { return out };
                    self.sent = at;
                    name.to_owned()
                }
            };
            self.header_sent = true;
            out.push(CallDelta::Header { id: self.id.clone(), name });
        }
        let hold = usize::from(self.shape == CallShape::NameAndArguments);
        let mut until = self.text.len().saturating_sub(hold).max(self.sent);
        while !self.text.is_char_boundary(until) {
            until -= 1;
        }
        if until > self.sent {
            out.push(CallDelta::Arguments(self.text[self.sent..until].to_owned()));
            self.sent = until;
        }
        out
    }

    /// The rest at the end of the output: what was held back, without the closing brace of a complete call.
    pub fn finish(&mut self) -> Vec<CallDelta> {
        if !self.header_sent {
            return Vec::new();
        }
        let mut rest = &self.text[self.sent..];
        if self.shape == CallShape::NameAndArguments {
            rest = rest.strip_suffix('}').unwrap_or(rest);
        }
        let out = match rest.is_empty() {
            true => Vec::new(),
            false => vec![CallDelta::Arguments(rest.to_owned())],
        };
        self.sent = self.text.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::pieces;

    #[test]
    fn outputs_parse_as_calls_only_when_complete() {
        let both = CallShape::NameAndArguments;
        let text = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
        assert_eq!(parse_call(&both, text), Some(("get_weather".into(), r#"{"city": "Paris"}"#.into())));
        assert_eq!(parse_call(&both, &text[..text.len() - 3]), None);
        let named = CallShape::Arguments { name: "f".into() };
        assert_eq!(parse_call(&named, r#"{"a": 1}"#), Some(("f".into(), r#"{"a": 1}"#.into())));
        assert_eq!(parse_call(&named, r#"{"a": "#), None);
    }

    /// Any split of the text into pieces streams the same call: the header once, then the arguments exactly.
    #[test]
    fn a_streamed_call_is_the_whole_call_whatever_the_pieces() {
        let text = r#"{"name": "get_weather", "arguments": {"city": "Pär"}}"#;
        for shape in [CallShape::NameAndArguments, CallShape::Arguments { name: "get_weather".into() }] {
            let text = match shape {
                CallShape::NameAndArguments => text,
                CallShape::Arguments { .. } => r#"{"city": "Pär"}"#,
            };
            let expected = parse_call(&shape, text).unwrap();
            for size in 1..text.len() {
                let mut s = CallStream::new(shape.clone(), "call_1".into());
                let mut deltas = Vec::new();
                for piece in pieces(text, size) {
                    deltas.extend(s.push(piece));
                }
                deltas.extend(s.finish());
                let headers: Vec<&CallDelta> =
                    deltas.iter().filter(|d| matches!(d, CallDelta::Header { .. })).collect();
                assert_eq!(headers, [&CallDelta::Header { id: "call_1".into(), name: expected.0.clone() }]);
                assert!(matches!(deltas[0], CallDelta::Header { .. }), "the header comes first");
                let args: String = deltas
                    .iter()
                    .filter_map(|d| if let CallDelta::Arguments(a) = d { Some(a.as_str()) } else { None })
                    .collect();
                assert_eq!(args, expected.1, "pieces of {size}");
            }
        }
    }
}

//! How a request's outputs are read back as tool calls, whole or streamed: a forced call (`"required"`, a named
//! function) is the whole output; an `"auto"` one is found in the model's format (`auto_call.rs`).

use super::auto_call::AutoCalls;
use super::auto_stream::{AutoDelta, AutoStream};
use super::call_syntax::{Call, ReadCalls};
use super::forced_call::{parse_call, CallStream};
use super::{CallIdStyle, CallShape};

/// A request's way of reading calls.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallReader {
    /// One call of this shape, its id in this style (the template's, as `"auto"` calls' are).
    Forced(CallShape, CallIdStyle),
    Auto(AutoCalls),
}

impl CallReader {
    /// A whole output read as calls; `None` when it is not (a message, or a call cut short).
    pub fn read<'t>(&self, text: &'t str) -> Option<ReadCalls<'t>> {
        match self {
            CallReader::Forced(shape, _) => parse_call(shape, text)
                .map(|(name, arguments)| ReadCalls { content: None, calls: vec![Call { name, arguments }] }),
            CallReader::Auto(calls) => calls.read(text),
        }
    }

    /// The shape of the ids of the calls it reads: the template's (`tool_format::call_id_style`).
    pub fn id_style(&self) -> CallIdStyle {
        match self {
            CallReader::Forced(_, id_style) => *id_style,
            CallReader::Auto(calls) => calls.id_style,
        }
    }

    /// Whether the request's text must keep control tokens' text for its calls to be read back.
    pub fn needs_special_text(&self) -> bool {
        matches!(self, CallReader::Auto(calls) if calls.needs_special_text())
    }

    /// The streaming of one choice whose call will have this id.
    pub fn stream(&self, id: String) -> ChoiceCallStream {
        match self {
            CallReader::Forced(shape, _) => ChoiceCallStream::Forced(CallStream::new(shape.clone(), id)),
            CallReader::Auto(calls) => ChoiceCallStream::Auto(Box::new(AutoStream::new(calls.clone(), id))),
        }
    }
}

/// One choice's text as it streams: all of it a call (forced), or content or a call (`"auto"`).
#[derive(Clone, Debug)]
pub(crate) enum ChoiceCallStream {
    Forced(CallStream),
    /// Boxed: it carries the reading state of a whole choice.
    Auto(Box<AutoStream>),
}

impl ChoiceCallStream {
    /// The deltas `piece` of output text releases.
    pub fn push(&mut self, piece: &str) -> Vec<AutoDelta> {
        match self {
            ChoiceCallStream::Forced(s) => s.push(piece).into_iter().map(|d| AutoDelta::Call(0, d)).collect(),
            ChoiceCallStream::Auto(s) => s.push(piece),
        }
    }

    /// What is left at the end of the output.
    pub fn finish(&mut self) -> Vec<AutoDelta> {
        match self {
            ChoiceCallStream::Forced(s) => s.finish().into_iter().map(|d| AutoDelta::Call(0, d)).collect(),
            ChoiceCallStream::Auto(s) => s.finish(),
        }
    }

    /// Whether the text so far is a complete call (the finish chunk then says `"tool_calls"`).
    pub fn is_complete(&self) -> bool {
        match self {
            ChoiceCallStream::Forced(s) => s.is_complete(),
            ChoiceCallStream::Auto(s) => s.is_complete(),
        }
    }
}

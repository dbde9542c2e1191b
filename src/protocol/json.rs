//! Writing response bodies: one encoder, and the three states an optional OpenAI field can be in.

use serde::{Serialize, Serializer};

/// The JSON text of a protocol body.
///
/// # Panics
/// Only if serializing fails, which cannot happen for the protocol's own types: they are structs of strings,
/// numbers, options and vectors, with no map keys that could be non-strings and no fallible `Serialize` impl.
pub(crate) fn encode(body: &impl Serialize) -> String {
    serde_json::to_string(body).expect("protocol bodies serialize infallibly")
}

/// A field that is either left out, written as `null`, or written with a value. OpenAI uses all three: chunks
/// carry `"usage": null` until the last one when usage was asked for and no `usage` key otherwise; our `metrics`
/// is absent behind a closed gate and `null` when one timing would be ambiguous.
///
/// Use with `#[serde(skip_serializing_if = "Slot::is_absent")]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Slot<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<T> Slot<T> {
    pub fn is_absent(&self) -> bool {
        matches!(self, Slot::Absent)
    }
}

impl<T: Serialize> Serialize for Slot<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            // Only reached when a field forgot its `skip_serializing_if`: `null` is the least wrong output.
            Slot::Absent | Slot::Null => serializer.serialize_none(),
            Slot::Value(value) => value.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Body {
        #[serde(skip_serializing_if = "Slot::is_absent")]
        field: Slot<u32>,
    }

    #[test]
    fn a_slot_is_absent_null_or_a_value() {
        assert_eq!(encode(&Body { field: Slot::Absent }), "{}");
        assert_eq!(encode(&Body { field: Slot::Null }), r#"{"field":null}"#);
        assert_eq!(encode(&Body { field: Slot::Value(7) }), r#"{"field":7}"#);
    }
}

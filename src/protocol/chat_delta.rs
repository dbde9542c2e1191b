//! What one chat stream chunk's `delta` carries, read once for the writers of the APIs whose streams are written
//! from chat's chunks (Anthropic Messages' content blocks, Responses' output items): each reads the same pieces in
//! the same order and only says how its API frames them.

use serde_json::Value;

/// One piece of a chat delta, in the order a writer meets it: reasoning, then content, then tool calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum DeltaPiece<'a> {
    /// Reasoning text (`reasoning_content`, from the reasoning split), never empty.
    Reasoning(&'a str),
    /// Content text, never empty.
    Text(&'a str),
    /// A tool call's first delta: its id and function name (its arguments may follow in the same delta).
    CallStart { id: &'a str, name: &'a str },
    /// A piece of the current call's arguments (JSON text), never empty.
    CallArguments(&'a str),
}

/// The pieces of `delta` (a chat chunk's `choices[i].delta`).
pub(crate) fn delta_pieces(delta: &Value) -> Vec<DeltaPiece<'_>> {
    let mut pieces = Vec::new();
    let text = |key: &str| delta[key].as_str().filter(|t| !t.is_empty());
    if let Some(reasoning) = text("reasoning_content") {
        pieces.push(DeltaPiece::Reasoning(reasoning));
    }
    if let Some(content) = text("content") {
        pieces.push(DeltaPiece::Text(content));
    }
    for call in delta["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let function = &call["function"];
        if let Some(id) = call["id"].as_str() {
            pieces.push(DeltaPiece::CallStart { id, name: function["name"].as_str().unwrap_or_default() });
        }
        if let Some(arguments) = function["arguments"].as_str().filter(|a| !a.is_empty()) {
            pieces.push(DeltaPiece::CallArguments(arguments));
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delta_reads_as_its_pieces_in_order() {
        let delta = json!({
            "role": "assistant", "reasoning_content": "think", "content": "say",
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}},
                {"index": 0, "function": {"arguments": ": 1}"}}
            ]
        });
        assert_eq!(
            delta_pieces(&delta),
            [
                DeltaPiece::Reasoning("think"),
                DeltaPiece::Text("say"),
                DeltaPiece::CallStart { id: "call_1", name: "f" },
                DeltaPiece::CallArguments("{\"a\""),
                DeltaPiece::CallArguments(": 1}"),
            ]
        );
        // Empty texts and absent fields are no pieces.
        assert_eq!(delta_pieces(&json!({"role": "assistant", "content": "", "reasoning_content": null})), []);
        assert_eq!(delta_pieces(&json!({"tool_calls": [{"function": {"arguments": ""}}]})), []);
    }
}

//! An Anthropic Messages request's answers: the whole `message` object, or the stream of events the official
//! `anthropic` client's `messages.stream` accumulates, each event's `type` first (its SSE event name):
//! `message_start` (the message with no content yet), per content block `content_block_start`, its
//! `content_block_delta`s (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`, then
//! `message_delta` (the stop reason and the final usage) and `message_stop`. An engine failure mid-stream is one
//! `error` event, which ends the stream (as Anthropic's do).

use std::collections::VecDeque;

use serde_json::{json, Value};

use super::super::chat_delta::{delta_pieces, DeltaPiece};
use super::super::translate::OutputWriter;
use super::output::{
    content_of_message, copy_gated, error_object, message_object, stop_reason, thinking_block, usage, Head,
};
use crate::engine::RequestHandle;

/// A content block's kind, as the stream opens it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

#[derive(Debug)]
pub(super) struct MessagesWriter {
    head: Head,
    started: bool,
    /// The blocks opened so far; the last is open until another starts or the stream ends.
    blocks: Vec<Block>,
    open: bool,
    finish_reason: Option<String>,
    /// The chat stream's last chunk (`usage`, and the gated `metrics`, `timings`).
    tail: Value,
    /// An `error` event ended the stream.
    failed: bool,
}

impl MessagesWriter {
    pub fn new(head: Head) -> Self {
        MessagesWriter {
            head,
            started: false,
            blocks: Vec::new(),
            open: false,
            finish_reason: None,
            tail: Value::Null,
            failed: false,
        }
    }

    fn event(out: &mut VecDeque<String>, event: Value) {
        out.push_back(event.to_string());
    }

    /// `message_start`: the message with no content, and the prompt's usage as far as it is known.
    fn start(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>) {
        if self.started {
            return;
        }
        self.started = true;
        let prompt = json!({"prompt_tokens": handle.prompt_tokens(),
            "prompt_tokens_details": {"cached_tokens": handle.cached_prompt_tokens()}});
        let message = message_object(&self.head, Vec::new(), (Value::Null, Value::Null), usage(&prompt));
        Self::event(out, json!({"type": "message_start", "message": message}));
    }

    /// Opens a block of `kind` with `content_block` (closing the open one), unless one of that kind is open and
    /// `kind` continues it; returns its index.
    fn open_block(&mut self, out: &mut VecDeque<String>, kind: Block, content_block: impl FnOnce() -> Value) -> usize {
        if self.open && kind != Block::ToolUse && self.blocks.last() == Some(&kind) {
            return self.blocks.len() - 1;
        }
        self.close_block(out);
        let index = self.blocks.len();
        Self::event(out, json!({"type": "content_block_start", "index": index, "content_block": content_block()}));
        self.blocks.push(kind);
        self.open = true;
        index
    }

    fn close_block(&mut self, out: &mut VecDeque<String>) {
        if self.open {
            self.open = false;
            Self::event(out, json!({"type": "content_block_stop", "index": self.blocks.len() - 1}));
        }
    }

    fn delta(&mut self, out: &mut VecDeque<String>, delta: &Value) {
        for piece in delta_pieces(delta) {
            match piece {
                DeltaPiece::Reasoning(text) => {
                    let index = self.open_block(out, Block::Thinking, || thinking_block(""));
                    if !self.head.omit_thinking {
                        let delta = json!({"type": "thinking_delta", "thinking": text});
                        Self::event(out, json!({"type": "content_block_delta", "index": index, "delta": delta}));
                    }
                }
                DeltaPiece::Text(text) => {
                    let index = self.open_block(out, Block::Text, || json!({"type": "text", "text": ""}));
                    let delta = json!({"type": "text_delta", "text": text});
                    Self::event(out, json!({"type": "content_block_delta", "index": index, "delta": delta}));
                }
                DeltaPiece::CallStart { id, name } => {
                    let block = || json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                    self.open_block(out, Block::ToolUse, block);
                }
                DeltaPiece::CallArguments(piece) => {
                    if self.open && self.blocks.last() == Some(&Block::ToolUse) {
                        let delta = json!({"type": "input_json_delta", "partial_json": piece});
                        let index = self.blocks.len() - 1;
                        Self::event(out, json!({"type": "content_block_delta", "index": index, "delta": delta}));
                    }
                }
            }
        }
    }
}

/// The stop string that ended the request's choice, when one did (the engine's; chat has no word for it).
fn stop_string(handle: &RequestHandle) -> Option<String> {
    handle.choices().into_iter().next().and_then(|c| c.stop_string)
}

impl OutputWriter for MessagesWriter {
    fn response(&self, chat: Value, handle: &RequestHandle) -> String {
        if let Some(error) = chat.get("error").filter(|e| !e.is_null()) {
            return error_object(error["message"].as_str().unwrap_or("the engine failed the request")).to_string();
        }
        let choice = &chat["choices"][0];
        let content = content_of_message(&self.head, &choice["message"]);
        let output_tokens = chat["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        let stop = stop_string(handle);
        let ending = stop_reason(&self.head, choice["finish_reason"].as_str(), stop.as_deref(), output_tokens);
        let mut message = message_object(&self.head, content, ending, usage(&chat["usage"]));
        copy_gated(&chat, &mut message);
        Value::Object(message).to_string()
    }

    fn chunk(&mut self, chunk: Value, handle: &RequestHandle, out: &mut VecDeque<String>) {
        if self.failed {
            return;
        }
        self.start(handle, out);
        if let Some(error) = chunk.get("error") {
            self.failed = true;
            let message = error["message"].as_str().unwrap_or("the engine failed the request");
            return Self::event(out, error_object(message));
        }
        if let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) {
            self.delta(out, &choice["delta"]);
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        if chunk.get("usage").is_some_and(|u| !u.is_null()) {
            self.tail = chunk;
        }
    }

    fn end(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>) {
        if self.failed {
            return;
        }
        self.start(handle, out);
        self.close_block(out);
        let chat_usage = &self.tail["usage"];
        let output_tokens = chat_usage["completion_tokens"].as_u64().unwrap_or(0);
        let stop = stop_string(handle);
        let (stop_reason, stop_sequence) =
            stop_reason(&self.head, self.finish_reason.as_deref(), stop.as_deref(), output_tokens);
        // Usage counts here are totals, which the client puts in place of message_start's.
        let mut delta = json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
            "stop_sequence": stop_sequence}, "usage": usage(chat_usage)});
        if let Value::Object(o) = &mut delta {
            copy_gated(&self.tail, o);
        }
        Self::event(out, delta);
        Self::event(out, json!({"type": "message_stop"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_support::FakeRequest;

    fn writer() -> MessagesWriter {
        MessagesWriter::new(Head { id: "msg_1".into(), model: "m".into(), max_tokens: Some(16), omit_thinking: false })
    }

    /// The events `chunks` (chat stream chunks' `choices[0]`, then a usage chunk) become.
    fn events(writer: &mut MessagesWriter, handle: &RequestHandle, choices: &[Value]) -> Vec<Value> {
        let mut out = VecDeque::new();
        for choice in choices {
            writer.chunk(json!({"id": "c", "choices": [choice], "usage": null}), handle, &mut out);
        }
        let usage = json!({"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": 0}});
        writer.chunk(json!({"id": "c", "choices": [], "usage": usage}), handle, &mut out);
        writer.end(handle, &mut out);
        out.iter().map(|e| serde_json::from_str(e).unwrap()).collect()
    }

    fn kinds(events: &[Value]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e["delta"]["type"].as_str() {
                Some(delta) if e["type"] == "content_block_delta" => delta.to_owned(),
                _ => e["type"].as_str().unwrap().to_owned(),
            })
            .collect()
    }

    #[test]
    fn thinking_text_and_a_call_are_three_blocks_in_order() {
        let request = FakeRequest::new(1, 7);
        let call = json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}});
        let events = events(
            &mut writer(),
            &request.handle,
            &[
                json!({"delta": {"role": "assistant", "content": ""}}),
                json!({"delta": {"reasoning_content": "hm"}}),
                json!({"delta": {"reasoning_content": "m"}}),
                json!({"delta": {"content": "Hi"}}),
                json!({"delta": {"tool_calls": [call]}}),
                json!({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}}),
                json!({"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}),
                json!({"delta": {}, "finish_reason": "tool_calls"}),
            ],
        );
        assert_eq!(
            kinds(&events),
            [
                "message_start",
                "content_block_start",
                "thinking_delta",
                "thinking_delta",
                "content_block_stop",
                "content_block_start",
                "text_delta",
                "content_block_stop",
                "content_block_start",
                "input_json_delta",
                "input_json_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for event in &events {
            assert_eq!(event.as_object().unwrap().keys().next().map(String::as_str), Some("type"));
        }
        let start = &events[0]["message"];
        assert_eq!((&start["content"], &start["stop_reason"]), (&json!([]), &Value::Null));
        assert_eq!(start["usage"]["input_tokens"], 7);
        assert_eq!(events[8]["content_block"], json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {}}));
        assert_eq!(events[9]["index"], 2);
        let end = &events[12];
        assert_eq!(end["delta"], json!({"stop_reason": "tool_use", "stop_sequence": null}));
        assert_eq!(end["usage"]["output_tokens"], 5);
    }

    #[test]
    fn a_stop_string_is_the_stop_sequence() {
        let request = FakeRequest::new(1, 7);
        request.token(0, "Hi", 2.0);
        request.shared.set_stop_string(0, "END".to_owned());
        request.finish(0, crate::engine::FinishReason::Stop);
        let events = events(
            &mut writer(),
            &request.handle,
            &[json!({"delta": {"content": "Hi"}}), json!({"delta": {}, "finish_reason": "stop"})],
        );
        let end = events.iter().find(|e| e["type"] == "message_delta").unwrap();
        assert_eq!(end["delta"], json!({"stop_reason": "stop_sequence", "stop_sequence": "END"}));
        let whole: Value = serde_json::from_str(&writer().response(
            json!({"choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 1}}),
            &request.handle,
        ))
        .unwrap();
        assert_eq!((&whole["stop_reason"], &whole["stop_sequence"]), (&json!("stop_sequence"), &json!("END")));
        assert_eq!(whole["content"], json!([{"type": "text", "text": "Hi"}]));
    }

    #[test]
    fn an_engine_failure_is_one_error_event_that_ends_the_stream() {
        let request = FakeRequest::new(1, 7);
        let mut w = writer();
        let mut out = VecDeque::new();
        w.chunk(json!({"choices": [{"delta": {"content": "Hi"}}]}), &request.handle, &mut out);
        w.chunk(json!({"error": {"message": "boom", "type": "server_error"}}), &request.handle, &mut out);
        w.end(&request.handle, &mut out);
        let events: Vec<Value> = out.iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert_eq!(kinds(&events), ["message_start", "content_block_start", "text_delta", "error"]);
        assert_eq!(events[3], json!({"type": "error", "error": {"type": "api_error", "message": "boom"}}));
    }
}

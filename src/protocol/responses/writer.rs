//! A Responses request's answers: the whole `response` object, or the stream of events the official `openai`
//! client's `responses.stream` reads, each event's `type` first (its SSE event name):
//! `response.created`, `response.in_progress`, then per output item `response.output_item.added`, its deltas
//! (`response.reasoning_text.delta`, `response.output_text.delta` within a content part,
//! `response.function_call_arguments.delta`), their `.done` events and `response.output_item.done`, and last
//! `response.completed` (or `response.incomplete`, `response.failed`) with the whole response.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::super::chat_delta::{delta_pieces, DeltaPiece};
use super::super::translate::OutputWriter;
use super::output::{assistant_message, items_of_message, new_id, response_object, text_part, Ending, Head, Item};
use super::store::ResponseStore;
use crate::engine::RequestHandle;

#[derive(Debug)]
pub(super) struct ResponsesWriter {
    head: Head,
    /// With `store`: where the finished response goes, and the conversation it continues.
    store: Option<(Arc<ResponseStore>, Vec<Value>)>,
    /// The stream's items so far; the last is open until another starts or the stream ends.
    items: Vec<Item>,
    open: bool,
    sequence: u64,
    started: bool,
    finish_reason: Option<String>,
    /// The chat stream's last chunk (`usage`, and the gated `metrics`, `timings`).
    tail: Value,
    failed: Option<String>,
}

impl ResponsesWriter {
    pub fn new(head: Head, store: Option<(Arc<ResponseStore>, Vec<Value>)>) -> Self {
        ResponsesWriter {
            head,
            store,
            items: Vec::new(),
            open: false,
            sequence: 0,
            started: false,
            finish_reason: None,
            tail: Value::Null,
            failed: None,
        }
    }

    /// One event: `type` first, then `sequence_number`, then `fields`.
    fn event(&mut self, out: &mut VecDeque<String>, kind: &str, fields: Value) {
        let mut o = Map::new();
        o.insert("type".into(), json!(kind));
        o.insert("sequence_number".into(), json!(self.sequence));
        if let Value::Object(fields) = fields {
            o.extend(fields);
        }
        self.sequence += 1;
        out.push_back(Value::Object(o).to_string());
    }

    fn start(&mut self, out: &mut VecDeque<String>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = response_object(&self.head, &[], None, &Value::Null);
        self.event(out, "response.created", json!({"response": response}));
        self.event(out, "response.in_progress", json!({"response": response}));
    }

    /// Makes the open item one like `wanted` (closing another), and returns its index.
    fn open_item(&mut self, out: &mut VecDeque<String>, wanted: Item) -> usize {
        let same_kind = self.open
            && matches!(
                (self.items.last(), &wanted),
                (Some(Item::Reasoning { .. }), Item::Reasoning { .. })
                    | (Some(Item::Message { .. }), Item::Message { .. })
            );
        if same_kind {
            return self.items.len() - 1;
        }
        self.close_item(out);
        let index = self.items.len();
        self.event(out, "response.output_item.added", json!({"output_index": index, "item": wanted.json(false)}));
        let id = wanted.id().to_owned();
        match &wanted {
            Item::Reasoning { .. } => {
                let part = json!({"type": "reasoning_text", "text": ""});
                self.event(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
            }
            Item::Message { .. } => {
                let part = text_part("");
                self.event(
                    out,
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
            }
            Item::Call { .. } => {}
        }
        self.items.push(wanted);
        self.open = true;
        index
    }

    fn close_item(&mut self, out: &mut VecDeque<String>) {
        if !self.open {
            return;
        }
        self.open = false;
        let index = self.items.len() - 1;
        let item = self.items[index].clone();
        match &item {
            Item::Reasoning { id, text } => {
                self.event(
                    out,
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                );
                let part = json!({"type": "reasoning_text", "text": text});
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                );
            }
            Item::Message { id, text } => {
                self.event(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.event(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part(text)}),
                );
            }
            Item::Call { id, name, arguments, .. } => {
                self.event(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                );
            }
        }
        self.event(out, "response.output_item.done", json!({"output_index": index, "item": item.json(true)}));
    }

    fn salt(&self) -> u64 {
        self.sequence.wrapping_add(self.items.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.head.created_at
    }

    fn delta(&mut self, out: &mut VecDeque<String>, delta: &Value) {
        for piece in delta_pieces(delta) {
            match piece {
                DeltaPiece::Reasoning(text) => {
                    let item = Item::Reasoning { id: new_id("rs_", self.salt()), text: String::new() };
                    let index = self.open_item(out, item);
                    if let Item::Reasoning { text: all, id } = &mut self.items[index] {
                        all.push_str(text);
                        let id = id.clone();
                        self.event(
                            out,
                            "response.reasoning_text.delta",
                            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
                        );
                    }
                }
                DeltaPiece::Text(text) => {
                    let item = Item::Message { id: new_id("msg_", self.salt()), text: String::new() };
                    let index = self.open_item(out, item);
                    if let Item::Message { text: all, id } = &mut self.items[index] {
                        all.push_str(text);
                        let id = id.clone();
                        let fields = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []});
                        self.event(out, "response.output_text.delta", fields);
                    }
                }
                DeltaPiece::CallStart { id: call_id, name } => {
                    let item = Item::Call {
                        id: new_id("fc_", self.salt()),
                        call_id: call_id.to_owned(),
                        name: name.to_owned(),
                        arguments: String::new(),
                    };
                    self.close_item(out);
                    self.open_item(out, item);
                }
                DeltaPiece::CallArguments(piece) => {
                    // The pieces belong to the call opened last (a delta without an id continues it).
                    let index = self.items.len().saturating_sub(1);
                    if let Some(Item::Call { arguments, id, .. }) = self.items.get_mut(index) {
                        arguments.push_str(piece);
                        let id = id.clone();
                        self.event(
                            out,
                            "response.function_call_arguments.delta",
                            json!({"item_id": id, "output_index": index, "delta": piece}),
                        );
                    }
                }
            }
        }
    }

    /// Keeps the finished response for `previous_response_id`, with `store`.
    fn keep(&self, items: &[Item], ending: &Ending) {
        if let Some((store, conversation)) = &self.store {
            if matches!(ending, Ending::Completed | Ending::Incomplete(_)) {
                let mut conversation = conversation.clone();
                conversation.push(assistant_message(items));
                store.insert(&self.head.id, conversation);
            }
        }
    }
}

impl OutputWriter for ResponsesWriter {
    fn response(&self, chat: Value, _handle: &RequestHandle) -> String {
        let choice = &chat["choices"][0];
        let items = items_of_message(&choice["message"], self.head.created_at);
        let ending = Ending::of(choice["finish_reason"].as_str(), chat.get("error"));
        self.keep(&items, &ending);
        response_object(&self.head, &items, Some(&ending), &chat).to_string()
    }

    fn chunk(&mut self, chunk: Value, _handle: &RequestHandle, out: &mut VecDeque<String>) {
        self.start(out);
        if let Some(error) = chunk.get("error") {
            self.failed = Some(error["message"].as_str().unwrap_or("the engine failed the request").to_owned());
            return;
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

    fn end(&mut self, _handle: &RequestHandle, out: &mut VecDeque<String>) {
        self.start(out);
        self.close_item(out);
        let ending = match &self.failed {
            Some(message) => Ending::Failed(message.clone()),
            None => Ending::of(self.finish_reason.as_deref(), None),
        };
        self.keep(&self.items, &ending);
        let response = response_object(&self.head, &self.items, Some(&ending), &self.tail);
        let kind = match ending {
            Ending::Completed => "response.completed",
            Ending::Incomplete(_) | Ending::Cancelled => "response.incomplete",
            Ending::Failed(_) => "response.failed",
        };
        self.event(out, kind, json!({"response": response}));
    }
}

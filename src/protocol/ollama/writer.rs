//! An Ollama request's answers, from the chat or completion ones: the whole object (`message` or `response`,
//! `done: true`, `done_reason`, the durations and counts), or the NDJSON stream: an object per piece of text or
//! thinking (`done: false`), a tool call whole once its arguments are (Ollama sends calls whole), and last the
//! `done: true` object with the durations. Ollama always reports its durations; they come from ember's own
//! per-request timing (`docs/per_request_metrics.md`, "Ollama's durations"), not behind chat's metrics gate.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::super::translate::OutputWriter;
use crate::engine::RequestHandle;
use crate::model::chat_template::strftime;

/// Which endpoint's objects to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// `/api/chat`: the text in `message.content`, thinking in `message.thinking`, calls in `message.tool_calls`.
    Chat,
    /// `/api/generate`: the text in `response`, thinking in `thinking`.
    Generate,
}

#[derive(Debug)]
pub(super) struct OllamaWriter {
    shape: Shape,
    model: String,
    /// A completion's alternatives per token (its `top_logprobs` map also holds the sampled token).
    top_logprobs: usize,
    /// The calls of the stream so far, each whole only once the choice has finished.
    calls: Vec<Call>,
    /// The calls already sent.
    sent_calls: usize,
    done_reason: Option<String>,
    /// The engine failed the request: its `{"error"}` object ended the stream.
    failed: bool,
}

/// A tool call as it streams in.
#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl OllamaWriter {
    pub fn new(shape: Shape, model: String, top_logprobs: usize) -> Self {
        OllamaWriter { shape, model, top_logprobs, calls: Vec::new(), sent_calls: 0, done_reason: None, failed: false }
    }

    /// An object: `model`, `created_at`, then the text in the endpoint's place.
    fn object(&self, text: &str, thinking: &str, calls: Vec<Value>) -> Map<String, Value> {
        let mut o = Map::new();
        o.insert("model".into(), json!(self.model));
        o.insert("created_at".into(), json!(created_at(now())));
        match self.shape {
            Shape::Chat => {
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                message.insert("content".into(), json!(text));
                if !thinking.is_empty() {
                    message.insert("thinking".into(), json!(thinking));
                }
                if !calls.is_empty() {
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                o.insert("message".into(), Value::Object(message));
            }
            Shape::Generate => {
                o.insert("response".into(), json!(text));
                if !thinking.is_empty() {
                    o.insert("thinking".into(), json!(thinking));
                }
            }
        }
        o
    }

    /// The last object's ending: `done`, `done_reason` and the durations and counts.
    fn finish(&self, o: &mut Map<String, Value>, finish_reason: Option<&str>, handle: &RequestHandle) {
        o.insert("done".into(), json!(true));
        o.insert("done_reason".into(), json!(done_reason(finish_reason)));
        for (name, value) in durations(handle) {
            o.insert(name.into(), json!(value));
        }
    }

    /// The calls complete now (the choice has finished), in one object.
    fn flush_calls(&mut self, out: &mut VecDeque<String>) {
        if self.sent_calls == self.calls.len() {
            return;
        }
        let calls = self.calls[self.sent_calls..]
            .iter()
            .enumerate()
            .map(|(i, c)| ollama_call(self.sent_calls + i, &c.id, &c.name, &c.arguments))
            .collect();
        self.sent_calls = self.calls.len();
        let mut o = self.object("", "", calls);
        o.insert("done".into(), json!(false));
        out.push_back(Value::Object(o).to_string());
    }
}

impl OutputWriter for OllamaWriter {
    fn response(&self, openai: Value, handle: &RequestHandle) -> String {
        if let Some(error) = openai.get("error") {
            return error_object(error);
        }
        let choice = &openai["choices"][0];
        let message = &choice["message"];
        let text = message["content"].as_str().or(choice["text"].as_str()).unwrap_or_default();
        let thinking = message["reasoning_content"].as_str().unwrap_or_default();
        let calls = message["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
        let calls = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let function = &c["function"];
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                ollama_call(i, &text(&c["id"]), &text(&function["name"]), &text(&function["arguments"]))
            })
            .collect();
        let mut o = self.object(text, thinking, calls);
        self.finish(&mut o, choice["finish_reason"].as_str(), handle);
        if let Some(logprobs) = logprobs(&choice["logprobs"], self.top_logprobs) {
            o.insert("logprobs".into(), logprobs);
        }
        Value::Object(o).to_string()
    }

    fn chunk(&mut self, openai: Value, _handle: &RequestHandle, out: &mut VecDeque<String>) {
        if let Some(error) = openai.get("error") {
            self.failed = true;
            out.push_back(error_object(error));
            return;
        }
        // The usage chunk (empty choices) says nothing Ollama's objects do not.
        let Some(choice) = openai["choices"].as_array().and_then(|c| c.first()) else { return };
        let delta = &choice["delta"];
        let text = delta["content"].as_str().or(choice["text"].as_str()).unwrap_or_default();
        let thinking = delta["reasoning_content"].as_str().unwrap_or_default();
        let logprobs =
            logprobs(&choice["logprobs"], self.top_logprobs).filter(|l| l.as_array().is_some_and(|a| !a.is_empty()));
        if !text.is_empty() || !thinking.is_empty() || logprobs.is_some() {
            let mut o = self.object(text, thinking, Vec::new());
            o.insert("done".into(), json!(false));
            if let Some(logprobs) = logprobs {
                o.insert("logprobs".into(), logprobs);
            }
            out.push_back(Value::Object(o).to_string());
        }
        for call in delta["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
            // A call's first delta has its id and name; the next ones pieces of its arguments.
            if let Some(id) = call["id"].as_str() {
                let name = call["function"]["name"].as_str().unwrap_or_default().to_owned();
                self.calls.push(Call { id: id.to_owned(), name, arguments: String::new() });
            }
            if let (Some(last), Some(piece)) = (self.calls.last_mut(), call["function"]["arguments"].as_str()) {
                last.arguments.push_str(piece);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.done_reason = Some(reason.to_owned());
            self.flush_calls(out);
        }
    }

    fn end(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>) {
        if self.failed {
            return;
        }
        self.flush_calls(out);
        let mut o = self.object("", "", Vec::new());
        self.finish(&mut o, self.done_reason.as_deref(), handle);
        out.push_back(Value::Object(o).to_string());
    }
}

/// Ollama's `done_reason` for chat's `finish_reason`: `"stop"` (tool calls too, as Ollama says), `"length"`;
/// ember's own endings (`"deadline"`, `"cancelled"`) keep their names.
fn done_reason(finish_reason: Option<&str>) -> &str {
    match finish_reason {
        None | Some("stop" | "tool_calls") => "stop",
        Some(other) => other,
    }
}

/// Ollama's error object, `{"error": "message"}`, for chat's error.
fn error_object(error: &Value) -> String {
    let message = error["message"].as_str().unwrap_or("the engine failed the request");
    json!({"error": message}).to_string()
}

/// An Ollama tool call: the function's `index` among the turn's calls, its `name`, and its `arguments` as the
/// object the JSON text encodes (the text itself if it is not one); `id` is ember's call id, which a `tool`
/// message may send back as `tool_call_id`.
fn ollama_call(index: usize, id: &str, name: &str, arguments: &str) -> Value {
    let arguments = serde_json::from_str::<Value>(arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::String(arguments.to_owned()));
    json!({"id": id, "function": {"index": index, "name": name, "arguments": arguments}})
}

/// Ollama's `logprobs`, `[{"token", "logprob", "bytes", "top_logprobs": [...]}]`, from chat's `logprobs.content`
/// (the same entries) or a completion's parallel arrays (its alternatives ordered most likely first, `top` of
/// them); `None` when the choice has none.
fn logprobs(openai: &Value, top: usize) -> Option<Value> {
    if let Some(content) = openai["content"].as_array() {
        return Some(Value::Array(content.clone()));
    }
    let tokens = openai["tokens"].as_array()?;
    let entries = tokens.iter().enumerate().map(|(i, token)| {
        let mut alternatives: Vec<(&String, f64)> = openai["top_logprobs"][i]
            .as_object()
            .map(|m| m.iter().filter_map(|(t, lp)| Some((t, lp.as_f64()?))).collect())
            .unwrap_or_default();
        alternatives.sort_by(|a, b| b.1.total_cmp(&a.1));
        alternatives.truncate(top);
        let alternatives: Vec<Value> =
            alternatives.into_iter().map(|(t, lp)| json!({"token": t, "logprob": lp})).collect();
        json!({"token": token, "logprob": openai["token_logprobs"][i], "top_logprobs": alternatives})
    });
    Some(Value::Array(entries.collect()))
}

/// The durations (nanoseconds) and counts of Ollama's last object, from the request's own timing (choice 0; an
/// Ollama request has one): `total_duration` from arrival to the end, queueing included; `load_duration` 0 (the
/// model was loaded when the engine started); `prompt_eval_duration` from first scheduling to the first token
/// (`time_to_first_token_ms`, which leaves the queue out); `eval_duration` from the first token to the last
/// (`generation_time_ms`). `total_duration` is at least the two others together. Without stats (the engine's
/// `disable_log_stats`) every duration is 0.
fn durations(handle: &RequestHandle) -> [(&'static str, u64); 6] {
    let ns = |ms: Option<f64>| ms.map_or(0, |ms| (ms * 1e6).round().max(0.0) as u64);
    let metrics = handle.timing_metrics(0);
    let prompt_eval = ns(metrics.time_to_first_token_ms);
    let eval = ns(metrics.generation_time_ms);
    // Rounding each apart could leave the total a nanosecond short of their sum.
    let total = ns(handle.extended_metrics(0).e2e_latency_ms).max(prompt_eval + eval);
    let eval_count = handle.choices().first().map_or(0, |c| c.completion_tokens);
    [
        ("total_duration", total),
        ("load_duration", 0),
        ("prompt_eval_count", u64::from(handle.prompt_tokens())),
        ("prompt_eval_duration", prompt_eval),
        ("eval_count", u64::from(eval_count)),
        ("eval_duration", eval),
    ]
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// RFC 3339 in UTC with nanoseconds, trailing zeros dropped, as Go writes Ollama's `time.Time`
/// (`2024-06-04T14:38:31.83753Z`).
pub(super) fn created_at(since_epoch: Duration) -> String {
    let seconds = strftime("%Y-%m-%dT%H:%M:%S", since_epoch.as_secs() as i64).unwrap_or_default();
    match since_epoch.subsec_nanos() {
        0 => format!("{seconds}Z"),
        nanos => format!("{seconds}.{}Z", format!("{nanos:09}").trim_end_matches('0')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FinishReason;
    use crate::protocol::test_support::FakeRequest;

    /// The objects `writer` makes of these chat chunks, then of the stream's end, parsed.
    fn stream(writer: &mut OllamaWriter, handle: &RequestHandle, chunks: &[Value]) -> Vec<Value> {
        let mut out = VecDeque::new();
        for chunk in chunks {
            writer.chunk(chunk.clone(), handle, &mut out);
        }
        writer.end(handle, &mut out);
        out.iter().map(|o| serde_json::from_str(o).unwrap()).collect()
    }

    fn delta(delta: Value, finish_reason: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
    }

    #[test]
    fn a_stream_sends_thinking_and_text_as_they_come_and_a_call_whole() {
        // Queued at 1.0 s, scheduled at 1.5 s, tokens at 2.0 and 2.5 s.
        let fake = FakeRequest::new(1, 7);
        fake.token(0, "a", 2.0);
        fake.token(0, "b", 2.5);
        fake.finish(0, FinishReason::Stop);
        let mut writer = OllamaWriter::new(Shape::Chat, "m".into(), 0);
        let objects = stream(
            &mut writer,
            &fake.handle,
            &[
                delta(json!({"role": "assistant", "content": ""}), Value::Null),
                delta(json!({"reasoning_content": "hmm"}), Value::Null),
                delta(json!({"content": "Let me check."}), Value::Null),
                delta(
                    json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "f", "arguments": ""}}]}),
                    Value::Null,
                ),
                delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\": "}}]}), Value::Null),
                delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), Value::Null),
                delta(json!({}), json!("tool_calls")),
                json!({"choices": [], "usage": {"prompt_tokens": 7}}),
            ],
        );
        let messages: Vec<&Value> = objects.iter().map(|o| &o["message"]).collect();
        assert_eq!(objects.len(), 4, "{objects:?}");
        assert_eq!(*messages[0], json!({"role": "assistant", "content": "", "thinking": "hmm"}));
        assert_eq!(*messages[1], json!({"role": "assistant", "content": "Let me check."}));
        assert_eq!(
            messages[2]["tool_calls"],
            json!([{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"x": 1}}}])
        );
        assert!(objects[..3].iter().all(|o| o["done"] == json!(false) && o["model"] == json!("m")));
        let last = &objects[3];
        assert_eq!(*messages[3], json!({"role": "assistant", "content": ""}));
        assert_eq!((&last["done"], &last["done_reason"]), (&json!(true), &json!("stop")));
        assert_eq!((&last["prompt_eval_count"], &last["eval_count"]), (&json!(7), &json!(2)));
        assert_eq!((&last["prompt_eval_duration"], &last["eval_duration"]), (&json!(500_000_000), &json!(500_000_000)));
        assert_eq!(last["load_duration"], json!(0));
        assert_eq!(last["total_duration"], json!(1_000_000_000), "at least the two others together");
    }

    #[test]
    fn an_engine_failure_ends_the_stream_with_ollamas_error_object() {
        let fake = FakeRequest::new(1, 3);
        let mut writer = OllamaWriter::new(Shape::Generate, "m".into(), 0);
        let objects = stream(
            &mut writer,
            &fake.handle,
            &[
                json!({"choices": [{"index": 0, "text": "par", "finish_reason": null}]}),
                json!({"error": {"message": "boom", "type": "server_error"}}),
            ],
        );
        assert_eq!(objects.len(), 2);
        assert_eq!((&objects[0]["response"], &objects[0]["done"]), (&json!("par"), &json!(false)));
        assert_eq!(objects[1], json!({"error": "boom"}));
    }

    #[test]
    fn created_at_is_rfc3339_with_gos_nanoseconds() {
        assert_eq!(created_at(Duration::new(1_717_511_911, 837_530_000)), "2024-06-04T14:38:31.83753Z");
        assert_eq!(created_at(Duration::new(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(created_at(Duration::new(86_399, 1)), "1970-01-01T23:59:59.000000001Z");
    }

    #[test]
    fn calls_carry_object_arguments_and_their_index() {
        assert_eq!(
            ollama_call(1, "call_1", "f", "{\"x\": 1}"),
            json!({"id": "call_1", "function": {"index": 1, "name": "f", "arguments": {"x": 1}}})
        );
        assert_eq!(ollama_call(0, "c", "f", "not json")["function"]["arguments"], json!("not json"));
    }

    #[test]
    fn done_reasons_are_ollamas() {
        assert_eq!(done_reason(Some("tool_calls")), "stop");
        assert_eq!(done_reason(Some("length")), "length");
        assert_eq!(done_reason(Some("deadline")), "deadline");
    }

    #[test]
    fn completion_logprobs_become_entries_with_their_best_alternatives() {
        let openai = json!({"tokens": ["a", "b"], "token_logprobs": [-0.5, -1.0],
            "top_logprobs": [{"a": -0.5, "c": -0.1, "d": -2.0}, {"b": -1.0}], "text_offset": [0, 1]});
        assert_eq!(
            logprobs(&openai, 2).unwrap(),
            json!([{"token": "a", "logprob": -0.5, "top_logprobs": [{"token": "c", "logprob": -0.1},
                {"token": "a", "logprob": -0.5}]},
                {"token": "b", "logprob": -1.0, "top_logprobs": [{"token": "b", "logprob": -1.0}]}])
        );
        assert_eq!(logprobs(&Value::Null, 0), None);
    }
}

//! A `/completion` request's answers in llama-server's shape (`to_json_non_oaicompat` in its
//! `server-task.cpp`): the whole object, or a stream of `{content, tokens, stop: false, ...}` objects ending with
//! one `stop: true` object that sums the request up (its `content` empty: the text came in the partials).
//!
//! The text, token ids and log probabilities are read from the engine's record of the request
//! (`RequestHandle::output_after`), which has the ids the OpenAI chunks leave out; the OpenAI chunks say when to
//! read, and bring the usage, `timings` and failures.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::super::metrics_gate::TimingsJson;
use super::probs::completion_probabilities;
use crate::engine::{ChoiceOutput, FinishReason, OutputMark, RequestHandle};
use crate::model::Model;

/// What every answer of one request repeats, and what it asked the answers to carry.
#[derive(Debug)]
pub(super) struct Head {
    pub model: String,
    pub generation_settings: Value,
    /// The prompt's tokens read back, control tokens written out (llama-server's `prompt`).
    pub prompt: String,
    pub prompt_tokens: usize,
    pub n_predict: Option<usize>,
    pub return_tokens: bool,
    pub n_probs: bool,
    /// `timings_per_token` with the metrics gate open: every partial carries the timings so far.
    pub timings_per_token: bool,
    pub response_fields: Vec<String>,
}

pub(super) struct LlamaWriter {
    head: Head,
    model: Arc<Model>,
    /// How much of the choice's output the stream has written.
    mark: OutputMark,
    has_new_line: bool,
    /// The OpenAI stream's usage chunk (with `timings` behind the metrics gate).
    tail: Value,
    failed: Option<String>,
}

impl std::fmt::Debug for LlamaWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaWriter").field("head", &self.head).field("mark", &self.mark).finish()
    }
}

impl LlamaWriter {
    pub fn new(head: Head, model: Arc<Model>) -> Self {
        LlamaWriter { head, model, mark: OutputMark::default(), has_new_line: false, tail: Value::Null, failed: None }
    }

    /// A partial object of the stream: the output since the last one, if there is any.
    fn partial(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>) {
        let (new, mark) = handle.output_after(0, self.mark);
        self.mark = mark;
        if new.text.is_empty() && new.token_ids.is_empty() {
            return;
        }
        self.has_new_line |= new.text.contains('\n');
        let mut o = Map::new();
        o.insert("index".into(), json!(0));
        o.insert("content".into(), json!(new.text));
        o.insert("tokens".into(), json!(new.token_ids));
        o.insert("stop".into(), json!(false));
        o.insert("id_slot".into(), json!(0));
        o.insert("tokens_predicted".into(), json!(new.completion_tokens));
        o.insert("tokens_evaluated".into(), json!(self.head.prompt_tokens));
        if self.head.timings_per_token {
            o.insert("timings".into(), timings_so_far(handle));
        }
        if self.head.n_probs && !new.logprobs.is_empty() {
            let probs = completion_probabilities(&self.model.tokenizer, &new.logprobs);
            o.insert("completion_probabilities".into(), Value::Array(probs));
        }
        out.push_back(Value::Object(o).to_string());
    }

    /// The final object. `choice` is the whole output (a whole response) or the stream's last part (whose text
    /// went out in the partials); `openai` is the OpenAI body or usage chunk.
    fn summary(&self, choice: &ChoiceOutput, whole: bool, openai: &Value, handle: &RequestHandle) -> Value {
        let (stop_type, stopping_word) = stop_type(choice);
        let truncated = choice.finish_reason == Some(FinishReason::Length)
            && self.head.n_predict.is_none_or(|n| (choice.completion_tokens as usize) < n);
        let tokens: &[u32] = if whole && self.head.return_tokens { &choice.token_ids } else { &[] };
        let mut o = Map::new();
        o.insert("index".into(), json!(0));
        o.insert("content".into(), json!(if whole { choice.text.as_str() } else { "" }));
        o.insert("tokens".into(), json!(tokens));
        o.insert("id_slot".into(), json!(0));
        o.insert("stop".into(), json!(true));
        o.insert("model".into(), json!(self.head.model));
        o.insert("tokens_predicted".into(), json!(choice.completion_tokens));
        o.insert("tokens_evaluated".into(), json!(self.head.prompt_tokens));
        o.insert("generation_settings".into(), self.head.generation_settings.clone());
        o.insert("prompt".into(), json!(self.head.prompt));
        o.insert("has_new_line".into(), json!(self.has_new_line || (whole && choice.text.contains('\n'))));
        o.insert("truncated".into(), json!(truncated));
        o.insert("stop_type".into(), json!(stop_type));
        o.insert("stopping_word".into(), json!(stopping_word));
        o.insert("tokens_cached".into(), json!(handle.cached_prompt_tokens()));
        // Behind the metrics gate, as every timing ember reports (docs/per_request_metrics.md).
        if let Some(timings) = openai.get("timings").filter(|t| !t.is_null()) {
            o.insert("timings".into(), timings.clone());
        }
        if whole && self.head.n_probs {
            let probs = completion_probabilities(&self.model.tokenizer, &choice.logprobs);
            o.insert("completion_probabilities".into(), Value::Array(probs));
        }
        if let Some(error) = openai.get("error").filter(|e| !e.is_null()) {
            o.insert("error".into(), llama_error(error["message"].as_str().unwrap_or("the engine failed")));
        }
        let o = Value::Object(o);
        match self.head.response_fields.is_empty() {
            true => o,
            false => pick(&o, &self.head.response_fields),
        }
    }
}

impl super::super::translate::OutputWriter for LlamaWriter {
    fn response(&self, openai: Value, handle: &RequestHandle) -> String {
        let choice = handle.choices().into_iter().next().unwrap_or_default();
        self.summary(&choice, true, &openai, handle).to_string()
    }

    fn chunk(&mut self, openai: Value, handle: &RequestHandle, out: &mut VecDeque<String>) {
        if let Some(error) = openai.get("error") {
            self.failed = Some(error["message"].as_str().unwrap_or("the engine failed the request").to_owned());
            return;
        }
        if let Some(progress) = openai.get("prompt_progress") {
            out.push_back(
                json!({"index": 0, "content": "", "tokens": [], "stop": false, "id_slot": 0, "tokens_predicted": 0,
                    "tokens_evaluated": self.head.prompt_tokens, "prompt_progress": progress})
                .to_string(),
            );
            return;
        }
        if openai.get("usage").is_some_and(|u| !u.is_null()) {
            self.tail = openai;
            return;
        }
        self.partial(handle, out);
    }

    fn end(&mut self, handle: &RequestHandle, out: &mut VecDeque<String>) {
        self.partial(handle, out);
        if let Some(message) = &self.failed {
            out.push_back(json!({"error": llama_error(message)}).to_string());
            return;
        }
        let (last, _) = handle.output_after(0, self.mark);
        out.push_back(self.summary(&last, false, &self.tail, handle).to_string());
    }
}

/// llama-server's `stop_type` and `stopping_word` for how a choice ended. A `deadline_ms` that passed is a
/// limit, as llama-server's own time limit is.
fn stop_type(choice: &ChoiceOutput) -> (&'static str, &str) {
    match (choice.finish_reason, &choice.stop_string) {
        (Some(FinishReason::Stop), Some(word)) => ("word", word.as_str()),
        (Some(FinishReason::Stop), None) => ("eos", ""),
        (Some(FinishReason::Length | FinishReason::Deadline), _) => ("limit", ""),
        _ => ("none", ""),
    }
}

/// The timings of the request so far (a partial's, with `timings_per_token`).
fn timings_so_far(handle: &RequestHandle) -> Value {
    serde_json::to_value(TimingsJson::from(handle.llamacpp_timings(0))).unwrap_or_default()
}

/// llama-server's error object.
fn llama_error(message: &str) -> Value {
    json!({"code": 500, "message": message, "type": "server_error"})
}

/// `response_fields`: only these paths of `o`, each under its path as the key (llama-server's
/// `json_get_nested_values`: `generation_settings/n_predict` is the key of that nested value); a path that is
/// not there is left out.
fn pick(o: &Value, paths: &[String]) -> Value {
    let mut picked = Map::new();
    for path in paths {
        let found = path.split('/').try_fold(o, |v, key| v.get(key));
        if let Some(value) = found {
            picked.insert(path.clone(), value.clone());
        }
    }
    Value::Object(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_types_are_llama_servers() {
        let ended = |reason, word: Option<&str>| ChoiceOutput {
            finish_reason: Some(reason),
            stop_string: word.map(str::to_owned),
            ..ChoiceOutput::default()
        };
        assert_eq!(stop_type(&ended(FinishReason::Stop, None)), ("eos", ""));
        assert_eq!(stop_type(&ended(FinishReason::Stop, Some("\n\n"))), ("word", "\n\n"));
        assert_eq!(stop_type(&ended(FinishReason::Length, None)), ("limit", ""));
        assert_eq!(stop_type(&ended(FinishReason::Deadline, None)), ("limit", ""));
        assert_eq!(stop_type(&ended(FinishReason::Cancelled, None)), ("none", ""));
    }

    #[test]
    fn response_fields_pick_paths_under_their_own_names() {
        let o = json!({"content": "x", "generation_settings": {"n_predict": 4}, "stop": true});
        let picked = pick(&o, &["content".into(), "generation_settings/n_predict".into(), "missing".into()]);
        assert_eq!(picked, json!({"content": "x", "generation_settings/n_predict": 4}));
    }
}

//! `POST /v1/rerank` in the shape llama-server, vLLM, Jina and Cohere share: a query and candidate documents in, each
//! document's relevance out, most relevant first.
//!
//! Request fields: `query` (a string), `documents` (strings, or objects with a `text` string; 1 to the embedder's
//! `max_inputs`), `top_n` (keep the best N), `return_documents` (default false: echo each document's text),
//! `model` and `user` (accepted, no effect), and ember's `priority`, `deadline_ms` and `include_metrics` (shared
//! with embeddings: `encoder_body.rs`). Any other field is refused by name. Each pair is encoded as `[CLS] query
//! [SEP] document [SEP]` (a BERT cross-encoder's input; llama-server leaves out the last `[SEP]` for WordPiece
//! vocabularies) and scored by the model's classification head: `relevance_score` is that raw score (a logit, as
//! llama-server reports it). Response: `{"model", "object": "list", "usage": {"prompt_tokens", "total_tokens",
//! "prompt_tokens_per_input"}, "results": [{"index", "relevance_score", "document": {"text"}}]}`, and `metrics`
//! behind the metrics gate.

use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::embeddings::api_error;
use super::encoder_answer::{gated_metrics, EncoderAnswer, Usage};
use super::encoder_body::{known_object, shared_fields};
use super::error::ApiError;
use super::json::Slot;
use super::metrics_gate::TimingMetricsJson;
use crate::engine::embed::{EmbedError, EmbedRequest, Embedder};
use crate::model::encoder::Pooling;

/// The fields this endpoint reads besides the shared ones.
const FIELDS: [&str; 4] = ["query", "documents", "top_n", "return_documents"];

#[derive(Serialize)]
struct DocumentText<'a> {
    text: &'a str,
}

#[derive(Serialize)]
struct Ranked<'a> {
    index: usize,
    relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<DocumentText<'a>>,
}

#[derive(Serialize)]
struct Response<'a> {
    model: &'a str,
    object: &'static str,
    usage: Usage,
    results: Vec<Ranked<'a>>,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
}

/// Answers a rerank request body with its response body, or the error to send.
pub fn rerank_json(embedder: &Embedder, model_name: &str, json: &str) -> Result<String, ApiError> {
    rerank_answer(embedder, model_name, json, Instant::now()).map(|answer| answer.body)
}

/// Answers a rerank request body that arrived at `arrival` (its `deadline_ms` counts from there) with every
/// document's score, in document order, and the response body, or the error to send.
pub fn rerank_answer(
    embedder: &Embedder,
    model_name: &str,
    json: &str,
    arrival: Instant,
) -> Result<EncoderAnswer, ApiError> {
    let body = known_object(json, &FIELDS, "a rerank request")?;
    let query =
        body.get("query").and_then(Value::as_str).ok_or_else(|| ApiError::invalid("query", "query: a string"))?;
    let documents: Vec<&str> = match body.get("documents") {
        Some(Value::Array(docs)) if !docs.is_empty() => docs
            .iter()
            .map(|d| match d {
                Value::String(text) => Some(text.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::invalid("documents", "documents: strings, or objects with a \"text\" string"))?,
        _ => return Err(ApiError::invalid("documents", "documents: a non-empty array")),
    };
    let max = embedder.config().max_inputs;
    if documents.len() > max {
        return Err(ApiError::invalid("documents", format!("documents: {}, at most {max}", documents.len())));
    }
    let top_n = match body.get("top_n").filter(|v| !v.is_null()) {
        None => documents.len(),
        Some(v) => v
            .as_u64()
            .filter(|&n| n >= 1)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX).min(documents.len()))
            .ok_or_else(|| ApiError::invalid("top_n", "top_n: a positive integer"))?,
    };
    let return_documents = match body.get("return_documents").filter(|v| !v.is_null()) {
        None => false,
        Some(v) => {
            v.as_bool().ok_or_else(|| ApiError::invalid("return_documents", "return_documents: true or false"))?
        }
    };
    let shared = shared_fields(&body, arrival)?;
    let inputs = embedder.rerank_inputs(query, &documents).map_err(|e| refusal(&e))?;
    let request = EmbedRequest {
        pooling: Some(Pooling::Rank),
        priority: shared.priority,
        deadline: shared.deadline,
        ..EmbedRequest::new(inputs)
    };
    let output = embedder.embed(request).map_err(|e| refusal(&e))?;
    // The head's first output is the relevance score (a reranker's head has one).
    let scores: Vec<f32> = (0..documents.len()).map(|index| output.vector(index)[0]).collect();
    let mut results: Vec<Ranked<'_>> = scores
        .iter()
        .enumerate()
        .map(|(index, &relevance_score)| Ranked {
            index,
            relevance_score,
            document: return_documents.then(|| DocumentText { text: documents[index] }),
        })
        .collect();
    // Most relevant first; equal scores keep the documents' order.
    results.sort_by(|a, b| b.relevance_score.total_cmp(&a.relevance_score));
    results.truncate(top_n);
    let (metrics, shown) = gated_metrics(embedder, &output, shared.include_metrics);
    let body = super::json::encode(&Response {
        model: model_name,
        object: "list",
        usage: Usage::of(&output),
        results,
        metrics: shown,
    });
    Ok(EncoderAnswer { floats: scores, dimensions: 1, input_tokens: output.input_tokens, metrics, body })
}

/// An embedder's refusal in the rerank body's terms: its inputs are the documents, each with the query.
fn refusal(e: &EmbedError) -> ApiError {
    match *e {
        EmbedError::InputTooLong { index, tokens, max } => ApiError::invalid(
            format!("documents[{index}]"),
            format!("documents[{index}]: the query and this document make {tokens} tokens, more than the {max} this model takes"),
        ),
        _ => match api_error(e) {
            ApiError { param: Some(p), message, .. } if p.starts_with("input[") => {
                ApiError::invalid(p.replacen("input", "documents", 1), message.replacen("input", "documents", 1))
            }
            other => other,
        },
    }
}

//! `POST /v1/embeddings` in OpenAI's shape: the request body read and checked, the embedder's vectors written back.
//!
//! Request fields: `input` (a string, an array of strings, an array of token ids, or an array of such arrays; 1 to
//! the embedder's `max_inputs`), `model` and `user` (accepted, no effect on the output), `encoding_format`
//! (`"float"`, the default, or `"base64"`: each vector's little-endian f32 bytes), `dimensions` (keep the first
//! N, then normalize: Matryoshka truncation), and ember's own `pooling` (`"mean"`, `"cls"`, `"last"`: instead of
//! the file's), `normalize` (default true: unit length, as OpenAI's and the embedding servers' vectors), and the
//! fields both encoder bodies share (`encoder_body.rs`): `priority` (a lower value first, as chat's), `deadline_ms` and
//! `include_metrics`. Any other field is refused by name. Response: `{"object": "list", "data": [{"object":
//! "embedding", "index", "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens",
//! "prompt_tokens_per_input"}}`, and `metrics` behind the metrics gate.

use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use super::encoder_answer::{gated_metrics, EncoderAnswer, Usage};
use super::encoder_body::{known_object, shared_fields};
use super::error::{ApiError, DEADLINE, OVERLOADED};
use super::json::Slot;
use super::metrics_gate::TimingMetricsJson;
use crate::engine::embed::{EmbedError, EmbedOutput, EmbedRequest, Embedder};
use crate::model::encoder::Pooling;
use crate::model::TokenId;

/// The fields this endpoint reads besides the shared ones.
const FIELDS: [&str; 5] = ["input", "encoding_format", "dimensions", "pooling", "normalize"];

/// Answers an embeddings request body with its response body, or the error to send.
pub fn embeddings_json(embedder: &Embedder, model_name: &str, json: &str) -> Result<String, ApiError> {
    embeddings_answer(embedder, model_name, json, Instant::now()).map(|answer| answer.body)
}

/// Answers an embeddings request body that arrived at `arrival` (its `deadline_ms` counts from there) with the
/// vectors and the response body, or the error to send.
pub fn embeddings_answer(
    embedder: &Embedder,
    model_name: &str,
    json: &str,
    arrival: Instant,
) -> Result<EncoderAnswer, ApiError> {
    let (request, options) = parse(embedder, json, arrival)?;
    let output = embedder.embed(request).map_err(|e| api_error(&e))?;
    let (metrics, shown) = gated_metrics(embedder, &output, options.include_metrics);
    let body = response(&output, model_name, options.base64, shown);
    Ok(EncoderAnswer {
        dimensions: output.dimensions,
        input_tokens: output.input_tokens,
        floats: output.vectors,
        metrics,
        body,
    })
}

/// What a request asks of its response.
struct ResponseOptions {
    /// The vectors go back in base64.
    base64: bool,
    include_metrics: bool,
}

/// The request body as an embedder request, and what it asks of its response. The inputs are tokenized last, once
/// every cheaper field has been checked.
fn parse(embedder: &Embedder, json: &str, arrival: Instant) -> Result<(EmbedRequest, ResponseOptions), ApiError> {
    let body = known_object(json, &FIELDS, "an embeddings request")?;
    let shared = shared_fields(&body, arrival)?;
    let base64 = match body.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "float" => false,
        Some(Value::String(s)) if s == "base64" => true,
        Some(_) => return Err(ApiError::invalid("encoding_format", "encoding_format: \"float\" or \"base64\"")),
    };
    let dimensions = match body.get("dimensions").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => {
            let d = v.as_u64().filter(|&d| d >= 1).ok_or_else(|| {
                ApiError::invalid("dimensions", "dimensions: a positive integer (the vector's width to keep)")
            })?;
            Some(usize::try_from(d).unwrap_or(usize::MAX))
        }
    };
    let pooling = match body.get("pooling").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => {
            let named = v.as_str().and_then(Pooling::from_name).filter(|p| !matches!(p, Pooling::None | Pooling::Rank));
            Some(named.ok_or_else(|| ApiError::invalid("pooling", "pooling: \"mean\", \"cls\" or \"last\""))?)
        }
    };
    let normalize = match body.get("normalize").filter(|v| !v.is_null()) {
        None => true,
        Some(v) => v.as_bool().ok_or_else(|| ApiError::invalid("normalize", "normalize: true or false"))?,
    };
    let request = EmbedRequest {
        pooling,
        normalize,
        dimensions,
        priority: shared.priority,
        deadline: shared.deadline,
        ..EmbedRequest::new(inputs(embedder, &body)?)
    };
    Ok((request, ResponseOptions { base64, include_metrics: shared.include_metrics }))
}

/// `input` as token lists: texts tokenized as the model expects (`[CLS] … [SEP]`), token ids taken as they are.
fn inputs(embedder: &Embedder, body: &Map<String, Value>) -> Result<Vec<Vec<TokenId>>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "input",
            "input: a string, an array of strings, an array of token ids, or an array of arrays of token ids",
        )
    };
    let ids = |v: &[Value]| -> Option<Vec<TokenId>> {
        v.iter().map(|x| x.as_u64().and_then(|t| TokenId::try_from(t).ok())).collect()
    };
    let max = embedder.config().max_inputs;
    let count_ok = |n: usize| match n {
        0 => Err(ApiError::invalid("input", "input: at least one input is needed")),
        n if n > max => Err(ApiError::invalid("input", format!("input: {n} inputs, at most {max} per request"))),
        _ => Ok(()),
    };
    match body.get("input") {
        None | Some(Value::Null) => Err(ApiError::invalid("input", "input is required")),
        Some(Value::String(text)) => Ok(vec![embedder.tokenize(text)]),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            count_ok(items.len())?;
            Ok(items.iter().map(|t| embedder.tokenize(t.as_str().unwrap_or_default())).collect())
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_number) && !items.is_empty() => {
            Ok(vec![ids(items).ok_or_else(bad)?])
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_array) => {
            count_ok(items.len())?;
            items.iter().map(|i| ids(i.as_array().map_or(&[][..], Vec::as_slice)).ok_or_else(bad)).collect()
        }
        Some(_) => Err(bad()),
    }
}

/// An embedder's refusal as an OpenAI error.
pub fn api_error(e: &EmbedError) -> ApiError {
    let message = e.to_string();
    match e {
        EmbedError::Overloaded { .. } => ApiError { code: Some(OVERLOADED.into()), ..ApiError::server(message) },
        EmbedError::DeadlineExceeded => ApiError { code: Some(DEADLINE.into()), ..ApiError::server(message) },
        EmbedError::Stopped | EmbedError::Encoder(_) => ApiError::server(message),
        EmbedError::Pooling(_) | EmbedError::RankerNeedsPairs => ApiError::invalid("pooling", message),
        EmbedError::Dimensions { .. } => ApiError::invalid("dimensions", message),
        EmbedError::InputTooLong { index, .. }
        | EmbedError::EmptyInput { index }
        | EmbedError::PromptTooLong { index, .. } => ApiError::invalid(format!("input[{index}]"), message),
        EmbedError::TokenOutOfRange { index, .. } => ApiError::invalid(format!("input[{index}]"), message),
        EmbedError::NoInputs | EmbedError::TooManyInputs { .. } => ApiError::invalid("input", message),
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector<'a> {
    Floats(&'a [f32]),
    Base64(String),
}

#[derive(Serialize)]
struct Datum<'a> {
    object: &'static str,
    index: usize,
    embedding: Vector<'a>,
}

#[derive(Serialize)]
struct Response<'a> {
    object: &'static str,
    data: Vec<Datum<'a>>,
    model: &'a str,
    usage: Usage,
    #[serde(skip_serializing_if = "Slot::is_absent")]
    metrics: Slot<TimingMetricsJson>,
}

/// The response body of `output`, with `metrics` as the gate decided.
fn response(output: &EmbedOutput, model_name: &str, base64: bool, metrics: Slot<TimingMetricsJson>) -> String {
    let data = (0..output.input_tokens.len())
        .map(|index| {
            let v = output.vector(index);
            let embedding = match base64 {
                true => Vector::Base64(base64_f32(v)),
                false => Vector::Floats(v),
            };
            Datum { object: "embedding", index, embedding }
        })
        .collect();
    super::json::encode(&Response { object: "list", data, model: model_name, usage: Usage::of(output), metrics })
}

/// The vector's little-endian f32 bytes in standard base64 (with padding), as OpenAI's `encoding_format: base64`.
fn base64_f32(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_alphabet_with_padding() {
        // 1.0f32 = 00 00 80 3F; 2.0 = 00 00 00 40.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 2.0]), "AACAPwAAAEA=");
        assert_eq!(base64_f32(&[]), "");
    }
}
